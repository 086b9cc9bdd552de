"""Compacting the event table: a new generation of what the candidate set still needs.

The rule per address is :func:`lakefs_gc.gc.compaction.compact` (the specification; the tests
compare the two). :func:`compacted_frame` is that rule on DataFrames, one aggregation per address
and an anti-join with the snapshot's addresses, so no address reaches the driver.

:func:`compact_event_table` runs one compaction (layout and crash safety: :mod:`.generations`):

1. **retire** what the newest complete generation superseded (older generations, the batch
   records and parts it folded, and any generation directory without a manifest, left by a kill);
2. **fold** the newest generation and every batch record it did not fold into a new generation
   directory, written by the executors;
3. **commit** by writing the new generation's manifest, whole.

A kill before 3 leaves the previous generation and every record in place (the half-written
directory is invisible and retired next time); a kill after 3 leaves the new generation in force
and the folded files waiting for step 1 of the next run. Readers never see a torn table, and a
mark that listed the files before step 3 still finds them until the next compaction.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.errors import StorageError
from lakefs_gc.events.model import EVENT_SCHEMA
from lakefs_gc.spark.ingest.events.generations import (
    Generation,
    generation_dir,
    generation_numbers,
    manifest_path,
    newest_generation,
)
from lakefs_gc.spark.ingest.events.table import KEY_COLUMNS, EventTable, event_records, files_frame
from lakefs_gc.spark.report.layout import new_part_tag, partition_id
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.storage.writes import write_parquet, write_whole

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_WRITTEN_DDL = "path string, rows long"


@dataclass(frozen=True)
class Watermark:
    """Fold a repository's events at or before ``time``; ``listed``: the addresses its snapshot
    lists (``repository, address``), None without a snapshot (events only)."""

    repository: str
    time: datetime
    listed: Callable[[SparkSession, int], DataFrame] | None = None


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction did (the service's metrics)."""

    generation: int | None  # the generation written; None: nothing new to fold
    rows_before: int  # rows read: the previous generation and the folded parts
    rows_after: int  # rows in the new generation
    rows_retired: int  # rows in the files retired (superseded by the previous compaction)
    files_retired: int
    seconds: float


def compacted_frame(events: DataFrame, watermarks: DataFrame, listed: DataFrame | None) -> DataFrame:
    """``events`` (EVENT_DDL) after folding (gc.compaction): ``watermarks`` is ``repository,
    watermark``; ``listed`` the ``repository, address`` pairs the snapshots list."""
    from pyspark.sql import functions as F

    with_mark = events.join(F.broadcast(watermarks), "repository", "left")
    old = F.col("watermark").isNotNull() & (F.col("event_time") <= F.col("watermark"))
    columns = list(EVENT_SCHEMA.names)
    recent = with_mark.filter(~old).select(*columns).dropDuplicates(KEY_COLUMNS)
    row, is_created = F.struct(*columns), F.col("kind") == "created"
    folded = (
        with_mark.filter(old)
        .groupBy("repository", "address")
        .agg(
            F.max_by(row, F.struct("sequencer", "event_time", "kind")).alias("_latest"),  # gc event_order
            F.max_by(F.when(is_created, row), F.when(is_created, F.struct("event_time", "sequencer"))).alias(
                "_write"
            ),
        )
    )
    folded = folded.filter(F.col("_latest.kind") == "created")
    if listed is not None:
        folded = folded.join(listed.select("repository", "address"), ["repository", "address"], "left_anti")
    kept = folded.select(F.explode(F.array_distinct(F.array("_latest", "_write"))).alias("_e")).select("_e.*")
    return kept.unionByName(recent)


def compact_event_table(
    spark: SparkSession,
    table: EventTable,
    watermarks: Sequence[Watermark],
    clock: Callable[[], datetime],
    *,
    parallelism: int = 8,
) -> CompactionResult:
    """Retire, fold, commit (see the module docstring)."""
    started = time.monotonic()
    rows_retired, files_retired = retire_superseded(table)
    newest = newest_generation(table)
    folded = newest.folded if newest is not None else frozenset()
    records = [r for r in event_records(table) if r["record"] not in folded]
    marks = {w.repository: w.time.isoformat() for w in watermarks}
    if not records and (newest is None or newest.watermarks == marks):
        return CompactionResult(None, 0, 0, rows_retired, files_retired, time.monotonic() - started)
    files = [*(newest.files if newest else ()), *(r["part"] for r in records if r.get("part"))]
    number = max([0, *generation_numbers(table)[0], *generation_numbers(table)[1]]) + 1
    generation = write_generation(
        spark, table, number, files, watermarks, parallelism=parallelism, created_at=clock().isoformat(),
        folded=frozenset(r["record"] for r in records),
    )  # fmt: skip
    seconds = time.monotonic() - started
    before = _rows(table, files)
    log.info(
        "event table %s: generation %d written in %.1fs: %d rows folded into %d; %d files (%d rows) retired",
        *(table, number, seconds, before, generation.rows, files_retired, rows_retired),
    )
    return CompactionResult(number, before, generation.rows, rows_retired, files_retired, seconds)


