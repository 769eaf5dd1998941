"""The launcher's command line, made from LaunchConfig's fields (defaults and help live there).

Flags simeval does not know are kept for ``--init-fn`` (Isaac Lab's
AppLauncher adds ``--headless``, ``--livestream``, ...); without an init hook
they are an error, which names the nearest flag simeval knows.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import typing
from dataclasses import dataclass
from typing import Any

from simeval.command_line import OneLineParser
from simeval.launch.config import FIELDS, ConfigError, LaunchConfig, from_mapping, load_yaml, resolve


def _value_type(name: str) -> Any:
    """int, float, str, dict or list: the type of a field, without ``| None``."""
    hint = typing.get_type_hints(LaunchConfig)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return args[0]


def build_parser() -> argparse.ArgumentParser:
    """The launcher's command line: ``--config`` plus one flag per :class:`LaunchConfig` field."""
    p = OneLineParser(
        error_type=ConfigError,
        prog="simeval-launch",
        description="Evaluate robot-learning policies: a checkpoint, a directory training writes to, "
        "or weights streamed from a training process.",
        argument_default=argparse.SUPPRESS,
        allow_abbrev=False,
    )
    p.add_argument("--config", help="YAML profile (launchers/*.yaml); flags override it")
    for name, f in FIELDS.items():
        meta = f.metadata
        flag = meta.get("flag", "--" + name.replace("_", "-"))
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        kind = _value_type(name)
        quiet = default in (None, {}, []) or kind is bool or not meta.get("show_default", True)
        help_text = (meta["help"] + ("" if quiet else f" (default {default})")).replace("%", "%%")  # argparse formats
        if kind is bool:
            action = "store_false" if flag.startswith("--no-") else "store_true"
            p.add_argument(flag, dest=name, action=action, help=help_text)
        elif meta.get("json"):
            p.add_argument(flag, dest=name, type=json.loads, metavar="JSON", help=help_text)
        elif meta.get("nargs"):
            action = meta.get("action", "store")  # "extend": the flag may be given again, its values add up
            p.add_argument(
                flag, dest=name, nargs=meta["nargs"], metavar=meta.get("metavar"), action=action, help=help_text
            )
        else:  # action "append": the flag may be given again (--checkpoint A --checkpoint B), a list of its values
            action = meta.get("action", "store")
            metavar = meta.get("metavar", name.upper())
            p.add_argument(flag, dest=name, type=kind, metavar=metavar, action=action, help=help_text)
    p.add_argument(
        "--again",
        action="store_true",
        help="--checkpoint: evaluate it again although --out holds its result with these settings (a line is appended)",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def unrecognized(extra: list[str], parser: argparse.ArgumentParser) -> str:
    """The error for flags no parser knows: ``unrecognized arguments: ...; did you mean --episodes?``."""
    flags = [s for s in parser._option_string_actions if s.startswith("--")]
    nearest = []
    for arg in extra:
        if arg.startswith("--"):
            nearest += difflib.get_close_matches(arg.split("=", 1)[0], flags, n=1, cutoff=0.75)
    guess = f"; did you mean {' or '.join(dict.fromkeys(nearest))}?" if nearest else ""
    return f"unrecognized arguments: {' '.join(extra)}{guess} (see --help)."


@dataclass
class Parsed:
    """What the command line asked for."""

    cfg: LaunchConfig
    extra: list[str]  # flags for the init hook
    explicit: set[str]  # fields set by the profile or a flag (not defaults)
    config_path: str | None
    again: bool = False  # --again: evaluate a --checkpoint whose result --out holds


def parse(argv: list[str]) -> Parsed:
    """Config from YAML then flags."""
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    given = vars(ns)
    given.pop("debug", None)
    again = bool(given.pop("again", False))
    settings: dict[str, Any] = {}
    config_path = given.pop("config", None)
    if config_path:
        settings.update(load_yaml(config_path))
    settings.update(from_mapping(given, "command line", typed=True))
    cfg = resolve(settings)
    if extra and not cfg.init_fn:
        raise ConfigError(unrecognized(extra, parser))
    return Parsed(cfg, extra, set(settings), config_path, again)
