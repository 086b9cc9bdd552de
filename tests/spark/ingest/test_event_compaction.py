"""Compacting the event table on Spark: the rule, the size it leaves, and kills at every step.

:func:`compacted_frame` equals the specification (:func:`lakefs_gc.gc.compaction.compact`, whose
property test shows marks agree with and without compaction) on random events. The table tests
write batches through the sink (real files), compact, and read the candidate set back.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from lakefs_gc.events.model import EVENT_DDL, sequencer_order
from lakefs_gc.gc.candidate_set import Observed
from lakefs_gc.gc.compaction import compact
from lakefs_gc.spark.ingest.events.compaction import (
    Watermark,
    compact_event_table,
    compacted_frame,
    retire_superseded,
)
from lakefs_gc.spark.ingest.events.generations import GENERATIONS, newest_generation
from lakefs_gc.spark.ingest.events.source import SOURCE_SCHEMA
from lakefs_gc.spark.ingest.events.table import (
    EventTable,
    EventTableSink,
    event_records,
    events_frame,
    recorded_parts,
)
from lakefs_gc.spark.mark.sources.candidate_set import candidate_set_frame
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location
from lakefs_gc.storage.writes import write_bytes

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_compacted_frame_equals_the_rule(spark: SparkSession) -> None:
    """Random events of 300 addresses (orders, ties, repeats, listed or not) in one job."""
    rng = random.Random(16)
    rows, listed = [], {f"a{i}" for i in range(300) if rng.random() < 0.3}
    for i in range(300):
        for _ in range(rng.randint(1, 5)):
            kind, q, t = (
                rng.choice(["created", "deleted"]),
                rng.choice(["", "01", "02", "0a"]),
                rng.randint(0, 20),
            )
            size = (t + len(q)) % 3 + 1 if kind == "created" else None  # one notification, one size
            event = ("r", f"a{i}", kind, at(t), sequencer_order(q) if q else "", size, None, None, "m", T0)
            rows += [event] * rng.choice([1, 1, 2])  # some delivered twice
    frame = spark.createDataFrame(rows, EVENT_DDL)
    marks = spark.createDataFrame([("r", at(10))], "repository string, watermark timestamp")
    snapshot = spark.createDataFrame([("r", a) for a in listed], "repository string, address string")
    got: dict[str, list[Observed]] = {}
    for r in compacted_frame(frame, marks, snapshot).collect():
        got.setdefault(r["address"], []).append(_observed(r))
    fields = ["address", "kind", "event_time", "sequencer", "size"]
    want = {}
    for i in range(300):
        mine = [_observed(dict(zip(fields, r[1:6], strict=True))) for r in rows if r[1] == f"a{i}"]
        if kept := compact(mine, at(10), listed=f"a{i}" in listed):
            want[f"a{i}"] = sorted(kept, key=repr)
    assert {a: sorted(e, key=repr) for a, e in got.items()} == want
    assert 0 < len(want) < 300


def _observed(r: Any) -> Observed:
    return Observed(r["kind"], r["event_time"].astimezone(timezone.utc), r["sequencer"], r["size"])


# ---- the table --------------------------------------------------------------------------------


class Events:
    """Batches of events through the sink into a table under ``tmp_path``."""

    def __init__(self, tmp_path: Path) -> None:
        self.table = EventTable(parse_location(str(tmp_path / "table")), StorageOptions())
        self.now = T0
        self.sink = EventTableSink(self.table, "src", "s", clock=lambda: self.now)
        self.batch, self.sequence = 0, 0

    def store(self, changes: list[tuple[str, str]]) -> None:
        """One batch a minute: ``(address, kind)`` changes happening now."""
        self.now = at(self.batch)
        rows = []
        for address, kind in changes:
            self.sequence += 1
            rows.append({
                "repository": "r", "address": address, "kind": kind, "event_time": self.now,
                "sequencer": sequencer_order(f"{self.sequence:016x}"),
                "size": 1 if kind == "created" else None,
                "message_id": f"m{self.sequence}", "received_time": self.now, "status": "event",
                "spool": self.batch,
            })  # fmt: skip
        assert self.sink.store(pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA), self.batch) is not None
        self.batch += 1

    def rows(self) -> int:
        fs, base = self.table.filesystem()
        return sum(
            pq.ParquetFile(fs.open_input_file(f"{base}/{p}")).metadata.num_rows
            for p in recorded_parts(self.table)
        )

    def candidates(self, spark: SparkSession) -> set[str]:
        """The events-only candidate set (created minus deleted), as the rule computes it."""
        frame = candidate_set_frame(None, None, events_frame(spark, self.table, ["r"], parallelism=2))
        return {r["address"] for r in frame.collect()}

    def compact(self, spark: SparkSession, margin: int = 5) -> Any:
        return compact_event_table(
            spark, self.table, [Watermark("r", self.now - timedelta(minutes=margin))], lambda: self.now,
            parallelism=2,
        )  # fmt: skip


def _churn(events: Events, batches: int, live: int) -> None:
    """Each batch writes 20 new objects and deletes 20 older ones, keeping about ``live`` alive."""
    for _ in range(batches):
        first = events.batch * 20
        created = [(f"data/o{first + i}", "created") for i in range(20)]
        gone = [(f"data/o{first - live + i}", "deleted") for i in range(20) if first - live + i >= 0]
        events.store(created + gone)


def test_after_compaction_the_size_depends_on_recent_events_not_uptime(
    spark: SparkSession, tmp_path: Path
) -> None:
    short, long = Events(tmp_path / "short"), Events(tmp_path / "long")
    _churn(short, 8, 60)
    _churn(long, 30, 60)
    assert long.rows() > 3 * short.rows()
    before = long.candidates(spark)
    for events in (short, long):
        result = events.compact(spark)
        assert result.rows_after == events.rows()
        retire_superseded(events.table)  # what the next compaction does first
    assert long.candidates(spark) == before
    # what is left: the live objects older than the watermark, and the events of the last 5 minutes
    assert short.rows() == long.rows() < 60 + 7 * 40
    fs, base = long.table.filesystem()
    files = [
        i for i in fs.get_file_info(pafs.FileSelector(base, recursive=True)) if i.type == pafs.FileType.File
    ]
    assert len(files) < 6  # a generation and its manifest, the dead-letter-free records since


def test_a_kill_at_any_step_leaves_the_table_readable_and_the_candidates_right(
    spark: SparkSession, tmp_path: Path
) -> None:
    events = Events(tmp_path)
    _churn(events, 12, 40)
    want = events.candidates(spark)
    first = events.compact(spark)
    assert first.generation == 1
    # killed after the new generation's manifest, before anything was retired (the next run retires)
    assert events.candidates(spark) == want
    _churn(events, 3, 40)
    want = events.candidates(spark)
    # killed while writing a generation: files without a manifest are invisible
    fs, base = events.table.filesystem()
    write_bytes(fs, f"{base}/{GENERATIONS}/000000000002/part-00000-x.parquet", b"torn")
    assert events.candidates(spark) == want
    # killed half-way through retiring: only some of the superseded files went
    assert newest_generation(events.table) is not None
    second = events.compact(spark)
    assert second.generation == 2 and events.candidates(spark) == want  # the torn one was retired first
    torn = f"{base}/{GENERATIONS}/000000000002/part-00000-x.parquet"
    assert fs.get_file_info(torn).type == pafs.FileType.NotFound
    folded = newest_generation(events.table)
    assert folded is not None and folded.folded
    [part, *_] = [
        r["part"] for r in event_records(events.table) if r["record"] in folded.folded and r["part"]
    ]
    fs.delete_file(f"{base}/{part}")  # as if killed after deleting one part, before its record
    assert events.candidates(spark) == want
    rows, files = retire_superseded(events.table)
    assert files > 0 and rows > 0
    assert fs.get_file_info(f"{base}/{GENERATIONS}/000000000001").type == pafs.FileType.NotFound
    assert events.candidates(spark) == want
