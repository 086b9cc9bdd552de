"""A class-data-sharing archive for the test run's subprocess JVMs.

Most of a short-lived Spark JVM's start is loading and verifying Spark's classes: a ``lakefs-gc``
subprocess on a tiny job took 6.8 s from launch to exit, 3.9 s with the classes mapped from an
archive (JDK 13+'s dynamic CDS, ``-XX:ArchiveClassesAtExit`` / ``-XX:SharedArchiveFile``);
``tests/batch/test_mark_sweep_modes.py`` with ``tests/cli/test_exit_codes.py`` ran in 65 s
instead of 88. Only how classes are loaded changes, not what runs.

The archive is kept between runs (:func:`archive_path`). When it is not there yet, the controller
of the test run (``tests/conftest.py``) starts an :class:`ArchiveBuild` in the background and
points every subprocess JVM at the archive's final path at once: a JVM launched
before the archive is there runs without it (``-Xshare:auto``, the default; the CDS log is off,
so nothing is printed), one launched after maps it. The archive is written under another name and renamed when
the JVM that wrote it has exited, so no JVM sees half of it. A JVM whose class path differs (the
image test's own virtualenv) does not use it either.

``python -m tests.support.jvm_archive`` (with ``-XX:ArchiveClassesAtExit`` in
``$SPARK_SUBMIT_OPTS``) is the JVM that writes it: a small job touching what the product's jobs
load (Arrow frames, a Python ``mapInArrow``, a join, Parquet). It takes about 30 s, beside the
first tests; a run that ends before it stops it, and the next run builds it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

#: flags of a JVM that maps the archive at ``{}`` if it is there and can (silently otherwise)
USE = "-XX:SharedArchiveFile={} -Xlog:cds*=off"


def archive_path() -> Path:
    """Where this machine's archive for this Spark, Java and Python lives (kept between runs:
    ``$XDG_CACHE_HOME`` or ``~/.cache``, ``lakefs-gc-tests/``). Another Spark install or Java
    gets another file; a stale one would only be ignored by the JVM."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    java = shutil.which("java") or ""
    key = "|".join(
        [pyspark.__version__, str(jars), str(jars.stat().st_mtime_ns if jars.exists() else 0),
         os.environ.get("JAVA_HOME", ""), os.path.realpath(java), sys.executable]
    )  # fmt: skip
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lakefs-gc-tests"
    return cache / f"spark-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


class ArchiveBuild:
    """The archiving JVM, run in the background, writing ``archive`` (under another name first):
    a failure leaves no archive, and the JVMs run as they would without one."""

    def __init__(self, archive: Path, base_options: str) -> None:
        archive.parent.mkdir(parents=True, exist_ok=True)
        self._partial = archive.with_suffix(f".{os.getpid()}.partial")
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{base_options} -XX:ArchiveClassesAtExit={self._partial} -Xlog:cds*=off",
            "PYSPARK_PYTHON": sys.executable,
        }
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.jvm_archive"],
            env=env, cwd=Path(__file__).resolve().parents[2], start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def publish() -> None:
            if self._process.wait() == 0 and self._partial.exists():
                self._partial.rename(archive)

        self._thread = threading.Thread(target=publish, name="jvm-archive", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the archiving JVM if the run ends first (with its Python: one process group, so
        that it does not write the archive at its exit), and remove what it left half done."""
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._thread.join(30)
        self._partial.unlink(missing_ok=True)


def _warm_up() -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    from lakefs_gc.spark.runtime.frames import local_frame
    from lakefs_gc.spark.runtime.session import build_session

    spark = build_session("jvm-archive", environ=os.environ, master="local[2]")
    jvm = spark.sparkContext._gateway.proc  # type: ignore[union-attr]  # the java process itself
    try:
        frame = local_frame(spark, [(f"a{i}", i) for i in range(100)], "address string, size long")

        def double(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in batches:
                yield pa.RecordBatch.from_arrays([b[0], pc.multiply(b[1], 2)], ["address", "size"])

        doubled = frame.mapInArrow(double, "address string, size long")
        frame.join(doubled.withColumnRenamed("size", "twice"), "address").groupBy().sum("twice").collect()
        with tempfile.TemporaryDirectory() as tmp:
            doubled.write.parquet(f"{tmp}/p")
            spark.read.parquet(f"{tmp}/p").count()
    finally:
        spark.stop()
    jvm.stdin.close()  # the gateway exits at the end of its input, and writes the archive then
    jvm.wait(120)


if __name__ == "__main__":
    _warm_up()
