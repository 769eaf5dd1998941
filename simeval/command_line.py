"""What simeval's commands share: ``OneLineParser`` (every parse error one line), ``error_line`` (any other error,
one line) and ``run_command`` (the exit, a closed pipe included)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` that raises ``error_type("<message> (see --help).")`` instead of printing its
    usage block and exiting: the command's own handler prints the one line and picks the exit code.

    Args:
        error_type: the exception a parse error raises (ValueError by default; the launcher's ConfigError).
        **kwargs: ``argparse.ArgumentParser``'s.
    """

    def __init__(self, *args: Any, error_type: type[Exception] = ValueError, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error_type = error_type

    def error(self, message: str) -> NoReturn:
        """Raise ``error_type`` with ``message`` and a pointer to ``--help``."""
        raise self.error_type(f"{message} (see --help).")


def run_command(main: Callable[[], int]) -> NoReturn:
    """Exit with ``main()``'s code; a reader that closes the pipe early (``... | head``) ends the command quietly,
    as ``SIGPIPE`` would: no traceback, exit status 141 (128 + SIGPIPE). Every console entry point runs through it."""
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at devnull so that flush cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.exit(141)
    sys.exit(code)


def error_line(prog: str, exc: BaseException, argv: list[str]) -> int:
    """Print ``PROG: error: <the first line of exc>`` on stderr (its traceback first with ``--debug`` in ``argv``);
    the exit code of bad input, 2."""
    if "--debug" in argv:
        traceback.print_exc()
    text = str(exc).strip()
    print(f"{prog}: error: {text.splitlines()[0] if text else type(exc).__name__}", file=sys.stderr, flush=True)
    return 2
