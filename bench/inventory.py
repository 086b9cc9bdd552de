"""Benchmark: ingesting an S3 Inventory delivery into the candidate table (numbers, not a test).

A synthetic delivery of N rows (default 10M; Parquet and/or gzipped CSV, ``--rows-per-file`` rows
per data file) is written once under ``--workdir`` and reused. Its keys look like lakeFS's:
``<namespace>/data/<slice xid>/<object xid>`` under three repository namespaces of one bucket,
plus ``_lakefs/`` metadata, files directly under ``data/`` and keys outside every namespace.

Measured in the same run, per format:

* **plain read**: the data files read by pyarrow alone in this process (``pyarrow.parquet.read_table``,
  ``pyarrow.csv.read_csv`` on the gzip stream), with and without pyarrow's threads, the best of three;
* **Python pipeline, no Spark**: the executor-side work of the ingest, one stage at a time in this
  process: MD5, ``read_data_file``, ``route_rows``, ``CandidatePartWriter``;
* **ingest**: ``ingest_available`` (the streaming source with ``availableNow`` into a fresh candidate
  table and checkpoint) on local Spark, ``--repeat`` times (the first is the session's first stream,
  so colder), with a check that the table holds exactly the expected candidates, the Spark stages
  from the event log, and the CPU seconds the JVM and the Python workers spent meanwhile (CPU
  seconds say where the work goes even when other jobs share the machine; wall time does not).

Aim (issue 17): ingest rows/second within 1.5x of the plain read (threaded). Also reported: peak
RSS of this Python driver (taken right after the Spark runs, before the in-process
measurements), of the driver JVM and of the largest Python worker.

``--store s3`` puts the delivery in a moto S3 server (a child process, as ``bench/mark.py`` runs
it) and ingests it from there, reporting the GET requests and bytes moto served per ingest run
beside the delivery's own bytes: how many times the ingest reads each data file from the store.

    python bench/inventory.py [--rows N] [--format parquet|csv|both] [--rows-per-file N] [--trust-checksums]
                              [--workdir DIR] [--master local[2]] [--repeat N] [--json FILE]
                              [--conf KEY=VALUE ...] [--no-diagnostics] [--store local|s3]
                              [--task-per-file]

The first run writes the deliveries in a child process (10M rows: about 5 s of generation, 5 s for
Parquet and 4 minutes for CSV, whose writer encodes row by row); later runs reuse them.

Results and how to read them: bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mark import (
    S3_KEYS,
    cpu_seconds,
    driver_memory,
    moto,
    print_stages,
    process_tree,
    say,
    spark_session,
    stage_times,
)

HERE = Path(__file__).resolve()
BUCKET = "bench-bucket"
SNAPSHOT = datetime(2026, 11, 20, 6, 0, tzinfo=timezone.utc)
#: (repository or None, namespace prefix, kind, share of the rows); kinds: "data" (candidates),
#: "meta" (``_lakefs/``), "loose" (directly under ``data/``), "outside" (no namespace)
GROUPS: tuple[tuple[str | None, str, str, float], ...] = (
    (None, "elsewhere/logs/", "outside", 0.02),
    ("alpha", "repos/alpha/", "meta", 0.01),
    ("alpha", "repos/alpha/", "data", 0.31),
    ("beta", "repos/beta/", "loose", 0.01),
    ("beta", "repos/beta/", "data", 0.31),
    ("gamma", "warehouse/gamma/", "meta", 0.01),
    ("gamma", "warehouse/gamma/", "data", 0.33),
)
OBJECTS_PER_SLICE = 10_000


# ---- the synthetic delivery ----------------------------------------------------------------


def _xids(values: Any, head: bytes) -> Any:
    """(n, 20) uint8: xid-like ids, a 7-character head then 13 base32hex digits of ``values``."""
    import numpy as np

    digits = np.frombuffer(b"0123456789abcdefghijklmnopqrstuv", np.uint8)
    shifts = np.arange(12, -1, -1, dtype=np.uint64) * np.uint64(5)
    tail = digits[((values[:, None] >> shifts) & np.uint64(31)).astype(np.intp)]
    return np.hstack([np.broadcast_to(np.frombuffer(head, np.uint8), (len(values), len(head))), tail])


def _fixed_width(parts: list[Any], n: int) -> Any:
    """A string array of n equal-width strings, from byte constants and (n, w) uint8 blocks."""
    import numpy as np
    import pyarrow as pa

    blocks = [np.broadcast_to(np.frombuffer(p, np.uint8), (n, len(p))) if isinstance(p, bytes) else p
              for p in parts]  # fmt: skip
    matrix = np.ascontiguousarray(np.hstack(blocks))
    offsets = np.arange(0, (n + 1) * matrix.shape[1], matrix.shape[1], dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(matrix))


def _group_keys(prefix: str, kind: str, start: int, n: int) -> Any:
    import numpy as np

    i = np.arange(start, start + n, dtype=np.uint64)
    objects = _xids(np.uint64(0x5A3C_0000_0000) + i * np.uint64(7919), b"ce8co45")
    if kind == "outside":
        return _fixed_width([prefix.encode(), objects, b".log"], n)
    if kind == "meta":
        return _fixed_width([prefix.encode() + b"_lakefs/", objects], n)
    if kind == "loose":
        return _fixed_width([prefix.encode() + b"data/", objects], n)
    slices = _xids(np.uint64(0x3F0_0000) + (i // np.uint64(OBJECTS_PER_SLICE)) * np.uint64(31337), b"gqv3epl")
    return _fixed_width([prefix.encode() + b"data/", slices, b"/", objects], n)


def inventory_rows(n: int, seed: int = 1) -> tuple[Any, dict[str, int]]:
    """(INVENTORY_SCHEMA table of n rows, expected candidates per repository), built vectorised."""
    import numpy as np
    import pyarrow as pa

    from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA

    rng = np.random.default_rng(seed)
    hexdigits = np.frombuffer(b"0123456789abcdef", np.uint8)
    chunks, expected, done = [], {}, 0
    for g, (repository, prefix, kind, share) in enumerate(GROUPS):
        size = n - done if g == len(GROUPS) - 1 else round(n * share)
        for start in range(0, size, 1_000_000):
            m = min(1_000_000, size - start)
            raw = rng.integers(0, 256, (m, 16), dtype=np.uint8)
            etag = np.empty((m, 32), np.uint8)
            etag[:, 0::2], etag[:, 1::2] = hexdigits[raw >> 4], hexdigits[raw & 15]
            millis = 1_760_000_000_000 + rng.integers(0, 90 * 86_400_000, m)
            chunks.append(pa.table({
                "bucket": pa.repeat(pa.scalar(BUCKET), m),
                "key": _group_keys(prefix, kind, start, m),
                "size": pa.array(rng.integers(1, 64 << 20, m), pa.int64()),
                "last_modified": pa.array(millis, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                "etag": _fixed_width([etag], m),
                "encryption": pa.nulls(m, pa.string()),  # none: the delivery has no EncryptionStatus
            }).cast(INVENTORY_SCHEMA))  # fmt: skip
        if kind == "data" and repository:
            expected[repository] = expected.get(repository, 0) + size
        done += size
    return pa.concat_tables(chunks), expected


def routes() -> tuple[Any, ...]:
    from lakefs_gc.inventory.mapping import NamespaceRoute

    named = {(r, p) for r, p, _k, _s in GROUPS if r}
    return tuple(NamespaceRoute(r, BUCKET, p) for r, p in sorted(named))


def delivery_dir(workdir: Path, rows: int, rows_per_file: int, fmt: str) -> Path:
    return workdir / f"n{rows}-f{rows_per_file}" / fmt


def generate(workdir: Path, rows: int, rows_per_file: int, formats: list[str]) -> None:
    """Child mode: write the missing deliveries (one per format) and their ``delivery.json``."""
    import pyarrow.fs as pafs

    from lakefs_gc.inventory.s3 import write_delivery

    start = time.perf_counter()
    table, expected = inventory_rows(rows)
    say(f"generated {rows:,} rows in {time.perf_counter() - start:.1f}s")
    for fmt in formats:
        base = delivery_dir(workdir, rows, rows_per_file, fmt)
        if (base / "delivery.json").is_file():
            continue
        if base.exists():
            shutil.rmtree(base)
        start = time.perf_counter()
        manifest = write_delivery(
            pafs.LocalFileSystem(), str(base / "dest"), BUCKET, "daily", SNAPSHOT, table,
            format=fmt, rows_per_file=rows_per_file,  # type: ignore[arg-type]
        )  # fmt: skip
        seconds = time.perf_counter() - start
        say(f"wrote the {fmt} delivery in {seconds:.1f}s")
        info = {"rows": rows, "expected": expected, "manifest": manifest, "write_seconds": round(seconds, 1)}
        (base / "delivery.json").write_text(json.dumps(info, indent=1))


def ensure_deliveries(workdir: Path, rows: int, rows_per_file: int, formats: list[str]) -> None:
    missing = [
        f for f in formats if not (delivery_dir(workdir, rows, rows_per_file, f) / "delivery.json").is_file()
    ]
    if not missing:
        return
    say(f"writing {', '.join(missing)} deliveries of {rows:,} rows into {workdir} (once; CSV takes minutes)")
    argv = [sys.executable, str(HERE), "--generate-only", "--rows", str(rows), "--rows-per-file",
            str(rows_per_file), "--workdir", str(workdir), "--format", ",".join(missing)]  # fmt: skip
    subprocess.run(argv, check=True)  # a child: this driver's RSS stays the ingest's own


def load_delivery(base: Path) -> tuple[Any, dict[str, Any]]:
    import pyarrow.fs as pafs

    from lakefs_gc.inventory.discovery import discover

    info = json.loads((base / "delivery.json").read_text())
    found = discover(pafs.LocalFileSystem(), str(base / "dest"))
    [delivery] = found.complete
    return delivery, info


# ---- plain pyarrow read and the Python pipeline ----------------------------------------------


def plain_read(delivery: Any, threads: bool, repeat: int = 3) -> dict[str, Any]:
    """Every data file read by pyarrow alone (the floor any ingest is compared with): the best of
    ``repeat`` reads, as the ingest's best run is taken. One threaded read of the 10M-row delivery
    took 1.8-2.7 s in six runs of one hour; the best of three is the floor a ratio should face."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    best: dict[str, Any] = {}
    for _ in range(repeat):
        rows, start, start_cpu = 0, time.perf_counter(), time.process_time()
        for f in delivery.files:
            if f.format == "parquet":
                rows += pq.read_table(f.path, use_threads=threads).num_rows
            else:
                options = pa_csv.ReadOptions(column_names=list(delivery.columns), use_threads=threads)
                with pa.input_stream(f.path, compression="gzip") as stream:
                    rows += pa_csv.read_csv(stream, read_options=options).num_rows
        seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        if not best or seconds < best["seconds"]:
            best = {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
                    "cpu_s": round(cpu, 2)}  # fmt: skip
    return best


