"""Writes a small service state with this release's own writers: ``tests/fixtures/state-layout-1/``.

The upgrade test (``tests/service/test_state_upgrade.py``) reads that directory, kept as it was
written, with the code of whatever release runs it: the state a release leaves behind must be read
by the next one. Regenerate it only when the layout changes (and then under a new name, keeping
the old one: a new release must still read the old layout, or migrate it)::

    PYTHONPATH=$PWD/src python -m tests.support.state_fixture tests/fixtures/state-layout-1

Every writer is the service's own, run without Spark: the cycle records, the event table sink
(events, a dead letter, batch records), the candidate part writer and the candidate table sink,
the range cache's part writer and generation record, the layout marker. Nothing written holds an
absolute path (tables record paths relative to themselves).
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakefs_gc.events.model import sequencer_order
from lakefs_gc.inventory.mapping import CANDIDATE_SCHEMA
from lakefs_gc.service.layout import take_layout
from lakefs_gc.service.records import BatchRecord, CycleRecords, MarkRecord
from lakefs_gc.spark.ingest.events.source import SOURCE_SCHEMA as EVENT_SOURCE_SCHEMA
from lakefs_gc.spark.ingest.events.table import EventTable, EventTableSink
from lakefs_gc.spark.ingest.inventory.parts import CandidatePartWriter, part_path
from lakefs_gc.spark.ingest.inventory.source import SOURCE_SCHEMA as INVENTORY_SOURCE_SCHEMA
from lakefs_gc.spark.ingest.inventory.table import CandidateTable, CandidateTableSink
from lakefs_gc.spark.mark.range_cache import Generation, Part, RangeCache
from lakefs_gc.spark.mark.range_cache.tasks import META_DIR, META_SCHEMA, RANGE_DIR, RANGE_SCHEMA, _PartWriter
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location

#: when the fixture's world happened (fixed, so the test can name every value)
WRITTEN = datetime(2026, 11, 24, 12, tzinfo=timezone.utc)
REPOSITORY = "demo"
NAMESPACE = "s3://demo-bucket/repos/demo"
EVENT_SOURCE, EVENT_STREAM = "queue", "s1"
INGEST = "i1"
DELIVERY = "s3://inventory/demo-bucket/all/2026-11-24T00-00Z/manifest.json"


def write_cycle_records(state: Path) -> None:
    """Two cycles: one marked and swept, one marked with its sweep still pending."""
    records = CycleRecords(state / f"cycles/{REPOSITORY}/batches")
    first, second = WRITTEN - timedelta(hours=2), WRITTEN - timedelta(hours=1)
    done = BatchRecord(0, first.isoformat(), finished=(first + timedelta(minutes=6)).isoformat())
    swept = (first + timedelta(minutes=5)).isoformat()
    done.marks.append(
        MarkRecord(first.isoformat(), "mark-0001", True, (first + timedelta(minutes=2)).isoformat(),
                   marked=3, marked_bytes=300, candidates=10, sweep="done", swept=swept, deleted=3)
    )  # fmt: skip
    done.swept.append("mark-0001")
    records.save(done)
    pending = BatchRecord(1, second.isoformat())
    pending.marks.append(
        MarkRecord(second.isoformat(), "mark-0002", True, (second + timedelta(minutes=2)).isoformat(),
                   marked=1, marked_bytes=100, candidates=8)
    )  # fmt: skip
    records.save(pending)


def _event(n: int, kind: str, status: str = "event") -> dict[str, Any]:
    when = WRITTEN - timedelta(minutes=30 - n)
    dead = status == "dead"
    return {
        "repository": REPOSITORY, "address": f"data/obj-{n}", "kind": kind, "event_time": when,
        "sequencer": sequencer_order(f"{n:016x}"), "size": 100, "message_id": f"msg-{n}",
        "received_time": when, "status": status, "reason": "not JSON" if dead else None,
        "body": "{" if dead else None, "spool": n,
    }  # fmt: skip


def write_event_table(state: Path) -> None:
    """Two batches of one event source: three events (one a redelivery, dropped) and a dead letter."""
    table = EventTable(parse_location(str(state / "events/table")), StorageOptions())
    sink = EventTableSink(table, EVENT_SOURCE, EVENT_STREAM, clock=lambda: WRITTEN)
    batches = [[_event(1, "created"), _event(2, "created")], [_event(2, "created"), _event(3, "deleted"),
                                                              _event(9, "", "dead")]]  # fmt: skip
    for batch_id, rows in enumerate(batches):
        sink.store(pa.Table.from_pylist(rows, schema=EVENT_SOURCE_SCHEMA), batch_id)


class _StatusRows:
    """The inventory source's status rows as the sink's ``df.collect()`` gives them (no Spark)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def collect(self) -> list[dict[str, Any]]:
        return self.rows


