"""``OneLineParser``: the argument parser of simeval's commands, whose every error is one line."""

from __future__ import annotations

import argparse
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
