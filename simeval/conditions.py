"""Conditions: what a suite changes about an env, and the per-episode seeds that make them common.

A condition is a mapping of settings (``{"observation_noise": 0.1,
"body_mass_scale": [0.8, 1.2]}``); ``{}`` is the nominal env. A setting's value
is a number, or a ``[low, high]`` range drawn per episode from that episode's
own seed. Every setting but ``cfg`` is a condition term (:mod:`simeval.condition_terms`: its
kind, its check, its draw and its effect; installed packages add terms there). The built-in ones:

* applied by simeval around any env (:class:`simeval.envs.perturb.Perturb`,
  below VecNorm): ``observation_noise`` (Gaussian std, in the observation's own
  units), ``action_noise`` (Gaussian std added to the action the env gets),
  ``action_delay`` (the env gets the action of ``k`` steps earlier; the first
  ``k`` actions of an episode are zero), ``inference_delay`` (inference latency in
  control steps: the policy's answer to step ``t``'s observation reaches the env at
  step ``t + d``; while it is on its way the last answer is held (zeros before the first;
  ``d = 1`` equals ``action_delay: 1``), or, written ``{steps: d, while_waiting: tail}``, a
  policy of action chunks plays the previous chunk's tail (:data:`WHILE_WAITING`)),
  ``action_scale`` (the action is multiplied by it: actuator strength; the env's own
  limits still apply);
* simulator-native, applied by the simulators that list them (``Simulator.terms``; native MuJoCo,
  ``backend="native"``):
  ``body_mass_scale`` (every body's mass and inertia), ``friction_scale``
  (every geom's friction coefficients), ``gravity`` (its vertical component,
  m/s^2, nominal -9.81), ``push`` with ``push_step`` and ``push_direction`` (a shove at one step),
  ``init_noise_scale`` (the reset noise scaled), ``camera_shift``, ``camera_tilt``,
  ``light_intensity`` and ``light_direction`` (the observed cameras' pose and the scene's lights);
* ``prompt``: a list of 2..64 texts, one sent to a policy server per episode (``--policy-server``;
  it replaces the suite task's ``prompt``): each episode draws a variant's index from a generator of
  its own seed (:class:`simeval.condition_terms.VariantTerm`), recorded with the other drawn values;
* ``cfg``: Isaac Lab and mjlab task-config overrides by dotted path, applied before the
  env is built (``{"cfg": {"events.add_pole_mass.params.mass_distribution_params": [0.5, 2.0]}}``);
  a value there is the config's value, never drawn by simeval. It is data only
  (:func:`cfg_value_problem`): a suite file names no callable for the simulator to import.

Episode ``k`` of global sub-env ``i`` in a round seeded with ``seed`` has the
seed :func:`episode_seed` ``(seed, i, k)``, whatever checkpoint, backend or
sharding runs it: its drawn settings and its noise come from that seed alone,
and its initial state from sub-env ``i``'s generator (seeded ``seed + i``) after
``k`` resets. That is what makes two checkpoints' episodes common random numbers.
No torch here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simeval.condition_terms import KINDS, VariantTerm, registered, term

CFG = "cfg"
# inference_delay's modes, what the env plays while an answer is on its way: "hold" (the default) the last answer,
# applied by the Perturb transform around the env; "tail" the rest of the previous action chunk, played by the
# worker's chunk player (simeval.policy_kinds.acting.ActingPolicy), which alone knows the chunks.
WHILE_WAITING = ("hold", "tail")
_DELAY_KEYS = ("steps", "while_waiting")
__all__ = ["KINDS"]  # the kinds of settings: simeval.condition_terms.KINDS


def kind_of(name: str) -> str:
    """The kind of setting ``name`` (a key of :data:`KINDS`): its term's, ``task_config`` for ``cfg``."""
    if name == CFG:
        return "task_config"
    found = term(name)
    if found is None:
        raise KeyError(name)
    return found.kind


