"""The source section: where the weights come from (``--checkpoint``, ``--watch``, ``--serve``), how they are read."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simeval.checkpoints.bounds import parse_size
from simeval.checkpoints.formats import names as _format_names
from simeval.launch.config.base import ConfigError, Section, flag, opt

SOURCES = ("checkpoint", "watch", "serve", "policy_server")
CHECKPOINT_FORMATS = tuple(_format_names())


@dataclass
class SourceSection(Section):
    """``--checkpoint`` (repeatable: ``checkpoints`` holds them all), ``--watch``, ``--serve`` and their reading."""

    title = "source"
    reads = ("policy_server", "suite", "backend")
    choices = {"format": ("checkpoint format", CHECKPOINT_FORMATS)}

    checkpoint: str | list | None = opt(
        None,
        "evaluate this checkpoint once (--select-best: give the flag once per checkpoint to choose from)",
        action="append",
    )
    watch: str | None = opt(None, "evaluate every checkpoint written to this directory, once, in step order")
    until_step: int | None = opt(None, "--watch: stop after a checkpoint at or past this step")
    poll_interval: float = opt(2.0, "--watch: seconds between directory scans")
    serve: str | None = opt(None, "serve a named Ray evaluator that training reaches with simeval.connect(NAME)")
    format: str | None = opt(
        None, f"checkpoint format, when recognising it by content is not wanted: {', '.join(CHECKPOINT_FORMATS)}"
    )
    max_checkpoint_size: str = opt(
        "32G",
        "largest checkpoint file read, and the most its zip members may expand to (e.g. 64G, 500M); a bigger "
        "file is refused unread (docs/security.md)",
    )

    def prepare(self) -> None:
        """``checkpoint`` given as a list (a repeated flag, a YAML list): the first; ``checkpoints``: all of them."""
        value = self.checkpoint
        many = list(value) if isinstance(value, (list, tuple)) else ([value] if value else [])
        self._checkpoints = many
        self.checkpoint = many[0] if many else None

    @property
    def checkpoints(self) -> list:
        """Every ``--checkpoint`` given, in order (``checkpoint`` is the first); empty without one."""
        many = getattr(self, "_checkpoints", [])
        if many[:1] == [self.checkpoint]:
            return list(many)
        return [self.checkpoint] if self.checkpoint else []  # ``checkpoint`` was set after the config was made

    @property
    def source(self) -> str | None:
        """Which source of weights was given (``checkpoint``, ``watch``, ``serve``, ``policy_server``), or None."""
        return next((k for k in SOURCES if getattr(self, k)), None)

    @property
    def max_checkpoint_bytes(self) -> int:
        """``--max-checkpoint-size`` in bytes; ConfigError for a size it cannot read."""
        try:
            return parse_size(self.max_checkpoint_size)
        except ValueError as exc:
            raise ConfigError(f"--max-checkpoint-size: {exc}.") from None

    def check(self) -> None:
        """One source of weights, each checkpoint a path, and the sources' own settings."""
        if not all(isinstance(p, str) and p for p in self.checkpoints):
            raise ConfigError(f"--checkpoint: a path per checkpoint, got {self.checkpoints!r:.60}.")
        sources = [k for k in SOURCES if getattr(self, k)]
        if len(sources) > 1:
            raise ConfigError("give one source of weights, not " + " and ".join(f"--{s}" for s in sources) + ".")
        if self.suite and self.serve:
            raise ConfigError("--suite evaluates checkpoints (--checkpoint or --watch), not --serve.")
        if self.serve and self.backend != "ray":
            raise ConfigError("--serve needs --backend ray (a named Ray actor is what training connects to).")
        if not 0 < self.poll_interval < math.inf:
            raise ConfigError(f"{flag('poll_interval')} must be a number of seconds > 0, got {self.poll_interval}.")
        self.max_checkpoint_bytes  # noqa: B018 - a size the flag's words cannot give fails here, in one line
