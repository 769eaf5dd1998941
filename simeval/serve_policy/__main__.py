"""``python -m simeval.serve_policy``."""

import sys

from simeval.serve_policy import main

sys.exit(main())
