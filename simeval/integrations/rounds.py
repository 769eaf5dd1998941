"""The rounds an integration starts beside a training loop: one Evaluator, started at the first round."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import simeval
from simeval.envs import make_env
from simeval.factories import build_policy

# Round metrics written to a training library's log writer, under "Eval/".
WRITER_METRICS = ("reward", "episode_length", "success_rate", "terminated_fraction")

if TYPE_CHECKING:
    from simeval.caller.evaluator import Evaluator
    from simeval.checkpoints.base import Checkpoint


class Rounds:
    """Rounds on snapshots of a training policy, queued in order and taken in as they finish.

    The :class:`simeval.Evaluator` is built at the first round, from that snapshot's
    architecture (``policy_factory`` and ``policy_kwargs``, fixed for a run), and
    stopped by :meth:`close`; a later round starts a new one.

    Args:
        env_maker: the Evaluator's env factory.
        evaluator_kwargs: the Evaluator's other arguments (``busy_policy`` is ``"queue"``:
            every round asked for is run).
    """

    def __init__(self, env_maker: Callable[..., Any], evaluator_kwargs: dict[str, Any]) -> None:
        self.env_maker = env_maker
        self.evaluator_kwargs = dict(evaluator_kwargs)
        self.evaluator: Evaluator | None = None

    @property
    def pending(self) -> bool:
        """Whether a round asked for has not been taken in yet."""
        return self.evaluator is not None and self.evaluator.pending

    def start(self, ck: Checkpoint, step: int) -> None:
        """Queue a round on the snapshot ``ck``, recorded as ``step``."""
        if self.evaluator is None:
            self.evaluator = simeval.Evaluator(
                self.env_maker,
                policy_factory=functools.partial(build_policy, ck.policy_factory, ck.policy_kwargs),
                busy_policy="queue",
                **self.evaluator_kwargs,
            )
        self.evaluator.trigger_eval(weights_dict=ck.weights_dict, step=step)

    def finished(self, wait: bool = False) -> Iterator[dict[str, Any]]:
        """The results of rounds that finished, in order (with ``wait``: every pending one, waiting for it)."""
        while self.evaluator is not None:
            result = self.evaluator.poll(0)
            if result is None and wait and self.evaluator.pending:
                result = self.evaluator.wait()
            if result is None:
                return
            yield result

    def close(self, take: Callable[[dict[str, Any]], None]) -> None:
        """Wait for the rounds still running, ``take`` each result in order, then stop the Evaluator."""
        if self.evaluator is None:
            return
        try:
            for result in self.finished(wait=True):
                take(result)
        finally:
            self.evaluator.shutdown()
            self.evaluator = None


def training_rounds(
    env: str,
    *,
    episodes: int,
    num_envs: int | None,
    max_steps: int | None,
    seed: int,
    device: str,
    backend: str,
    results_path: str | None,
    evaluator_kwargs: dict[str, Any],
) -> Rounds:
    """The Rounds of an integration: ``make_env(env)`` without VecNorm (the training libraries fold theirs into
    the actor), one episode per sub-env by default, per-episode lists kept, results appended to ``results_path``;
    ``evaluator_kwargs`` last (they win)."""
    env_maker = functools.partial(
        make_env, env, num_envs=num_envs or episodes, max_steps=max_steps, device=device, obs_norm=False
    )
    settings = {
        "num_trajectories": episodes,
        "seed": seed,
        "device": device,
        "backend": backend,
        "num_gpus": 0 if device == "cpu" else 1,
        "keep_episodes": True,
        "results_path": results_path,
        "results_context": {"env": env},
        **evaluator_kwargs,
    }
    return Rounds(env_maker, settings)


def write_scalars(add_scalar: Callable[[str, float, int], Any] | None, result: dict[str, Any]) -> None:
    """``add_scalar("Eval/<metric>", value, step)`` for ``result``'s ``WRITER_METRICS`` (None: nothing)."""
    if add_scalar is None:
        return
    step = int(result["eval/step"])
    for name in WRITER_METRICS:
        if f"eval/{name}" in result:
            add_scalar(f"Eval/{name}", float(result[f"eval/{name}"]), step)