class Clock:
    """Seconds spent per named stage, summed over files."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}  # CPU seconds: comparable while other jobs share the machine

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        start, start_cpu = time.perf_counter(), time.process_time()
        out = fn()
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - start_cpu
        return out


def python_pipeline(delivery: Any, expected: int, scratch: Path, *, etags: bool) -> dict[str, Any]:
    """The executor-side work of the ingest, stage by stage, one data file at a time, no Spark."""
    import pyarrow.parquet as pq

    from lakefs_gc.inventory.discovery import read_rows
    from lakefs_gc.inventory.mapping import route_rows
    from lakefs_gc.spark.ingest.inventory.parts import CandidatePartWriter, part_path

    fs, where = _local_fs(), routes()
    clock, rows, candidates = Clock(), 0, 0

    def route(batches: list[Any]) -> list[Any]:
        return [
            route_rows(b, where, delivery_id=delivery.id, snapshot_time=delivery.snapshot_time)
            for b in batches
        ]

    for i, data_file in enumerate(delivery.files):
        clock.run("md5 (hashlib, included in read_data_file)", lambda f=data_file: _md5(f.path))
        batches = clock.run(
            "read_data_file (MD5 + parse + convert)",
            lambda f=data_file: list(read_rows(fs, delivery, f, etags=etags)),
        )
        rows += sum(b.num_rows for b in batches)
        routed = clock.run("route_rows", lambda b=batches: route(b))
        candidates += sum(t.num_rows for t in routed)
        writer = CandidatePartWriter(fs, part_path(str(scratch), 0, i))
        clock.run(
            "CandidatePartWriter (parquet part)", lambda w=writer, r=routed: [*map(w.write, r), w.close()]
        )
    written = sum(pq.ParquetFile(p).metadata.num_rows for p in scratch.rglob("*.parquet"))
    shutil.rmtree(scratch, ignore_errors=True)
    total = sum(v for k, v in clock.seconds.items() if not k.startswith("md5"))
    return {
        "rows": rows, "candidates": candidates, "written": written, "ok": written == candidates == expected,
        "stages": {k: round(v, 2) for k, v in clock.seconds.items()}, "seconds": round(total, 2),
        "stages_cpu": {k: round(v, 2) for k, v in clock.cpu.items()},
        "rows_per_s": round(rows / total),
    }  # fmt: skip


def _pipeline_file(job: tuple[Any, Any, int]) -> int:
    """One data file through the source's own executor work (``read_partition``: verify, parse,
    route, write the part), in a pool process; its candidates."""
    from lakefs_gc.spark.ingest.inventory.source import FilePartition, read_partition

    config, entry, i = job
    [status] = list(read_partition(config, FilePartition(entry, i)))
    [row] = status.to_pylist()
    if row["error"]:
        raise RuntimeError(row["error"])
    return sum(json.loads(row["repositories"]).values())


def parallel_pipeline(
    base: Path, delivery: Any, info: dict[str, Any], scratch: Path, *, etags: bool
) -> dict[str, Any]:
    """The same work, one data file per task on a pool of one process per core, no Spark: what
    any ingest that verifies, routes and writes every file in parallel needs at the least."""
    import multiprocessing

    from lakefs_gc.inventory.delivery_log import LogEntry
    from lakefs_gc.storage.locations import parse_location

    config = replace(source_config(base, etags=etags), parts=parse_location(str(scratch)))
    entry = LogEntry(0, delivery.id, delivery)
    jobs = [(config, entry, i) for i in range(len(delivery.files))]
    processes = os.cpu_count() or 1
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(_pipeline_file, jobs[:processes], chunksize=1)  # start and import, as Spark's workers are
        start = time.perf_counter()
        candidates = sum(pool.map(_pipeline_file, jobs, chunksize=1))
        seconds = time.perf_counter() - start
    shutil.rmtree(scratch, ignore_errors=True)
    rows = info["rows"]
    return {"processes": processes, "rows": rows, "candidates": candidates,
            "ok": candidates == sum(info["expected"].values()),
            "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}  # fmt: skip


def _md5(path: str) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _local_fs() -> Any:
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem()


# ---- Spark ----------------------------------------------------------------------------------


def warm_up(spark: Any) -> None:
    """Start the Python workers and import the ingest's modules, as any earlier job would have."""

    def imports(batches: Iterator[Any]) -> Iterator[Any]:

        yield from batches

    partitions = spark.sparkContext.defaultParallelism
    spark.range(0, partitions, numPartitions=partitions).mapInArrow(imports, "id long").count()


