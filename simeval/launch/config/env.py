"""The env section: the task evaluated (env, simulator, sub-envs, cameras) and the episodes of a round."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simeval.envs.simulators import env_backends, env_id_forms, registered
from simeval.launch.config.base import ConfigError, Section, flag, opt


@dataclass
class EnvSection(Section):
    """``--env`` and its simulator, sub-envs, cameras, episodes, steps, seed, init hook and info keys."""

    title = "env"
    reads = ("policy_server", "serve")
    choices = {"env_backend": ("env backend", tuple(env_backends()))}

    env: str = opt(
        "HalfCheetah-v5",
        f"{env_id_forms()} (default: the checkpoint's, else HalfCheetah-v5)",
        show_default=False,
    )
    env_backend: str | None = opt(
        None,
        f"the simulator of a gymnasium id: {', '.join(env_backends())} "
        "(default: native for the tasks it has, else gymnasium)",
    )
    num_envs: int = opt(8, "batched sub-envs")
    cameras: list = opt(
        list,
        f"cameras each sub-env observes ({', '.join(s.title for s in registered() if s.cameras)} envs; e.g. track): "
        "the policy then reads observation.state and observation.images.<camera>, float (3, H, W) in [0, 1]",
        nargs="+",
        metavar="CAMERA",
    )
    image_size: int = opt(64, "--cameras: the images' side in pixels")
    frame_stack: int = opt(1, "--cameras: each camera's last N images, stacked along the channels")
    episodes: int = opt(16, "complete episodes per evaluation")
    time_budget: float | None = opt(
        None,
        "seconds an evaluation round may take, instead of --episodes: each round runs the most whole waves of "
        "--num-envs complete episodes that fit, measured on the round before (the first runs one wave)",
    )
    max_steps: int | None = opt(1000, "episode cap")
    seed: int | None = opt(0, "env seed, the same every round")
    init_fn: str | None = opt(
        None,
        "module:function run first, before torch"
        + "".join(f"; {sim.title}: {sim.init_fn}" for sim in registered() if sim.init_fn),
    )
    info_keys: list = opt(
        list,
        "keys under the step's 'next' entry (e.g. success) whose value at each episode's end is averaged "
        "(eval/<key>; eval/success_rate for success, is_success, success_rate)",
        nargs="+",
        metavar="KEY",
    )

    def check(self) -> None:
        """Sizes, cameras, the time budget, ``--init-fn``'s form; ``info_keys`` normalised."""
        for name in ("num_envs", "episodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{flag(name)} must be >= 1, got {getattr(self, name)}.")
        _check_cameras(self)
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"--max-steps must be >= 1, got {self.max_steps}.")
        if self.time_budget is not None:
            number = isinstance(self.time_budget, (int, float)) and not isinstance(self.time_budget, bool)
            if not number or not 0 < self.time_budget < float("inf"):
                raise ConfigError(f"--time-budget must be a number of seconds > 0, got {self.time_budget!r}.")
            if self.serve:
                raise ConfigError("--time-budget sizes the rounds this launcher runs: --serve's are training's.")
        self.info_keys = _info_keys(self.info_keys)
        if self.init_fn is not None and self.init_fn.count(":") != 1:
            raise ConfigError(f"--init-fn must look like 'package.module:function', got {self.init_fn!r}.")


def _check_cameras(cfg: EnvSection) -> None:
    """``--cameras`` and the settings of its images (which need it)."""
    if not cfg.cameras:
        for name, default in (("image_size", 64), ("frame_stack", 1)):
            if getattr(cfg, name) != default:
                raise ConfigError(f"{flag(name)} sets the camera images: add --cameras CAMERA.")
        return
    if not 1 <= cfg.image_size <= 1024:
        raise ConfigError(f"--image-size must be 1..1024 pixels, got {cfg.image_size}.")
    if cfg.frame_stack < 1:
        raise ConfigError(f"--frame-stack must be >= 1, got {cfg.frame_stack}.")
    if cfg.policy_server and cfg.frame_stack > 1:
        raise ConfigError(
            "--frame-stack: a policy server is sent each camera's current image and keeps its own history."
        )


def _info_keys(value: Any) -> list:
    """``info_keys`` as a list of keys: strings, or lists of strings for nested keys (YAML)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(k, str) or (isinstance(k, (list, tuple)) and k and all(isinstance(p, str) for p in k)) for k in value
    )
    if not ok:
        raise ConfigError(
            f"info_keys must be a list of keys (strings, or lists of strings for nested keys), got {value!r}."
        )
    return [k if isinstance(k, str) else list(k) for k in value]
