"""Building the Spark session every lakefs-gc job runs in.

One place decides the JVM (Java 17+, falling back to the bundled JDK), the Python the
executors run (``sys.executable``, or workers may pick an interpreter without our packages)
and the defaults a GC job wants (UI off in tests, few shuffle partitions locally, Arrow on).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING

from lakefs_gc.spark.java import ensure_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: what a GC job wants regardless of cluster
DEFAULTS: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Spark 4.3 defaults this to 64 MiB, which makes the JVM size the Arrow batch after every row
    # (25% of its CPU in bench/inventory.py); batches stay bounded by maxRecordsPerBatch.
    "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",  # our commands print their own progress on stderr
}
#: on a laptop or CI runner: no UI port, few partitions (2 cores), fast start-up
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def build_session(
    app_name: str,
    *,
    environ: MutableMapping[str, str],
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Create (or reuse) the process's Spark session.

    ``environ`` is the environment the JVM is launched with (normally ``os.environ``).
    ``master`` defaults to what spark-submit configured when launched by it, else ``local[2]``.
    """
    ensure_java(environ)
    environ.setdefault("PYSPARK_PYTHON", sys.executable)
    environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    settings = dict(DEFAULTS)
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in environ
    if master or not under_spark_submit:
        master = master or "local[2]"
        builder = builder.master(master)
    if master and master.startswith("local"):
        settings.update(LOCAL_DEFAULTS)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
