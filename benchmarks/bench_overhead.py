"""Harness overhead on a near-free tensor env: the bare loop, simeval.Evaluator (thread, process), torchrl's Collector.

    python benchmarks/bench_overhead.py [--device cuda:0] [--sizes 256 1024 4096 16384] [--steps 1000] [--repeats 5]
    python benchmarks/bench_overhead.py --quick              # smoke run: sizes 64 256, 200 steps, 1 repeat
    python benchmarks/bench_overhead.py --profile            # one thread-backend round under cProfile (largest size)
    python benchmarks/bench_overhead.py --warp               # adds MuJoCo Warp HalfCheetah rows (needs mujoco_warp)
    python benchmarks/bench_overhead.py --json out.json      # every row (and the machine) as JSON too
    python benchmarks/bench_overhead.py --rows bare,process  # some rows only (the bare loop always runs)

The env (``TinyEnv`` below) is a torchrl ``EnvBase`` as a user writes one: batch size [N], a 17-d
float observation, a 6-d action, 100-step episodes (a per-sub-env step counter; done and truncated
at 100, partial resets through the ``_reset`` mask), a step of a few tensor ops, all on ``--device``.
The policy is an MLP 17-64-6 (tanh), deterministic, on the same device. Per size N, rounds of
``--steps`` steps per sub-env (10 episodes of each sub-env at the default 1000) of:

  bare       the loop a user writes: the MLP on the observation tensor, ``env.step_and_maybe_reset``;
  thread     ``simeval.Evaluator`` rounds (env and policy factories, the weights passed each round), thread backend;
  process    the same, process backend (the env factory is this module's function: picklable);
  collector  torchrl's ``Collector`` (``SyncDataCollector`` on older torchrl), one batch of N x steps frames.

One warm-up round of each, then ``--repeats`` interleaved repeats (bare, thread, process, collector,
bare, ...) and their medians. Per row: env-steps/s (frames / wall time of the round as its caller
sees it), the ratio to the bare loop, the time per batched step, and the harness's extra time per
batched step, ``(1/rate - 1/rate_bare) * N``, over the whole round and over the stepping window
alone (first env step to last, read from clocks the env keeps: perf_counter is system-wide, so the
process backend's child writes them to a shared file). The fixed cost of a round: ``head``, the
round's request to its first env step (the step's ops launched), ``tail``, the last env step to the
result in the caller's hands; ``outside``, the round's wall time less the rollout time the Evaluator
itself reports (``frame_count / fps``). The engine column says which round loop simeval chose
(``simeval.worker.engines.choose``, noted by a wrapper this script puts around it: in this process
for the thread backend, through ``init_fn`` in the process backend's child).

``--warp`` adds the same four rows on simeval's MuJoCo Warp HalfCheetah-v5 (``make_env(...,
backend="warp", device=D, obs_norm=False)``; one episode of min(steps, 1000) steps per sub-env) where
``mujoco_warp`` imports. On a CUDA device the thread backend steps Warp kernel by kernel, without
graphs (docs/evaluator.md), and is slow at large sizes: ``--rows bare,process,collector`` (or
``BENCH_ROWS="bare process collector"``) leaves it out; the bare loop always runs. On a CPU ``--device``
every row runs torch on one intra-op thread (simeval's workers do so for a CPU policy). Not a test: it
asserts nothing about time.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone

import numpy as np
import torch
import torch.nn.functional as F
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OBS, ACT, HIDDEN = 17, 6, 64
EPISODE = 100  # the tensor env's episode length
WARP_TASK, WARP_EPISODE = "HalfCheetah-v5", 1000
FIRST, LAST = 0, 1  # slots of an env's clock: perf_counter after its first step of a round, after its latest step
ENGINE_LOG = "SIMEVAL_BENCH_OVERHEAD_ENGINE_LOG"  # where the engines.choose wrapper notes its choice
ROWS = ("bare", "thread", "process", "collector")
LABELS = {
    "bare": "bare loop",
    "thread": "Evaluator, thread",
    "process": "Evaluator, process",
    "collector": "torchrl Collector",
}


# -- what a user writes: the env and the policy ------------------------------------
class TinyEnv(EnvBase):
    """A near-free batched tensor env: obs = 0.99 obs + 0.01 action (padded), reward = -|action|^2, 100-step episodes.

    ``clock`` (two float64 slots, e.g. a shared memmap) receives perf_counter after the first step
    following a full reset (a round's start) and after every step: the benchmark's only addition.
    """

    def __init__(self, num_envs: int, device="cpu", episode: int = EPISODE, clock=None):
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        dev = self.device
        self.episode = episode
        self.clock = np.zeros(2) if clock is None else clock
        self.observation_spec = Composite(
            observation=Unbounded((num_envs, OBS), device=dev), shape=(num_envs,), device=dev
        )
        self.action_spec = Bounded(-1.0, 1.0, (num_envs, ACT), device=dev)
        self.reward_spec = Unbounded((num_envs, 1), device=dev)
        flag = functools.partial(Categorical, 2, (num_envs, 1), dtype=torch.bool, device=dev)
        self.done_spec = Composite(done=flag(), terminated=flag(), truncated=flag(), shape=(num_envs,), device=dev)
        self._obs = torch.zeros(num_envs, OBS, device=dev)
        self._count = torch.zeros(num_envs, 1, dtype=torch.int64, device=dev)
        self._gen = torch.Generator(device=dev)
        self._gen.manual_seed(0)
        self._armed = False

    def _set_seed(self, seed):
        self._gen.manual_seed(0 if seed is None else int(seed))

    def _reset(self, tensordict):
        fresh = 0.1 * torch.randn(self._obs.shape, generator=self._gen, device=self.device)
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:  # every sub-env: a round (or a user's loop) starts
            self._obs = fresh
            self._count.zero_()
            self._armed = True
        else:  # the sub-envs whose episodes ended
            mask = mask.reshape(-1, 1)
            self._obs = torch.where(mask, fresh, self._obs)
            self._count.masked_fill_(mask, 0)
        done = torch.zeros(self._count.shape, dtype=torch.bool, device=self.device)
        return TensorDict(
            observation=self._obs,
            done=done,
            terminated=done.clone(),
            truncated=done.clone(),
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict):
        action = tensordict.get("action")
        self._obs = 0.99 * self._obs + 0.01 * F.pad(action, (0, OBS - ACT))
        reward = -(action**2).sum(-1, keepdim=True)
        self._count += 1
        truncated = self._count >= self.episode
        now = time.perf_counter()
        if self._armed:
            self._armed = False
            self.clock[FIRST] = now
        self.clock[LAST] = now
        return TensorDict(
            observation=self._obs,
            reward=reward,
            done=truncated.clone(),
            terminated=torch.zeros_like(truncated),
            truncated=truncated,
            batch_size=self.batch_size,
            device=self.device,
        )


def net() -> nn.Module:
    """The MLP 17-64-6 (tanh), the same weights in every row."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(OBS, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, ACT), nn.Tanh())


def policy_factory(env=None) -> TensorDictModule:
    """What a user passes as ``policy_factory``: observation -> action, deterministic."""
    return TensorDictModule(net(), in_keys=["observation"], out_keys=["action"])


# -- env factories (module-level functions: picklable for the process backend) ------
def _clock(path: str | None):
    return None if path is None else np.memmap(path, dtype=np.float64, mode="r+", shape=(2,))


def make_tiny(num_envs: int, device: str, episode: int = EPISODE, clock_path: str | None = None) -> TinyEnv:
    return TinyEnv(num_envs, device, episode, _clock(clock_path))


def make_warp(num_envs: int, device: str, clock_path: str | None = None):
    """bench_gpu.py's ``make``: simeval's MuJoCo Warp HalfCheetah-v5, no observation normaliser."""
    from simeval.envs import make_env

    return make_env(WARP_TASK, num_envs=num_envs, backend="warp", device=device, obs_norm=False)


def spy_engines() -> None:
    """Wrap ``simeval.worker.engines.choose`` to note the engine each worker picks (in ``$ENGINE_LOG``).

    Called here for the thread backend and as the process backend's ``init_fn`` in its child;
    it changes no choice, it only writes the chosen engine's name.
    """
    from simeval.worker import engines

    if getattr(engines.choose, "bench_spy", False):
        return
    real = engines.choose

    def choose(*args, **kwargs):
        engine = real(*args, **kwargs)
        path = os.environ.get(ENGINE_LOG)
        if path:
            with open(path, "a") as f:
                f.write(("Collector" if engine is None else type(engine).__name__) + "\n")
        return engine

    choose.bench_spy = True
    engines.choose = choose


ENGINE_NAMES = {"Collector": "Collector", "TensorRollout": "tensor", "DirectRollout": "direct"}


# -- one round of each row ----------------------------------------------------------
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Setup:
    """Everything one (env kind, N) block needs: the four rows built, warmed up, then rounds on demand."""

    def __init__(self, kind: str, n: int, device: torch.device, steps: int, episode: int, tmp: str, rows: tuple = ROWS):
        self.kind, self.n, self.device, self.steps, self.episode = kind, n, device, steps, episode
        dev = str(device)
        self.clock_path = os.path.join(tmp, f"clock-{kind}-{n}")
        np.zeros(2).tofile(self.clock_path)
        self.clock = _clock(self.clock_path)
        if kind == "tensor":
            factory = functools.partial(make_tiny, n, dev, episode, self.clock_path)
            trajectories, max_steps = n * (steps // episode), episode
        else:
            factory = functools.partial(make_warp, n, dev)
            trajectories, max_steps = n, steps
        self.factory = factory
        self.trainer_policy = policy_factory().to(device)  # the weights a trainer hands over each round
        self.module = net().to(device)  # the bare loop's policy: the same weights, on the observation tensor
        self.engines: dict[str, str] = {}
        self.bare_env = factory()
        self.collector = self.collector_env = None
        if "collector" in rows:
            self.collector_env = factory()
            self.collector = self._collector()
            self.collector_iter = iter(self.collector)
        from simeval import Evaluator

        self.evaluators = {}
        for backend in ("thread", "process"):
            if backend not in rows:
                continue
            log = os.path.join(tmp, f"engine-{kind}-{n}-{backend}")
            os.environ[ENGINE_LOG] = log  # read by the wrapper: here (thread), or inherited by the child (process)
            ev = Evaluator(
                factory,
                policy_factory=policy_factory,
                num_trajectories=trajectories,
                max_steps=max_steps,
                device=dev,
                backend=backend,
                init_fn="bench_overhead:spy_engines" if backend == "process" else None,
            )
            self.evaluators[backend] = ev
            self.round(backend, warm=True)  # builds env, policy and collector (and the child's imports)
            self.engines[backend] = _read_engine(log)
        self.round("bare", warm=True)
        if self.collector is not None:
            self.round("collector", warm=True)

    def _collector(self):
        import torchrl.collectors as collectors
        from torchrl.envs.utils import ExplorationType

        cls = getattr(collectors, "Collector", None) or collectors.SyncDataCollector
        kwargs = {}
        if "auto_register_policy_transforms" in inspect.signature(cls.__init__).parameters:
            kwargs["auto_register_policy_transforms"] = False  # the env is complete (silences torchrl 0.14's warning)
        return cls(
            self.collector_env,
            policy_factory().to(self.device),
            frames_per_batch=self.n * self.steps,
            total_frames=-1,
            device=self.device,
            exploration_type=ExplorationType.DETERMINISTIC,
            **kwargs,
        )

    def round(self, row: str, warm: bool = False) -> dict:
        """One round of ``row``: {"seconds", "frames", "head", "tail", "window", "outside"} (NaN where unknown)."""
        self.clock[:] = math.nan
        out = {"outside": math.nan}
        start = time.perf_counter()
        if row == "bare":
            frames = self._bare()
        elif row == "collector":
            batch = self._collect()
            frames = batch.numel()
        else:
            result = self.evaluators[row].evaluate(weights=self.trainer_policy, step=0)
            frames = int(result["eval/frame_count"])
            rollout = frames / float(result["eval/fps"])
        end = time.perf_counter()
        if row in self.evaluators:
            out["outside"] = end - start - rollout
        first, last = float(self.clock[FIRST]), float(self.clock[LAST])
        out.update(seconds=end - start, frames=frames, head=first - start, tail=end - last, window=last - first)
        if not warm and frames != self.n * self.steps:
            print(f"    note: {row} round stepped {frames} frames, not {self.n * self.steps}")
        if row == "collector" and self.kind == "tensor":  # checked after the clock stopped
            ends, want = int(batch.get(("next", "done")).sum()), self.n * (self.steps // self.episode)
            if ends != want:
                print(f"    note: the Collector's batch has {ends} episode ends, not {want}")
        return out

    def _bare(self) -> int:
        env, module = self.bare_env, self.module
        with torch.inference_mode():
            td = env.reset()
            for _ in range(self.steps):
                td.set("action", module(td.get("observation")))
                _, td = env.step_and_maybe_reset(td)
        _sync(self.device)
        return self.n * self.steps

    def _collect(self):
        self.collector.reset()
        batch = next(self.collector_iter)
        _sync(self.device)
        return batch

    def close(self) -> None:
        for ev in self.evaluators.values():
            ev.shutdown()
        if self.collector is not None:
            self.collector.shutdown()
        for env in (self.bare_env, self.collector_env):
            if env is not None and not env.is_closed:
                env.close()


def _read_engine(path: str) -> str:
    try:
        with open(path) as f:
            names = [line.strip() for line in f if line.strip()]
    except OSError:
        return "?"
    return ",".join(ENGINE_NAMES.get(name, name) for name in names) or "?"


def _median(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _median_of(runs: list[dict], key: str) -> float:
    return _median([r[key] for r in runs])


def measure(kind: str, n: int, args: argparse.Namespace, steps: int, episode: int, tmp: str) -> list[dict]:
    """The rows (``args.rows``, bare first) of one (env kind, N): warm-up, then ``args.repeats`` interleaved repeats."""
    setup = Setup(kind, n, args.torch_device, steps, episode, tmp, rows=args.rows)
    runs: dict[str, list[dict]] = {row: [] for row in args.rows}
    try:
        for _ in range(args.repeats):
            for row in args.rows:
                runs[row].append(setup.round(row))
    finally:
        setup.close()
    rows = []
    for row in args.rows:
        rates = [r["frames"] / r["seconds"] for r in runs[row]]
        med = functools.partial(_median_of, runs[row])
        rows.append(
            {
                "env": kind,
                "num_envs": n,
                "row": row,
                "engine": setup.engines.get(row, "-"),
                "steps": steps,
                "episode": episode,
                "rates": rates,
                "rate": statistics.median(rates),
                "step_us_window": med("window") / max(1, steps - 1) * 1e6,
                "head_ms": med("head") * 1e3,
                "tail_ms": med("tail") * 1e3,
                "outside_ms": med("outside") * 1e3,
            }
        )
    bare = rows[0]
    for r in rows:
        r["ratio"] = r["rate"] / bare["rate"]
        r["step_us"] = n / r["rate"] * 1e6
        r["extra_step_us"] = (1 / r["rate"] - 1 / bare["rate"]) * n * 1e6
        r["extra_step_us_window"] = r["step_us_window"] - bare["step_us_window"]
    return rows


# -- the report ------------------------------------------------------------------------
def machine(device: torch.device) -> dict:
    import platform

    import tensordict
    import torchrl

    from simeval.machine import cpu_model

    cpu = cpu_model()
    gpu = None
    if torch.cuda.is_available():
        index = device.index if device.type == "cuda" and device.index is not None else 0
        gpu = f"{torch.cuda.get_device_name(index)}, CUDA {torch.version.cuda}"
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "gpu": gpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


HEADER = (
    f"{'env':<7}{'N':>6}  {'row':<19}{'engine':<10}{'env-steps/s':>12}{'x bare':>8}{'us/step':>9}"
    f"{'+us/step':>10}{'+us loop':>10}{'head ms':>9}{'tail ms':>9}{'outside':>9}   env-steps/s of each repeat"
)


def print_row(r: dict) -> None:
    extra = r["row"] != "bare"
    print(
        f"{r['env']:<7}{r['num_envs']:>6}  {LABELS[r['row']]:<19}{r['engine']:<10}{r['rate']:>12,.0f}"
        f"{r['ratio']:>8.2f}{r['step_us']:>9,.0f}"
        f"{_fmt(r['extra_step_us'] if extra else math.nan, ',.0f'):>10}"
        f"{_fmt(r['extra_step_us_window'] if extra else math.nan, ',.0f'):>10}"
        f"{_fmt(r['head_ms'], ',.1f'):>9}{_fmt(r['tail_ms'], ',.1f'):>9}{_fmt(r['outside_ms'], ',.1f'):>9}"
        f"   {[round(x) for x in r['rates']]}",
        flush=True,
    )


LEGEND = """
env-steps/s: frames / wall time of the round as its caller sees it (median); x bare: its ratio to the bare loop;
us/step: wall time per batched step (N sub-envs); +us/step: the harness's extra time per batched step over the
whole round, (1/rate - 1/rate_bare) * N; +us loop: the same over the stepping window only (first env step to last);
head: the round's request to its first env step; tail: the last env step to the result in hand (both from the
env's clocks; '-' where the env keeps none); outside: wall time less the rollout time the Evaluator reports
(frame_count / fps), Evaluator rows only; engine: the round loop simeval chose (Collector: torchrl's Collector;
tensor, direct: simeval's own engines)."""


# -- --profile ---------------------------------------------------------------------
def _short(path: str) -> str:
    for marker in ("site-packages" + os.sep, ROOT + os.sep):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _category(path: str, func: str) -> str:
    if path == "~":
        return "torch built-ins (ops, tensor methods)" if "torch" in func or "Tensor" in func else "other built-ins"
    return _short(path)


def _where(path: str, line: int, func: str) -> str:
    return func if path == "~" else f"{_short(path)}:{line}({func})"


def _by_file(entries: dict) -> dict[str, float]:
    """Own time (tottime, seconds) summed per file; built-ins in two groups."""
    out: dict[str, float] = {}
    for (path, _, func), (_, _, tt, _, _) in entries.items():
        key = _category(path, func)
        out[key] = out.get(key, 0.0) + tt
    return out


def profile(args: argparse.Namespace, steps: int, episode: int, tmp: str) -> dict:
    """One thread-backend round at the largest size under cProfile (the worker's thread), after a warm-up round.

    The bare loop's round is profiled too (in this thread), so the per-file table can say where the
    Evaluator's extra time per step goes.
    """
    import cProfile
    import pstats

    from simeval.worker.eval_worker import EvalWorker

    n = max(args.sizes)
    setup = Setup("tensor", n, args.torch_device, steps, episode, tmp, rows=("bare", "thread"))
    prof, prof_bare = cProfile.Profile(), cProfile.Profile()
    real_run = EvalWorker.run

    def run(self, *a, **k):  # the round runs on the worker's thread: profile it there
        prof.enable()
        try:
            return real_run(self, *a, **k)
        finally:
            prof.disable()

    try:
        bare = setup.round("bare")
        plain = setup.round("thread")
        EvalWorker.run = run
        try:
            profiled = setup.round("thread")
        finally:
            EvalWorker.run = real_run
        prof_bare.enable()
        try:
            setup.round("bare")
        finally:
            prof_bare.disable()
    finally:
        setup.close()
    entries = pstats.Stats(prof).stats  # (file, line, func) -> (primitive calls, calls, tottime, cumtime, callers)
    total = sum(v[2] for v in entries.values())
    total_bare = sum(v[2] for v in pstats.Stats(prof_bare).stats.values())
    us = 1e6 / steps  # seconds per round -> microseconds per batched step
    print(
        f"profile: one Evaluator round, thread backend, tensor env, N={n}, {steps} steps per sub-env, "
        f"engine {setup.engines['thread']}, on {args.torch_device}"
    )
    print(
        f"  round wall time: {plain['seconds']:.3f} s unprofiled, {profiled['seconds']:.3f} s under cProfile "
        f"({total:.3f} s profiled in the worker's thread); bare loop {bare['seconds']:.3f} s unprofiled, "
        f"{total_bare:.3f} s profiled"
    )
    print(
        f"  per batched step, unprofiled: {plain['seconds'] * us:,.0f} us (bare loop {bare['seconds'] * us:,.0f} us); "
        f"head {plain['head'] * 1e3:,.1f} ms, tail {plain['tail'] * 1e3:,.1f} ms"
    )
    print("\ntop 25 functions by cumulative time (the worker's thread):")
    print(f"{'calls':>10}{'tottime s':>11}{'cumtime s':>11}{'us/step':>9}  function")
    top = sorted(entries.items(), key=lambda kv: kv[1][3], reverse=True)[:25]
    rows = []
    for (path, line, func), (_, calls, tt, ct, _) in top:
        print(f"{calls:>10}{tt:>11.3f}{ct:>11.3f}{ct * us:>9,.0f}  {_where(path, line, func)}")
        rows.append({"function": _where(path, line, func), "calls": calls, "tottime": tt, "cumtime": ct})
    print("\nsimeval's own functions by cumulative time (beyond the round's call chain), top 10:")
    print(f"{'calls':>10}{'cumtime s':>11}{'us/step':>9}  function")
    chain = {"run", "_run", "_roll_out", "_collector_round", "run_round"}
    mine = [kv for kv in entries.items() if _short(kv[0][0]).startswith("simeval") and kv[0][2] not in chain]
    for (path, line, func), (_, calls, _, ct, _) in sorted(mine, key=lambda kv: kv[1][3], reverse=True)[:10]:
        print(f"{calls:>10}{ct:>11.3f}{ct * us:>9,.0f}  {_where(path, line, func)}")
    files, files_bare = _by_file(entries), _by_file(pstats.Stats(prof_bare).stats)
    print("\nown time (tottime) by file, us per batched step: the Evaluator round, the bare loop, the difference")
    print(f"{'Evaluator':>10}{'bare':>8}{'extra':>8}  file")
    keys = sorted(set(files) | set(files_bare), key=lambda k: files.get(k, 0) - files_bare.get(k, 0), reverse=True)
    for key in keys[:15]:
        mine_us, bare_us = files.get(key, 0.0) * us, files_bare.get(key, 0.0) * us
        print(f"{mine_us:>10,.0f}{bare_us:>8,.0f}{mine_us - bare_us:>8,.0f}  {key}")
    print(f"{total * us:>10,.0f}{total_bare * us:>8,.0f}{(total - total_bare) * us:>8,.0f}  (all)")
    print("\ntop 15 functions by own time (tottime), the Evaluator round:")
    print(f"{'calls':>10}{'tottime s':>11}{'us/step':>9}  function")
    for (path, line, func), (_, calls, tt, _, _) in sorted(entries.items(), key=lambda kv: kv[1][2], reverse=True)[:15]:
        print(f"{calls:>10}{tt:>11.3f}{tt * us:>9,.0f}  {_where(path, line, func)}")
    print("\n(cProfile slows Python-level code more than torch's kernels: read shares, not absolute times)")
    return {
        "num_envs": n,
        "steps": steps,
        "round_s": plain["seconds"],
        "profiled_round_s": profiled["seconds"],
        "bare_s": bare["seconds"],
        "top_cumulative": rows,
        "tottime_by_file": files,
        "tottime_by_file_bare": files_bare,
    }


# -- main ----------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(2, f"bench_overhead.py: error: {message}\n")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="where env and policy run: cpu (default) or cuda:N")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="num_envs (default 256 1024 4096 16384)")
    parser.add_argument("--steps", type=int, default=None, help="steps per sub-env per round (default 1000)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats after the warm-up (default 5)")
    parser.add_argument("--quick", action="store_true", help="smoke run: sizes 64 256, 200 steps, 1 repeat")
    parser.add_argument("--profile", action="store_true", help="only a cProfile of one thread-backend round")
    parser.add_argument("--warp", action="store_true", help="add MuJoCo Warp HalfCheetah rows (if mujoco_warp imports)")
    parser.add_argument("--json", metavar="PATH", help="also write every row as JSON to PATH")
    parser.add_argument(
        "--rows",
        default=os.environ.get("BENCH_ROWS", ",".join(ROWS)),
        help="rows to run, comma- or space-separated, of bare thread process collector (default: all, or "
        "$BENCH_ROWS); the bare loop always runs (the ratios need it)",
    )
    args = parser.parse_args(argv)
    wanted = args.rows.replace(",", " ").split()
    unknown = sorted(set(wanted) - set(ROWS))
    if unknown:
        parser.error(f"--rows: unknown row(s) {', '.join(unknown)}; choose from {' '.join(ROWS)}")
    args.rows = tuple(row for row in ROWS if row == "bare" or row in wanted)
    quick = {"sizes": [64, 256], "steps": 200, "repeats": 1}
    full = {"sizes": [256, 1024, 4096, 16384], "steps": 1000, "repeats": 5}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if any(n < 1 for n in args.sizes):
        parser.error(f"--sizes must be positive, got {args.sizes}")
    if args.steps < 1 or args.repeats < 1:
        parser.error(f"--steps and --repeats must be >= 1, got {args.steps} and {args.repeats}")
    try:
        args.torch_device = torch.device(args.device)
    except (RuntimeError, ValueError) as exc:
        parser.error(f"--device {args.device!r} is not a torch device ({str(exc).splitlines()[0]})")
    if args.torch_device.type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda:N, got {args.device!r}")
    if args.torch_device.type == "cuda":
        if not torch.cuda.is_available():
            parser.error(f"--device {args.device}: torch.cuda.is_available() is False")
        if args.torch_device.index is None:
            args.torch_device = torch.device("cuda", torch.cuda.current_device())
        if args.torch_device.index >= torch.cuda.device_count():
            parser.error(f"--device {args.device}: only {torch.cuda.device_count()} CUDA device(s)")
    if args.json:
        folder = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(folder):
            parser.error(f"--json {args.json}: no folder {folder}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.torch_device.type == "cpu":
        torch.set_num_threads(1)  # as simeval's workers (and the thread backend's thread) do for a CPU policy
    episode = min(EPISODE, args.steps)
    steps = -(-args.steps // episode) * episode  # whole episodes per sub-env
    info = machine(args.torch_device)
    gpu = info["gpu"] or "no GPU"
    print(
        f"machine: {info['cpu']}, {info['cpus']} CPUs, {gpu}; Python {info['python']}, torch {info['torch']}, "
        f"torchrl {info['torchrl']}, tensordict {info['tensordict']}; {info['date_utc']}; "
        f"load {' '.join(map(str, info['loadavg']))}"
    )
    if steps != args.steps:
        print(f"note: --steps {args.steps} rounded up to {steps}: whole {episode}-step episodes per sub-env")
    spy_engines()
    report: dict = {"machine": info, "device": str(args.torch_device), "steps": steps, "repeats": args.repeats}
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        if args.profile:
            report["profile"] = profile(args, steps, episode, tmp)
        else:
            report["rows"] = table(args, steps, episode, tmp)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0


def table(args: argparse.Namespace, steps: int, episode: int, tmp: str) -> list[dict]:
    threads = "1 torch intra-op thread, " if args.torch_device.type == "cpu" else ""
    print(
        f"work: TinyEnv (17-d obs, 6-d action, {episode}-step episodes, partial resets), MLP 17-64-6 deterministic, "
        f"on {args.torch_device} ({threads}every row); rounds of {steps} steps per sub-env "
        f"({steps // episode} episodes each); one warm-up round, then the median of {args.repeats} "
        "interleaved repeats\n"
    )
    print(HEADER)
    rows = []
    for n in args.sizes:
        for r in measure("tensor", n, args, steps, episode, tmp):
            print_row(r)
            rows.append(r)
    if args.warp:
        warp_steps = min(steps, WARP_EPISODE)
        try:
            import mujoco_warp  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - any import failure means: no Warp rows
            print(f"\n--warp: mujoco_warp does not import ({type(exc).__name__}: {exc}); no Warp rows")
        else:
            print(
                f"\nwarp: simeval's MuJoCo Warp {WARP_TASK} (obs_norm=False), one {warp_steps}-step episode per "
                f"sub-env per round (Evaluator: num_trajectories=N, max_steps={warp_steps})"
            )
            for n in args.sizes:
                for r in measure("warp", n, args, warp_steps, warp_steps, tmp):
                    print_row(r)
                    rows.append(r)
    print(LEGEND)
    return rows


if __name__ == "__main__":
    # Run as a script, this file is __main__; the process backend's child must find the env factory
    # by a module name it can import: bench_overhead (this folder is on sys.path, which the child copies).
    sys.path.insert(0, HERE)
    from bench_overhead import main as _main

    sys.exit(_main())
