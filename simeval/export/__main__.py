"""``python -m simeval.export CHECKPOINT --to onnx|torchscript [--out FILE] [--env NAME] [--format NAME]``.

Bad input (an unknown target, an unreadable checkpoint, no env): one line on
stderr and exit code 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys

from simeval.command_line import OneLineParser, error_line, run_command
from simeval.export import TARGETS, export_checkpoint


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m simeval.export``."""
    p = OneLineParser(
        prog="python -m simeval.export",
        description="Write a checkpoint's deterministic actor (observation -> action, normaliser folded in) "
        "as ONNX or TorchScript.",
        allow_abbrev=False,
    )
    p.add_argument("checkpoint", help="any checkpoint simeval reads (simeval, rsl_rl, ...)")
    p.add_argument("--to", required=True, choices=TARGETS, help="onnx (input obs, output actions) or torchscript")
    p.add_argument(
        "--out",
        help="output file (default: <checkpoint dir>/exported/<stem>.onnx or .pt; ./exported/ for a checkpoint "
        "inside the simeval package, the shipped ones)",
    )
    p.add_argument("--env", help="the env the policy is built for (required when the checkpoint records none)")
    p.add_argument("--format", help="the checkpoint format, when detection by content is not wanted")
    p.add_argument(
        "--policy",
        help="module:function building the policy from the env, instead of the checkpoint's own factory "
        "(which is used only when registered; see docs/security.md)",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(argv: list[str] | None = None) -> int:
    """Export as the command line ``argv`` (default: ``sys.argv[1:]``) says; the exit code (0, or 2 on error)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)

        result = export_checkpoint(
            args.checkpoint, args.to, out=args.out, env=args.env, format=args.format, policy=args.policy
        )
    except BrokenPipeError:
        raise  # the reader of stdout went away: run_command ends quietly
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line and exit code 2
        return error_line("simeval-export", exc, argv)
    print(result.describe(), flush=True)
    return 0


def main_exit() -> None:
    """Console-script entry point (``simeval-export``, ``python -m simeval.export``): :func:`run_command`."""
    run_command(main)


if __name__ == "__main__":
    main_exit()
