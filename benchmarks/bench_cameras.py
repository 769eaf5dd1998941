"""Camera observations on the CPU: simeval's native env beside gymnasium's vector env rendering the same camera.

Prints, in one run and per (image side, sub-envs): the milliseconds a step of every sub-env
takes with one camera's images, and without (the physics alone), for

  * simeval: ``make_env("HalfCheetah-v5", cameras=["track"], image_size=S)`` (MuJoCo's renderer,
    one context, each sub-env rendered in turn; a shadow map of 4 S pixels, no multisampling);
  * the peer a user would pick instead: gymnasium's ``SyncVectorEnv`` of ``HalfCheetah-v5`` with
    ``render_mode="rgb_array"`` at the same size (its renderer's defaults: a 4096-pixel shadow map,
    4x multisampling), each sub-env's ``render()`` after each step, as LeRobot's gym envs do;

and their ratio. Medians over ``--repeats``; the machine and the date are printed. MuJoCo's OpenGL:
``MUJOCO_GL`` (EGL by default here: software rendering where the machine has no GPU).

    python benchmarks/bench_cameras.py [--sizes 64 128] [--envs 16 64 256] [--steps 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import torch  # noqa: E402


def simeval_step_ms(n: int, size: int | None, steps: int) -> float:
    """Median ms per step of ``n`` native sub-envs, with ``size``-pixel images of the track camera (None: none)."""
    from simeval.envs import make_env

    kw = {"cameras": ["track"], "image_size": size} if size else {}
    env = make_env("HalfCheetah-v5", num_envs=n, seed=0, obs_norm=False, **kw)
    td = env.reset()
    times = []
    for _ in range(steps + 1):
        td["action"] = torch.zeros(n, 6)
        start = time.perf_counter()
        td = env.step(td)["next"]
        times.append(time.perf_counter() - start)
    env.close()
    return 1e3 * statistics.median(times[1:])  # the first step makes the OpenGL context


def gymnasium_step_ms(n: int, size: int | None, steps: int) -> float:
    """Median ms per step of gymnasium's SyncVectorEnv, each sub-env's frame rendered after the step (None: none)."""
    import gymnasium as gym

    kw = {"render_mode": "rgb_array", "width": size, "height": size, "camera_name": "track"} if size else {}
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("HalfCheetah-v5", **kw) for _ in range(n)])
    envs.reset(seed=0)
    action = np.zeros((n, 6), dtype=np.float32)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        envs.step(action)
        if size:
            frames = [e.render() for e in envs.envs]
            assert frames[0].shape == (size, size, 3)
        times.append(time.perf_counter() - start)
    envs.close()
    return 1e3 * statistics.median(times[1:])


def main() -> None:
    """Run the grid and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--envs", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--peer-max-envs",
        type=int,
        default=64,
        help="gymnasium's rows up to this many sub-envs (each holds an OpenGL context: 256 did not finish here)",
    )
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()})"
    print(f"{now}; {machine}; MUJOCO_GL={os.environ['MUJOCO_GL']}; median of {args.repeats} runs of {args.steps}")
    print("steps; ms per step of all sub-envs\n")
    print("| image | sub-envs | simeval, no camera | simeval | gymnasium SyncVectorEnv + render() | simeval / gym |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes:
        for n in args.envs:
            row = {}
            runs = [("plain", simeval_step_ms, None), ("simeval", simeval_step_ms, size)]
            if n <= args.peer_max_envs:
                runs.append(("gymnasium", gymnasium_step_ms, size))
            for name, fn, s in runs:
                row[name] = statistics.median(fn(n, s, args.steps) for _ in range(args.repeats))
            peer = f"{row['gymnasium']:.1f}" if "gymnasium" in row else "not run"
            ratio = f"{row['simeval'] / row['gymnasium']:.2f}" if "gymnasium" in row else ""
            print(f"| {size} px | {n} | {row['plain']:.1f} | {row['simeval']:.1f} | {peer} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
