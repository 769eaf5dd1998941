"""LaunchConfig: every setting of ``python -m simeval.launch``, from YAML and flags.

A YAML profile (``--config launchers/....yaml``) sets any field; a flag given
on the command line overrides it. Field names use underscores; YAML may use
dashes too. Unknown YAML keys are an error, never silently ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("thread", "process", "ray")
LOGGERS = ("csv", "tensorboard", "wandb", "mlflow")
LAUNCHERS = ("local", "docker")
ENV_BACKENDS = ("native", "gymnasium")


class ConfigError(ValueError):
    """Bad launcher input; the message says what is wrong and what to do."""


@dataclass
class LaunchConfig:
    backend: str = "thread"
    num_gpus: float = 0
    device: str | None = None
    env: str = "HalfCheetah-v5"
    env_backend: str | None = None
    num_envs: int = 8
    episodes: int = 16
    max_steps: int | None = 1000
    seed: int | None = 0
    init_fn: str | None = None
    policy: str | None = None
    policy_kwargs: dict = field(default_factory=dict)
    checkpoint: str | None = None
    watch: str | None = None
    serve: str | None = None
    out: str | None = None
    logger: str = "csv"
    video: bool = False
    until_step: int | None = None
    poll_interval: float = 2.0
    start_timeout: float = 120.0
    obs_norm: bool = True
    launcher: str = "local"
    image: str | None = None
    gpus: str | None = None
    network: str | None = None

    def validate(self) -> LaunchConfig:
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend {self.backend!r}: choose one of {', '.join(BACKENDS)}.")
        if self.logger not in LOGGERS:
            raise ConfigError(f"unknown logger {self.logger!r}: choose one of {', '.join(LOGGERS)}.")
        if self.env_backend is not None and self.env_backend not in ENV_BACKENDS:
            raise ConfigError(f"unknown env backend {self.env_backend!r}: choose one of {', '.join(ENV_BACKENDS)}.")
        if self.launcher not in LAUNCHERS:
            raise ConfigError(f"unknown launcher {self.launcher!r}: choose one of {', '.join(LAUNCHERS)}.")
        if self.launcher != "docker":
            for name in ("image", "gpus", "network"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"--{name} is a container setting: it needs --launcher docker.")
        elif not self.image:
            raise ConfigError(
                "--launcher docker needs --image IMAGE (build one: docker build -f containers/Dockerfile -t IMAGE .)."
            )
        sources = [k for k in ("checkpoint", "watch", "serve") if getattr(self, k)]
        if len(sources) > 1:
            raise ConfigError("give one source of weights, not " + " and ".join(f"--{s}" for s in sources) + ".")
        if self.serve and self.backend != "ray":
            raise ConfigError("--serve needs --backend ray (a named Ray actor is what training connects to).")
        for name in ("num_envs", "episodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"--max-steps must be >= 1, got {self.max_steps}.")
        for name in ("init_fn", "policy"):
            value = getattr(self, name)
            if value is not None and value.count(":") != 1:
                raise ConfigError(
                    f"--{name.replace('_', '-')} must look like 'package.module:function', got {value!r}."
                )
        return self

    @property
    def source(self) -> str | None:
        return next((k for k in ("checkpoint", "watch", "serve") if getattr(self, k)), None)


FIELDS = {f.name: f for f in dataclasses.fields(LaunchConfig)}


def from_mapping(data: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate a YAML mapping's keys against LaunchConfig; returns field -> value."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(data).__name__}.")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {', '.join(sorted(FIELDS))}.")
        out[name] = value
    return out


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}.") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]}).") from None
    return from_mapping(data, path)
