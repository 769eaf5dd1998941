"""Can a thread-backend worker capture CUDA graphs beside a trainer? A probe for issue 48.

    python benchmarks/probe_thread_graphs.py [--device cuda:0] [--num-envs 4096] [--steps 1000] [--seconds 20]
    python benchmarks/probe_thread_graphs.py --device cpu --num-envs 4 --steps 20 --seconds 2   # smoke

A trainer (an MLP regression, forward, backward and Adam on a 65536-row batch, on torch's default
stream of the main thread) runs while an evaluation rollout of the MuJoCo Warp HalfCheetah env
(``WarpBatchEnv``, a 17-64-64-6 MLP policy, ``step_and_maybe_reset``) runs beside it:

  alone        the rollout on the main thread with graphs, no trainer (the reference rate and returns)
  graphless    the rollout on a worker thread, kernel by kernel (simeval's thread backend today)
  own-stream   the rollout on a worker thread whose current torch stream is a non-blocking stream of
               its own, the env built (and its graphs captured) on that stream
  process      the rollout in a child process (its own CUDA context; simeval's process backend)

For each: the rollout's env-steps/s, the trainer's iterations/s beside it (and its slowdown against
the trainer alone), and whether the rollout's summed reward equals the ``alone`` row's bit for bit
(same seed, same weights; on a GPU MuJoCo Warp accumulates with atomics, so rows differ in their
last digits there). A capture that fails prints its error and the row says so: on an H200 with Warp
1.19 the ``own-stream`` capture failed with "Warp error: unknown stream" (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import threading
import time
import traceback

TASK = "HalfCheetah-v5"


def policy_net(device: str):
    """The 17-64-64-6 MLP, seeded, on ``device``."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(17, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 6)
    )
    return net.to(device)


def rollout(num_envs: int, steps: int, device: str, graphs: bool, own_stream: bool) -> dict:
    """Build the env (on this thread) and run ``steps`` batched steps; rate, summed reward, errors."""
    import torch
    import warp as wp

    from simeval.envs.simulators.mujoco_warp.env import WarpBatchEnv

    cuda = device.startswith("cuda")
    stream = torch.cuda.Stream(device=device) if (cuda and own_stream) else None
    if stream is not None:
        torch.cuda.set_stream(stream)  # this thread's current stream (thread-local in torch)
    built = time.perf_counter()
    if stream is not None:
        with wp.ScopedStream(wp.stream_from_torch(stream)):
            env = WarpBatchEnv(TASK, num_envs, device=device, cuda_graphs=graphs)
    else:
        env = WarpBatchEnv(TASK, num_envs, device=device, cuda_graphs=graphs if cuda else None)
    built = time.perf_counter() - built
    net = policy_net(device)
    env.set_seed(0)
    total = torch.zeros((), dtype=torch.float64, device=device)
    with torch.inference_mode():
        td = env.reset()
        for _ in range(3):  # warm-up
            td["action"] = net(td["observation"])
            _, td = env.step_and_maybe_reset(td)
        env.set_seed(0)
        td = env.reset()
        if cuda:
            torch.cuda.current_stream().synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            td["action"] = net(td["observation"])
            stepped, td = env.step_and_maybe_reset(td)
            total += stepped["next", "reward"].sum(dtype=torch.float64)
        if cuda:
            torch.cuda.current_stream().synchronize()
        seconds = time.perf_counter() - start
    return {
        "env_steps_per_s": num_envs * steps / seconds,
        "reward_sum": float(total),
        "graphs": env._graph is not None,
        "build_s": built,
    }


