"""spark-submit entry point for `lakefs-gc serve`, the always-on GC service.

    spark-submit --master <cluster> streaming/serve.py --config gc.yaml

Every option of `lakefs-gc serve --help` applies. The Spark master and resources come from
spark-submit; `service.state` must be a directory the driver can write (a mounted volume: it
holds the streaming checkpoints). The lakefs-gc package must be installed on the driver and the
executors (an image with it, see deploy/).
"""

import sys

from lakefs_gc.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
