"""The launcher section: where the launcher runs (here, or in a Docker container) and the container's settings."""

from __future__ import annotations

from dataclasses import dataclass

from simeval.launch.config.base import ConfigError, Section, flag, opt

LAUNCHERS = ("local", "docker")
CONTAINER_SETTINGS = ("image", "gpus", "network", "pass_env", "policy_image", "policy_gpus")


@dataclass
class LauncherSection(Section):
    """``--launcher`` and, for ``docker``, the image, GPUs, network and environment of its containers."""

    title = "launcher"
    choices = {"launcher": ("launcher", LAUNCHERS)}

    launcher: str = opt("local", f"where the launcher runs: {', '.join(LAUNCHERS)}")
    image: str | None = opt(None, "--launcher docker: the eval image (containers/Dockerfile)")
    gpus: str | None = opt(None, "--launcher docker: host GPUs for the container, e.g. 1 or 0,2 or all")
    network: str | None = opt(
        None,
        "--launcher docker: container network, e.g. host or a network's name (default: none; the engine's "
        "default network for --logger wandb or mlflow)",
    )
    policy_image: str | None = opt(
        None,
        "--launcher docker: serve --checkpoint's policy (python -m simeval.serve_policy) from a container of its "
        "own, of this image; the simulators' container reaches it on their shared loopback (--policy-server)",
    )
    policy_gpus: str | None = opt(None, "--policy-image: host GPUs for the policy's container, e.g. 0")
    pass_env: list = opt(
        list,
        "--launcher docker: host environment variables to pass into the container (none by default besides "
        "WANDB_* for --logger wandb, MLFLOW_* for --logger mlflow)",
        nargs="+",
        metavar="NAME",
        action="extend",
    )

    def check(self) -> None:
        """Container settings only with ``--launcher docker``, which needs ``--image``."""
        if self.launcher != "docker":
            for name in CONTAINER_SETTINGS:
                if getattr(self, name) not in (None, []):
                    raise ConfigError(f"{flag(name)} is a container setting: it needs --launcher docker.")
        elif not self.image:
            raise ConfigError(
                "--launcher docker needs --image IMAGE (build one: docker build -f containers/Dockerfile -t IMAGE .)."
            )
