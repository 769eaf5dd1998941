"""The strategy section: the rules that decide how many episodes a run plays (``--until-decided``, ``--until-precise``).

Its look flags (``--look-every``, ``--max-episodes``, ``--alpha``, ``--margin``) are shared with every mode a
section lists in ``looks`` (the table of sections' ``look_modes``): such a mode reuses them without touching this
section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simeval.launch.config.base import ConfigError, Section, flag, opt
from simeval.sequential import DESIGNS


@dataclass
class StrategySection(Section):
    """``--suite``, the adaptive rules (``--until-decided`` with ``--baseline``, ``--until-precise``) and the looks."""

    title = "strategy"
    reads = ("source", "launcher", "time_budget", "logger", "mode", "look_modes")
    choices = {"design": ("design", DESIGNS)}
    looks = ("until-decided", "until-precise")

    suite: str | None = opt(
        None,
        "a suite file (tasks x conditions, see suites/): evaluate each --checkpoint or --watch checkpoint on every "
        "cell, one results.jsonl line per cell (--select-best: a checkpoint's score is the suite's aggregate)",
    )
    until_decided: bool = opt(
        False,
        "--suite: compare --checkpoint (B) with --baseline (A) look by look on common seeds, each cell until its "
        "verdict is reached (better, worse; equivalent with --margin) or its budget is spent; writes OUT/a and OUT/b",
    )
    baseline: str | None = opt(
        None, "--until-decided: the baseline checkpoint A that --checkpoint (B) is compared with"
    )
    until_precise: str | float | None = opt(
        None,
        "--suite: evaluate --checkpoint look by look, each cell until its mean's anytime-valid interval is this "
        "narrow: a half-width in the task's units (e.g. 5) or a percentage of |mean| (e.g. 5%)",
        metavar="W",
    )
    look_every: int | None = opt(
        None,
        "--until-decided, --until-precise, --select-best: episodes per look, per cell and per checkpoint (default: "
        "the task's num_envs, one episode per sub-env; exactly that where sub-envs share one reset generator)",
    )
    max_episodes: int | None = opt(
        None,
        "--until-decided, --until-precise, --select-best: the most episodes per cell and per checkpoint, a multiple "
        "of the look (default: the suite task's episodes)",
    )
    margin: float = opt(
        0.0,
        "--until-decided: equivalence margin in the task's units: a cell whose interval lies inside it stops; "
        "--select-best: checkpoints within it of the leader are equivalent, and the run stops when all left are "
        "(with --suite: a fraction of the tasks' reference width)",
    )
    alpha: float = opt(
        0.05,
        "--until-decided, --until-precise: the error over all cells and every look (each cell gets alpha/cells); "
        "--select-best: the chance, over every look, that the best checkpoint is eliminated",
    )
    design: str = opt(
        "anytime",
        "--until-decided, --until-precise, --select-best: anytime (confidence sequences, valid at any look: a "
        "resume may raise --max-episodes) or planned (a group-sequential design over exactly these looks and "
        "budget: fewer episodes on average at equal power; cells with declared bounds keep their anytime sequence)",
    )

    @property
    def adaptive(self) -> str | None:
        """The adaptive rule asked for: ``"until-decided"``, ``"until-precise"``, or None (a fixed-n run)."""
        if self.until_decided:
            return "until-decided"
        return "until-precise" if self.until_precise is not None else None

    @property
    def precision(self) -> tuple[float, bool]:
        """``--until-precise W`` as (half-width, relative): ``5`` -> (5.0, False), ``5%`` -> (0.05, True)."""
        value = self.until_precise
        text = str(value).strip()
        relative = text.endswith("%")
        try:
            width = float(text[:-1] if relative else text)
        except ValueError:
            width = math.nan
        if isinstance(value, bool) or not (math.isfinite(width) and width > 0):
            raise ConfigError(
                f"--until-precise: a half-width > 0 in the task's units (e.g. 5) or a percentage of |mean| "
                f"(e.g. 5%), got {value!r}."
            )
        return (width / 100 if relative else width), relative

    def check(self) -> None:
        """The adaptive rules' flags, then the look flags of whichever mode plays looks; each error one line."""
        _check_rules(self)
        if self.mode not in self.look_modes:
            given = [flag(n) for n in ("look_every", "max_episodes") if getattr(self, n) is not None]
            given += ["--margin"] * (self.margin != 0.0) + ["--alpha"] * (self.alpha != 0.05)
            given += ["--design"] * (self.design != "anytime")
            if given:
                modes = [f"--{m}" for m in self.look_modes]
                words = ", ".join(modes[:-1]) + " or " + modes[-1] if len(modes) > 1 else modes[0]
                raise ConfigError(f"{', '.join(given)} set the looks of {words}: add one.")
            return
        for name in ("look_every", "max_episodes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{flag(name)} must be >= 1, got {value}.")
        if self.look_every is not None and self.max_episodes is not None and self.max_episodes < self.look_every:
            raise ConfigError(
                f"--max-episodes {self.max_episodes} < --look-every {self.look_every}: the budget must hold one look."
            )
        if not 0 < self.alpha < 1:
            raise ConfigError(f"--alpha must be in (0, 1), got {self.alpha}.")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ConfigError(f"--margin must be a finite number >= 0, got {self.margin}.")
        if self.margin and self.until_precise is not None:
            raise ConfigError("--margin is --until-decided's equivalence margin; --until-precise has none.")


def _check_rules(cfg: StrategySection) -> None:
    """``--until-decided`` and ``--until-precise``: what each needs and refuses."""
    rule = cfg.adaptive
    if cfg.until_decided and cfg.until_precise is not None:
        raise ConfigError("give --until-decided (B against A) or --until-precise (one checkpoint), not both.")
    if cfg.until_decided and not (cfg.baseline and cfg.suite):
        raise ConfigError("--until-decided needs --baseline A and --suite FILE (beside --checkpoint B).")
    if cfg.baseline and not cfg.until_decided:
        raise ConfigError(
            "--until-precise evaluates one checkpoint: --baseline is --until-decided's A."
            if cfg.until_precise is not None
            else "--baseline is the checkpoint A of --until-decided: add --until-decided."
        )
    if cfg.until_precise is not None:
        cfg.precision  # noqa: B018 - a width the flag's words cannot give fails here, in one line
        if not cfg.suite:
            raise ConfigError("--until-precise needs --suite FILE (beside --checkpoint).")
    if rule is None:
        return
    if cfg.source is None:
        raise ConfigError(f"--{rule} needs --checkpoint FILE: the checkpoint it evaluates.")
    if cfg.source != "checkpoint":
        raise ConfigError(f"--{rule} evaluates the checkpoint --checkpoint names, not --{cfg.source}.")
    if cfg.until_decided and cfg.launcher == "docker":
        raise ConfigError("--until-decided runs with --launcher local: the Docker launcher does not mount --baseline.")
    if cfg.time_budget is not None:
        raise ConfigError(f"--{rule} sizes its rounds in looks (--look-every): leave --time-budget out.")
    if cfg.logger != "csv":
        raise ConfigError(f"--{rule} writes its looks to results.jsonl only: leave --logger {cfg.logger} out.")
