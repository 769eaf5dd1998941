"""The output section: where results go (``--out``, ``--logger``), what is recorded besides, and resumes."""

from __future__ import annotations

from dataclasses import dataclass

from simeval.launch.config.base import Section, opt

LOGGERS = ("csv", "tensorboard", "wandb", "mlflow")


@dataclass
class OutputSection(Section):
    """``--out``, ``--append``, ``--retry-failed``, ``--logger``, ``--video``, ``--verbose``."""

    title = "output"
    choices = {"logger": ("logger", LOGGERS)}

    out: str | None = opt(None, "results directory (default: runs/<timestamp>)")
    append: bool = opt(
        False,
        "add this run's lines to an --out whose results.jsonl holds lines of other settings (episodes, seed, "
        "num_envs, max_steps, env, suite, conditions, ...); without it such a run is refused",
    )
    retry_failed: bool = opt(
        False,
        "on a resume, evaluate again the checkpoints (--suite: cells) whose newest line in results.jsonl "
        "failed; without it a resume retries only failures marked retry: resume (a plan mismatch, a lost worker)",
    )
    logger: str = opt("csv", f"metrics logger besides results.jsonl: {', '.join(LOGGERS)}")
    video: bool = opt(
        False,
        "record an MP4 of each round's first episode (sub-env 0) into OUT/videos/, named in the summary (--replay: "
        "the replayed episode, into DIR/videos/); one frame a step: about 6 ms each with software OpenGL (a "
        "1000-step episode: +9 s on 2 vCPUs)",
    )
    verbose: bool = opt(False, "show known third-party warnings and Ray's start-up and INFO logs (hidden by default)")
