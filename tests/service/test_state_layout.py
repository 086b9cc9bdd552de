"""Upgrades: this release reads the state a release of layout 1 left, and refuses a newer layout.

``tests/fixtures/state-layout-1/`` is a state written by the service's own writers (its README
says how; ``tests/support/state_fixture.py`` regenerates it) and kept as it was written: each
release must read it whole, or migrate it. The test copies it to a temporary directory and reads
every part of it the way the service does: the layout marker, the cycle records (marks, the
pending sweep, the last success), the event table (its records, events and dead letter, as the
cycle's Spark read gives them), the candidate table (its deliveries and their candidates) and the
range cache (its generation and parts); the same on S3 (moto), as a cluster keeps its state. A
newer layout is refused by ``serve`` before Spark starts (exit 3), and the lease given back.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakefs_gc.errors import ConfigError, ExitCode
from lakefs_gc.service.candidates import CandidateSets
from lakefs_gc.service.layout import LAYOUT, MARKER, LayoutDecision, decide_layout, take_layout
from lakefs_gc.service.records import CycleRecords
from lakefs_gc.spark.ingest.events.table import EventTable, event_records, events_frame, recorded_parts
from lakefs_gc.spark.ingest.inventory.table import CandidateTable, candidates_frame, ingested_deliveries
from lakefs_gc.spark.mark.range_cache import RangeCache
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location
from tests.support.object_stores import MotoServer, s3_options

LAKEFS = {"endpoint": "http://127.0.0.1:9", "access_key_id": "k", "secret_access_key": "s"}
NAMESPACE = "s3://demo-bucket/repos/demo"


@pytest.fixture
def old_state(fixtures: Path, tmp_path: Path) -> Path:
    """A copy of the layout-1 fixture (the test may write to it; the fixture stays as it was)."""
    source = fixtures / "state-layout-1"
    assert (source / MARKER).is_file(), f"missing fixture {source}"
    return Path(shutil.copytree(source, tmp_path / "state"))


def test_the_layout_decision() -> None:
    where = "s3://b/state/_layout.json"
    assert decide_layout(None, False, "9.9", where=where) == LayoutDecision(None, True)  # a new state
    assert decide_layout(None, True, "9.9", where=where) == LayoutDecision(1, True)  # from before the marker
    same, older = {"layout": LAYOUT, "written_by": "9.9"}, {"layout": LAYOUT, "written_by": "0.1.0"}
    assert decide_layout(same, True, "9.9", where=where) == LayoutDecision(LAYOUT, False)
    assert decide_layout(older, True, "9.9", where=where) == LayoutDecision(LAYOUT, True)  # this version
    assert LAYOUT == 2  # layout 1 is read as is, and the marker says this layout from then on
    layout_1 = {"layout": 1, "written_by": "9.9"}
    assert decide_layout(layout_1, True, "9.9", where=where) == LayoutDecision(1, True)
    with pytest.raises(ConfigError, match=r"layout 3, written by lakefs-gc 3\.0\.0; this release \(9\.9\)"):
        decide_layout({"layout": 3, "written_by": "3.0.0"}, True, "9.9", where=where)
    for bad in ({"layout": "1"}, {"layout": 0}, {"layout": True}, {}):
        with pytest.raises(ConfigError, match="no layout version"):
            decide_layout(bad, True, "9.9", where=where)


def test_this_release_reads_a_layout_1_state(old_state: Path, spark: SparkSession) -> None:
    directory = StoreDirectory.of(old_state)
    assert json.loads((old_state / MARKER).read_text()) == {"layout": 1, "written_by": "0.1.0"}
    assert take_layout(directory, "0.1.0") == 1
    assert json.loads((old_state / MARKER).read_text()) == {"layout": LAYOUT, "written_by": "0.1.0"}

    records = CycleRecords(directory.sub("cycles/demo/batches"))
    assert [(m.mark_id, m.success, m.sweep, m.marked) for _, m in records.marks()] == [
        ("mark-0001", True, "done", 3),
        ("mark-0002", True, None, 1),
    ]
    assert [m.mark_id for _, m in records.pending_sweeps()] == ["mark-0002"]
    assert records.last_success() == datetime(2026, 11, 24, 10, 5, tzinfo=timezone.utc)
    assert records.last_success(sweeps=False) == datetime(2026, 11, 24, 11, 2, tzinfo=timezone.utc)
    assert records.summary() == {"marks": 2, "last_mark": "mark-0002"}

    events = EventTable(parse_location(str(old_state / "events/table")), StorageOptions())
    counts = [(r["batch"], r["events"], r["deduplicated"], r["dead_lettered"]) for r in event_records(events)]
    assert counts == [("s1-000000000000", 2, 0, 0), ("s1-000000000001", 1, 1, 1)]
    assert len(recorded_parts(events)) == 2
    rows = events_frame(spark, events, ["demo"], parallelism=2).collect()
    assert sorted((r.address, r.kind) for r in rows) == [
        ("data/obj-1", "created"), ("data/obj-2", "created"), ("data/obj-3", "deleted"),
    ]  # fmt: skip
    assert (old_state / "events/table/dead-letter/queue/s1-000000000001.jsonl").read_text().count("\n") == 1

    candidates = CandidateTable(parse_location(str(old_state / "inventory/table")), StorageOptions())
    deliveries = ingested_deliveries(candidates)
    assert [(d.seq, d.status, d.candidates) for d in deliveries] == [(0, "ingested", 4), (1, "rejected", 0)]
    ingested = [d for d in deliveries if d.status == "ingested"]
    frame = candidates_frame(spark, candidates, ingested, parallelism=2)
    expected = [(f"data/obj-{n}", 100 * n) for n in range(1, 5)]
    assert sorted((r.address, r.size) for r in frame.collect()) == expected
    assert {r.encryption for r in frame.collect()} == {None}  # a part from before the column: no proof
    snapshot = CandidateSets(StorageOptions(), candidates, None, evidence=True).newest_snapshot("demo")
    assert snapshot is not None
    proofs = {(r.address, r.md5) for r in snapshot.objects(spark, 2).collect()}
    assert proofs == {(address, None) for address, _ in expected}  # the service's candidates: none proven

    cache = RangeCache.for_repository(directory, "demo")
    generation = cache.open("demo", NAMESPACE)  # fail closed: a listed part missing would raise
    assert generation.number == 1 and generation.buckets == 4
    assert [p.ids for p in generation.metaranges] == [("metarange-1",)]
    found: set[str] = set()
    store = cache.store()
    addresses = [
        a for ps in generation.ranges.values() for p in ps
        for batch in store.scan(p, ["range_id", "address"], None, found) for a in batch.column(1).to_pylist()
    ]  # fmt: skip
    assert sorted(addresses) == [f"data/obj-{n}" for n in range(1, 5)] and found == {"range-a", "range-b"}


def test_a_layout_1_state_on_s3_is_read(fixtures: Path, moto: MotoServer, s3_bucket: str) -> None:
    """The same state on an object store (a cluster's state): marker, records, tables, cache."""
    options = StorageOptions(s3=s3_options(moto))
    directory = StoreDirectory.of(f"s3://{s3_bucket}/gc-state", options)
    source = fixtures / "state-layout-1"
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        directory.write(file.relative_to(source).as_posix(), file.read_bytes())
    assert take_layout(directory, "0.1.0") == 1
    records = CycleRecords(directory.sub("cycles/demo/batches"))
    assert [m.mark_id for _, m in records.pending_sweeps()] == ["mark-0002"]
    events = EventTable(parse_location(directory.uri("events/table")), options)
    assert [r["events"] for r in event_records(events)] == [2, 1] and len(recorded_parts(events)) == 2
    candidates = CandidateTable(parse_location(directory.uri("inventory/table")), options)
    assert [d.candidates for d in ingested_deliveries(candidates)] == [4, 0]
    assert RangeCache.for_repository(directory, "demo").open("demo", NAMESPACE).number == 1


def test_an_unmarked_state_is_layout_1_and_gets_its_marker(old_state: Path) -> None:
    (old_state / MARKER).unlink()
    assert take_layout(StoreDirectory.of(old_state), "0.2.0") == 1
    assert json.loads((old_state / MARKER).read_text()) == {"layout": LAYOUT, "written_by": "0.2.0"}
    fresh = old_state.parent / "fresh"
    assert take_layout(StoreDirectory.of(fresh), "0.2.0") is None
    assert json.loads((fresh / MARKER).read_text())["layout"] == LAYOUT


def test_serve_refuses_a_newer_layout_before_spark_starts(old_state: Path, tmp_path: Path) -> None:
    (old_state / MARKER).write_text(json.dumps({"layout": LAYOUT + 1, "written_by": "9.0.0"}))
    config = tmp_path / "gc.yaml"
    settings = {"lakefs": LAKEFS, "service": {"state": str(old_state)}, "repositories": ["r"]}
    config.write_text(json.dumps(settings))
    run = subprocess.run(
        [sys.executable, "-m", "lakefs_gc", "serve", "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == ExitCode.SETTINGS == 3, run.stderr
    assert f"layout {LAYOUT + 1}, written by lakefs-gc 9.0.0" in run.stderr, run.stderr
    assert "Run lakefs-gc 9.0.0 or newer" in run.stderr
    assert not (old_state / "_lease.json").exists()  # the lease was given back
    assert json.loads((old_state / MARKER).read_text())["layout"] == LAYOUT + 1  # nothing rewritten
