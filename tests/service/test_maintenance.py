"""State maintenance as the cycles run it: compaction, dead letters, reports and records, sizes.

Without a service around it (the cycle calls :meth:`Maintenance.run`): a state directory with an
event table written by the sink, cycle records and report directories on a local namespace.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from lakefs_gc.events.model import sequencer_order
from lakefs_gc.gc.reports import lakefs_exports
from lakefs_gc.service.candidates import CandidateSets
from lakefs_gc.service.maintenance import (
    Maintenance,
    jvm_heap_after_gc,
    open_descriptors,
    process_memory,
    state_sizes,
)
from lakefs_gc.service.metrics import Metrics
from lakefs_gc.service.records import BatchRecord, CycleRecords, MarkRecord
from lakefs_gc.service.settings import ServiceOptions
from lakefs_gc.spark.ingest.events.generations import newest_generation
from lakefs_gc.spark.ingest.events.source import SOURCE_SCHEMA
from lakefs_gc.spark.ingest.events.table import EventTable, EventTableSink
from lakefs_gc.spark.mark.range_cache import RangeCache
from lakefs_gc.spark.mark.range_cache.generation import Generation
from lakefs_gc.spark.mark.range_cache.tasks import Part
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location

NOW = datetime(2026, 11, 24, 12, tzinfo=timezone.utc)


def _row(n: int, kind: str, when: datetime, status: str = "event") -> dict[str, object]:
    dead = status == "dead"
    return {
        "repository": "r", "address": f"data/o{n // 2}", "kind": kind, "event_time": when,
        "sequencer": sequencer_order(f"{n:016x}"), "size": 1, "message_id": f"m{n}", "received_time": when,
        "status": status, "reason": "bad" if dead else None, "body": "{" if dead else None, "spool": n,
    }  # fmt: skip


def _mark(records: CycleRecords, batch: int, mark_id: str, ended: datetime, namespace: Path) -> None:
    record = BatchRecord(batch, ended.isoformat())
    record.marks.append(MarkRecord(ended.isoformat(), mark_id, True, ended.isoformat(), sweep="done",
                                   swept=ended.isoformat()))  # fmt: skip
    records.save(record)
    report = namespace / "_lakefs/retention/gc/unified" / mark_id
    report.mkdir(parents=True)
    (report / "summary.json").write_text("{}")
    export = namespace / "_lakefs/retention/gc/uncommitted" / mark_id / "uncommitted"
    export.mkdir(parents=True)
    (export / "part.parquet").write_text("x")


def test_a_cycle_compacts_caps_dead_letters_and_retires_old_reports(
    spark: SparkSession, tmp_path: Path
) -> None:
    state, namespace = tmp_path / "state", tmp_path / "ns"
    table = EventTable(parse_location(str(state / "events/table")), StorageOptions())
    sink = EventTableSink(table, "q", "s", clock=lambda: NOW)
    for batch in range(6):  # an object written and deleted over and over, a dead letter per batch
        when = NOW - timedelta(hours=12 - batch)
        rows = [
            _row(batch * 2, "created", when),
            _row(batch * 2 + 1, "deleted", when),
            _row(99, "", when, "dead"),
        ]
        sink.store(pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA), batch)
    records = CycleRecords(state / "cycles/r/batches")
    _mark(records, 1, "old", NOW - timedelta(days=40), namespace)
    _mark(records, 2, "newest", NOW - timedelta(days=35), namespace)
    options = ServiceOptions(state=state, dead_letters_max_files=2)
    metrics = Metrics()
    maintenance = Maintenance(
        spark,
        options,
        state,
        CandidateSets(StorageOptions(), None, None),
        table,
        ("r",),
        metrics,
        lambda: NOW,
    )
    location = parse_location(str(namespace) + "/")
    maintenance.run("r", location, records)

    generation = newest_generation(table)
    assert generation is not None and generation.rows == 0  # every object deleted before the watermark
    assert len(list((state / "events/table/dead-letter/q").iterdir())) == 2
    assert not (namespace / "_lakefs/retention/gc/unified/old").exists()
    assert not (namespace / "_lakefs/retention/gc/uncommitted/old").exists()
    assert (namespace / "_lakefs/retention/gc/uncommitted/newest").exists()
    assert (namespace / "_lakefs/retention/gc/unified/newest").exists()  # the newest mark stays
    assert [m.mark_id for _, m in records.marks()] == ["newest"]
    assert metrics.state_files_retired.labels("dead_letters")._value.get() == 4
    assert metrics.event_table_rows._value.get() == 0
    sizes = state_sizes(state)
    assert sizes["events"] > 0 and sizes["cycles"] > 0
    assert metrics.state_bytes.labels("events")._value.get() == sizes["events"]
    assert process_memory() > 10_000_000
    assert 3 < open_descriptors() < 1024  # stdin, stdout, stderr and more; under py4j's limit
    spark.sparkContext._jvm.java.lang.System.gc()  # type: ignore[union-attr]
    assert 0 < jvm_heap_after_gc(spark)() < 2**32  # the heap left after that collection
    # not due again within compaction_interval (the clock has not moved)
    sink.store(pa.Table.from_pylist([_row(40, "created", NOW)], schema=SOURCE_SCHEMA), 6)
    maintenance.run("r", location, records)
    newest = newest_generation(table)
    assert newest is not None and newest.number == 1 and metrics.maintenance_failures._value.get() == 0


def test_retention_removes_the_lakefs_exports_of_our_old_marks_and_nothing_else(
    spark: SparkSession, tmp_path: Path
) -> None:
    """lakeFS's exports named by a retired mark's summary go with it (docs/invariants.md,
    invariant 3: nothing else under ``_lakefs/``): its uncommitted dump, its commits CSV, and its
    sweep's revalidation's dump and CSV. Another run's exports, a run id that is not one path
    segment, the newest mark's exports and the rest of ``_lakefs/`` stay."""
    state, namespace = tmp_path / "state", tmp_path / "ns"
    records = CycleRecords(state / "cycles/r/batches")
    _mark(records, 1, "old", NOW - timedelta(days=40), namespace)
    _mark(records, 2, "newest", NOW - timedelta(days=35), namespace)
    gc = namespace / "_lakefs/retention/gc"
    summaries = {
        "old": {"run_id": "old", "commits_export_run_id": "c-old",
                "revalidation": {"run_id": "u-sweep", "commits_export_run_id": "c-sweep"}},
        "newest": {"run_id": "newest", "commits_export_run_id": "c-newest"},
    }  # fmt: skip
    for mark_id, summary in summaries.items():
        (gc / "unified" / mark_id / "summary.json").write_text(json.dumps(summary))
    exports = ["uncommitted/u-sweep", "commits/run_id=c-old", "commits/run_id=c-sweep",
               "commits/run_id=c-newest", "commits/run_id=c-other", "uncommitted/other"]  # fmt: skip
    for export in exports:
        (gc / export).mkdir(parents=True, exist_ok=True)
        (gc / export / "commits.csv").write_text("commit_id,expired,metarange_id\n")
    (namespace / "_lakefs/dummy-range").write_text("x")
    maintenance = Maintenance(
        spark, ServiceOptions(state=state), state, CandidateSets(StorageOptions(), None, None), None, ("r",),
        Metrics(), lambda: NOW,
    )  # fmt: skip
    maintenance.run("r", parse_location(str(namespace) + "/"), records)

    left = {p.relative_to(gc).as_posix() for p in gc.glob("*/*") if p.is_dir()}
    assert left == {
        "unified/newest", "uncommitted/newest", "commits/run_id=c-newest", "commits/run_id=c-other",
        "uncommitted/other",
    }  # fmt: skip
    assert (namespace / "_lakefs/dummy-range").exists()
    assert maintenance.metrics.state_files_retired.labels("lakefs_exports")._value.get() == 4
    assert maintenance.metrics.maintenance_failures._value.get() == 0


