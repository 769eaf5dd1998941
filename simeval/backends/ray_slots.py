"""The Ray backend's workers: one actor per slot, created, probed, replaced and killed here.

A slot is a place for one eval worker: its setup (what its actor is built
from: with several workers, an env factory bound to the slot's number of
sub-envs) and its current actor. A dead actor is replaced by a fresh one in
the same slot; a borrowed actor (``simeval.connect``) has no setup and cannot be.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from simeval.backends.ray_actor import EvalActor, remote

NAMESPACE = "simeval"
# Set on an autoscaling cluster, where GPUs not yet in the cluster will be added on demand.
AUTOSCALING_ENV = "SIMEVAL_RAY_AUTOSCALING"


def ensure_ray() -> Any:
    """Import ray and join the cluster in RAY_ADDRESS, or start a local one."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("backend='ray' needs Ray: pip install 'simeval[ray]'.") from None
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        check_reachable(ray, address)
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    return ray


def check_reachable(ray: Any, address: str | None) -> None:
    """One line, instead of Ray's minutes of retries, when the cluster ``ray.init`` would join does not answer.

    Without ``RAY_ADDRESS`` Ray joins the cluster named in ``ray_current_cluster`` under its temp dir (written by
    the last ``ray start`` or ``ray.cluster_utils.Cluster``), which outlives a cluster killed without ``ray stop``.
    """
    if address == "local" or (address and "://" in address):
        return
    if address is None or address == "auto":
        from ray._common.utils import get_ray_address_file

        path = get_ray_address_file(None)
        try:
            with open(path) as f:
                found = f.read(256).strip()
        except OSError:
            return  # no cluster to join: ray.init starts one
        where = f"the cluster named in {path} (the last `ray start` on this machine)"
    else:
        found, where = address, f"RAY_ADDRESS={address}"
    host, _, port = found.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return
    except (OSError, ValueError):
        pass
    raise RuntimeError(
        f"backend='ray' would join {where} at {found!r}, but nothing answers there: set RAY_ADDRESS=local to start "
        "a cluster of its own, or RAY_ADDRESS=host:port to join a live one."
    )


def check_capacity(ray: Any, num_workers: int, num_gpus: float, ray_kwargs: dict) -> None:
    """One line when the workers ask for more GPUs or CPUs than the cluster has (they would never start).

    A Ray actor that names any resource holds ``num_cpus`` (default 1) for its life.
    """
    if os.environ.get(AUTOSCALING_ENV):
        return
    have = ray.cluster_resources()
    num_cpus = ray_kwargs.get("num_cpus", 1)
    for what, each, flag in (("GPU", num_gpus, "num_gpus"), ("CPU", num_cpus, "num_cpus")):
        want = num_workers * (each or 0)
        if want > have.get(what, 0) + 1e-9:
            raise ValueError(
                f"{num_workers} Ray eval worker(s) with {flag}={each:g} ask for {want:g} {what}s but the Ray cluster "
                f"has {have.get(what, 0):g}: lower num_workers or {flag}, or add nodes ({AUTOSCALING_ENV}=1 skips "
                "this check on an autoscaling cluster)."
            )


def is_worker_death(ray: Any, exc: BaseException) -> bool:
    """A failure of the worker's process or node (worth a re-run elsewhere), not of the evaluation."""
    e = ray.exceptions
    kinds = [e.RayActorError, e.WorkerCrashedError, e.ObjectLostError]
    kinds += [getattr(e, name) for name in ("NodeDiedError", "OwnerDiedError") if hasattr(e, name)]
    return isinstance(exc, tuple(kinds))


def unwrap_actor_error(exc: BaseException) -> tuple[str, str]:
    """The user's exception behind a Ray actor error, as (message, traceback)."""
    cause = getattr(exc, "cause", None) or exc.__cause__
    text = str(exc)
    if cause is not None and not isinstance(cause, type(exc)):
        return f"{type(cause).__name__}: {cause}", text
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}", text


