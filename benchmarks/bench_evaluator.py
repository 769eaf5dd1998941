"""simeval.Evaluator vs torchrl.collectors.Evaluator on the same batched HalfCheetah-v5 work.

Prints, side by side and in one run:
  * useful env-steps/s (episodes x mean length / wall time of evaluate()),
    median over repeats, for simeval and for the anchor, and their ratio;
  * the time trigger_eval() takes for a ~1M-parameter policy on each backend.

    python benchmarks/bench_evaluator.py [--repeats 3] [--num-envs 16]

Not a test: these machines are noisy, so it reports medians and ratios and
names the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402


def make_cheetah(num_envs: int):
    from simeval.envs import make_env

    # gymnasium sub-envs on both sides: this benchmark compares the evaluators, not the envs
    # (benchmarks/bench_native.py measures simeval's native MuJoCo env).
    return make_env("HalfCheetah-v5", num_envs=num_envs, obs_norm=False, backend="gymnasium")


class CheetahFactory:
    """Picklable env factory (for the process and Ray backends).

    ``plain=True`` leaves out the StepCounter: torchrl's process backend
    refuses an env that already counts steps.
    """

    def __init__(self, num_envs: int, plain: bool = False) -> None:
        self.num_envs = num_envs
        self.plain = plain

    def __call__(self):
        if not self.plain:
            return make_cheetah(self.num_envs)
        import gymnasium as gym
        from torchrl.envs import DoubleToFloat, TransformedEnv
        from torchrl.envs.libs.gym import GymWrapper

        vec = gym.make_vec(
            "HalfCheetah-v5",
            num_envs=self.num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
        )
        return TransformedEnv(GymWrapper(vec), DoubleToFloat())


def mlp(hidden: tuple[int, ...] = (64, 64), seed: int = 0) -> TensorDictModule:
    torch.manual_seed(seed)
    layers, last = [], 17
    for h in hidden:
        layers += [nn.Linear(last, h), nn.Tanh()]
        last = h
    layers += [nn.Linear(last, 6), nn.Tanh()]
    return TensorDictModule(nn.Sequential(*layers), in_keys=["observation"], out_keys=["action"])


def big_policy_factory(env=None) -> TensorDictModule:
    return mlp((1000, 1000))


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def throughput(evaluators: dict, num_envs: int, episodes: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Useful env-steps/s and CPU seconds per round of each evaluator.

    Rounds are interleaved so machine drift hits both alike. CPU time (this
    process, which runs the thread backend) is steadier than wall time on a
    shared VM and shows the evaluator's own overhead.
    """
    built = {
        name: cls(make_cheetah(num_envs), mlp(), num_trajectories=episodes, max_steps=1000)
        for name, cls in evaluators.items()
    }
    out = {name: {"rate": [], "cpu": []} for name in built}
    try:
        for ev in built.values():
            ev.evaluate()  # warm-up: builds the collector
        for _ in range(repeats):
            for name, ev in built.items():
                start, cpu = time.perf_counter(), time.process_time()
                result = ev.evaluate()
                seconds = time.perf_counter() - start
                out[name]["cpu"].append(time.process_time() - cpu)
                out[name]["rate"].append(result["eval/num_episodes"] * result["eval/episode_length"] / seconds)
    finally:
        for ev in built.values():
            ev.shutdown()
    return out


def trigger_times(evaluator_cls, backend: str, n: int = 21, **kwargs) -> tuple[float, float]:
    """Median ms of trigger_eval() (the training thread's cost): right after the
    previous result ("hot") and after 50 ms of idle training-side time ("idle")."""
    policy = big_policy_factory()
    ev = evaluator_cls(
        CheetahFactory(1, plain=True),
        policy_factory=big_policy_factory,
        num_trajectories=1,
        max_steps=5,
        backend=backend,
        **kwargs,
    )
    hot, idle = [], []
    try:
        ev.evaluate(policy)  # warm-up: worker started and buffers allocated
        for i in range(2 * n):
            with torch.no_grad():
                policy.module[0].weight.add_(1e-6)  # training moved on
            if i % 2:
                time.sleep(0.05)
            start = time.perf_counter()
            ev.trigger_eval(policy)
            (idle if i % 2 else hot).append(time.perf_counter() - start)
            ev.wait(120)
    finally:
        ev.shutdown()
    return statistics.median(hot) * 1e3, statistics.median(idle) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args()

    from torchrl.collectors import Evaluator as Anchor

    from simeval import Evaluator

    n_params = sum(p.numel() for p in big_policy_factory().parameters())
    print(f"machine: {machine()}")
    print(
        f"work: HalfCheetah-v5, {args.num_envs} sub-envs, {args.num_envs} episodes x 1000 steps, MLP 17-64-64-6, "
        f"deterministic; median of {args.repeats}\n"
    )

    runs = throughput({"simeval": Evaluator, "torchrl": Anchor}, args.num_envs, args.num_envs, args.repeats)
    med = {k: (statistics.median(v["rate"]), statistics.median(v["cpu"])) for k, v in runs.items()}
    print(f"{'evaluator':<32}{'env-steps/s':>12}{'CPU s/round':>13}   env-steps/s of each run")
    for key, label in (("simeval", "simeval.Evaluator"), ("torchrl", "torchrl.collectors.Evaluator")):
        print(f"{label:<32}{med[key][0]:>12,.0f}{med[key][1]:>13.2f}   {[round(r) for r in runs[key]['rate']]}")
    print(
        f"{'ratio simeval / torchrl':<32}{med['simeval'][0] / med['torchrl'][0]:>12.2f}"
        f"{med['simeval'][1] / med['torchrl'][1]:>13.2f}   (throughput: higher is better; CPU: lower)\n"
    )

    print(f"trigger_eval() with a {n_params / 1e6:.2f}M-parameter policy, median ms (hot / after 50 ms idle):")
    print(f"{'backend':<10}{'simeval':>18}{'torchrl':>18}")
    rows = [("thread", {}), ("process", {})] + ([] if args.skip_ray else [("ray", {"num_gpus": 0})])
    for backend, kwargs in rows:
        if backend == "ray":  # started only now: its daemons would disturb the other rows
            import ray

            ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
        mine = "{:8.2f} / {:6.2f}".format(*trigger_times(Evaluator, backend, **kwargs))
        try:
            theirs = "{:8.2f} / {:6.2f}".format(*trigger_times(Anchor, backend, **kwargs))
        except Exception as exc:  # noqa: BLE001 - report the anchor's failure and go on
            theirs = f"  failed: {type(exc).__name__}: {str(exc).splitlines()[0][:70]}"
        print(f"{backend:<10}{mine:>18}{theirs:>18}")


if __name__ == "__main__":
    main()
