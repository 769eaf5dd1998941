"""The Docker launcher: the launcher's job in a container (``--launcher docker``), apart from the launcher.

:mod:`~simeval.containers.plan` decides what the container sees (plain data: the
files the evaluation reads, at their own paths, ``--out``, GPUs, environment,
network); :mod:`~simeval.containers.engine` runs it through the Docker SDK. The
launcher hands it its parsed settings (:class:`~simeval.containers.plan.LaunchSettings`)
and its command line; this package never imports the launcher: inside the
container, ``python -m simeval.launch`` runs the same command without the
container flags.
"""

from __future__ import annotations

from simeval.containers import engine, plan
from simeval.containers.plan import ContainerError, LaunchSettings

__all__ = ["ContainerError", "LaunchSettings", "run_in_container"]


def run_in_container(settings: LaunchSettings, argv: list[str], config_path: str | None) -> int:
    """Run the launcher's command line ``argv`` in the planned container; the container's exit code."""
    return engine.run(plan.plan(settings, argv, config_path))