def test_only_run_ids_of_one_path_segment_name_exports() -> None:
    summary = {
        "commits_export_run_id": "../../data",
        "revalidation": {"run_id": "a/b", "commits_export_run_id": ".."},
    }
    assert lakefs_exports("m1", summary) == ["_lakefs/retention/gc/uncommitted/m1/"]
    assert lakefs_exports("..", None) == []
    assert lakefs_exports("m2", {"commits_export_run_id": "c1", "revalidation": "not a mapping"}) == [
        "_lakefs/retention/gc/uncommitted/m2/", "_lakefs/retention/gc/commits/run_id=c1/",
    ]  # fmt: skip


def test_a_range_cache_its_marks_outgrow_is_reported(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cap below what the last mark needed makes every mark read the excess from lakeFS again:
    the maintenance says so in its log, and ``lakefs_gc_range_cache_needed_bytes`` beside
    ``lakefs_gc_range_cache_max_bytes`` lets an alert say it (dashboards/alerts.yaml)."""
    state, namespace = tmp_path / "state", tmp_path / "ns"
    cache = RangeCache.for_repository(state, "r")
    needed = Part("ranges/part-00000002-b00000-a.parquet", 9, ranges=2, used=2)
    unneeded = Part("ranges/part-00000001-b00001-b.parquet", 9, ranges=2, used=1)
    heads = Part("entries/part-00000001-b00000-c.parquet", 9, ranges=2, used=1)  # no guard in mark 2
    for part, size in ((needed, 600), (unneeded, 1000), (heads, 400)):
        (cache.root / part.file).parent.mkdir(parents=True, exist_ok=True)
        (cache.root / part.file).write_bytes(b"x" * size)
    cache.commit(Generation(2, "r", "local://r", 4, (), {0: (needed,), 1: (unneeded,)}, {0: (heads,)}))
    records, location = CycleRecords(state / "cycles/r/batches"), parse_location(str(namespace) + "/")
    metrics = Metrics()

    def maintenance(cap: int) -> Maintenance:
        options = ServiceOptions(state=state, range_cache_max_bytes=cap)
        sets = CandidateSets(StorageOptions(), None, None)
        return Maintenance(spark, options, state, sets, None, ("r",), metrics, lambda: NOW)

    fits = maintenance(1700)
    assert metrics.range_cache_max._value.get() == 1700  # from the start
    with caplog.at_level(logging.WARNING, logger="lakefs_gc.service.maintenance"):
        fits.run("r", location, records)  # the address part the last mark did not need goes, not the entries
        assert not caplog.records
        assert metrics.range_cache_needed.labels("r")._value.get() == 1000  # the HEAD entries too
        assert {p.file for p in cache.latest().parts()} == {needed.file, heads.file}  # type: ignore[union-attr]

        maintenance(500).run("r", location, records)
    assert metrics.range_cache_max._value.get() == 500
    assert metrics.range_cache_needed.labels("r")._value.get() == 1000  # what the last marks needed
    [warning] = [r.getMessage() for r in caplog.records]
    assert "r: its last mark needed 0.0 GiB of range cache" in warning
    assert "raise range_cache_max_bytes" in warning and metrics.maintenance_failures._value.get() == 0
