"""Event table compaction killed with SIGKILL (Python driver and JVM) and restarted: the next mark
is the mark of an uninterrupted run.

A repository of the test server changes before and after an inventory snapshot of its namespace;
its object notifications (one per physical object written, plus create-then-delete churn and
redeliveries) go, batch by batch, into two event tables. One is compacted in this process without
interruption (the reference). The other is compacted by a separate process
(``tests/support/compaction_driver.py``, the real code path) killed at two steps: after the new
generation's files were written but before its manifest, and half-way through retiring what the
previous generation superseded. Each time a compaction in this process then restarts the work.
After each step both tables give the uncompacted candidate set, and at the end a mark of the
repository through each table marks the same garbage (docs/invariants.md, invariants 1 and 4).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from lakefs_gc import jobs
from lakefs_gc.events.model import sequencer_order
from lakefs_gc.settings import GcSettings
from lakefs_gc.spark.ingest.events.compaction import Watermark, compact_event_table
from lakefs_gc.spark.ingest.events.generations import GENERATIONS, generation_numbers, manifest_path
from lakefs_gc.spark.ingest.events.source import SOURCE_SCHEMA
from lakefs_gc.spark.ingest.events.table import (
    EventTable,
    EventTableSink,
    event_records,
    events_frame,
    recorded_parts,
)
from lakefs_gc.spark.mark.sources.candidate_set import CandidateSetSource, Snapshot, candidate_set_frame
from lakefs_gc.spark.mark.sources.listing import ListingSource
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from tests.support.gc_env import GcEnv, gc_env
from tests.support.jobs import mark as jobs_mark

REPO = "compacted"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GcEnv]:
    yield from gc_env(tmp_path, StorageOptions(), ("local",), [])


@dataclass
class Notified:
    """The namespace's data files already notified, and the event rows of the next batch."""

    namespace: Path
    seen: set[str] = field(default_factory=set)
    sequence: int = 0

    def files(self) -> dict[str, os.stat_result]:
        return {
            p.relative_to(self.namespace).as_posix(): p.stat()
            for p in self.namespace.rglob("*")
            if p.is_file() and not p.relative_to(self.namespace).as_posix().startswith("_lakefs/")
        }

    def batch(self, churn: str) -> pa.Table:
        """A created event for every new file, twice for some; a created and a deleted event of
        ``churn`` objects nobody keeps."""
        rows = []
        for address, stat in sorted(self.files().items()):
            if address not in self.seen:
                self.seen.add(address)
                when = datetime.fromtimestamp(stat.st_mtime, timezone.utc)
                rows += [self._row(address, "created", when, stat.st_size)] * (1 + self.sequence % 2)
        now = datetime.now(timezone.utc)
        for i in range(20):
            rows += [
                self._row(f"data/{churn}{i}", "created", now, 5),
                self._row(f"data/{churn}{i}", "deleted", now),
            ]
        return pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA)

    def _row(self, address: str, kind: str, when: datetime, size: int | None = None) -> dict[str, object]:
        self.sequence += 1
        return {
            "repository": REPO, "address": address, "kind": kind, "event_time": when,
            "sequencer": sequencer_order(f"{self.sequence:016x}"), "size": size,
            "message_id": f"m{self.sequence}", "received_time": when, "status": "event", "spool": 0,
        }  # fmt: skip


@dataclass
class Table:
    """An event table, its sink, and how the test compacts it."""

    path: Path

    @property
    def table(self) -> EventTable:
        return EventTable(parse_location(str(self.path)), StorageOptions())

    def store(self, batch: pa.Table, batch_id: int) -> None:
        assert EventTableSink(self.table, "src", "s").store(batch, batch_id) is not None

    def compact(self, spark: SparkSession, watermark: Watermark) -> None:
        compact_event_table(spark, self.table, [watermark], lambda: datetime.now(timezone.utc), parallelism=2)


@dataclass(frozen=True)
class SnapshotOf:
    """An inventory snapshot of the namespace: its rows and its time."""

    rows: list[tuple[str, int, datetime]]
    time: datetime

    def frame(self, spark: SparkSession, parallelism: int = 2) -> DataFrame:
        return spark.createDataFrame(self.rows, "address string, size long, last_modified timestamp")

    def listed(self, spark: SparkSession, parallelism: int) -> DataFrame:
        return spark.createDataFrame(
            [(REPO, a) for a, _, _ in self.rows], "repository string, address string"
        )

    def watermark(self) -> Watermark:
        return Watermark(REPO, self.time, self.listed)


def snapshot_of(notified: Notified) -> SnapshotOf:
    files = notified.files()
    rows = [
        (a, s.st_size, datetime.fromtimestamp(s.st_mtime, timezone.utc)) for a, s in sorted(files.items())
    ]
    time.sleep(0.01)  # the snapshot is taken after every file it lists
    return SnapshotOf(rows, datetime.now(timezone.utc))


def candidates(spark: SparkSession, table: Table, snapshot: SnapshotOf) -> set[str]:
    events = events_frame(spark, table.table, [REPO], parallelism=2)
    frame = candidate_set_frame(snapshot.frame(spark), snapshot.time, events)
    return {r["address"] for r in frame.collect()}