class Trainer:
    """An MLP regression on the default stream of the calling thread until ``stop`` is set; iterations/s."""

    def __init__(self, device: str) -> None:
        import torch

        g = torch.Generator(device="cpu").manual_seed(1)
        self.x = torch.randn(65536, 64, generator=g).to(device)
        self.y = torch.randn(65536, 8, generator=g).to(device)
        layers = [torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(512, 8)).to(device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-4)
        self.device = device

    def run(self, stop: threading.Event, max_seconds: float) -> float:
        """Train until ``stop`` (or ``max_seconds``); iterations per second."""
        import torch

        n, start = 0, time.perf_counter()
        while not stop.is_set() and time.perf_counter() - start < max_seconds:
            loss = ((self.net(self.x) - self.y) ** 2).mean()
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            n += 1
            if n % 20 == 0 and self.device.startswith("cuda"):
                torch.cuda.synchronize(self.device)  # bounded queue, as a trainer reading its loss does
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        return n / (time.perf_counter() - start)


def _child(queue, num_envs: int, steps: int, device: str) -> None:
    try:
        queue.put(rollout(num_envs, steps, device, graphs=True, own_stream=False))
    except Exception as exc:  # noqa: BLE001 - reported in the row
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def beside_trainer(mode: str, args: argparse.Namespace, trainer: Trainer) -> dict:
    """The rollout of ``mode`` on a worker (thread or process) while ``trainer`` trains on this thread."""
    result: dict = {}
    stop = threading.Event()
    if mode == "process":
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        proc = ctx.Process(target=_child, args=(queue, args.num_envs, args.steps, args.device))
        proc.start()

        def wait() -> None:
            result.update(queue.get())
            proc.join()
            stop.set()

        waiter = threading.Thread(target=wait)
        waiter.start()
        result["trainer_it_per_s"] = trainer.run(stop, args.seconds * 10)
        waiter.join()
        return result

    def work() -> None:
        try:
            result.update(rollout(args.num_envs, args.steps, args.device, graphs=mode == "own-stream",
                                  own_stream=mode == "own-stream"))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - reported in the row
            result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            traceback.print_exc()
        finally:
            stop.set()

    worker = threading.Thread(target=work)
    worker.start()
    result["trainer_it_per_s"] = trainer.run(stop, args.seconds * 10)
    worker.join()
    return result


def main() -> None:
    """Run the rows and print the table (``--json`` writes it too)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the trainer alone runs")
    parser.add_argument("--modes", nargs="+", default=["graphless", "own-stream", "process"])
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("probe_thread_graphs: --device is CUDA but torch sees no GPU.", file=sys.stderr)
        sys.exit(2)
    rows: dict[str, dict] = {}
    rows["alone"] = rollout(args.num_envs, args.steps, args.device, graphs=True, own_stream=False)
    trainer = Trainer(args.device)
    trainer.run(threading.Event(), 2.0)  # warm-up
    rows["trainer alone"] = {"trainer_it_per_s": trainer.run(threading.Event(), args.seconds)}
    for mode in args.modes:
        rows[mode] = beside_trainer(mode, args, trainer)
        print(mode, json.dumps(rows[mode]), flush=True)
    base_train, ref = rows["trainer alone"]["trainer_it_per_s"], rows["alone"]
    print(f"\n{args.num_envs} worlds, {args.steps} steps, {args.device} "
          f"({torch.cuda.get_device_name(args.device) if args.device.startswith('cuda') else 'cpu'}), "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    print(f"{'row':<14} {'env-steps/s':>12} {'graphs':>7} {'trainer it/s':>13} {'slowdown':>9} {'returns equal':>14}")
    for name, row in rows.items():
        rate = f"{row['env_steps_per_s']:,.0f}" if "env_steps_per_s" in row else row.get("error", "")[:40]
        train = row.get("trainer_it_per_s")
        slow = f"{100 * (1 - train / base_train):.0f}%" if train and name != "trainer alone" else ""
        same = "" if "reward_sum" not in row or name == "alone" else str(row["reward_sum"] == ref["reward_sum"])
        print(f"{name:<14} {rate:>12} {str(row.get('graphs', '')):>7} "
              f"{(f'{train:.1f}' if train else ''):>13} {slow:>9} {same:>14}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