def write_candidate_table(state: Path) -> None:
    """One ingested delivery (one data file, four candidates) and one rejected delivery."""
    table = CandidateTable(parse_location(str(state / "inventory/table")), StorageOptions())
    sink = CandidateTableSink(table, INGEST, say=lambda line: None)
    fs, base = table.filesystem()
    snapshot = WRITTEN - timedelta(hours=12)
    writer = CandidatePartWriter(fs, part_path(f"{base}/parts/{INGEST}", 0, 0))
    writer.write(
        pa.Table.from_pylist(
            [{"repository": REPOSITORY, "address": f"data/obj-{n}", "size": 100 * n,
              "last_modified": snapshot - timedelta(days=n), "etag": f"etag-{n}", "delivery_id": DELIVERY,
              "snapshot_time": snapshot} for n in range(1, 5)],
            schema=CANDIDATE_SCHEMA,
        )
    )  # fmt: skip
    part = writer.close()
    status = [
        {"delivery_seq": 0, "delivery_id": DELIVERY, "snapshot_time": snapshot,
         "file": "data/file-0.parquet", "part": part, "repositories": json.dumps(writer.counts),
         "error": None},
        {"delivery_seq": 1, "delivery_id": DELIVERY.replace("24T", "25T"), "snapshot_time": None,
         "file": None, "part": None, "repositories": "{}",
         "error": "manifest.checksum does not match manifest.json"},
    ]  # fmt: skip
    assert set(status[0]) == set(INVENTORY_SOURCE_SCHEMA.names)
    sink(_StatusRows(status), 0)  # type: ignore[arg-type]


def write_range_cache(state: Path) -> None:
    """Generation 1: one metarange of two ranges, the ranges' addresses in one bucket each."""
    cache = RangeCache.for_repository(StoreDirectory.of(state), REPOSITORY, buckets=4)
    cache.open(REPOSITORY, NAMESPACE)
    store = cache.store()
    meta = _PartWriter(store, f"{META_DIR}/part-00000001", META_SCHEMA)
    for range_id in ("range-a", "range-b"):
        meta.add("metarange-1", range_id)
    metaranges = meta.close()
    ranges: dict[int, tuple[Part, ...]] = {}
    for bucket, range_id in ((0, "range-a"), (1, "range-b")):
        writer = _PartWriter(store, f"{RANGE_DIR}/part-00000001-b{bucket}", RANGE_SCHEMA)
        for n in range(1, 3):
            writer.add(range_id, f"data/obj-{n + 2 * bucket}")
        written = writer.close()
        assert written is not None
        ranges[bucket] = (Part(written.file, written.rows, ranges=1),)
    assert metaranges is not None
    meta_part = Part(metaranges.file, metaranges.rows, ids=("metarange-1",))
    cache.commit(Generation(1, REPOSITORY, NAMESPACE, 4, (meta_part,), ranges))


def write_state(state: Path) -> None:
    """The whole fixture, as a service leaves its state between two cycles (no lease: stopped)."""
    take_layout(StoreDirectory.of(state))
    write_cycle_records(state)
    write_event_table(state)
    write_candidate_table(state)
    write_range_cache(state)


def main(argv: list[str]) -> int:
    target = (Path(argv[0]) if argv else Path("tests/fixtures/state-layout-1")).resolve()
    readme = (target / "README.md").read_text() if (target / "README.md").exists() else None
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    write_state(target)
    if readme is not None:
        (target / "README.md").write_text(readme)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
