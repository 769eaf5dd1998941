"""``python -m simeval.launch``."""

from simeval.launch import main_exit

main_exit()
