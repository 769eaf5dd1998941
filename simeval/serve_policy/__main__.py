"""``python -m simeval.serve_policy``."""

from simeval.serve_policy import main_exit

main_exit()
