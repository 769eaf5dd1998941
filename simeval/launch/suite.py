"""Suite files: tasks x conditions, read as plain data (``--suite FILE``).

.. code-block:: yaml

    name: halfcheetah-robustness
    episodes: 16        # per cell
    seed: 0
    num_envs: 8         # defaults for every task; a task may override them
    max_steps: 1000
    tasks:
      - env: HalfCheetah-v5
        reference: {low: -280, high: 5000}   # optional: an untrained and an expert score
        bounds: {low: -1000, high: 13000}    # optional: the least and most one episode can return
        deterministic: false                 # optional: true where every episode of a checkpoint returns the same
        conditions:                          # name -> settings; {} is the nominal env
          nominal: {}
          obs-noise: {observation_noise: 0.1}
          heavy: {body_mass_scale: [1.2, 1.5]}
      - env: Hopper-v5
        cameras: [track]                     # optional: what this task's policy sees (--cameras by default)
        image_size: 96
        prompt: hop forward                  # optional: the task's text, sent to a policy server
        search:                              # optional: where it fails (simeval.launch.suite_search)
          ranges: {body_mass_scale: [0.5, 3.0]}
          max_episodes: 512

A cell is (task, condition). A task's ``cameras``, ``image_size`` and ``frame_stack`` replace the
run's ``--cameras``, ``--image-size`` and ``--frame-stack`` for its cells (the flags are the
defaults of the tasks that set none); its ``prompt`` is sent with every request to a policy
server (``--policy-server``, openpi's ``prompt`` key) and recorded on its lines, but in the cells of a
condition that sets ``prompt`` (a list of variants, one drawn per episode), whose variants replace it.

``bounds`` (a task's, or the suite's default for every task) declares the range of one
episode's return: every line of the task records it, a return outside it fails the cell
(never clipped), and the adaptive runs' and ``report compare``'s confidence sequences
become the finite-sample betting ones (:mod:`simeval.sequential`). A task that declares none takes its simulator's
(:meth:`simeval.envs.simulators.Simulator.return_bounds`), if it declares any.

``deterministic: true`` declares that the task has no randomness: a checkpoint returns the same on
every episode, so differences B - A that are all equal are the exact difference, and the t based
intervals (fixed-n, t-mixture, planned looks) give a verdict from them; undeclared, such differences
give none (``zero variance: declare deterministic``). Every line of the task records it, and
``report compare`` uses it where both runs' lines do. Every error is one line naming the file and the
field (``suites/x.yaml: tasks[0].conditions.heavy.body_mass_scale: ...``).
The settings a condition may hold are :mod:`simeval.conditions`'. A condition's
``cfg`` overrides are data only: judged from the file alone, then applied to a
copy of the task's config where this process can build it (no env, no simulation),
so that a value into a field the simulator turns into a callable is refused here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simeval.condition_terms import MAX_PROMPT, Prompt
from simeval.conditions import Condition
from simeval.envs import task_config
from simeval.envs.cfg_overrides import apply_cfg_overrides
from simeval.envs.simulators import check_condition, env_id_forms, simulator_for
from simeval.launch.config import ConfigError
from simeval.launch.suite_search import SuiteSearch, parse_search
from simeval.yaml_files import YamlError, read_yaml

_TOP = ("name", "episodes", "seed", "num_envs", "max_steps", "bounds", "tasks")
_TASK = (
    "env", "conditions", "search", "reference", "bounds", "deterministic", "episodes", "seed", "num_envs", "max_steps"
)  # fmt: skip
SEES = ("cameras", "image_size", "frame_stack", "prompt")  # what a task's policy sees; None: the run's flags
_TASK += SEES
_DEFAULTS = {"episodes": 16, "seed": 0, "num_envs": 8, "max_steps": 1000}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite: its env id, its run settings and its named conditions (in file order)."""

    env: str
    episodes: int
    seed: int
    num_envs: int
    max_steps: int | None
    conditions: dict[str, Condition]
    reference: tuple[float, float] | None = None
    bounds: tuple[float, float] | None = None
    """The least and the most one episode can return (``bounds: {low, high}``), or None."""
    cameras: tuple[str, ...] | None = None
    """The cameras its sub-envs observe (None: the run's ``--cameras``)."""
    image_size: int | None = None
    """The camera images' side in pixels (None: the run's ``--image-size``)."""
    frame_stack: int | None = None
    """Each camera's last N images stacked (None: the run's ``--frame-stack``)."""
    prompt: str | None = None
    """The task's text, sent to a policy server with every request (openpi's ``prompt``), or None."""
    deterministic: bool = False
    """Whether the task has no randomness (``deterministic: true``): identical differences are then a verdict."""
    search: SuiteSearch | None = None
    """Its ``search:`` block (:mod:`simeval.launch.suite_search`), or None."""


