"""The round engines and which one runs a round: one contract, chosen from the simulator's declaration.

Every engine runs a round of exact per-sub-env episode quotas and returns its
:class:`~simeval.worker.rollout.Episodes` (:class:`RoundEngine`):

* torchrl's Collector (:func:`simeval.worker.rollout.run_round`): any env, any setting;
* the direct engine (:mod:`simeval.worker.direct_rollout`): a grouped NumPy env, groups overlapped;
* the tensor engine (:mod:`simeval.worker.tensor_rollout`): a tensor-batched env stepped as a user's loop.

The simulator that built the env (the worker finds it once, :func:`simeval.envs.simulators.simulator_of`)
says which of the last two reproduces the Collector over it (:meth:`~simeval.envs.simulators.Simulator.round_source`);
the round's settings decide whether the Collector must run anyway (:func:`~simeval.worker.round_parts.collector_only`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from simeval.envs.simulators import DirectRound, Simulator, TensorRound
from simeval.worker.direct_rollout import DirectRollout
from simeval.worker.round_parts import collector_only
from simeval.worker.tensor_rollout import TensorRollout

if TYPE_CHECKING:
    from torchrl.envs import EnvBase
    from torchrl.envs.utils import ExplorationType

    from simeval.settings import EvalSettings
    from simeval.worker.rollout import Episodes


class RoundEngine(Protocol):
    """A round loop of the worker's own (the Collector's numbers without the Collector)."""

    counter: Any
    """The worker's :class:`~simeval.worker.rollout.RoundCounter` (or None): told the kept episodes and env steps
    where the engine accounts them."""

    def run(
        self, quotas: list[int], seed: int | None, stop: threading.Event, exploration_type: ExplorationType
    ) -> Episodes:
        """One round: ``quotas[i]`` episodes from sub-env ``i``, seeded with ``seed`` (None: not reseeded).

        Raises :class:`~simeval.errors.Cancelled` once ``stop`` is set.
        """

    def close(self) -> None:
        """Release what the engine holds (threads); the env stays open."""


def choose(
    simulator: Simulator | None,
    env: EnvBase,
    policy: Any,
    settings: EvalSettings,
    recording: bool,
    steps_per_batch: int,
) -> RoundEngine | None:
    """The engine for rounds of ``policy`` on ``env`` (built by ``simulator``, None: unknown) under ``settings``.

    None: the Collector. ``steps_per_batch`` is the Collector's batch length (frames per batch /
    sub-envs): the tensor engine reads its steps in batches of that many, as the tally reads the Collector's.
    """
    if simulator is None or collector_only(policy, settings, recording):
        return None
    source = simulator.round_source(env)
    if isinstance(source, DirectRound):
        return DirectRollout(env, source.base, source.transforms, policy)
    if isinstance(source, TensorRound):
        return TensorRollout(env, source.steps, source.vecnorm, policy, steps_per_batch)
    return None
