"""Ray backend: eval workers in Ray actors, one round at a time, split over ``num_workers`` of them.

With one worker the round runs in one actor. With K workers the round's
sub-envs are split into K fixed shards (:mod:`simeval.shards`): each actor
builds its share of the env, runs its share of the episodes, and the shards
are merged in sub-env order, so a seeded round gives the same episodes for
any K. Weights are put in Ray's object store once per round and read by
every worker.

Faults: when a worker's process or node dies mid-round, simeval (not Ray's
actor restart) re-runs its shard, on an idle healthy worker of the same size
if there is one (its env is already built), else on a fresh actor in the
dead one's slot; a shard is a pure function of the weights, the seed and its
range, so the round's result is unchanged. A shard may be re-run
``max_restarts`` times; one more death fails the round with an EvalError
naming the worker. Ray's own restart would rebuild the actor (init_fn, env)
before retrying, possibly on the node that just failed, and would hide the
count. A worker that cannot be scheduled fails the round after
``start_timeout``. A named actor is detached and can be reached from any
process with :func:`simeval.connect`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.backends.base import Backend, BackendOptions, WorkerRecipe, cancelled, complete
from simeval.backends.host import make_setup
from simeval.backends.ray_slots import (
    NAMESPACE,
    Slot,
    Slots,
    check_capacity,
    ensure_ray,
    is_worker_death,
    unwrap_actor_error,
)
from simeval.errors import EvalError, WorkerLost
from simeval.records import append_record, make_record
from simeval.settings import RoundOverrides

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle
    from tensordict import TensorDictBase

__all__ = ["NAMESPACE", "RayBackend", "ensure_ray"]
_POLL_S = 0.5


@dataclass(eq=False)
class _RoundControl:
    """One round's fate as others decide it: ``failed`` (set under the backend's lock) ends the round."""

    failed: EvalError | None = None  # its timeout: the round's thread stops and touches no slot again
    token: int = 0  # the key its workers report progress under
    total: int | None = None  # its episodes, once its shards are planned


@dataclass(eq=False)
class _Job:
    """A shard of the running round (or the whole round) and the slot running it."""

    shard: Any  # simeval.shards.Shard, or None for a round run whole by one worker
    slot: Slot
    ctl: _RoundControl
    ref: Any = None
    restarts: int = 0


class _RoundFailed(Exception):
    pass


class RayBackend(Backend):
    """Owns (or, for a connected handle, borrows) the workers; replaces owned ones that died.

    ``kill_on_shutdown`` is True for the evaluator that created the actors (and
    for ``RayEvalWorker`` handles, as in torchrl); a ``connect()`` handle leaves
    the served actor running.
    """

    name = "ray"

    def __init__(
        self,
        setups: list[dict] | None,
        *,
        shards: list | None = None,
        num_gpus: float = 1,
        ray_kwargs: Mapping[str, Any] | None = None,
        start_timeout: float = 120.0,
        max_restarts: int = 3,
        info_keys: tuple = (),
        results: tuple[str, str, dict] | None = None,
        actor: ActorHandle | None = None,
        kill_on_shutdown: bool | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__()
        self._progress = progress  # start a ProgressSink with the first round: the workers report to it
        self._sink: ActorHandle | None = None
        self._tokens = 0
        self._ray = ensure_ray()
        self._shards = shards
        self._num_gpus = num_gpus
        self._ray_kwargs = dict(ray_kwargs or {})
        self._start_timeout = start_timeout
        self._max_restarts = max_restarts
        self._info_keys = info_keys
        self._results = results  # (path, log prefix, context): merged rounds written here
        self._kill_on_shutdown = actor is None if kill_on_shutdown is None else kill_on_shutdown
        sizes = [s.size for s in shards] if shards else [None]
        self._slots = Slots(self._ray, setups or [None], sizes, num_gpus, self._ray_kwargs)
        self._lock = threading.Lock()  # slot actors: the round thread and shutdown
        with self._lock:
            if actor is not None:
                self._slots.adopt(actor)
            for slot in self._slots.slots:
                self._slots.ensure(slot)
        self._thread: threading.Thread | None = None
        self._running: _RoundControl | None = None  # the latest round's
        self._closing = False

    @classmethod
    def create(cls, recipe: WorkerRecipe, options: BackendOptions) -> RayBackend:
        """Start ``options.num_workers`` Ray actors for ``recipe`` (its env split into shards when more than one)."""
        recipe.require_factories("'ray'", "the Ray actor process")
        k = options.num_workers
        shards = None
        if k > 1:
            from simeval import shards as sharding

            if recipe.settings.metrics_fn is not None:
                raise ValueError(
                    "metrics_fn sees a round's trajectories in one place: use num_workers=1 with metrics_fn, or "
                    "keep_episodes=True for per-episode values from every worker."
                )
            shards = sharding.plan(sharding.factory_num_envs(recipe.env), k, recipe.settings.num_trajectories)
        ray = ensure_ray()
        check_capacity(ray, k, options.num_gpus, dict(options.ray_kwargs or {}))
        info = dict(options.info or {})
        if shards is None:
            setups = [dict(make_setup(recipe), info=info)]
            results = None
        else:
            # Each worker writes nothing itself: the merged round is written once, here.
            settings = dataclasses.replace(recipe.settings, results_path=None)
            by_size = {}
            for size in {s.size for s in shards}:
                part = dataclasses.replace(recipe, settings=settings, env=functools.partial(recipe.env, num_envs=size))
                by_size[size] = dict(make_setup(part), info=info)
            setups = [by_size[s.size] for s in shards]
            rs = recipe.settings
            results = (rs.results_path, rs.log_prefix, rs.results_context) if rs.results_path else None
        return cls(
            setups,
            shards=shards,
            num_gpus=options.num_gpus,
            ray_kwargs=options.ray_kwargs,
            start_timeout=options.start_timeout,
            max_restarts=options.max_restarts,
            info_keys=recipe.settings.info_keys,
            results=results,
            progress=options.progress,
        )

    @classmethod
    def attach(
        cls, name: str, namespace: str = NAMESPACE, start_timeout: float = 120.0, kill_on_shutdown: bool = False
    ) -> RayBackend:
        """A backend on the running named actor ``name`` (see :func:`simeval.connect`); ValueError if there is none."""
        ray = ensure_ray()
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError:
            raise ValueError(
                f"no simeval evaluator named {name!r} in Ray namespace {namespace!r}: "
                "start one with Evaluator(..., backend='ray', ray_kwargs={'name': ...}) or RayEvalWorker(name=...)."
            ) from None
        return cls(None, actor=actor, start_timeout=start_timeout, kill_on_shutdown=kill_on_shutdown)

    def describe(self) -> dict:
        """The front-end settings the (first) actor was started with, once it is up."""
        slot = self._slots[0]
        self._wait_ready([slot])
        return self._ray.get(slot.actor.describe.remote(), timeout=self._start_timeout)

    # -- a round ------------------------------------------------------------
    def _start(
        self, step: int, weights: Mapping[str, Any] | None, future: Future, overrides: RoundOverrides | None
    ) -> None:
        payload = None
        if weights:
            from simeval.weights import as_weights

            # One copy to CPU (training keeps changing its tensors); Ray ships it from there.
            payload = {k: as_weights(v).apply(lambda t: t.detach().to("cpu", copy=True)) for k, v in weights.items()}
        self._tokens += 1
        self._running = ctl = _RoundControl(token=self._tokens)
        self._thread = threading.Thread(
            target=self._run, args=(step, payload, overrides, future, ctl), name="simeval-ray-round", daemon=True
        )
        self._thread.start()

    def _run(
        self,
        step: int,
        payload: dict[str, TensorDictBase] | None,
        overrides: RoundOverrides | None,
        future: Future,
        ctl: _RoundControl,
    ) -> None:
        try:
            raws = self._round(step, payload, overrides, ctl)
        except _RoundFailed as exc:
            complete(future, exc=cancelled() if self._closing else exc.args[0])
            return
        except Exception as exc:  # noqa: BLE001 - anything unforeseen still completes the future
            message, tb = unwrap_actor_error(exc)
            complete(future, exc=cancelled() if self._closing else EvalError(f"Ray eval round failed: {message}", tb))
            return
        if self._shards is None:
            raw = raws[0]
        else:
            from simeval import shards

            raw = shards.merge(raws, self._info_keys)
            # the round's sub-envs (every shard's, sent or not) and its time (the slowest shard's, as fps)
            raw["num_envs"] = sum(s.size for s in self._shards)
            raw["seconds"] = max(r["seconds"] for r in raws)
        raw["workers"] = [r.pop("worker") for r in raws]  # where each shard ran, for the records
        if self._results is not None:
            from simeval import metrics  # NumPy: the caller side loads it only when a round's results arrive

            path, prefix, context = self._results
            append_record(path, make_record(metrics.prefixed(raw, prefix, keep_episodes=True), prefix, **context))
        complete(future, raw)

    def _round(
        self,
        step: int,
        payload: dict[str, TensorDictBase] | None,
        overrides: RoundOverrides | None,
        ctl: _RoundControl,
    ) -> list[dict]:
        """Run every shard to a result, re-running those whose worker died; raws in shard order."""
        ray = self._ray
        ref = ray.put(payload) if payload is not None else None
        with self._lock:
            for slot in self._slots.slots:
                self._ensure(slot, ctl)
        shards = self._round_shards(overrides) or [None]
        # A shard whose sub-envs have no episodes to run (fewer episodes than sub-envs) is not sent.
        jobs = [
            _Job(shard, self._slots[i], ctl) for i, shard in enumerate(shards) if shard is None or sum(shard.quotas)
        ]
        if self._progress:
            self._start_sink()
            ctl.total = None if shards == [None] else sum(sum(s.quotas) for s in shards)
        done: dict[int, dict] = {}
        for job in jobs:
            self._submit(job, step, ref, overrides)
        while len(done) < len(jobs):
            running = [j for j in jobs if j.ref is not None]
            probes = [s.probe for s in {j.slot for j in running} if s.probe is not None]
            ray.wait([j.ref for j in running] + probes, num_returns=1, timeout=_POLL_S)
            if self._closing:
                raise _RoundFailed(cancelled())
            if ctl.failed is not None:  # timed out: its workers were killed, the next round makes new ones
                raise _RoundFailed(ctl.failed)
            for slot in {j.slot for j in running}:
                if slot.probe is not None and ray.wait([slot.probe], timeout=0)[0]:
                    self._probe(slot)
            for job in running:
                if ray.wait([job.ref], timeout=0)[0]:
                    raw = self._collect(job, jobs)
                    if raw is None:  # its worker died: re-run on an idle worker or a fresh one
                        self._submit(job, step, ref, overrides, busy={j.slot for j in jobs if j.ref is not None})
                    else:
                        done[jobs.index(job)] = raw
            self._check_start_deadlines(running)
        return [done[i] for i in range(len(jobs))]

    def _round_shards(self, overrides: RoundOverrides | None) -> list | None:
        """The shards of this round: the fixed plan's, with the quotas of the round's own count when it has one.

        The sub-env ranges depend only on ``num_envs`` and K, so each shard still runs on its own worker.
        """
        if self._shards is None or overrides is None or overrides.num_trajectories is None:
            return self._shards
        from simeval import shards as sharding

        num_envs = sum(s.size for s in self._shards)
        return sharding.plan(num_envs, len(self._shards), overrides.num_trajectories)

    def _ensure(self, slot: Slot, ctl: _RoundControl | None = None) -> None:
        """Give ``slot`` an actor if it lost one (under ``_lock``); never after shutdown or ``ctl``'s round failed."""
        if self._closing:
            raise _RoundFailed(cancelled())
        if ctl is not None and ctl.failed is not None:
            raise _RoundFailed(ctl.failed)
        if slot.actor is None and slot.setup is None:
            raise _RoundFailed(WorkerLost("the served Ray evaluator is gone; connect again."))
        self._slots.ensure(slot)

    def _submit(
        self,
        job: _Job,
        step: int,
        ref: ObjectRef | None,
        overrides: RoundOverrides | None,
        busy: set | None = None,
    ) -> None:
        """Send ``job`` to an idle ready worker of its size (after a death), else to its own slot's actor."""
        if busy is not None and job.shard is not None:
            idle = [
                s for s in self._slots.slots
                if s not in busy and s.ready and s.size == job.shard.size and s is not job.slot
            ]  # fmt: skip
            if idle:
                job.slot = idle[0]
        with self._lock:
            self._ensure(job.slot, job.ctl)
            actor = job.slot.actor
        sink = self._sink
        if sink is None:
            job.ref = actor.run.remote(step, ref, overrides, job.shard)
        else:
            key = (job.ctl.token, job.shard.index if job.shard is not None else 0)
            job.ref = actor.run.remote(step, ref, overrides, job.shard, (sink, key))

    def want_progress(self) -> None:
        """Start the progress sink with the next round (a round already running reports none)."""
        self._progress = True

    def _start_sink(self) -> None:
        """Start the progress sink (once): a small actor, no CPU asked, that the workers' counts go to."""
        if self._sink is None:
            from simeval.backends.ray_actor import ProgressSink, remote

            self._sink = remote(self._ray, ProgressSink, num_cpus=0).remote()

    def progress(self) -> tuple[int, int, int] | None:
        """The running round's counts, summed over its workers as they last sent them to the sink.

        Waits on the sink (a small actor) at most one second: it runs on the caller's progress thread,
        never on the round's.
        """
        ctl, sink = self._running, self._sink
        if ctl is None or sink is None or self._thread is None or not self._thread.is_alive():
            return None
        counts = self._ray.get(sink.take.remote(ctl.token), timeout=1.0)
        if not counts:
            return None
        episodes, total, env_steps = (sum(c[i] for c in counts) for i in range(3))
        return episodes, ctl.total if ctl.total is not None else total, env_steps

    def _probe(self, slot: Slot) -> None:
        try:
            self._slots.mark_ready(slot)
        except Exception:  # noqa: BLE001 - died while starting; its run call reports it
            slot.probe = None

    def _check_start_deadlines(self, running: list[_Job]) -> None:
        for job in running:
            slot = job.slot
            if slot.probe is not None and self._slots.overdue(slot, self._start_timeout):
                with self._lock:
                    self._drop(job, kill=slot.setup is not None)
                raise _RoundFailed(WorkerLost(self._unschedulable(slot)))

    def _unschedulable(self, slot: Slot) -> str:
        who = "the Ray eval actor" if len(self._slots) == 1 else f"Ray eval worker {slot.index} of {len(self._slots)}"
        return (
            f"{who} did not start within {self._start_timeout:g} s: it asks for "
            f"num_gpus={self._num_gpus} (and {self._ray_kwargs or 'no other resources'}), the cluster "
            f"has {self._ray.cluster_resources()}. Lower num_gpus, add resources, or raise start_timeout."
        )

    def _collect(self, job: _Job, jobs: list[_Job]) -> dict | None:
        """The job's raw result; None when its worker died and the shard may run again; else raise."""
        slot, ref = job.slot, job.ref
        job.ref = None
        try:
            outcome = self._ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - actor died, was killed, or its node was lost
            owned = slot.setup is not None
            with self._lock:
                self._drop(job, kill=owned)
            message, tb = unwrap_actor_error(exc)
            died = is_worker_death(self._ray, exc)
            if not owned or not died:
                raise _RoundFailed(
                    (WorkerLost if died else EvalError)(f"Ray eval actor failed: {message}", tb)
                ) from None
            job.restarts += 1
            if job.restarts > self._max_restarts:
                raise _RoundFailed(
                    WorkerLost(
                        f"{slot.name(len(self._slots))} died {job.restarts} time(s) in this round "
                        f"(max_restarts={self._max_restarts}): {message}",
                        tb,
                    )
                ) from None
            return None
        if outcome[0] == "result":
            raw = outcome[1]
            raw.setdefault("worker", {})
            raw["worker"].update(
                worker=slot.index,
                restarts=job.restarts,
                env_steps=raw["frame_count"],
                seconds=round(raw["seconds"], 4),
                started_at=raw["started_at"],  # wall clock of its first env step
            )
            return raw
        if outcome[0] == "fatal":
            with self._lock:
                self._drop(job, kill=slot.setup is not None)  # an owned actor is replaced by a fresh one
            raise _RoundFailed(EvalError(f"Ray eval worker failed to start: {outcome[1]}", outcome[2]))
        raise _RoundFailed(EvalError(f"Ray eval worker failed: {outcome[1]}", outcome[2]))

    def _drop(self, job: _Job, kill: bool) -> None:
        """Forget (and kill) the job's actor, under ``_lock``; a timed-out round's slots are the next round's."""
        if job.ctl.failed is not None:
            raise _RoundFailed(job.ctl.failed)
        self._slots.drop(job.slot, kill=kill)

    def _wait_ready(self, slots: list[Slot]) -> None:
        """Block (in short waits, at most ``start_timeout``) until each slot's actor is up."""
        deadline = time.monotonic() + self._start_timeout
        for slot in slots:
            with self._lock:
                self._ensure_or_raise(slot)
            while slot.probe is not None:
                ready, _ = self._ray.wait([slot.probe], timeout=min(_POLL_S, max(0.01, deadline - time.monotonic())))
                if ready:
                    self._probe(slot)
                elif self._closing:
                    raise cancelled()
                elif time.monotonic() >= deadline:
                    raise WorkerLost(self._unschedulable(slot))

    def _ensure_or_raise(self, slot: Slot) -> None:
        try:
            self._ensure(slot)
        except _RoundFailed as exc:
            raise exc.args[0] from None

    def _replace_worker(self, error: EvalError) -> None:
        """End the timed-out round (its thread raises ``error``) and kill its actors; the next round makes new ones.

        Every owned worker goes, not only a stuck one: a Ray actor runs its calls one at a time, so an
        actor still busy with the old round would hold up the next. A borrowed actor (``connect()``) is left.
        """
        with self._lock:
            if self._running is not None:
                self._running.failed = error
            for slot in self._slots.slots:
                if slot.setup is not None:
                    self._slots.drop(slot, kill=True)

    def _shutdown(self, timeout: float) -> None:
        self._closing = True
        deadline = time.monotonic() + timeout
        if self._kill_on_shutdown:
            with self._lock:  # the round thread makes no new actor once _closing is set
                actors = self._slots.drop_all()
            self._slots.confirm_dead(actors, deadline)
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        sink, self._sink = self._sink, None
        if sink is not None:
            with contextlib.suppress(Exception):
                self._ray.kill(sink)