_MASK32 = 0xFFFFFFFF
# cfg overrides are data: a path part with one of these names (or ending in _<name>) is a field the simulator
# calls or instantiates (a manager term's func, an asset's class_type, mjlab's spec_fn), never set from a file.
CALLABLE_NAMES = ("func", "fn", "class_type", "cls")
# Isaac Lab turns strings of this shape into callables ("module.path:attr", "{DIR}.module:attr") and evaluates
# "lambda ..." strings (isaaclab.utils.string.string_to_callable), wherever they land.
_CALLABLE_STRING = re.compile(r"^\s*(\{DIR\})?[A-Za-z_.][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*\s*$|^\s*lambda\b")
CFG_DATA = (
    "a cfg override sets data only: numbers, booleans, null, strings where the config holds a string, "
    "and lists or mappings of these"
)


@functools.lru_cache(maxsize=1 << 17)
def episode_seed(seed: int, sub_env: int, ordinal: int) -> int:
    """The seed of episode ``ordinal`` of global sub-env ``sub_env`` in a round seeded ``seed`` (a uint32).

    A hash (numpy's ``SeedSequence``) of the three numbers, so neighbouring
    episodes get unrelated streams and the value is the same on every machine.
    Cached: a seeded evaluation asks for the same seeds every round (about 15 us each).
    """
    state = np.random.SeedSequence([int(seed) & _MASK32, int(sub_env), int(ordinal)]).generate_state(1, np.uint32)
    return int(state[0])


LOOK_STRIDE = 1 << 16
"""How far apart an adaptive run's look seeds are: a look's sub-env generators (``seed + i``) never meet another's."""
_LOOK_TAG = 0x100C  # keeps look seeds' hashes apart from episode seeds' (which hash three numbers, not two)


def look_seed(seed: int, look: int) -> int:
    """The seed of look ``look`` (from 0) of an adaptive run's cell whose task is seeded ``seed`` (a uint32).

    Each look of ``--until-decided`` / ``--until-precise`` is one ordinary round seeded
    with this, so its episodes are ``episode_seed(look_seed(seed, look), i, k)`` and sub-env
    ``i`` starts from the generator seeded ``look_seed(seed, look) + i``. The seeds are
    multiples of :data:`LOOK_STRIDE` on a ring of 65536 (its offset a hash, numpy's
    ``SeedSequence``, of ``seed``): looks ``0 .. 65535`` get distinct seeds, and their
    sub-env generators' seeds (up to 65536 sub-envs) never repeat across looks. The
    value depends on ``seed`` and ``look`` only: every checkpoint, backend and number of
    workers sees the same episodes at each look.
    """
    look = int(look)
    if not 0 <= look < LOOK_STRIDE:
        raise ValueError(f"look must be in [0, {LOOK_STRIDE}), got {look}.")
    state = np.random.SeedSequence([int(seed) & _MASK32, _LOOK_TAG]).generate_state(1, np.uint32)
    offset = int(state[0]) >> 16
    return ((offset + look) % LOOK_STRIDE) * LOOK_STRIDE


def round_seed(seed: int | None) -> int:
    """The base of a round's episode seeds: ``seed``, or fresh entropy for an unseeded round."""
    if seed is not None:
        return int(seed)
    return int(np.random.SeedSequence().generate_state(1, np.uint32)[0])


Value = float | tuple[float, float] | tuple[str, ...]
"""A setting's value: a number, a ``(low, high)`` range, or a variant term's variants."""


