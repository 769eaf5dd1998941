"""Resources over many rounds: open files, threads, child processes, shared memory, RSS (and GPU memory) must not grow.

    python benchmarks/soak.py --rounds 500                     # each backend: thread, process, ray
    python benchmarks/soak.py --rounds 100 --watch-suite 40    # and a --watch --suite launcher over 40 checkpoints

Each backend runs ``--rounds`` rounds of an Evaluator (HalfCheetah-v5, native env, 4
sub-envs, 4 episodes of 100 steps, new weights every round) and samples this process
and its descendants after every ``--every`` rounds: open file descriptors, threads,
live child processes, /dev/shm segments, resident memory, and CUDA memory where a
GPU is used. ``--watch-suite N`` starts the launcher on a directory that gets a new
checkpoint every few seconds, with a two-cell suite, and samples the launcher the
same way. The table compares the first sample after warm-up with the last; a count
that grew, or memory that grew by more than ``--rss-slack-mb``, fails (exit 1).
tests/test_soak.py runs a short slice of it.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
COUNTS = ("fds", "threads", "children", "shm")


def descendants(pid: int) -> list[int]:
    """Live (not zombie) descendants of ``pid``, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _status(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def sample(pid: int | None = None) -> dict[str, float]:
    """The resources of process ``pid`` (default: this one) and its descendants, now."""
    pid = pid or os.getpid()
    family = [pid, *descendants(pid)]
    fds, shm = 0, set()
    for p in family:
        try:
            names = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        fds += len(names)
        for name in names:
            try:
                target = os.readlink(f"/proc/{p}/fd/{name}")
            except OSError:
                continue
            if target.startswith("/dev/shm/"):
                shm.add(target)
        try:
            with open(f"/proc/{p}/maps") as f:
                shm.update(line.split()[-1] for line in f if "/dev/shm/" in line)
        except OSError:
            pass
    out = {
        "fds": fds,
        "threads": sum(_status(p, "Threads") for p in family),
        "children": len(family) - 1,
        "shm": len(shm),  # shared-memory segments the family has open or mapped
        "rss_mb": sum(_status(p, "VmRSS") for p in family) / 1024,
    }
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["cuda_mb"] = torch.cuda.memory_allocated() / 2**20
    return out


def soak_backend(backend: str, rounds: int, every: int, device: str = "cpu") -> list[dict[str, float]]:
    """Samples taken every ``every`` rounds of an Evaluator on ``backend`` (weights changed each round)."""
    import torch

    import simeval
    from simeval.envs import make_env
    from simeval.policies import gaussian_actor

    env = make_env("HalfCheetah-v5", num_envs=1)
    actor = gaussian_actor(env, hidden=(32,))
    env.close()
    ev = simeval.Evaluator(
        functools.partial(make_env, "HalfCheetah-v5", num_envs=4, obs_norm=False),
        policy_factory=functools.partial(gaussian_actor, hidden=(32,)),
        num_trajectories=4,
        max_steps=100,
        backend=backend,
        device=device,
        num_gpus=0 if device == "cpu" else 1,
        seed=0,
        start_timeout=300,
    )
    samples = []
    try:
        for i in range(rounds):
            with torch.no_grad():
                for p in actor.parameters():
                    p.add_(0.001)
            ev.evaluate(weights=actor, step=i)
            if (i + 1) % every == 0:
                samples.append({"round": i + 1, "time": time.time(), **sample()})
    finally:
        ev.shutdown()
    return samples


def soak_watch_suite(checkpoints: int, interval: float, every: int) -> list[dict[str, float]]:
    """Samples of a ``--watch --suite`` launcher while ``checkpoints`` checkpoints arrive, each once the last is done.

    A sample is taken ``interval`` s after the launcher recorded both cells of a checkpoint (idle, waiting for
    the next), so samples compare like with like.
    """
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from launch_helpers import write_checkpoints

    with tempfile.TemporaryDirectory() as tmp:
        run, out, suite = os.path.join(tmp, "run"), os.path.join(tmp, "out"), os.path.join(tmp, "suite.yaml")
        os.makedirs(run)
        with open(suite, "w") as f:
            f.write(
                "name: soak\nseed: 0\nepisodes: 4\nnum_envs: 4\nmax_steps: 100\ntasks:\n  - env: HalfCheetah-v5\n"
                "    conditions:\n      nominal: {}\n      noisy: {observation_noise: 0.1}\n"
            )
        cmd = [sys.executable, "-m", "simeval.launch", "--watch", run, "--suite", suite, "--out", out,
               "--backend", "process", "--poll-interval", "0.5"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": REPO}
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
        samples = []
        try:
            for i in range(checkpoints):
                staging = os.path.join(tmp, "staging")
                (path,) = write_checkpoints(staging, steps=(1000 * (i + 1),), hidden=(32,))
                os.replace(path, os.path.join(run, os.path.basename(path)))
                _wait_for_lines(os.path.join(out, "results.jsonl"), 2 * (i + 1), proc)  # idle again: comparable
                time.sleep(interval)
                if (i + 1) % every == 0:
                    samples.append({"round": i + 1, "time": time.time(), **sample(proc.pid)})
                if proc.poll() is not None:
                    raise RuntimeError("the launcher ended early: " + proc.stderr.read().decode()[-2000:])
            open(os.path.join(run, "DONE"), "w").close()
            proc.wait(600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        lines = open(os.path.join(out, "results.jsonl")).read().splitlines()
        if len(lines) != 2 * checkpoints:
            raise RuntimeError(f"{len(lines)} results for {checkpoints} checkpoints x 2 cells")
    return samples


def _wait_for_lines(path: str, count: int, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    """Until ``path`` has ``count`` lines (the launcher took in every checkpoint so far), or RuntimeError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(path) and sum(1 for _ in open(path)) >= count:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the launcher did not write {count} results in {timeout:.0f} s")


def verdict(samples: list[dict[str, float]], rss_slack_mb: float, warm: int = 1) -> list[str]:
    """What grew between the first sample after ``warm`` warm-up samples and the last ([] if nothing)."""
    first, last = samples[min(warm, len(samples) - 1)], samples[-1]
    grew = [f"{k} {first[k]:.0f} -> {last[k]:.0f}" for k in COUNTS if last[k] > first[k]]
    for key in ("rss_mb", "cuda_mb"):
        if key in last and last[key] - first[key] > rss_slack_mb:
            grew.append(f"{key} {first[key]:.0f} -> {last[key]:.0f}")
    return grew


def _row(name: str, samples: list[dict[str, float]], grew: list[str]) -> str:
    first, last = samples[1 if len(samples) > 1 else 0], samples[-1]
    hours = (last["time"] - samples[0]["time"]) / 3600
    cells = [f"{first[k]:.0f} -> {last[k]:.0f}" for k in (*COUNTS, "rss_mb")]
    return f"| {name} | {last['round']} | {hours:.2f} | " + " | ".join(cells) + f" | {'; '.join(grew) or 'none'} |"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=500)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--backends", nargs="+", default=["thread", "process", "ray"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--watch-suite", type=int, default=0, help="checkpoints for a --watch --suite launcher (0: none)")
    p.add_argument("--rss-slack-mb", type=float, default=64.0)
    a = p.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import platform

    print(f"soak: {platform.machine()}, {os.cpu_count()} CPU cores, {time.strftime('%Y-%m-%d')}")
    print("| run | rounds | hours | open fds | threads | children | /dev/shm | RSS MB | grew |")
    print("|---|---|---|---|---|---|---|---|---|")
    failed = False
    for backend in a.backends:
        samples = soak_backend(backend, a.rounds, a.every, a.device)
        grew = verdict(samples, a.rss_slack_mb)
        failed |= bool(grew)
        print(_row(f"Evaluator, {backend}", samples, grew), flush=True)
    if a.watch_suite:
        samples = soak_watch_suite(a.watch_suite, 3.0, max(1, a.watch_suite // 10))
        grew = verdict(samples, a.rss_slack_mb)
        failed |= bool(grew)
        print(_row("--watch --suite (2 cells), process", samples, grew), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
