"""How long an evaluation round may run before it fails and its worker is replaced (caller side, no torch).

``Evaluator(round_timeout_s=...)`` (the launcher's ``--round-timeout``):

- ``None`` (the default): the default rule, :func:`default_round_timeout`. Before any round was measured,
  :data:`FIRST_ROUND_S` (one hour: a first round also builds the env and compiles what the simulator
  compiles). Afterwards ``max(FLOOR_S, SLACK x the expected round time)``: the latest round's time per
  env step (of all sub-envs together) x the round's waves x the longest an episode can be (``max_steps``,
  else the longest episode seen so far). Generous on purpose: a false timeout on a slow but healthy
  simulator costs a round and a worker; a late one only delays the report of a hang.
- a number of seconds > 0: that limit for every round.
- ``math.inf``: no limit.

A round that starts on a fresh worker (the first round, and the first after a failed one, whose worker
was replaced or rebuilds its env) also gets ``start_timeout``: the worker's start-up and build are part
of it. The limit runs from the moment the round starts on its worker, never while it waits in a queue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The default limit of a round before any round was measured (seconds).
FIRST_ROUND_S = 3600.0
#: The default limit is never below this (seconds) ...
FLOOR_S = 600.0
#: ... nor below this many times the round time the measured step time predicts.
SLACK = 20.0

_FIX = "give a larger round_timeout_s (the launcher's --round-timeout) if rounds are legitimately this slow"


def check_round_timeout(value: Any) -> None:
    """A one-line ValueError unless ``value`` is None, a number of seconds > 0, or ``math.inf``."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if value is None or (number and value > 0):  # NaN fails "> 0"
        return
    raise ValueError(
        f"round_timeout_s must be a number of seconds > 0 (None: the default rule, math.inf: no limit), "
        f"got {value!r:.60}."
    )


def default_round_timeout(seconds_per_step: float | None, waves: int, episode_steps: int | None) -> float:
    """The default limit of a round: ``FIRST_ROUND_S`` unmeasured, else ``max(FLOOR_S, SLACK x expected)``.

    ``seconds_per_step`` is the latest round's time per env step of all sub-envs together (None before
    any), ``waves`` the most episodes one sub-env runs this round, ``episode_steps`` the longest an
    episode can be (None: unknown, the floor).
    """
    if seconds_per_step is None:
        return FIRST_ROUND_S
    expected = seconds_per_step * waves * (episode_steps or 0)
    return max(FLOOR_S, SLACK * expected)


@dataclass(frozen=True)
class Deadline:
    """A round's limit in seconds, and the one-line message its EvalError says when the round overruns it."""

    seconds: float
    message: str


class RoundClock:
    """The caller's record of the rounds: the latest step time, the longest episode, whether a worker is fresh.

    :meth:`start_round` gives each round its :class:`Deadline` (None: no limit); :meth:`finished` records
    a round that came back with a result. A round that started and never finished (a failure) leaves the
    next round on a fresh worker.
    """

    def __init__(self, round_timeout_s: float | None, start_timeout: float, max_steps: int | None) -> None:
        check_round_timeout(round_timeout_s)
        self.round_timeout_s = round_timeout_s
        self.start_timeout = float(start_timeout)
        self.max_steps = max_steps
        self._fresh = True  # the next round starts a worker (or rebuilds its env)
        self._step_s: float | None = None  # seconds per env step of all sub-envs, latest round
        self._num_envs = 1
        self._longest = 0  # the longest episode seen, in steps

    def start_round(self, num_trajectories: int | None) -> Deadline | None:
        """The deadline of the round that starts now (``num_trajectories`` episodes; None: one per sub-env)."""
        fresh, self._fresh = self._fresh, True  # until finished() says otherwise
        if self.round_timeout_s is not None and math.isinf(self.round_timeout_s):
            return None
        extra = self.start_timeout if fresh else 0.0
        allowance = f" + start_timeout={self.start_timeout:g} for a round that starts its worker" if fresh else ""
        if self.round_timeout_s is not None:
            base, why = float(self.round_timeout_s), f"round_timeout_s={self.round_timeout_s:g}"
        else:
            base, why = self._default(num_trajectories)
        seconds = base + extra
        return Deadline(
            seconds,
            f"evaluation round exceeded its {seconds:g} s timeout ({why}{allowance}): a policy or env step hung "
            f"or ran far slower than allowed, and the round's worker was replaced; {_FIX}.",
        )

    def _default(self, num_trajectories: int | None) -> tuple[float, str]:
        """The default rule's limit for a round of ``num_trajectories`` episodes, and how it was chosen."""
        if self._step_s is None:
            return FIRST_ROUND_S, f"the default before any round was measured: {FIRST_ROUND_S:g} s"
        waves = -(-num_trajectories // self._num_envs) if num_trajectories else 1
        steps = self.max_steps or self._longest
        seconds = default_round_timeout(self._step_s, waves, steps)
        expected = self._step_s * waves * steps
        return seconds, f"the default: max({FLOOR_S:g} s, {SLACK:g} x the {expected:.3g} s the step time predicts)"

    def finished(self, raw: Mapping[str, Any]) -> None:
        """Record a round that returned ``raw``: its time per env step and its longest episode."""
        self._fresh = False
        seconds, frames = float(raw.get("seconds") or 0.0), int(raw.get("frame_count") or 0)
        num_envs = int(raw.get("num_envs") or raw.get("num_episodes") or 1)
        lengths = raw.get("episode_lengths") or []
        self._longest = max([self._longest, *(int(n) for n in lengths)])
        if math.isfinite(seconds) and seconds > 0 and frames > 0:
            self._step_s = seconds / (frames / num_envs)
            self._num_envs = num_envs
