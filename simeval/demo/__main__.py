"""``python -m simeval.demo`` (``make demo``)."""

import sys

from simeval.demo import main

sys.exit(main())
