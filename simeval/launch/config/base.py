"""What every section of the launcher's config shares: the error, the field helper, the :class:`Section` contract."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, ClassVar


class ConfigError(ValueError):
    """Bad launcher input; the message says what is wrong and what to do."""


def opt(default: Any, help: str, **meta: Any) -> Any:
    """A config field: its default (a callable is a default factory), its ``--help`` text and flag metadata."""
    factory = {"default_factory": default} if callable(default) else {"default": default}
    return field(metadata={"help": help, **meta}, **factory)


def flag(name: str) -> str:
    """The flag of field ``name``: ``num_envs`` -> ``--num-envs``."""
    return "--" + name.replace("_", "-")


class Section:
    """One feature's part of :class:`~simeval.launch.config.LaunchConfig`: its fields and the checks of its flags.

    A section is a dataclass mixin. ``check`` validates the section's own flags and raises :class:`ConfigError`
    (one line, naming the flag); it may read another section's settings only where ``reads`` names them (the
    explicit interface between sections; tests/test_config_sections.py holds every section to it). ``choices``
    maps a field to (what it is called in the error, its allowed values); ``None`` is always allowed.
    ``looks`` names the modes of this section that play looks (and so take ``--look-every``, ``--max-episodes``,
    ``--alpha``, ``--margin``). ``prepare`` runs when the config is made (before ``check``).
    """

    title: ClassVar[str] = ""
    reads: ClassVar[tuple[str, ...]] = ()
    choices: ClassVar[dict[str, tuple[str, tuple[str, ...]]]] = {}
    looks: ClassVar[tuple[str, ...]] = ()

    def prepare(self) -> None:
        """Normalise the section's fields as given (a YAML list, a repeated flag); nothing by default."""

    def check(self) -> None:
        """Validate the section's flags; raise :class:`ConfigError` for the first that is wrong."""

    @classmethod
    def own(cls) -> tuple[str, ...]:
        """The names this section declares: its fields, properties and methods."""
        fields = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
        return tuple(fields) + tuple(k for k in vars(cls) if not k.startswith("__"))
