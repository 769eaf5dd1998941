"""The selection section: ``--select-best``, the best of several checkpoints chosen look by look.

It reuses the source's ``--watch`` and repeatable ``--checkpoint`` and the strategy section's look flags
(``--suite``, ``--margin``, ``--alpha``, ``--look-every``, ``--max-episodes``; ``--until-step`` under ``--watch``).
"""

from __future__ import annotations

from dataclasses import dataclass

from simeval.launch.config.base import ConfigError, Section, opt


@dataclass
class SelectionSection(Section):
    """``--select-best``: what it needs (checkpoints to choose from) and the flags it refuses."""

    title = "selection"
    reads = (
        "checkpoints", "watch", "serve", "until_decided", "until_precise", "baseline", "design", "launcher",
        "time_budget", "logger",
    )  # fmt: skip
    looks = ("select-best",)

    select_best: bool = opt(
        False,
        "choose the best of the --watch checkpoints (or of two or more --checkpoint) look by look on common seeds: "
        "checkpoints shown worse than the leader are eliminated, until one is left, all left are within --margin, "
        "or --max-episodes is spent; writes OUT/results.jsonl (one line per look per checkpoint, then the result)",
    )

    def check(self) -> None:
        """More than one ``--checkpoint`` only here; ``--select-best`` needs checkpoints and has its own rule."""
        many = len(self.checkpoints)
        if not self.select_best:
            if many > 1:
                raise ConfigError(
                    f"--checkpoint is given {many} times: more than one is for --select-best (which chooses the "
                    "best of them); evaluate the others in runs of their own."
                )
            return
        if self.serve:
            raise ConfigError("--select-best evaluates the checkpoints it chooses among: leave --serve out.")
        for name, given in (("until-decided", self.until_decided), ("until-precise", self.until_precise is not None)):
            if given:
                raise ConfigError(f"--select-best is a rule of its own: leave --{name} out.")
        if self.baseline:
            raise ConfigError("--select-best compares each checkpoint with the leader: leave --baseline out.")
        if not (self.watch or many >= 2):
            raise ConfigError(
                "--select-best needs --watch DIR or at least two --checkpoint (the ones it chooses among)."
            )
        if many > 1 and self.launcher == "docker":
            raise ConfigError(
                "--select-best with --checkpoint runs with --launcher local: "
                "the Docker launcher mounts one --checkpoint."
            )
        if self.time_budget is not None:
            raise ConfigError("--select-best sizes its rounds in looks (--look-every): leave --time-budget out.")
        if self.logger != "csv":
            raise ConfigError(
                f"--select-best writes its looks to results.jsonl only: leave --logger {self.logger} out."
            )
