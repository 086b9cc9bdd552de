"""Suite-wide fixtures: the real lakeFS and RocksDB files of ``tests/fixtures`` and the one Spark
session per test run."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support import jvm_archive
from tests.support.rocksdb import sst_dump  # noqa: F401  (a fixture for every test package)

pytest_plugins = ["tests.support.object_stores", "tests.support.gc_env"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[1]

# Each `lakefs-gc` subprocess's JVM (spark-submit adds $SPARK_SUBMIT_OPTS to the driver's options)
# runs with the client JIT only: they live seconds on small data, where C2's compilations are CPU
# spent for nothing (measured on a small Spark job: 15.7 s of JVM CPU instead of 29.1 s). The test
# session's own JVM, which runs every in-process Spark job, keeps the default (see `spark`).
_SUBPROCESS_JVM = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", _SUBPROCESS_JVM)
_archive: jvm_archive.ArchiveBuild | None = None

# The test session's own JVM runs thousands of small queries on a few rows each. Its CPU went to
# compiling them more than to running them: on tests/spark/mark/test_twin_evidence.py, of 170 JVM
# CPU seconds, 53 were C2 compiling, 13 C1 and 22 G1's collector threads, 24 the tasks. So: C2
# only for code called 4x as often as by default; the serial collector (a heap of short-lived
# query objects, no concurrent marking beside 2 busy cores); and no whole-stage code generation
# (every query's generated Java source compiled by Janino, then by the JIT, for a few rows).
# 142 JVM CPU seconds on that file instead of 170; the whole suite 1,238.6 s against 1,352-1,409 s
# (2026-11-30). Only the tests' session: the `lakefs-gc` subprocesses run with Spark's settings
# (their JVMs with the client JIT and the class archive above).
_SESSION_JVM = (
    "-XX:+UseSerialGC -XX:Tier4InvocationThreshold=20000 -XX:Tier4CompileThreshold=40000"
    " -XX:Tier4MinInvocationThreshold=2400"
)
_SESSION_CONF = {"spark.sql.shuffle.partitions": "2", "spark.sql.codegen.wholeStage": "false"}


def pytest_configure(config: pytest.Config) -> None:
    """The run's controller (not each xdist worker: they inherit its environment) has the
    subprocess JVMs map Spark's classes from an archive (tests/support/jvm_archive.py), built
    beside the first tests when this machine has none yet. Not when ``$SPARK_SUBMIT_OPTS`` was
    set from outside."""
    global _archive
    if hasattr(config, "workerinput") or os.environ.get("SPARK_SUBMIT_OPTS") != _SUBPROCESS_JVM:
        return
    archive = jvm_archive.archive_path()
    if not archive.exists():
        _archive = jvm_archive.ArchiveBuild(archive, _SUBPROCESS_JVM)
    os.environ["SPARK_SUBMIT_OPTS"] = f"{_SUBPROCESS_JVM} {jvm_archive.USE.format(archive)}"


def pytest_unconfigure(config: pytest.Config) -> None:
    if _archive is not None:
        _archive.close()


@pytest.hookimpl(trylast=True)  # after the durations: the last lines a CI shows
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The free space of the temporary directory, at the end of the output a CI shows: a store
    write that fails with exit code 6 on a nearly full disk then says so at once."""
    if hasattr(terminalreporter.config, "workerinput"):
        return
    where = tempfile.gettempdir()
    free = shutil.disk_usage(where).free / 2**30
    terminalreporter.write_line(f"free disk space in {where} at the end of the run: {free:.1f} GiB")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``slow`` tests first, the rest after them, each group in its collection order.

    ``tests/run`` hands the workers whole files in this order (``--dist loadfile
    --no-loadscope-reorder``), so the minute-long files start early and the run ends on short
    ones on every worker. xdist's own order (the files with the most tests first) left the long
    files of one or two tests for the end: one worker ran one of them while the other had
    nothing left, ~100 s at the end of a 24-minute run on 2 cores.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def fixtures_root() -> Path:
    """``$LAKEFS_GC_FIXTURES`` or ``tests/fixtures`` (see its README.md).

    Missing fixtures are an error, never a skip: CI must exercise the real lakeFS files.
    """
    env = os.environ.get("LAKEFS_GC_FIXTURES")
    root = Path(env) if env else REPO_ROOT / "tests" / "fixtures"
    if not (root / "lakefs-sstable").is_dir():
        raise RuntimeError(
            f"lakeFS fixtures not found at {root}: set LAKEFS_GC_FIXTURES to a copy of tests/fixtures"
        )
    return root


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return fixtures_root()


@pytest.fixture(scope="session")
def lakefs_sstables(fixtures: Path) -> Path:
    return fixtures / "lakefs-sstable"


@pytest.fixture(scope="session")
def pebble_testdata(fixtures: Path) -> Path:
    return fixtures / "pebble-testdata"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one local Spark session of the test run (start-up costs seconds)."""
    from lakefs_gc.spark.runtime.session import build_session

    # this JVM lives the whole run, where C2 pays off: launched without the subprocesses' option
    # (with it, measured again on 2026-11-30: the whole suite 1,426 s against 1,352 s) and with
    # _SESSION_JVM's options instead
    opts = os.environ.get("SPARK_SUBMIT_OPTS")
    if opts is not None and opts.startswith(_SUBPROCESS_JVM):
        os.environ["SPARK_SUBMIT_OPTS"] = f"{_SESSION_JVM} {opts.removeprefix(_SUBPROCESS_JVM).strip()}"
    try:
        session = build_session(
            "lakefs-gc-tests",
            environ=os.environ,
            master="local[2]",
            conf=_SESSION_CONF,
        )
    finally:
        if opts is not None:
            os.environ["SPARK_SUBMIT_OPTS"] = opts
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _lakefs_gc_logger_restored() -> Iterator[None]:
    """``serve`` run in-process routes the ``lakefs_gc`` logger to its own handler (no propagation):
    put it back after each test, so a later test's ``caplog`` still sees the records."""
    logger = logging.getLogger("lakefs_gc")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]


#: py4j's callback server watches its sockets with ``select()``, which refuses a descriptor >= 1024:
#: past it no ``foreachBatch`` call reaches Python and every streaming test left hangs until its
#: timeout. A test that leaves the process this close to it fails at once, naming what is open.
DESCRIPTOR_ALARM = 700


@pytest.fixture(autouse=True)
def _descriptors_stay_far_from_select_limit() -> Iterator[None]:
    yield
    if not os.path.isdir("/proc/self/fd"):
        return
    kinds: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")  # socket:[n], pipe:[n], /tmp/x, ...
            kinds[target.split("/")[1] if target.startswith("/") else target.split(":")[0]] += 1
    if sum(kinds.values()) > DESCRIPTOR_ALARM:
        pytest.fail(
            f"the test process holds {sum(kinds.values())} descriptors ({dict(kinds.most_common(5))}); "
            "a server, client or pipe is not closed, and from 1024 py4j stops calling foreachBatch"
        )
