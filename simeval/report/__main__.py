"""``python -m simeval.report``."""

from simeval.report.cli import main_exit

main_exit()