def measured(spark: Any, fn: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """(fn(), wall seconds, stages, and CPU seconds of the JVM and of the Python workers meanwhile).

    CPU seconds say where the work goes whatever else runs on the machine; wall time does not.
    """

    def cpu() -> dict[int, tuple[str, float]]:
        out = {}
        for pid, (_ppid, name) in process_tree(os.getpid()).items():
            with contextlib.suppress(OSError):  # a worker that just exited
                out[pid] = ("jvm" if name == "java" else "python workers", cpu_seconds(pid))
        return out

    before, load = cpu(), os.getloadavg()[0]
    since_ms, start = time.time() * 1000, time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    time.sleep(0.5)  # the event log's last stage lines
    spent = {"jvm": 0.0, "python workers": 0.0}
    for pid, (kind, value) in cpu().items():
        spent[kind] += value - before.get(pid, (kind, 0.0))[1]
    return result, {
        "seconds": round(seconds, 2), "cpu": {k: round(v, 1) for k, v in spent.items()},
        "load_before": round(load, 1), "stages": stage_times(spark, since_ms),
    }  # fmt: skip


def source_config(base: Path, s3_endpoint: str | None = None, *, etags: bool = False) -> Any:
    """The source over the delivery under ``base``: on local disk, or uploaded to moto's bucket ``dest``;
    ``etags``: keeping each candidate's ETag and EncryptionStatus, as with ``gc.trust_checksums``."""
    from lakefs_gc.spark.ingest.inventory.source import SourceConfig
    from lakefs_gc.storage.filesystems import S3Options, StorageOptions
    from lakefs_gc.storage.locations import parse_location

    if s3_endpoint is None:
        destination, storage = parse_location(str(base / "dest")), StorageOptions()
    else:
        destination = parse_location("s3://dest")
        storage = StorageOptions(s3=S3Options(endpoint_url=s3_endpoint, **S3_KEYS))
    return SourceConfig(destination=destination, storage=storage, routes=routes(), etags=etags)


def upload_delivery(base: Path, s3_endpoint: str) -> None:
    """Copy the delivery's destination tree into moto's bucket ``dest``, key for key."""
    import boto3
    import pyarrow.fs as pafs

    from lakefs_gc.storage.filesystems import filesystem_for

    boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id=S3_KEYS["access_key_id"],
                 aws_secret_access_key=S3_KEYS["secret_access_key"],
                 region_name=S3_KEYS["region"]).create_bucket(Bucket="dest")  # fmt: skip
    config = source_config(base, s3_endpoint)
    s3, _ = filesystem_for(config.destination, config.storage)
    pafs.copy_files(str(base / "dest"), "dest", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3, use_threads=True)  # fmt: skip