@dataclass(frozen=True)
class Cell:
    """A (task, condition) pair: what one results.jsonl line of a suite run is about."""

    task: SuiteTask
    condition_name: str
    condition: Condition

    @property
    def key(self) -> tuple[str, str]:
        """(task env id, condition name), unique in a suite."""
        return (self.task.env, self.condition_name)

    @property
    def prompt(self) -> str | None:
        """The task's ``prompt``, sent with every request to a policy server; None where the task sets none or the
        condition draws its own per episode (its ``prompt`` variants replace the task's)."""
        return None if Prompt.name in self.condition.values else self.task.prompt

    def context(self, suite: str) -> dict[str, Any]:
        """The fields a results.jsonl line of this cell carries besides the usual ones."""
        out = {
            "suite": suite,
            "task": self.task.env,
            "condition": self.condition_name,
            "condition_settings": self.condition.as_data(),
            "seed": self.task.seed,
            "num_envs": self.task.num_envs,
            "max_steps": self.task.max_steps,
        }
        if self.task.reference is not None:
            out["reference"] = {"low": self.task.reference[0], "high": self.task.reference[1]}
        if self.task.bounds is not None:
            out["bounds"] = {"low": self.task.bounds[0], "high": self.task.bounds[1]}
        if self.prompt is not None:
            out["prompt"] = self.prompt
        if self.task.deterministic:
            out["deterministic"] = True
        return out


@dataclass(frozen=True)
class Suite:
    """A parsed suite file."""

    name: str
    path: str
    tasks: list[SuiteTask] = field(default_factory=list)

    def cells(self) -> list[Cell]:
        """Every cell, task by task, conditions in file order."""
        return [Cell(t, name, c) for t in self.tasks for name, c in t.conditions.items()]


def load_suite(path: str) -> Suite:
    """Read and check a suite file; ConfigError (one line naming the file and the field) when it is wrong."""
    try:
        data = read_yaml(path)
    except FileNotFoundError:
        raise ConfigError(f"--suite {path}: no such file.") from None
    except OSError as exc:
        raise ConfigError(f"--suite {path}: cannot read it ({exc.strerror}).") from None
    except YamlError as exc:
        raise ConfigError(str(exc)) from None
    try:
        return _suite(data, path)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _suite(data: Any, path: str) -> Suite:
    if not isinstance(data, Mapping):
        raise ValueError("a suite is a mapping with name, tasks and optional defaults (episodes, seed, ...).")
    _known(data, _TOP, "")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name: a suite needs a name (letters, digits, '_', '.', '-', '+'), got {name!r}.")
    defaults = {key: _setting(data, key, _DEFAULTS[key], "") for key in _DEFAULTS}
    defaults["bounds"] = _bounds(data.get("bounds"), "bounds")
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise ValueError("tasks: a non-empty list of tasks, each with an env and its conditions.")
    parsed = [_task(t, f"tasks[{i}]", defaults) for i, t in enumerate(tasks)]
    seen: set[str] = set()
    for i, task in enumerate(parsed):
        if task.env in seen:
            raise ValueError(f"tasks[{i}].env: {task.env} is listed twice; give it one list of conditions.")
        seen.add(task.env)
    for i, task in enumerate(parsed):
        _check_cfg_overrides(task, f"tasks[{i}]")
        check_conditions(task, None, f"tasks[{i}]")
    return Suite(name, path, parsed)


def check_conditions(task: SuiteTask, backend: str | None, where: str) -> None:
    """Every condition of ``task``, and its searched settings, ones its simulator can apply (on ``backend``); else
    ValueError naming the field."""
    named = {f"conditions.{name}": condition for name, condition in task.conditions.items()}
    if task.search is not None:
        named["search.ranges"] = task.search.condition
    for field_name, condition in named.items():
        try:
            check_condition(task.env, condition, backend)
        except ValueError as exc:
            raise ValueError(f"{where}.{field_name}: {exc}") from None


def _check_cfg_overrides(task: SuiteTask, where: str) -> None:
    """Each condition's ``cfg`` overrides applied to a copy of the task's config, where it can be built here.

    The config is built without the env (Isaac Lab's ``parse_env_cfg``, mjlab's
    ``load_env_cfg``: no simulation); a path it lacks, or a value that would replace a
    callable, a class or a config object, is a ValueError naming the condition.
    Where the config cannot be built (the simulator is not installed here, Isaac
    Sim's app has not started), the worker checks them before it builds the env.
    """
    import copy

    overriding = {name: c.cfg for name, c in task.conditions.items() if c.cfg}
    if not overriding:
        return
    name, first = next(iter(overriding.items()))
    try:
        check_condition(task.env, Condition(cfg=first))
    except ValueError as exc:
        raise ValueError(f"{where}.conditions.{name}.cfg: {exc}") from None
    cfg = task_config(task.env)
    if cfg is None:
        return
    for name, overrides in overriding.items():
        try:
            apply_cfg_overrides(copy.deepcopy(cfg), overrides)
        except ValueError as exc:
            raise ValueError(f"{where}.conditions.{name}.cfg: {exc}") from None