@dataclass(frozen=True)
class Condition:
    """A checked condition: fixed values, ``(low, high)`` ranges, Isaac Lab config overrides, and what plays while
    an ``inference_delay`` answer is on its way (``while_waiting``).

    Build one with :meth:`parse` (from plain data, e.g. a suite file's
    mapping); ``Condition()`` is the nominal env.
    """

    values: Mapping[str, Value] = field(default_factory=dict)
    """Each setting's number, ``(low, high)`` range, or tuple of variants (a :class:`VariantTerm`'s)."""
    cfg: Mapping[str, Any] = field(default_factory=dict)
    while_waiting: str = "hold"
    """What plays while an ``inference_delay`` answer is on its way: one of :data:`WHILE_WAITING`."""

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None, where: str = "condition") -> Condition:
        """Check ``data`` and build the condition; ValueError (one line, starting with ``where``) otherwise."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected a mapping of settings ({{}} for the nominal env), got {data!r}.")
        values: dict[str, Value] = {}
        cfg: dict[str, Any] = {}
        while_waiting = "hold"
        for name, value in data.items():
            if name == CFG:
                cfg = _parse_cfg(value, f"{where}.{CFG}")
            elif name == "inference_delay" and isinstance(value, Mapping):
                value, while_waiting = _delay_mapping(value, f"{where}.{name}")
                values[name] = _parse_value(name, value, f"{where}.{name}.steps")
            elif isinstance(term(name), VariantTerm):
                values[name] = term(name).variants(value, f"{where}.{name}")  # type: ignore[union-attr]
            elif term(name) is not None:
                values[name] = _parse_value(name, value, f"{where}.{name}")
            else:
                names = ", ".join(t.name for t in registered())
                raise ValueError(
                    f"{where}: unknown setting {name!r}; settings are {names} and {CFG} "
                    "(task-config overrides by dotted path)."
                )
        for name in values:
            needs = term(name).needs  # type: ignore[union-attr]
            if needs is not None and needs not in values:
                raise ValueError(f"{where}.{name}: qualifies {needs}, which the condition does not set: add {needs}.")
        return cls(values, cfg, while_waiting)

    @property
    def nominal(self) -> bool:
        """Whether the condition changes nothing."""
        return not self.values and not self.cfg

    def settings_of(self, kind: str) -> tuple[str, ...]:
        """The settings of this condition of ``kind`` (a key of :data:`KINDS`), in file order."""
        names = (*self.values, *([CFG] if self.cfg else []))
        return tuple(name for name in names if kind_of(name) == kind)

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds of its settings: what a simulator needs to apply it."""
        return frozenset(kind_of(name) for name in (*self.values, *([CFG] if self.cfg else [])))

    @property
    def ranged(self) -> tuple[str, ...]:
        """The settings drawn per episode (ranges, and variant terms' indices), in a fixed order."""
        return tuple(sorted(k for k, v in self.values.items() if isinstance(v, tuple)))

    def draw(self, seed: int) -> dict[str, float]:
        """Every setting's value for the episode with seed ``seed``: ranges drawn uniformly, in name order, and each
        variant term's index from its own generator (:meth:`VariantTerm.pick`), which draws none of the ranges'."""
        rng = np.random.default_rng(int(seed))
        out: dict[str, float] = {}
        for name in sorted(self.values):
            value = self.values[name]
            found = term(name)
            if isinstance(found, VariantTerm):
                out[name] = float(found.pick(seed, len(value)))  # type: ignore[arg-type]
            elif isinstance(value, tuple):
                out[name] = found.draw(rng, *value)  # type: ignore[union-attr]
            else:
                out[name] = float(value)
        return out

    def as_data(self) -> dict[str, Any]:
        """The condition as plain data (ranges and variants as lists), as a suite file or results.jsonl writes it."""
        out: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(self.values.items())}
        if self.while_waiting != "hold" and "inference_delay" in out:
            out["inference_delay"] = {"steps": out["inference_delay"], "while_waiting": self.while_waiting}
        if self.cfg:
            out[CFG] = dict(self.cfg)
        return out


def _delay_mapping(value: Mapping, where: str) -> tuple[Any, str]:
    """``inference_delay: {steps: d, while_waiting: hold | tail}`` as (the steps as given, the mode)."""
    unknown = [k for k in value if k not in _DELAY_KEYS]
    if unknown:
        raise ValueError(
            f"{where}: unknown key {unknown[0]!r}; inference_delay is a number of steps, a [low, high] range, "
            "or {steps: <either>, while_waiting: hold | tail}."
        )
    if "steps" not in value:
        raise ValueError(
            f"{where}: steps is missing: {{steps: <a number or [low, high]>, while_waiting: hold | tail}}."
        )
    mode = value.get("while_waiting", "hold")
    if mode not in WHILE_WAITING:
        raise ValueError(
            f"{where}.while_waiting: expected one of {', '.join(WHILE_WAITING)} (the last answer held, or the previous "
            f"action chunk's tail played), got {mode!r}."
        )
    return value["steps"], mode


