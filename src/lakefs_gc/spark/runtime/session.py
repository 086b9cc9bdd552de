"""Building the Spark session every lakefs-gc job runs in.

One place decides the JVM (Java 17+, falling back to the bundled JDK), the Python the
executors run (``sys.executable``, or workers may pick an interpreter without our packages),
the defaults a GC job wants (UI off in tests, few shuffle partitions locally, Arrow on, the fair
scheduler with a pool for each of a mark's background readings: ``fairscheduler.xml``), how
much Spark says: warnings and errors only (``log4j2.properties`` beside this module and
``spark.log.level=WARN``, both overridable), so the tool's progress is not buried, and where the
driver's Arrow buffers come from (the C library: :mod:`lakefs_gc.spark.runtime.memory`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

from lakefs_gc.spark.runtime.java import ensure_java
from lakefs_gc.spark.runtime.memory import use_system_arrow_pool

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
    # spark-submit's driver logs at INFO (~9,000 lines a batch run): warnings are what matters
    "spark.log.level": "WARN",
    # how long the JVM and its Python workers wait for each other's socket (Spark's default 15 s):
    # on a driver busy with a mark, a worker that connects late killed the streaming query with
    # "Python worker failed to connect back", and an always-on service exited for a CPU spike
    "spark.python.authenticate.socketTimeout": "120s",
    # a mark's readings during lakeFS's dump run their jobs in pools of their own (POOLS): under
    # the default FIFO order, the range cache's one-task read-ahead waited until every task of the
    # candidates' stages had started (spark/runtime/background.py)
    "spark.scheduler.mode": "FAIR",
}
#: the fair scheduler's pools (``spark.scheduler.allocation.file``, unless the job names another)
POOLS = Path(__file__).with_name("fairscheduler.xml")
#: the driver's log4j2 configuration when lakefs-gc launches the JVM itself (not under spark-submit)
LOG4J2 = Path(__file__).with_name("log4j2.properties")
#: errors only: the demos, whose output is a story for a person to follow
QUIET = Path(__file__).with_name("log4j2-quiet.properties")
#: the JVM's start-up line for Spark's --add-modules=jdk.incubator.vector: noise to a user
_JVM_NOISE = (b"WARNING: Using incubator modules",)
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
    log_config: Path = LOG4J2,
) -> SparkSession:
    """Create (or reuse) the process's Spark session.

    ``environ`` is the environment the JVM is launched with (normally ``os.environ``).
    ``master`` defaults to what spark-submit configured when launched by it, else ``local[2]``.
    ``log_config``: the driver's log4j2 file when this process launches the JVM (a
    ``-Dlog4j2.configurationFile`` in ``spark.driver.extraJavaOptions`` wins).
    """
    ensure_java(environ)
    use_system_arrow_pool()  # the driver's Arrow buffers: spark/runtime/memory.py says why
    environ.setdefault("PYSPARK_PYTHON", sys.executable)
    environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    settings = dict(DEFAULTS)
    if POOLS.is_file():  # a missing allocation file would fail the SparkContext's start
        # a URI: Spark opens a bare path on the cluster's default filesystem (HDFS on EMR)
        settings["spark.scheduler.allocation.file"] = POOLS.as_uri()
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in environ
    if master or not under_spark_submit:
        master = master or "local[2]"
        builder = builder.master(master)
    if master and master.startswith("local"):
        settings.update(LOCAL_DEFAULTS)
    settings.update(conf or {})
    if not under_spark_submit:
        settings["spark.driver.extraJavaOptions"] = _with_log_config(
            settings.get("spark.driver.extraJavaOptions", ""), log_config
        )
    for key, value in settings.items():
        builder = builder.config(key, value)
    if under_spark_submit:
        return builder.getOrCreate()
    with _jvm_stderr_filtered():
        return builder.getOrCreate()


def _with_log_config(java_options: str, log_config: Path) -> str:
    if "log4j2.configurationFile" in java_options or "log4j.configurationFile" in java_options:
        return java_options
    return f"{java_options} -Dlog4j2.configurationFile={log_config.as_uri()}".strip()


@contextlib.contextmanager
def _jvm_stderr_filtered() -> Iterator[None]:
    """Launch the JVM with a stderr that drops its start-up noise and forwards everything else.

    The JVM inherits file descriptor 2 when PySpark starts it; for that moment fd 2 is a pipe,
    and a daemon thread copies its lines to the real stderr except :data:`_JVM_NOISE`. Python's
    own fd 2 is restored at once; the JVM (and the Python workers it starts) keep the pipe.
    """
    try:
        read_fd, write_fd = os.pipe()
        real = os.dup(2)
    except OSError:  # no fd 2 to speak of (a daemon): nothing to filter
        yield
        return
    sys.stderr.flush()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    threading.Thread(target=_forward, args=(read_fd, real), name="lakefs-gc-jvm-stderr", daemon=True).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)


def _forward(read_fd: int, out_fd: int) -> None:
    """Copy lines from ``read_fd`` to ``out_fd`` until the JVM closes it; never stop draining.

    Both are closed at the end: when the session already existed no JVM inherited the pipe, so it
    ends as soon as fd 2 is restored, and a process that asks for its session once per command
    (the tests run hundreds in one process) must not keep a copy of stderr for each.
    """
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            for line in iter(pipe.readline, b""):
                if line.startswith(_JVM_NOISE):
                    continue
                with contextlib.suppress(OSError):
                    os.write(out_fd, line)
    finally:
        os.close(out_fd)


def task_slots(spark: SparkSession) -> int:
    """How many tasks the session can run at once, as far as its configuration tells
    (:func:`configured_slots` of its conf and default parallelism)."""
    sc = spark.sparkContext
    return configured_slots(dict(sc.getConf().getAll()), sc.defaultParallelism)


def configured_slots(conf: Mapping[str, str], default_parallelism: int) -> int:
    """The largest of Spark's default parallelism, the configured executors' cores
    (``spark.executor.instances`` or, with dynamic allocation, its ``maxExecutors``, times
    ``spark.executor.cores``) and a standalone cluster's ``spark.cores.max``.

    Spark's default parallelism counts the executors' cores registered so far (at least 2) unless
    ``spark.default.parallelism`` fixes it: a query planned once at a service's start, before its
    executors register (a Spark operator starts the driver first), would see 2.
    """

    def number(key: str, default: int = 0) -> int:
        try:
            return int(conf.get(key, default))
        except ValueError:
            return default

    cores = number("spark.executor.cores", 1)
    dynamic = str(conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true"
    executors = number("spark.dynamicAllocation.maxExecutors" if dynamic else "spark.executor.instances")
    if executors > 10_000:  # dynamic allocation's default maximum is "unbounded" (Integer.MAX_VALUE)
        executors = 0
    return max(default_parallelism, executors * cores, number("spark.cores.max"))