def _task(data: Any, where: str, defaults: dict[str, Any]) -> SuiteTask:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: a task is a mapping with env and conditions, got {data!r}.")
    _known(data, _TASK, where + ".")
    env = data.get("env")
    if not isinstance(env, str) or not env:
        raise ValueError(f"{where}.env: every task names its env ({env_id_forms()}).")
    search = parse_search(data["search"], where + ".search") if "search" in data else None
    conditions = data.get("conditions", {"nominal": {}} if search is None else {})
    if not isinstance(conditions, Mapping) or not (conditions or search):
        raise ValueError(f"{where}.conditions: a mapping of condition names to settings ({{}}: the nominal env).")
    parsed = {}
    for name, settings in conditions.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"{where}.conditions: {name!r} is not a name (letters, digits, '_', '.', '-', '+').")
        parsed[name] = Condition.parse(settings, f"{where}.conditions.{name}")
    return SuiteTask(
        env=env,
        episodes=_setting(data, "episodes", defaults["episodes"], where + "."),
        seed=_setting(data, "seed", defaults["seed"], where + "."),
        num_envs=_setting(data, "num_envs", defaults["num_envs"], where + "."),
        max_steps=_setting(data, "max_steps", defaults["max_steps"], where + "."),
        conditions=parsed,
        reference=_reference(data.get("reference"), where + ".reference"),
        bounds=_bounds(data["bounds"], where + ".bounds") if "bounds" in data else defaults["bounds"] or _declared(env),
        deterministic=_flag(data, "deterministic", where + "."),
        search=search,
        **_sees(data, where + "."),
    )


def _declared(env: str) -> tuple[float, float] | None:
    """The return bounds ``env``'s simulator declares for it (:meth:`Simulator.return_bounds`), or None."""
    try:
        sim = simulator_for(env)
    except ValueError:
        return None  # no simulator runs it: the conditions' check says so in its own line
    bounds = sim.return_bounds(env)
    if bounds is None:
        return None
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise ValueError(f"simulator {sim.name}'s return_bounds({env!r}) is not (low, high): {bounds!r:.80}") from None
    return _bounds({"low": low, "high": high}, f"simulator {sim.name}'s return_bounds({env!r})")


def _flag(data: Mapping, key: str, prefix: str) -> bool:
    """A task's ``true``/``false`` setting (absent: false); ValueError naming it when it is not a YAML boolean."""
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{prefix}{key}: true or false, got {value!r:.80}.")
    return value


def _sees(data: Mapping, prefix: str) -> dict[str, Any]:
    """A task's ``cameras``, ``image_size``, ``frame_stack`` and ``prompt``, each checked as data (absent: None)."""
    out: dict[str, Any] = {}
    cameras = data.get("cameras")
    if cameras is not None:
        if isinstance(cameras, str):
            cameras = [cameras]
        ok = isinstance(cameras, list) and 0 < len(cameras) <= 16 and all(isinstance(c, str) for c in cameras)
        if not ok or not all(_NAME.match(c) for c in cameras) or len(set(cameras)) != len(cameras):
            raise ValueError(
                f"{prefix}cameras: a list of the model's camera names (letters, digits, '_', '.', '-', '+'; "
                f"at most 16, each once), got {cameras!r:.80}."
            )
        out["cameras"] = tuple(cameras)
    for key, low, high in (("image_size", 1, 1024), ("frame_stack", 1, 64)):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ValueError(f"{prefix}{key}: a whole number in {low}..{high}, got {value!r:.80}.")
        out[key] = value
    prompt = data.get("prompt")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > MAX_PROMPT:
            raise ValueError(f"{prefix}prompt: the task's text, 1..{MAX_PROMPT} characters, got {prompt!r:.80}.")
        out["prompt"] = prompt
    return out


def _setting(data: Mapping, key: str, default: Any, prefix: str) -> Any:
    value = data.get(key, default)
    if key == "max_steps" and value is None:
        return None
    least = 0 if key == "seed" else 1
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{prefix}{key}: a whole number >= {least}, got {value!r}.")
    return value


def _reference(data: Any, where: str) -> tuple[float, float] | None:
    if data is None:
        return None
    if not isinstance(data, Mapping) or set(data) != {"low", "high"}:
        raise ValueError(f"{where}: {{low: <an untrained score>, high: <an expert score>}}, got {data!r}.")
    low, high = data["low"], data["high"]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)) or low == high:
        raise ValueError(f"{where}: low and high are two different numbers, got {low!r} and {high!r}.")
    return (float(low), float(high))


def _bounds(data: Any, where: str) -> tuple[float, float] | None:
    """``{low, high}`` on one episode's return: two finite numbers, low < high; None when not given."""
    if data is None:
        return None
    shape = "{low: <the least one episode can return>, high: <the most>}"
    if not isinstance(data, Mapping) or set(data) != {"low", "high"}:
        raise ValueError(f"{where}: {shape}, got {data!r}.")
    low, high = data["low"], data["high"]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
    if not numbers or not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise ValueError(f"{where}: low and high are two finite numbers with low < high, got {low!r} and {high!r}.")
    return (float(low), float(high))


def _known(data: Mapping, keys: tuple[str, ...], prefix: str) -> None:
    for key in data:
        if key not in keys:
            raise ValueError(f"{prefix}{key}: unknown field; a {'task' if prefix else 'suite'} has {', '.join(keys)}.")
