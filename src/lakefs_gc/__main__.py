"""``python -m lakefs_gc``: the ``lakefs-gc`` command, for environments without the console script."""

import sys

from lakefs_gc.cli.main import main

sys.exit(main())
