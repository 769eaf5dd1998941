"""The simulators simeval builds envs with, found through one registry.

Built in: native MuJoCo, gymnasium, MuJoCo Warp (the simulators of gymnasium ids, chosen by
``make_env(backend=...)`` / ``--env-backend``), Isaac Lab (``isaaclab:<task>``), mjlab
(``mjlab:<task>``), ManiSkill3 (``maniskill:<task>``) and LeRobot's sim envs (``lerobot:<env>``). A
third party adds one by a :class:`Simulator` subclass and an entry point in the group ``simeval.simulators`` (see the
docs' "Adding a simulator"). Nothing here imports a simulator: its module does, when it builds an env.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from simeval.envs.simulators.base import DirectRound, EnvRequest, ReplayPromise, Simulator, TensorRound
from simeval.envs.simulators.gymnasium_vector import GymnasiumVector
from simeval.envs.simulators.isaaclab import IsaacLab
from simeval.envs.simulators.lerobot import LeRobot
from simeval.envs.simulators.maniskill import ManiSkill
from simeval.envs.simulators.mjlab import Mjlab
from simeval.envs.simulators.mujoco_native import NativeMujoco
from simeval.envs.simulators.mujoco_warp import MujocoWarp
from simeval.plugins import plugins

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

    from simeval.conditions import Condition

__all__ = [
    "ENTRY_POINT_GROUP",
    "DirectRound",
    "EnvRequest",
    "ReplayPromise",
    "Simulator",
    "TensorRound",
    "check_condition",
    "env_backends",
    "env_id_forms",
    "registered",
    "tasks",
    "simulator_for",
    "simulator_of",
    "supporting",
]

ENTRY_POINT_GROUP = "simeval.simulators"
BUILT_IN: tuple[Simulator, ...] = (
    NativeMujoco(),
    GymnasiumVector(),
    MujocoWarp(),
    IsaacLab(),
    Mjlab(),
    ManiSkill(),
    LeRobot(),
)


def prepare_headless() -> None:
    """Set every simulator's headless rendering environment (unless already set), before any is imported.

    For ``--video``: MuJoCo reads ``MUJOCO_GL`` once, when it is imported, so this runs at
    the start of the process; worker processes and Ray actors inherit it. A ValueError
    (one line) where a simulator cannot render headless here.
    """
    import os

    for sim in registered():
        for key, value in sim.headless_env().items():
            if not os.environ.get(key):  # unset or empty: an empty MUJOCO_GL would mean GLFW, which needs a display
                os.environ[key] = value


@functools.cache
def registered() -> tuple[Simulator, ...]:
    """Every simulator: the built-in ones, then those of installed packages' ``simeval.simulators`` entry points.

    An entry point names a :class:`Simulator` subclass (or instance); one that does not
    load, is not one, or takes a name or prefix already taken is a one-line ValueError
    naming it.
    """
    found = list(BUILT_IN)
    for where, sim in plugins(ENTRY_POINT_GROUP, Simulator):
        taken = [s for s in found if s.name == sim.name or (sim.prefix and s.prefix == sim.prefix)]
        if taken:
            raise ValueError(f"{where} takes the name or prefix of {taken[0]!r}: give it another")
        found.append(sim)
    return tuple(found)


def tasks(simulator: str) -> tuple[str, ...]:
    """The ids the simulator named ``simulator`` (e.g. ``"native"``, ``"warp"``) lists as its tasks.

    ``()`` for a simulator whose :meth:`~Simulator.check` accepts any id it is asked for.
    """
    for sim in registered():
        if sim.name == simulator:
            return sim.tasks()
    raise ValueError(f"unknown simulator {simulator!r}: one of {', '.join(s.name for s in registered())}.")


def env_backends() -> tuple[str, ...]:
    """The names ``backend=`` / ``--env-backend`` accept: the simulators of gymnasium ids."""
    return tuple(s.name for s in registered() if s.prefix is None)


def env_id_forms() -> str:
    """The forms an env id takes, for messages: "a gymnasium id, isaaclab:<task> or mjlab:<task>"."""
    forms = ["a gymnasium id", *(f"{s.prefix}:<task>" for s in registered() if s.prefix)]
    return ", ".join(forms[:-1]) + f" or {forms[-1]}" if len(forms) > 1 else forms[0]


def simulator_for(name: str, backend: str | None = None) -> Simulator:
    """The simulator that builds env ``name`` (on ``backend``), by the id alone: nothing imported.

    ``"<prefix>:<task>"`` is the simulator of that prefix (``backend`` does not apply);
    any other id is a gymnasium id, built on ``backend``, or by default on the first
    simulator that claims it (native MuJoCo for its tasks), else on the fallback
    that claims every id (gymnasium).
    A one-line ValueError for a backend that does not exist or does not run ``name``.
    """
    sims = registered()
    prefix, colon, _ = name.partition(":")
    if colon:
        for sim in sims:
            if sim.prefix == prefix:
                return sim
    backends = env_backends()
    if backend is not None and backend not in backends:
        choices = ", ".join(repr(b) for b in backends[:-1]) + f" or {backends[-1]!r}"
        raise ValueError(f"unknown backend {backend!r}: choose {choices} (or None for the default).")
    claims = [s for s in sims if s.prefix is None and s.default_for(name)]
    default = next((s for s in claims if not s.fallback), claims[0])
    if backend is None:
        return default
    sim = next(s for s in sims if s.name == backend)
    if not sim.runs(name):
        raise ValueError(
            f"backend={backend!r} has no {name!r}: it runs {', '.join(sim.tasks())}; use backend={default.name!r}."
        )
    return sim


def simulator_of(env: EnvBase) -> Simulator | None:
    """The simulator that built ``env`` (the env under its transforms), or None for an env of other making.

    The worker asks it for ``env``'s round engine and episode length; an env no simulator
    owns runs on torchrl's Collector.
    """
    from simeval.envs.layout import innermost

    base = innermost(env)
    return next((sim for sim in registered() if sim.owns(base)), None)


def supporting(kind: str) -> tuple[Simulator, ...]:
    """The simulators that apply condition ``kind`` (a key of :data:`simeval.conditions.KINDS`): every one for a kind
    no simulator has to apply (:data:`simeval.condition_terms.ANY_SIMULATOR`)."""
    from simeval.condition_terms import ANY_SIMULATOR

    return tuple(s for s in registered() if kind in s.capabilities or kind in ANY_SIMULATOR)


def check_condition(name: str, condition: Condition, backend: str | None = None) -> None:
    """Whether the simulator of ``name`` (on ``backend``) applies every kind ``condition`` has; else one line.

    The refusal names the settings, the simulator that cannot apply them and the ones
    that can. Checked where a suite is loaded, where the launcher learns
    ``--env-backend``, and where ``make_env`` builds the env.
    """
    from simeval.condition_terms import ANY_SIMULATOR
    from simeval.conditions import KINDS  # NumPy: simeval.envs loads none until it builds an env

    sim = simulator_for(name, backend)
    for kind in sorted(condition.kinds - sim.capabilities - set(ANY_SIMULATOR), key=list(KINDS).index):
        settings = condition.settings_of(kind)
        own = sim.refusal(name, kind, settings)
        if own is not None:
            raise ValueError(own)
        raise ValueError(_refusal(name, sim, kind, settings))
    for setting in condition.values:
        if not sim.applies(setting):
            able = [s.title for s in registered() if s.applies(setting)]
            who = f"{' and '.join(able)} only" if able else "no simulator installed here"
            raise ValueError(
                f"{setting} is applied by {who}; {name} is built on the {sim.name} backend, which does not apply "
                "it: give it other conditions."
            )
    problem = sim.condition_problem(name, condition)
    if problem is not None:
        raise ValueError(problem)


def _refusal(name: str, sim: Simulator, kind: str, settings: tuple[str, ...]) -> str:
    from simeval.conditions import CFG, KINDS

    able = supporting(kind)
    titles = " and ".join(s.title for s in able) or "no simulator installed here"
    if settings == (CFG,):
        return f"cfg overrides apply to {titles} tasks only, not {name}."
    here = [s for s in able if s.prefix is None and s.runs(name)]
    if here:
        advice = f"use backend={here[0].name!r}, or other conditions"
    else:
        runs = "; ".join(f"{s.title} runs {', '.join(s.tasks()) or 'its own tasks'}" for s in able)
        advice = f"{runs}; give {name} other conditions"
    return (
        f"{', '.join(settings)} set {KINDS[kind]}, which only {titles} changes; {name} is built on the "
        f"{sim.name} backend: {advice}."
    )
