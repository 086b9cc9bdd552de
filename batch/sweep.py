"""spark-submit entry point for `lakefs-gc sweep`.

    spark-submit --master <cluster> batch/sweep.py --repo REPO [options]

Every option of `lakefs-gc sweep --help` applies; the Spark master and resources come from
spark-submit. The lakefs-gc package must be installed on the driver and the executors
(e.g. `--py-files` a wheel or an image with it, see deploy/).
"""

import sys

from lakefs_gc.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["sweep", *sys.argv[1:]]))
