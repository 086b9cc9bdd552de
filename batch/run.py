"""spark-submit entry point for `lakefs-gc run`.

    spark-submit --master <cluster> batch/run.py --repo REPO [options]
    spark-submit --master <cluster> batch/run.py --repo REPO --yes --inventory s3://inventory-bucket/prefix

Pass --yes: a spark-submit driver has no terminal to confirm on. Every option of
`lakefs-gc run --help` applies (--inventory: candidates from the newest inventory snapshot
instead of a listing, its data files read on the executors); the Spark master and resources come
from spark-submit. The lakefs-gc package must be installed on the driver and the executors
(e.g. `--py-files` a wheel or an image with it, see deploy/).
"""

import sys

from lakefs_gc.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
