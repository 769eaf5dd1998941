"""``python -m simeval.launch.report``: the earlier name of ``python -m simeval.report`` (the same command)."""

from __future__ import annotations

from simeval.report.cli import main, main_exit

__all__ = ["main", "main_exit"]

if __name__ == "__main__":
    main_exit()