def batch_times() -> Any:
    """A streaming query listener whose ``ms`` keeps each micro-batch's ``triggerExecution``:
    what a running query (the service's) spends per delivery, without the query's start and stop."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class BatchTimes(StreamingQueryListener):
        def __init__(self) -> None:
            self.ms: list[int] = []

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            self.ms.append(int(event.progress.durationMs.get("triggerExecution", 0)))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return BatchTimes()


def spark_ingest(spark: Any, source: Any, info: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """One ``ingest_available`` of the delivery ``source`` finds into a fresh table and checkpoint."""
    import pyarrow.parquet as pq

    from lakefs_gc.spark.ingest.inventory.stream import ingest_available
    from lakefs_gc.spark.ingest.inventory.table import CandidateTable
    from lakefs_gc.storage.filesystems import StorageOptions
    from lakefs_gc.storage.locations import parse_location

    table = CandidateTable(parse_location(str(run_dir / "candidates")), StorageOptions())
    batches = batch_times()
    spark.streams.addListener(batches)
    try:
        result, out = measured(spark, lambda: ingest_available(
            spark, source, table, run_dir / "checkpoint", say=lambda m: say("  " + m[:120])
        ))  # fmt: skip
    finally:
        spark.streams.removeListener(batches)
    out["batch_seconds"] = round(sum(batches.ms) / 1000, 2)
    [delivery] = result.deliveries
    written = sum(pq.ParquetFile(p).metadata.num_rows for p in (run_dir / "candidates").rglob("*.parquet"))
    expected = info["expected"]
    ok = delivery.status == "ingested" and delivery.repositories == expected
    shutil.rmtree(run_dir, ignore_errors=True)
    out.update(rows_per_s=round(info["rows"] / out["seconds"]), candidates=delivery.candidates,
               written=written, ok=ok and written == sum(expected.values()))  # fmt: skip
    return out


def print_report(result: dict[str, Any]) -> None:
    w = sys.stdout.write
    w(f"\nlakefs-gc inventory ingest benchmark: {result['rows']:,} rows, ")
    w(f"{result['rows_per_file']:,} per file\n")
    w(f"{result['environment']}\n")
    for fmt, r in result["formats"].items():
        expected = r["expected"]
        w(f"\n{fmt}: {r['files']} data files, {r['bytes'] / 2**20:,.0f} MiB; "
          f"{sum(expected.values()):,} candidates expected {expected}\n")  # fmt: skip
        print_lines(w, r)
        best = max(s["rows_per_s"] for s in r["ingest"])
        ratio = r["plain_threads"]["rows_per_s"] / best
        w(f"  best ingest is {ratio:.2f}x slower than the plain read "
          f"({'meets' if ratio <= 1.5 else 'MISSES'} the 1.5x aim)\n")  # fmt: skip
        for i, run in enumerate(r["ingest"]):
            batch = run.get("batch_seconds")
            if batch:
                plain_s = r["plain_threads"]["rows"] / r["plain_threads"]["rows_per_s"]
                w(f"  run {i + 1}'s micro-batch (what a running service spends per delivery): "
                  f"{batch:.1f} s, {batch / plain_s:.2f}x the plain read; "
                  f"the query's start and stop {run['seconds'] - batch:.1f} s\n")  # fmt: skip
            if "s3_gets" in run:
                g = run["s3_gets"]
                w(f"  run {i + 1} read from moto S3: {g['requests']:,} GETs, {g['bytes'] / 2**20:,.0f} MiB "
                  f"({g['bytes'] / max(r['bytes'], 1):.2f}x the delivery's data files)\n")  # fmt: skip
        cpu = min(s["cpu"]["jvm"] + s["cpu"]["python workers"] for s in r["ingest"])
        plain_cpu = max(r["plain_threads"]["cpu_s"], 1e-3)
        w(f"  in CPU seconds: best ingest {cpu:.1f} (JVM + Python workers), plain threaded read "
          f"{plain_cpu:.1f}: {cpu / plain_cpu:.2f}x\n")  # fmt: skip
        if "pipeline" in r:
            p = r["pipeline"]
            w(f"  Python pipeline stages (one core; {p['candidates']:,} candidates, "
              f"{'OK' if p['ok'] else 'WRONG ROWS'}):\n")  # fmt: skip
            for name, seconds in p["stages"].items():
                w(f"    {name:<56} {seconds:>8.1f} s, {p['stages_cpu'][name]:>6.1f} CPU s\n")
        w("  Spark stages of the last ingest run:\n")
        print_stages(w, r["ingest"][-1]["stages"])
    mem = result["memory"]
    w(f"\npeak RSS MiB: python driver {mem['python_driver_peak_mib']}, driver JVM {mem['jvm_peak_mib']}, "
      f"largest of {mem['python_workers']} python workers {mem['python_worker_peak_mib']}\n")  # fmt: skip


def print_lines(w: Callable[[str], Any], r: dict[str, Any]) -> None:
    plain = r["plain_threads"]["rows_per_s"]
    w(f"  {'measured':<56} {'seconds':>8} {'rows/s':>11} {'vs plain':>9} {'JVM CPU s':>10} "
      f"{'workers CPU s':>14} {'load':>5}\n")  # fmt: skip
    lines = [("plain pyarrow read, threads", r["plain_threads"]),
             ("plain pyarrow read, one thread", r["plain_one_thread"])]  # fmt: skip
    if "pipeline" in r:
        lines.append(("Python pipeline, one process, no Spark", r["pipeline"]))
    if "pipeline_parallel" in r:
        p = r["pipeline_parallel"]
        ok = "OK" if p["ok"] else "WRONG ROWS"
        lines.append((f"Python pipeline, {p['processes']} processes, no Spark ({ok})", p))
    for i, run in enumerate(r["ingest"]):
        lines.append((f"ingest_available, run {i + 1} ({'OK' if run['ok'] else 'WRONG ROWS'})", run))
    for label, m in lines:
        cpu = m.get("cpu")
        spark = f"{cpu['jvm']:>10.1f} {cpu['python workers']:>14.1f} {m['load_before']:>5.1f}" if cpu else ""
        ratio = plain / m["rows_per_s"]
        w(f"  {label:<56} {m['seconds']:>8.1f} {m['rows_per_s']:>11,} {ratio:>8.2f}x {spark}\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000, help="inventory rows in the delivery")
    parser.add_argument("--format", default="both", help="parquet, csv, both, or a comma list")
    parser.add_argument("--rows-per-file", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lakefs-gc-bench-inventory"),
                        help="deliveries are kept here and reused")  # fmt: skip
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=2, help="ingest runs per format (the first is colder)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark conf, to try a setting (repeatable)")  # fmt: skip
    parser.add_argument("--no-diagnostics", action="store_true",
                        help="skip the in-process pipeline")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write all numbers to this file")
    parser.add_argument("--store", choices=("local", "s3"), default="local",
                        help="where the delivery is read from: local disk, or a moto S3 server")  # fmt: skip
    parser.add_argument("--trust-checksums", action="store_true",
                        help="ingest as a service with gc.trust_checksums does: each candidate's ETag and "
                        "EncryptionStatus parsed and kept (default: as by default, neither)")  # fmt: skip
    parser.add_argument("--task-per-file", action="store_true",
                        help="a task per data file, as before 2026-12-07 (default: the source's groups, "
                        "one per task slot)")  # fmt: skip
    parser.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    formats = ["parquet", "csv"] if args.format == "both" else args.format.split(",")
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if args.generate_only:
        generate(workdir, args.rows, args.rows_per_file, formats)
        return 0
    ensure_deliveries(workdir, args.rows, args.rows_per_file, formats)
    extra = dict(c.split("=", 1) for c in args.conf)
    result: dict[str, Any] = {
        "rows": args.rows, "rows_per_file": args.rows_per_file, "conf": extra, "formats": {},
        "environment": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start, "
        f"Spark master {args.master}" + (f", extra conf {extra}" if extra else "")
        + (", gc.trust_checksums: ETags kept" if args.trust_checksums else ", ETags not kept (the default)"),
    }  # fmt: skip
    loaded = {f: load_delivery(delivery_dir(workdir, args.rows, args.rows_per_file, f)) for f in formats}
    spark = spark_session(args.master, workdir, extra, app="bench")
    try:
        warm_up(spark)
        for fmt, (delivery, info) in loaded.items():
            result["formats"][fmt] = bench_spark(spark, workdir, fmt, delivery, info, args)
        result["memory"] = driver_memory()  # before this process reads any table itself
    finally:
        spark.stop()
    for fmt, (delivery, info) in loaded.items():
        r = result["formats"][fmt]
        say(f"{fmt}: plain pyarrow reads")
        r["plain_threads"] = plain_read(delivery, threads=True)
        r["plain_one_thread"] = plain_read(delivery, threads=False)
        if not args.no_diagnostics:
            say(f"{fmt}: the Python pipeline without Spark")
            scratch = workdir / "runs" / "pipeline"
            etags = args.trust_checksums
            r["pipeline"] = python_pipeline(delivery, sum(info["expected"].values()), scratch, etags=etags)
            base = delivery_dir(workdir, args.rows, args.rows_per_file, fmt)
            r["pipeline_parallel"] = parallel_pipeline(base, delivery, info, scratch, etags=etags)
    result["environment"] += f", load average {os.getloadavg()[0]:.1f} at end"
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


def bench_spark(
    spark: Any, workdir: Path, fmt: str, delivery: Any, info: dict[str, Any], args: Any
) -> dict[str, Any]:
    base = delivery_dir(workdir, args.rows, args.rows_per_file, fmt)
    out: dict[str, Any] = {
        "files": len(delivery.files), "bytes": sum(f.size or 0 for f in delivery.files),
        "expected": info["expected"], "ingest": [],
    }  # fmt: skip
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(moto(0)) if args.store == "s3" else None
        endpoint = server.info["endpoint"] if server else None
        if server and endpoint:
            say(f"{fmt}: uploading the delivery to moto S3")
            upload_delivery(base, endpoint)
        for i in range(args.repeat):
            say(f"{fmt}: ingest run {i + 1}")
            before = server.request({"op": "gets"}) if server else None
            config = source_config(base, endpoint, etags=args.trust_checksums)
            if args.task_per_file:  # more tasks than files: group_files makes a group of each
                config = replace(config, tasks=len(delivery.files))
            run = spark_ingest(
                spark,
                config,
                info,
                workdir / "runs" / uuid.uuid4().hex[:8],
            )
            if server and before:
                after = server.request({"op": "gets"})
                run["s3_gets"] = {k: after[k] - before[k] for k in after}
            say(f"{fmt}: {run['seconds']}s, {run['rows_per_s']:,} rows/s, CPU {run['cpu']}, ok={run['ok']}"
                + (f", S3 GETs {run['s3_gets']}" if "s3_gets" in run else ""))  # fmt: skip
            out["ingest"].append(run)
    return out


if __name__ == "__main__":
    sys.exit(main())