@dataclass(eq=False)
class Slot:
    """One worker's place: what its actor is built from, the actor, and what it said about itself."""

    index: int
    setup: dict | None  # None: a borrowed actor, which cannot be recreated
    size: int | None = None  # sub-envs of its env when the round is split, else None
    actor: Any = None
    created: float = 0.0
    probe: Any = None  # ObjectRef of actor.where(): ready when the actor is up
    where: dict = field(default_factory=dict)  # node_id, host, pid once known

    @property
    def ready(self) -> bool:
        """Whether the slot has an actor that is up."""
        return self.probe is None and self.actor is not None

    def name(self, total: int) -> str:
        """``Ray eval worker i of total``, with its host, node and pid once known."""
        place = f" on {self.where.get('host', '?')} (node {self.where['node_id'][:8]}, pid {self.where['pid']})"
        return f"Ray eval worker {self.index} of {total}" + (place if self.where else "")


class Slots:
    """The backend's actors: created together (so they start in parallel), each replaceable."""

    def __init__(
        self, ray: Any, setups: list[dict | None], sizes: list[int | None], num_gpus: float, ray_kwargs: dict
    ) -> None:
        self.ray = ray
        self.num_gpus = num_gpus
        self.ray_kwargs = dict(ray_kwargs)
        self.slots = [Slot(i, setup, size) for i, (setup, size) in enumerate(zip(setups, sizes, strict=True))]

    def __len__(self) -> int:
        return len(self.slots)

    def __getitem__(self, index: int) -> Slot:
        return self.slots[index]

    def adopt(self, actor: Any) -> None:
        """Use an existing (named) actor as slot 0."""
        slot = self.slots[0]
        slot.actor, slot.created, slot.probe = actor, time.monotonic(), actor.where.remote()

    def ensure(self, slot: Slot) -> None:
        """Give ``slot`` an actor if it has none (a borrowed slot cannot get one: the caller checks)."""
        if slot.actor is not None or slot.setup is None:
            return

        kwargs = dict(self.ray_kwargs)
        options = {k: kwargs.pop(k) for k in ("name", "namespace", "lifetime") if k in kwargs}
        if options.get("name") is None:
            options.pop("name", None)
        else:
            options.setdefault("namespace", NAMESPACE)
            options.setdefault("lifetime", "detached")
        # Workers go to different nodes where they can: one lost node then costs the fewest of them.
        kwargs.setdefault("scheduling_strategy", "SPREAD")
        cls = remote(self.ray, EvalActor, num_gpus=self.num_gpus, **kwargs)
        slot.actor = cls.options(**options).remote(slot.setup)
        slot.created, slot.where = time.monotonic(), {}
        slot.probe = slot.actor.where.remote()

    def mark_ready(self, slot: Slot) -> None:
        """The slot's probe answered: the actor is up (its start-up outcome comes with the first run)."""
        probe, slot.probe = slot.probe, None
        slot.where = self.ray.get(probe)

    def drop(self, slot: Slot, kill: bool) -> None:
        """Forget the slot's actor (a new one is made by the next ``ensure``); kill it if asked."""
        actor, slot.actor, slot.probe, slot.where = slot.actor, None, None, dict(slot.where)
        if kill and actor is not None:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - already gone: nothing to kill, nothing to report
                pass

    def overdue(self, slot: Slot, timeout: float) -> bool:
        """Whether the slot's actor has not come up within ``timeout`` seconds of its creation."""
        return slot.probe is not None and time.monotonic() - slot.created > timeout

    def drop_all(self) -> list:
        """Kill every slot's actor; the actors, for :meth:`confirm_dead`."""
        actors = [s.actor for s in self.slots if s.actor is not None]
        for slot in self.slots:
            self.drop(slot, kill=True)
        return actors

    def confirm_dead(self, actors: list, deadline: float) -> None:
        """ray.kill is asynchronous: wait (within the shutdown timeout) until each actor is gone."""
        for actor in actors:
            self._confirm_dead(actor, deadline)

    def _confirm_dead(self, actor: Any, deadline: float) -> None:
        ray = self.ray
        while time.monotonic() < deadline:
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=min(0.5, max(0.05, deadline - time.monotonic())))
            except ray.exceptions.GetTimeoutError:
                continue
            except Exception:  # noqa: BLE001 - RayActorError: it is dead
                return
            time.sleep(0.05)
