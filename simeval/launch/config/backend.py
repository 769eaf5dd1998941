"""The backend section: where evaluation runs (thread, process, Ray), its workers, GPUs and timeouts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simeval.backends import NAMES as BACKENDS  # where rounds run: thread, process, ray
from simeval.launch.config.base import ConfigError, Section, opt


@dataclass
class BackendSection(Section):
    """``--backend`` and what it runs with: ``--workers``, ``--num-gpus``, ``--device``, the timeouts."""

    title = "backend"
    reads = ("serve",)
    choices = {"backend": ("backend", BACKENDS)}

    backend: str = opt("thread", f"where evaluation runs: {', '.join(BACKENDS)}")
    num_gpus: float = opt(0, "GPUs each Ray worker asks for")
    num_cpus: float = opt(1, "CPUs each Ray worker asks for")
    workers: int = opt(
        1,
        "Ray workers: --watch evaluates up to this many checkpoints at once; --checkpoint splits its episodes "
        "over them (same numbers as one worker)",
    )
    max_restarts: int = opt(3, "Ray: times a worker's share of a round is re-run after the worker died")
    device: str | None = opt(None, "eval device, e.g. cuda:1 (process backend: only that GPU is visible)")
    start_timeout: float = opt(120.0, "seconds a worker may take to start")
    round_timeout: float | None = opt(
        None,
        "seconds an evaluation round may run before it fails and its worker is replaced (a hung policy or env); "
        "a round that starts its worker also gets --start-timeout (default: 1 hour before any round was measured, "
        "then max(10 min, 20x the round time the measured env step time predicts))",
    )

    def check(self) -> None:
        """Workers, restarts, resources and timeouts."""
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}.")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {self.max_restarts}.")
        if self.workers > 1 and self.backend != "ray":
            raise ConfigError(
                f"--workers {self.workers} needs --backend ray (the thread and process backends run one worker)."
            )
        if self.workers > 1 and self.serve:
            raise ConfigError("--serve runs one named worker: --workers is for --checkpoint and --watch.")
        if not (0 <= self.num_cpus < math.inf and 0 <= self.num_gpus < math.inf):
            raise ConfigError("--num-cpus and --num-gpus must be numbers >= 0.")
        if not 0 < self.start_timeout < math.inf:
            raise ConfigError(f"--start-timeout must be a number of seconds > 0, got {self.start_timeout}.")
        if self.round_timeout is not None:
            number = isinstance(self.round_timeout, (int, float)) and not isinstance(self.round_timeout, bool)
            if not number or not 0 < self.round_timeout < float("inf"):
                raise ConfigError(
                    f"--round-timeout must be a finite number of seconds > 0 (leave it out for the default rule), "
                    f"got {self.round_timeout!r}."
                )
            if self.serve:
                raise ConfigError("--round-timeout bounds the rounds this launcher runs; --serve's are training's.")
