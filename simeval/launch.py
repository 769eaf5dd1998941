"""``python -m simeval.launch``: evaluate checkpoints, watch a directory, or serve training.

    python -m simeval.launch                                  # the shipped checkpoint, default settings
    python -m simeval.launch --checkpoint ckpt.pt --episodes 32
    python -m simeval.launch --config launchers/mujoco-halfcheetah.yaml --watch runs/exp1/ckpt
    python -m simeval.launch --backend ray --num-gpus 1 --serve cheetah-eval

Flags simeval does not know are handed to ``--init-fn`` (Isaac Lab's
AppLauncher adds ``--headless``, ``--livestream``, ...). torch is imported
only after the init hook ran. Bad input: one line on stderr, exit code 2
(``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from simeval.config import (
    BACKENDS,
    ENV_BACKENDS,
    LAUNCHERS,
    LOGGERS,
    ConfigError,
    LaunchConfig,
    from_mapping,
    load_yaml,
)

SHIPPED_CHECKPOINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "halfcheetah_ppo.pt")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, our exit code, no usage wall
        raise ConfigError(f"{message} (see --help).")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="simeval-launch",
        description="Evaluate robot-learning policies: a checkpoint, a directory training writes to, "
        "or weights streamed from a training process.",
        argument_default=argparse.SUPPRESS,
        allow_abbrev=False,
    )
    p.add_argument("--config", help="YAML profile (launchers/*.yaml); flags override it")
    p.add_argument("--backend", help=f"where evaluation runs: {', '.join(BACKENDS)} (default thread)")
    p.add_argument("--num-gpus", type=float, help="GPUs the Ray actor asks for (default 0)")
    p.add_argument("--device", help="eval device, e.g. cuda:1 (process backend: only that GPU is visible)")
    p.add_argument("--env", help="gymnasium id (HalfCheetah-v5, ...) or isaaclab:<task>")
    p.add_argument(
        "--env-backend",
        help=f"MuJoCo envs: {', '.join(ENV_BACKENDS)} (default native for the tasks it has, else gymnasium)",
    )
    p.add_argument("--num-envs", type=int, help="batched sub-envs (default 8)")
    p.add_argument("--episodes", type=int, help="complete episodes per evaluation (default 16)")
    p.add_argument("--max-steps", type=int, help="episode cap (default 1000)")
    p.add_argument("--seed", type=int, help="env seed, the same every round (default 0)")
    p.add_argument(
        "--init-fn", help="module:function run first, before torch (e.g. simeval.init:isaaclab_app_launcher)"
    )
    p.add_argument("--policy", help="module:factory building the policy from the env (default: the checkpoint's)")
    p.add_argument("--policy-kwargs", type=json.loads, help="JSON keyword arguments for --policy")
    p.add_argument("--checkpoint", help="evaluate this checkpoint once")
    p.add_argument("--watch", help="evaluate every checkpoint written to this directory, once, in step order")
    p.add_argument("--serve", help="serve a named Ray evaluator that training reaches with simeval.connect(NAME)")
    p.add_argument("--out", help="results directory (default runs/<timestamp>)")
    p.add_argument("--logger", help=f"metrics logger: {', '.join(LOGGERS)} (default csv)")
    p.add_argument("--video", action="store_true", help="record MP4s of the first eval episodes")
    p.add_argument("--until-step", type=int, help="--watch: stop after a checkpoint at or past this step")
    p.add_argument("--poll-interval", type=float, help="--watch: seconds between directory scans (default 2)")
    p.add_argument("--start-timeout", type=float, help="seconds a worker may take to start (default 120)")
    p.add_argument("--no-obs-norm", dest="obs_norm", action="store_false", help="evaluate without VecNorm")
    p.add_argument("--launcher", help=f"where the launcher runs: {', '.join(LAUNCHERS)} (default local)")
    p.add_argument("--image", help="--launcher docker: the eval image (containers/Dockerfile)")
    p.add_argument("--gpus", help="--launcher docker: host GPUs for the container, e.g. 1 or 0,2 or all (default none)")
    p.add_argument("--network", help="--launcher docker: container network, e.g. host or none (default Docker's)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def parse(argv: list[str]) -> tuple[LaunchConfig, list[str], set[str], str | None]:
    """Config from YAML then flags; returns (config, flags for the init hook, explicit fields, config path)."""
    ns, extra = build_parser().parse_known_args(argv)
    given = vars(ns)
    given.pop("debug", None)
    settings: dict[str, Any] = {}
    config_path = given.pop("config", None)
    if config_path:
        settings.update(load_yaml(config_path))
    settings.update(from_mapping(given, "command line"))
    cfg = LaunchConfig(**settings).validate()
    if extra and not cfg.init_fn:
        raise ConfigError(
            f"unrecognized arguments: {' '.join(extra)} (flags simeval does not know go to --init-fn; none is set)."
        )
    return cfg, extra, set(settings), config_path


# -- what workers build (module level: picklable by reference) -----------------
def build_env(
    name: str,
    num_envs: int,
    max_steps: int | None,
    device: str | None,
    obs_norm: bool,
    video_dir: str | None,
    backend: str | None = None,
):
    if name.startswith("isaaclab:"):
        from simeval.envs.isaaclab import make_env as make_isaaclab_env

        return make_isaaclab_env(name.split(":", 1)[1], num_envs=num_envs, device=device)
    if video_dir:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless; must be set before mujoco loads
    from simeval.envs import make_env

    env = make_env(
        name,
        num_envs=num_envs,
        max_steps=max_steps,
        device=device,
        obs_norm=obs_norm,
        render=bool(video_dir),
        backend=backend,
    )
    if video_dir:
        from simeval.video import EpisodeVideo

        env.append_transform(EpisodeVideo(video_dir))
    return env


def build_policy(factory: str, kwargs: dict, env):
    from simeval.spec import resolve_callable

    return resolve_callable(factory, "--policy")(env, **kwargs)


def placement(device: str | None, backend: str) -> tuple[str | None, str | None]:
    """(CUDA_VISIBLE_DEVICES for the worker, device inside it).

    A process worker sees only the GPU it was given and calls it cuda:0, so
    evaluation never touches the training GPU. Ray sets the variable itself.
    """
    if backend == "process" and device and device.startswith("cuda:"):
        return device.split(":", 1)[1], "cuda:0"
    return None, device


def check_env(name: str, backend: str | None = None) -> str:
    """The env backend that will run ``name`` (isaaclab, native or gymnasium); a ConfigError if none can."""
    if name.startswith("isaaclab:"):
        return "isaaclab"
    import gymnasium

    if name not in gymnasium.registry:
        raise ConfigError(
            f"unknown env {name!r}: not a gymnasium id (e.g. HalfCheetah-v5, Hopper-v5) or isaaclab:<task>."
        )
    from simeval.envs import env_backend

    return env_backend(name, backend)


class Launcher:
    """Runs one of the three modes and writes every result to OUT/results.jsonl."""

    def __init__(self, cfg: LaunchConfig, extra: list[str], explicit: set[str]) -> None:
        self.cfg = cfg
        self.extra = extra
        self.explicit = explicit
        self.out = cfg.out or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S"))
        self.stop = threading.Event()
        self.evaluator = None
        self.spec_key = None  # (env, obs_norm, factory, kwargs) the evaluator was built for
        self.env_backend = None  # native / gymnasium / isaaclab, recorded with every result

    # -- evaluator ----------------------------------------------------------
    def _plan(self, ck) -> tuple:
        cfg = self.cfg
        env = cfg.env
        if ck is not None and ck.env:
            if "env" in self.explicit and ck.env != cfg.env:
                from simeval.checkpoint import CheckpointError

                raise CheckpointError(f"{ck.path}: trained on {ck.env}, but --env is {cfg.env}.")
            env = ck.env
        from simeval.policies import DEFAULT_FACTORY

        factory = cfg.policy or (ck.policy_factory if ck is not None else None) or DEFAULT_FACTORY
        kwargs = cfg.policy_kwargs or (ck.policy_kwargs if ck is not None and factory == ck.policy_factory else {})
        obs_norm = cfg.obs_norm and (ck is None or ck.obs_norm is not None)
        return env, obs_norm, factory, tuple(sorted(kwargs.items()))

    def evaluator_for(self, ck):
        key = self._plan(ck)
        if self.evaluator is not None:
            if key != self.spec_key:
                from simeval.checkpoint import CheckpointError

                raise CheckpointError(
                    f"{ck.path}: needs env/policy {key[0]}/{key[2]}, but this run evaluates {self.spec_key[0]}/"
                    f"{self.spec_key[2]}; use a separate run."
                )
            return self.evaluator
        env, obs_norm, factory, kwargs = key
        self.env_backend = check_env(env, self.cfg.env_backend)
        cfg = self.cfg
        cuda_visible, device = placement(cfg.device, cfg.backend)
        init_fn = None
        if cfg.backend != "thread" and (cfg.init_fn or cuda_visible):
            from simeval.init import worker_init

            init_fn = functools.partial(
                worker_init,
                user_init=cfg.init_fn,
                cuda_visible=cuda_visible,
                argv=self.extra,
                video=cfg.video,
                device=device,
            )
        video_dir = os.path.abspath(os.path.join(self.out, "videos")) if cfg.video else None
        if cfg.backend == "thread" and device in (None, "cpu"):
            import torch

            # This process only evaluates: as in the process/Ray workers, a CPU policy gets one
            # intra-op thread, leaving the cores to the batched simulator's own threads.
            torch.set_num_threads(1)
        from simeval import Evaluator

        self.evaluator = Evaluator(
            functools.partial(
                build_env, env, cfg.num_envs, cfg.max_steps, device, obs_norm, video_dir, cfg.env_backend
            ),
            policy_factory=functools.partial(build_policy, factory, dict(kwargs)),
            num_trajectories=cfg.episodes,
            max_steps=cfg.max_steps,
            seed=cfg.seed,
            device=device,
            backend=cfg.backend,
            init_fn=init_fn,
            num_gpus=cfg.num_gpus,
            ray_kwargs={"name": cfg.serve} if cfg.serve else None,
            start_timeout=cfg.start_timeout,
            keep_episodes=True,
            results_path=os.path.join(self.out, "results.jsonl") if cfg.serve else None,
        )
        self.spec_key = key
        _install_signal_handlers(self.stop)  # ray.init installs its own SIGTERM handler: ours comes last
        return self.evaluator

    def evaluate(self, ck) -> dict | None:
        """One round for one checkpoint; None when stopped by a signal (nothing is written)."""
        ev = self.evaluator_for(ck)
        weights = dict(ck.weights_dict)
        if not self.spec_key[1]:
            weights = {"policy": ck.policy}
        ev.trigger_eval(weights_dict=weights, step=ck.step)
        start = time.monotonic()
        bar = None
        if sys.stdout.isatty():
            from tqdm import tqdm

            bar = tqdm(desc=f"step {ck.step}", unit="s", bar_format="{desc}: {elapsed} elapsed")
        else:
            print(f"evaluating {ck.path} (step {ck.step}) ...", flush=True)
        try:
            while True:
                result = ev.poll(timeout=0.5)
                if result is not None:
                    result["_seconds"] = time.monotonic() - start
                    return result
                if self.stop.is_set():
                    return None
                if bar is not None:
                    bar.update(0)
        finally:
            if bar is not None:
                bar.close()

    def record(self, log, ck, result) -> None:
        from simeval.checkpoint import file_hash
        from simeval.results import make_record

        seconds = result.pop("_seconds")
        log.append(
            make_record(
                result,
                checkpoint=ck.path,
                checkpoint_name=os.path.basename(ck.path),
                checkpoint_sha256=file_hash(ck.path),
                backend=self.cfg.backend,
                wall_time=round(seconds, 3),
                env=self.spec_key[0],
                env_backend=self.env_backend,
            )
        )
        print(format_result(result, ck), flush=True)

    # -- modes ----------------------------------------------------------------
    def run(self) -> int:
        from simeval.results import ResultsLog

        mode = self.cfg.source
        if "env" in self.explicit:
            check_env(self.cfg.env, self.cfg.env_backend)  # before waiting for checkpoints that may never come
        log = ResultsLog(self.out, self.cfg.logger if mode != "serve" else None)
        print(f"results: {log.path}", flush=True)
        try:
            if mode == "checkpoint":
                return self.run_checkpoint(log)
            if mode == "watch":
                return self.run_watch(log)
            return self.run_serve()
        finally:
            if self.evaluator is not None:
                self.evaluator.shutdown(timeout=10.0)

    def run_checkpoint(self, log) -> int:
        from simeval.checkpoint import load_checkpoint

        ck = load_checkpoint(self.cfg.checkpoint)
        result = self.evaluate(ck)
        if result is None:
            print("stopped by signal before the evaluation finished; nothing written.", flush=True)
            return 0
        self.record(log, ck, result)
        return 0

    def run_watch(self, log) -> int:
        from simeval.watch import Watcher

        return Watcher(self, log).run()

    def run_serve(self) -> int:
        self.evaluator_for(None)
        print(
            f"serving Ray evaluator {self.cfg.serve!r}: connect with simeval.connect({self.cfg.serve!r}); "
            "SIGTERM or Ctrl-C stops it.",
            flush=True,
        )
        while not self.stop.wait(1.0):
            pass
        print("stopping the served evaluator.", flush=True)
        return 0


def format_result(result: dict, ck) -> str:
    keys = ("reward", "reward_ci_low", "reward_ci_high", "reward_std", "episode_length", "num_episodes", "fps")
    rows = [f"{'checkpoint':<16}{os.path.basename(ck.path)} (step {ck.step})"]
    rows += [f"{k:<16}{float(result[f'eval/{k}']):.2f}" for k in keys if f"eval/{k}" in result]
    return "\n".join(rows)


def _install_signal_handlers(stop: threading.Event) -> None:
    def handler(signum, frame):
        print(f"received {signal.Signals(signum).name}: stopping cleanly.", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        cfg, extra, explicit, config_path = parse(argv)
        if cfg.launcher == "docker":
            from simeval import container

            return container.run(container.plan(cfg, argv, config_path))
        if cfg.source is None:
            if config_path:
                raise ConfigError("no source of weights: give --checkpoint FILE, --watch DIR or --serve NAME.")
            cfg.checkpoint = SHIPPED_CHECKPOINT
        if cfg.init_fn and cfg.backend == "thread":
            # The env lives in this process: the hook (e.g. AppLauncher) runs here, before torch.
            from simeval.init import call_hook
            from simeval.spec import resolve_callable

            call_hook(resolve_callable(cfg.init_fn, "--init-fn"), argv=extra, video=cfg.video, device=cfg.device)
        launcher = Launcher(cfg, extra, explicit)
        _install_signal_handlers(launcher.stop)
        return launcher.run()
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line and exit code 2
        if debug:
            traceback.print_exc()
        print(f"simeval-launch: error: {_one_line(exc)}", file=sys.stderr, flush=True)
        return 2


def main_exit() -> None:
    """Console-script entry point (``simeval-launch``)."""
    sys.exit(main())


if __name__ == "__main__":
    main_exit()