def killed_compaction(table: Table, snapshot: SnapshotOf, step: str, tmp_path: Path) -> None:
    """Runs the compaction driver and kills it (SIGKILL to its process group) at ``step``."""
    listed, flag = tmp_path / "listed.json", tmp_path / f"paused-{step}"
    listed.write_text(json.dumps([a for a, _, _ in snapshot.rows]))
    argv = [sys.executable, "-m", "tests.support.compaction_driver", str(table.path), REPO,
            snapshot.time.isoformat(), str(listed), step, str(flag)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 600
    while not flag.exists():
        if proc.poll() is not None:
            out = proc.communicate()[0].decode(errors="replace")
            pytest.fail(
                f"the compaction ended (exit {proc.returncode}) before the {step} pause:\n{out[-3000:]}"
            )
        assert time.monotonic() < deadline, f"the {step} pause was never reached"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver: Python and its JVM
    proc.communicate()


def settings(env: GcEnv) -> GcSettings:
    info = env.server.connection_info()
    return GcSettings.model_validate({
        "lakefs": {k: info[k] for k in ("endpoint", "access_key_id", "secret_access_key")},
        "storage": {"local_root": str(env.storage_root)},
        "gc": {"unsafe_min_age": "0s"},
        "spark": {"parallelism": 2},
    })  # fmt: skip


def marked(spark: SparkSession, env: GcEnv, table: Table, snapshot: SnapshotOf) -> set[str]:
    s = settings(env)
    namespace = parse_storage_namespace(f"local://{REPO}", local_root=str(env.storage_root))
    source = CandidateSetSource(
        REPO,
        Snapshot("snapshot", snapshot.time, snapshot.frame),
        ListingSource(namespace, s.storage),
        events=lambda spark, p: events_frame(spark, table.table, [REPO], parallelism=p),
        swept=lambda spark, p: None,
    )
    result = jobs_mark(spark, s, REPO, source=source)
    assert result.success
    report = jobs.report_table(s, result.storage_namespace, result.mark_id, "deleted")
    return set(report.column("address").to_pylist())


def change(env: GcEnv, tag: str) -> None:
    """Committed objects, and garbage: staged objects overwritten or deleted before any commit."""
    lakefs = env.lakefs
    for i in range(6):
        lakefs.upload(REPO, "main", f"{tag}/kept{i}", f"{tag} kept {i}".encode())
    lakefs.commit(REPO, "main", f"add {tag}")
    for i in range(4):
        lakefs.upload(REPO, "main", f"{tag}/staged{i}", f"{tag} first {i}".encode())
    for i in range(2):
        lakefs.upload(REPO, "main", f"{tag}/staged{i}", f"{tag} second {i}".encode())  # the first: garbage
    lakefs.delete(REPO, "main", f"{tag}/staged3")  # garbage


def test_a_killed_compaction_leaves_the_next_mark_as_an_uninterrupted_one(
    spark: SparkSession, env: GcEnv, tmp_path: Path
) -> None:
    env.lakefs.create_repo(REPO, f"local://{REPO}")
    env.lakefs.set_rules(REPO, 7)
    notified = Notified(env.storage_root / REPO)
    reference, killed = Table(tmp_path / "reference"), Table(tmp_path / "killed")
    fs_killed = killed.table

    change(env, "before")
    before = notified.batch("churn-0")  # before the snapshot: what compaction folds away
    snapshot = snapshot_of(notified)
    change(env, "after")
    first = pa.concat_tables([before, notified.batch("churn-1")])  # one batch
    change(env, "later")
    second = notified.batch("churn-2")
    for table in (reference, killed):
        table.store(first, 0)
    uncompacted = tmp_path / "uncompacted"
    shutil.copytree(reference.path, uncompacted)
    want = candidates(spark, Table(uncompacted), snapshot)
    assert want

    # 1. killed after the new generation's files, before its manifest: the table reads as before
    reference.compact(spark, snapshot.watermark())
    killed_compaction(killed, snapshot, "manifest", tmp_path)
    complete, directories = generation_numbers(fs_killed)
    assert complete == [] and directories == [1]
    assert any((killed.path / GENERATIONS / "000000000001").iterdir())
    assert candidates(spark, killed, snapshot) == want
    killed.compact(spark, snapshot.watermark())  # the restart
    assert generation_numbers(fs_killed)[0] == [2]
    assert candidates(spark, killed, snapshot) == candidates(spark, reference, snapshot) == want

    # 2. killed half-way through retiring what generation 2 superseded
    for table in (reference, killed):
        table.store(second, 1)
    shutil.rmtree(uncompacted)
    shutil.copytree(reference.path, uncompacted)  # the reference's state, plus batch 1
    killed_compaction(killed, snapshot, "retire", tmp_path)
    parts_on_disk = {
        p.relative_to(killed.path).as_posix() for p in (killed.path / "parts").rglob("*.parquet")
    }
    folded_records = [r for r in event_records(fs_killed) if r["part"] and r["part"] not in parts_on_disk]
    assert folded_records, "the kill came before any folded part was deleted"
    torn = killed.path / GENERATIONS / "000000000001"
    assert not [p for p in torn.rglob("*") if p.is_file()]  # the torn generation's files went first
    after_batch_1 = candidates(spark, reference, snapshot)
    assert candidates(spark, killed, snapshot) == after_batch_1
    reference.compact(spark, snapshot.watermark())
    killed.compact(spark, snapshot.watermark())  # the restart
    assert (killed.path / manifest_path(3)).exists()
    assert candidates(spark, killed, snapshot) == candidates(spark, reference, snapshot) == after_batch_1
    assert set(recorded_parts(fs_killed)) <= {
        p.relative_to(killed.path).as_posix() for p in killed.path.rglob("*.parquet")
    }

    # 3. the next mark
    garbage = marked(spark, env, reference, snapshot)
    assert garbage == marked(spark, env, killed, snapshot)
    assert len(garbage) == 9  # 2 overwritten and 1 deleted staged object of each change