def _parse_value(name: str, value: Any, where: str) -> float | tuple[float, float]:
    """A number, or a [low, high] range with low <= high, within the setting's bounds."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(_is_number(v) for v in value):
            raise ValueError(f"{where}: a range is [low, high] with two numbers, got {value!r}.")
        low, high = float(value[0]), float(value[1])
        if low > high:
            raise ValueError(f"{where}: range [{value[0]}, {value[1]}] has low > high.")
        _check_bounds(name, low, where)
        _check_bounds(name, high, where)
        return (low, high)
    if not _is_number(value):
        raise ValueError(f"{where}: expected a number or a [low, high] range, got {value!r}.")
    _check_bounds(name, float(value), where)
    return float(value)


def _check_bounds(name: str, value: float, where: str) -> None:
    term(name).check(value, where)  # type: ignore[union-attr]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parse_cfg(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"{where}: expected a mapping of dotted config paths to values, got {value!r}.")
    for path, setting in value.items():
        if not isinstance(path, str) or not path or any(not part for part in path.split(".")):
            raise ValueError(f"{where}: {path!r} is not a dotted path such as events.reset_pole.params.x.")
        problem = cfg_value_problem(path, setting)
        if problem:
            raise ValueError(f"{where}.{path}: {problem}.")
    return dict(value)


def cfg_value_problem(path: str, value: Any) -> str | None:
    """Why the cfg override ``path: value`` is not plain data, judged from the two alone; None if it is.

    Refused: a path part named like a field the simulator calls or instantiates
    (:data:`CALLABLE_NAMES`, also as a ``_<name>`` suffix), a value that is not plain
    data (numbers, booleans, None, strings, and lists, tuples and string-keyed
    mappings of these), a mapping key named like such a field, and a string that
    Isaac Lab would turn into a callable (``"module:attr"``, ``"lambda ..."``).
    What needs the config itself (does the field hold a callable, a config
    object?) is :func:`simeval.envs.cfg_overrides.apply_cfg_overrides`' to check.
    """
    for part in path.split("."):
        if callable_name(part):
            return f"{part!r} names a callable or a class the simulator imports or calls; {CFG_DATA}"
    return _data_problem(value)


def callable_name(name: str) -> bool:
    """Whether a config field or key called ``name`` holds what the simulator calls or instantiates (by its name)."""
    return any(name == n or name.endswith(f"_{n}") for n in CALLABLE_NAMES)


def callable_string(value: str) -> bool:
    """Whether Isaac Lab would turn the string ``value`` into a callable (``"module:attr"``, ``"lambda ..."``)."""
    return bool(_CALLABLE_STRING.match(value))


def _data_problem(value: Any) -> str | None:
    """Why ``value`` is not plain data (or holds a string that names a callable); None if it is."""
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, str):
        if callable(value):  # Isaac Lab's ResolvableString: a str that imports and calls what it names
            return f"{type(value).__name__} {str(value)!r} is callable, not a plain string; {CFG_DATA}"
        if callable_string(value):
            return (
                f"{value!r} names a callable (module:attr) or is a lambda: a task config imports or runs it; {CFG_DATA}"
            )
        return None
    if isinstance(value, (list, tuple)):
        return next((p for p in map(_data_problem, value) if p), None)
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"mapping key {key!r} is not a string; {CFG_DATA}"
            if callable_name(key):
                return f"mapping key {key!r} names a callable or a class the simulator imports or calls; {CFG_DATA}"
            problem = _data_problem(item)
            if problem:
                return problem
        return None
    return f"{type(value).__name__} is not plain data; {CFG_DATA}"
