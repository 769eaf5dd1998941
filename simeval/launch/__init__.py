"""``python -m simeval.launch``: evaluate checkpoints, watch a directory, or serve training.

    python -m simeval.launch                                  # the shipped training run, default settings
    python -m simeval.launch --checkpoint ckpt.pt --episodes 32
    python -m simeval.launch --config launchers/mujoco-halfcheetah.yaml --watch runs/exp1/ckpt
    python -m simeval.launch --backend ray --num-gpus 1 --serve cheetah-eval
    python -m simeval.launch --suite suite.yaml --until-decided --checkpoint b.pt --baseline a.pt --out runs/ab
    python -m simeval.launch --replay runs/ab/b --replay-episode 3:4 --video   # one recorded episode, re-run

The launcher application, built on the library (imported by itself and the demo only:
the import contracts say so): command line and config (``cli``, ``config``), what to evaluate
(``plan``) and how workers build it (``build``), the stages (``app``: a
``sources`` source of weights x ``cells`` -> jobs run by the one ``pipeline`` on
``session``'s evaluator slots -> ``lines`` -> ``results``; ``adaptive``: a suite's cells look
by look for ``--until-decided`` / ``--until-precise``) and video.
``--launcher docker`` hands the command line to the Docker launcher
(:mod:`simeval.containers`, an application of its own). Flags simeval does not
know are handed to ``--init-fn``; torch is imported only after the init hook ran.
Bad input: one line on stderr, exit code 2 (``--debug`` shows the traceback).
Nothing here imports torch at import time.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.containers import run_in_container
from simeval.hooks import call_hook
from simeval.refs import resolve_callable


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# simeval's own dependencies: missing one means this Python is not the one simeval was installed into.
_CORE = ("torch", "tensordict", "torchrl", "numpy", "scipy", "gymnasium", "yaml")


def _install_hint(exc: BaseException) -> str:
    """What to run where a core dependency is missing from this interpreter (the system Python after make demo)."""
    if not isinstance(exc, ModuleNotFoundError) or (exc.name or "").split(".")[0] not in _CORE:
        return ""
    return (
        f" ({sys.executable} does not have simeval's dependencies: after `make demo`, run "
        "`.venv/bin/python -m simeval.launch ...` or `source .venv/bin/activate` first; elsewhere `pip install -e .`)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the launcher on the command line ``argv`` (default: ``sys.argv[1:]``); the exit code (2 on bad input)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return launch(argv)
    except BrokenPipeError:
        raise  # the reader of stdout went away: run_command ends quietly
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line and exit code 2
        if "--debug" in argv:
            traceback.print_exc()
        print(f"simeval-launch: error: {_one_line(exc)}{_install_hint(exc)}", file=sys.stderr, flush=True)
        return 2


def launch(argv: list[str]) -> int:
    """Run the launcher on the command line ``argv``; its exit code, or the exception of bad input (a one-line
    :class:`~simeval.launch.config.ConfigError`, ...) as it is raised: :func:`main` prints it, the Python API
    (:mod:`simeval.launch.api`) lets it reach the caller."""
    from simeval.launch.cli import parse
    from simeval.launch.config import ConfigError

    parsed = parse(argv)
    cfg = parsed.cfg
    if cfg.launcher == "docker":
        return run_in_container(cfg, argv, parsed.config_path)
    if cfg.source is None and not cfg.replay:
        if parsed.config_path:
            raise ConfigError("no source of weights: give --checkpoint FILE, --watch DIR or --serve NAME.")

        cfg.watch = SHIPPED_RUN  # embedded default: every checkpoint of the shipped training run
    if cfg.video or cfg.cameras or cfg.evidence:  # before a simulator is imported: MuJoCo reads MUJOCO_GL then
        from simeval.envs.simulators import prepare_headless

        try:
            prepare_headless()
        except ValueError as exc:
            flag = "--video" if cfg.video else ("--cameras" if cfg.cameras else "--evidence")
            raise ConfigError(f"{flag}: {exc}") from None
    if cfg.init_fn and cfg.backend == "thread":
        # The env lives in this process: the hook (e.g. AppLauncher) runs here, before torch.

        call_hook(resolve_callable(cfg.init_fn, "--init-fn"), argv=parsed.extra, video=cfg.video, device=cfg.device)
    from simeval.launch.app import run

    return run(parsed, cfg.out or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S")))


def main_exit() -> None:
    """Console-script entry point (``simeval-launch``, ``python -m simeval.launch``): :func:`run_command`."""
    from simeval.command_line import run_command

    run_command(main)
