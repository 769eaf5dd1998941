"""The Docker launcher: the launcher's job in a container (``--launcher docker``), apart from the launcher.

:mod:`~simeval.containers.plan` decides what the container sees (plain data: the
files the evaluation reads, at their own paths, ``--out``, GPUs, environment,
network); :mod:`~simeval.containers.engine` runs it through the Docker SDK. The
launcher hands it its parsed settings (:class:`~simeval.containers.plan.LaunchSettings`)
and its command line; this package never imports the launcher: inside the
container, the image's entrypoint (``simeval-launch`` in simeval's images: never ``python -m``, which
would put the working directory first on ``sys.path``) runs the same command without the
container flags. ``--policy-image`` runs two containers: the checkpoint's policy server
(``python -m simeval.serve_policy``) and the launcher, with ``--policy-server``, in its network
namespace.
"""

from __future__ import annotations

from simeval.containers import engine, plan
from simeval.containers.plan import ContainerError, LaunchSettings

__all__ = ["ContainerError", "LaunchSettings", "run_in_container"]


def run_in_container(settings: LaunchSettings, argv: list[str], config_path: str | None) -> int:
    """Run the launcher's command line ``argv`` in the planned container; the container's exit code.

    With ``--policy-image``, the checkpoint's policy is served from a container of its own and the launcher
    runs in a second one that reaches it on their shared loopback (:func:`~simeval.containers.plan.plan_pair`).
    """
    if getattr(settings, "policy_image", None):
        return engine.run_pair(plan.plan_pair(settings, argv, config_path))
    return engine.run(plan.plan(settings, argv, config_path))