def write_generation(
    spark: SparkSession,
    table: EventTable,
    number: int,
    files: list[str],
    watermarks: Sequence[Watermark],
    *,
    parallelism: int,
    created_at: str,
    folded: frozenset[str],
) -> Generation:
    """Steps 2 and 3: the new generation's files, then its manifest."""
    events = files_frame(spark, table, files, parallelism=parallelism)
    marks = spark.createDataFrame(
        [(w.repository, w.time) for w in watermarks], "repository string, watermark timestamp"
    )
    listings = [w.listed(spark, parallelism) for w in watermarks if w.listed is not None]
    listed = None
    for frame in listings:
        listed = frame if listed is None else listed.unionByName(frame)
    result = compacted_frame(events, marks, listed).repartition(max(1, parallelism), "repository", "address")
    written = result.mapInArrow(on_executor(_GenerationWriter(table, number, new_part_tag())), _WRITTEN_DDL)
    parts = sorted((r["path"], int(r["rows"])) for r in written.collect())
    generation = Generation(
        number=number,
        created_at=created_at,
        files=tuple(p for p, _ in parts),
        folded=folded,
        rows=sum(n for _, n in parts),
        watermarks={w.repository: w.time.isoformat() for w in watermarks},
    )
    fs, base = table.filesystem()
    write_whole(fs, f"{base}/{manifest_path(number)}", json.dumps(generation.to_json(), indent=1).encode())
    return generation


def retire_superseded(table: EventTable) -> tuple[int, int]:
    """Step 1: delete what the newest complete generation superseded; (rows, files) retired.

    A part is deleted before its record, so a kill in between leaves a record the newest
    generation folded (readers skip it) whose part is gone, never a part without its record.
    """
    fs, base = table.filesystem()
    complete, directories = generation_numbers(table)
    if not complete:
        return 0, 0
    newest = newest_generation(table)
    assert newest is not None
    doomed: list[str] = []
    for number in directories:
        if number != newest.number:
            doomed += [i.path for i in _files(fs, f"{base}/{generation_dir(number)}")]
    records = [r for r in event_records(table) if r["record"] in newest.folded]
    doomed += [f"{base}/{r['part']}" for r in records if r.get("part")]
    rows = _rows(table, [p[len(base) + 1 :] for p in doomed])
    for path in doomed:
        _delete(fs, path)
    for number in directories:
        if number != newest.number:
            _delete_dir(fs, f"{base}/{generation_dir(number)}")
    for number in complete:
        if number != newest.number:
            _delete(fs, f"{base}/{manifest_path(number)}")
    for record in records:
        _delete(fs, f"{base}/{record['record']}")
    return rows, len(doomed) + len(records)


def _rows(table: EventTable, files: list[str]) -> int:
    """Rows in ``files`` (relative), from their parquet footers (missing files, and torn ones a
    kill left in a generation without a manifest, count 0: no reader saw them)."""
    fs, base = table.filesystem()
    total = 0
    for relative in files:
        try:
            with fs.open_input_file(f"{base}/{relative}") as f:
                total += pq.ParquetFile(f).metadata.num_rows
        except (FileNotFoundError, pa.ArrowInvalid):
            continue
        except OSError as e:
            raise StorageError(f"{table}: cannot read {relative}: {e}") from e
    return total


def _files(fs: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    infos = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True, recursive=True))
    return [i for i in infos if i.type == pafs.FileType.File]


def _delete(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise StorageError(f"cannot delete {path}: {e}") from e


def _delete_dir(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise StorageError(f"cannot delete {path}: {e}") from e


class _GenerationWriter:
    """One task's part of the new generation (pickled to the executors)."""

    def __init__(self, table: EventTable, number: int, tag: str) -> None:
        self.table, self.number, self.tag = table, number, tag

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        kept = [b for b in batches if b.num_rows]
        if not kept:
            return
        relative = f"{generation_dir(self.number)}/part-{partition_id():05d}-{self.tag}.parquet"
        fs, base = self.table.filesystem()
        rows = [b.cast(EVENT_SCHEMA) for b in kept]
        write_parquet(fs, f"{base}/{relative}", EVENT_SCHEMA, rows)
        yield pa.RecordBatch.from_pylist([{"path": relative, "rows": sum(b.num_rows for b in rows)}])


def describe(result: CompactionResult) -> dict[str, Any]:
    """The result as JSON-friendly fields (logs, bench output)."""
    return {
        "generation": result.generation,
        "rows_before": result.rows_before,
        "rows_after": result.rows_after,
        "rows_retired": result.rows_retired,
        "files_retired": result.files_retired,
        "seconds": round(result.seconds, 3),
    }
