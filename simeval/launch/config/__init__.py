"""LaunchConfig: every setting of ``python -m simeval.launch``, from YAML and flags, in sections owned by features.

A YAML profile (``--config launchers/....yaml``) sets any field; a flag given
on the command line overrides it. Field names use underscores; YAML may use
dashes too. Unknown YAML keys are an error, never silently ignored. Each
field's default and help text live in its section only: ``cli.py`` makes the flags from them.

Each feature owns a section (:mod:`.source`, :mod:`.replay`, :mod:`.backend`, :mod:`.container`, :mod:`.env`,
:mod:`.policy`, :mod:`.selection`, :mod:`.search`, :mod:`.strategy`, :mod:`.output`): a dataclass mixin with its
fields and a ``check`` of its flags, reading other sections' settings only where its ``reads`` names them.
:class:`LaunchConfig` is composed of the sections in :data:`SECTIONS`, and :meth:`LaunchConfig.validate` runs them
in that order; :data:`MODES` names what a run does (:attr:`LaunchConfig.mode`). A new feature adds its section, and
registers it in both tables.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from simeval.launch.config.backend import BackendSection
from simeval.launch.config.base import ConfigError, Section
from simeval.launch.config.container import LAUNCHERS, LauncherSection
from simeval.launch.config.env import EnvSection
from simeval.launch.config.output import LOGGERS, OutputSection
from simeval.launch.config.policy import PolicySection
from simeval.launch.config.replay import ReplaySection
from simeval.launch.config.search import SearchSection
from simeval.launch.config.selection import SelectionSection
from simeval.launch.config.source import CHECKPOINT_FORMATS, SOURCES, SourceSection
from simeval.launch.config.strategy import StrategySection
from simeval.yaml_files import YamlError, read_yaml

__all__ = [
    "CHECKPOINT_FORMATS", "DEVICE_ENV", "FIELDS", "LAUNCHERS", "LOGGERS", "MODES", "SECTIONS", "SOURCES",
    "ConfigError", "LaunchConfig", "Section", "from_mapping", "load_yaml", "resolve",
]  # fmt: skip

# A site's default device (slurm/eval.sh sets cuda:0 when the job has a GPU), used
# only when neither a flag nor the profile names one.
DEVICE_ENV = "SIMEVAL_DEFAULT_DEVICE"

# The sections, in the order their checks run (and their flags appear in --help).
SECTIONS: tuple[type[Section], ...] = (
    SourceSection,
    ReplaySection,
    BackendSection,
    LauncherSection,
    EnvSection,
    PolicySection,
    SelectionSection,
    SearchSection,
    StrategySection,
    OutputSection,
)

# What a run does, first match wins: app.py dispatches on the name.
MODES: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("replay", lambda cfg: bool(cfg.replay)),
    ("serve", lambda cfg: bool(cfg.serve)),
    ("select-best", lambda cfg: bool(cfg.select_best)),
    ("search", lambda cfg: bool(cfg.search)),
    ("until-decided", lambda cfg: bool(cfg.until_decided)),
    ("until-precise", lambda cfg: cfg.until_precise is not None),
    ("suite", lambda cfg: bool(cfg.suite)),
    ("checkpoint", lambda cfg: cfg.source == "checkpoint"),
    ("policy-server", lambda cfg: cfg.source == "policy_server"),
    ("watch", lambda cfg: True),  # also without a source: the launcher then watches the shipped training run
)


@dataclass
class LaunchConfig(*reversed(SECTIONS)):  # type: ignore[misc]  # fields in SECTIONS order
    """The launcher's settings: one field per flag (``--num-envs`` sets ``num_envs``) and YAML profile key."""

    look_modes: ClassVar[tuple[str, ...]] = tuple(m for s in SECTIONS for m in s.looks)  # modes that play looks

    def __post_init__(self) -> None:
        for section in SECTIONS:
            section.prepare(self)

    @property
    def mode(self) -> str:
        """The one name of what the run does, for the launcher's table of modes.

        ``"replay"``, ``"serve"``, ``"select-best"``, ``"until-decided"``, ``"until-precise"``, ``"suite"``, or the
        source of a plain run: ``"checkpoint"``, ``"policy-server"``, ``"watch"`` (also without a source: the
        launcher then watches the shipped training run).
        """
        return next(name for name, applies in MODES if applies(self))

    def validate(self) -> LaunchConfig:
        """Check each section's flags, in :data:`SECTIONS` order; returns ``self``, or raises :class:`ConfigError`."""
        for section in SECTIONS:
            for name, (what, choices) in section.choices.items():
                value = getattr(self, name)
                if value is not None and value not in choices:
                    raise ConfigError(f"unknown {what} {value!r}: choose one of {', '.join(choices)}.")
        for section in SECTIONS:
            section.check(self)
        return self


FIELDS = {f.name: f for f in dataclasses.fields(LaunchConfig)}


def from_mapping(data: dict[str, Any], where: str, typed: bool = False) -> dict[str, Any]:
    """Validate a mapping's keys (and, unless ``typed`` as argparse's are, its values' kinds); field -> value."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(data).__name__}.")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {', '.join(sorted(FIELDS))}.")
        if not typed:
            _check_kind(name, value, where)
        out[name] = value
    return out


def _kinds(name: str) -> tuple[tuple[type, ...], bool]:
    """The Python types field ``name`` takes, and whether it may be None."""
    import typing

    hint = typing.get_type_hints(LaunchConfig)[name]
    args = typing.get_args(hint) or (hint,)
    return tuple(a for a in args if a is not type(None)), type(None) in args


def _check_kind(name: str, value: Any, where: str) -> None:
    """A ConfigError naming ``where`` and the setting when ``value`` is not of the kind the field takes."""
    kinds, optional = _kinds(name)
    if value is None:
        if optional or name == "info_keys":
            return
    elif bool in kinds or not isinstance(value, bool):
        if float in kinds and isinstance(value, (int, float)):
            return
        if isinstance(value, kinds) or (name == "info_keys" and isinstance(value, str)):
            return
    words = {bool: "true or false", int: "a whole number", float: "a number", str: "text", dict: "a mapping",
             list: "a list"}  # fmt: skip
    wanted = " or ".join(words[k] for k in kinds) + (" or null" if optional else "")
    raise ConfigError(f"{where}: {name} must be {wanted}, got {value!r:.60}.")


def load_yaml(path: str) -> dict[str, Any]:
    """The settings in the YAML profile at ``path`` (field -> value); ConfigError if unreadable or unknown."""
    try:
        data = read_yaml(path) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}.") from None
    except YamlError as exc:
        raise ConfigError(str(exc)) from None
    return from_mapping(data, path)


def resolve(settings: dict[str, Any]) -> LaunchConfig:
    """The validated config for the merged YAML and flag ``settings``, with the site's default device."""
    if settings.get("time_budget") is not None and "episodes" in settings:
        raise ConfigError("give --episodes or --time-budget, not both (a profile's episodes count too).")
    cfg = LaunchConfig(**settings)
    if cfg.device is None and os.environ.get(DEVICE_ENV):
        cfg.device = os.environ[DEVICE_ENV]
    return cfg.validate()
