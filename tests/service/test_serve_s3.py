"""``lakefs-gc serve`` end to end on S3 (moto): notifications through SQS, inventory deliveries,
periodic marks and sweeps, while a history goes on.

The repository lives in a moto bucket whose notifications moto itself sends to SQS. The service
runs in this process, in the test session's Spark: its queries drain the queue into the event
table, ingest the inventory deliveries, and mark and sweep every few seconds, with a min age of a
few seconds. The tests check the bucket (boto3) and lakeFS (every live object read back), and the
service's metrics against what moto sent (a witness queue receives the same notifications).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote_plus, unquote_plus

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from lakefs_gc.events.model import sequencer_order
from lakefs_gc.inventory.generate import generate_delivery
from lakefs_gc.service.app import GcService
from lakefs_gc.spark.ingest.events.table import EventTable, event_records
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from tests.service.conftest import S3World, Served, records
from tests.service.histories import (
    MIN_AGE_S,
    History,
    Marks,
    Upload,
    deleted_branch,
    event_stored,
    expired_commits,
    from_inventory,
    mark_records,
    marked_addresses,
    one_cycle,
    orphan,
    pause_cycles,
    probe,
    recent_commit,
    running,
    scrape,
    service_settings,
    staging,
    total,
    value,
    wait_for,
    wait_older,
)

#: a minute or more of work (``-m 'not slow'`` leaves it out of a quick run)
pytestmark = pytest.mark.slow

REPO = "events-s3"
SOURCE = "s3"


def deliver(world: S3World, served: Served, repo: str, *, snapshot_time: datetime | None = None) -> str:
    """An S3 Inventory delivery of the namespace into the inventory bucket; its manifest path."""
    namespace = parse_storage_namespace(world.namespace(repo))
    destination = parse_location(world.inventory)
    return generate_delivery(namespace, served.options, destination, snapshot_time=snapshot_time)


def start(spark: SparkSession, world: S3World, served: Served, state: Any) -> GcService:
    settings = service_settings(
        served.connection, state, [REPO], storage=served.storage,
        events={SOURCE: world.queue()}, inventory=world.inventory,
    )  # fmt: skip
    return GcService(settings, spark)


def collected(world: S3World, h: History) -> bool:
    return not (h.garbage_addresses & world.keys(h.repo))


def young_object_kept(service: GcService, h: History, marks: Marks, *, older: Upload) -> dict[str, Any]:
    """Orphan an object just before a mark: that mark keeps it (too young) and collects ``older``.

    Cycles are paused while the object's event reaches the event table, so the next mark starts
    within a tick of that, well inside the min age. Returns that mark's summary.
    """
    pause_cycles(service)
    wait_older(service, older)
    young = orphan(h, "young/y")
    h.young(young, "orphaned just before the last mark: younger than its cutoff")
    wait_for(lambda: event_stored(service, young.address), "the young object's event", service)
    record, summary = one_cycle(service, marks, young.written)
    age = datetime.fromisoformat(record["started"]) - young.written
    assert age < timedelta(seconds=MIN_AGE_S), f"the mark started {age} after the orphaning: test too slow"
    marked = marked_addresses(service, REPO, record["mark_id"])
    assert young.address not in marked and summary["kept"]["too_young"]["objects"] >= 1
    return summary


def test_s3_end_to_end(spark: SparkSession, s3_world: S3World, s3_served: Served, tmp_path: Any) -> None:
    """Garbage of every kind is deleted, nothing live is, and the metrics say what happened."""
    world, served = s3_world, s3_served
    h = History(served.lakefs, REPO, world.namespace(REPO)).create()
    held = expired_commits(h)
    deleted_branch(h)
    staging(h)
    # a minute back: S3 names a delivery by its minute, and an earlier snapshot time is the safe side
    deliver(world, served, REPO, snapshot_time=datetime.now(timezone.utc) - timedelta(minutes=1))
    service = start(spark, world, served, tmp_path / "state")
    marks = Marks(service, REPO)
    with running(service):
        url = service.status.url
        # the history goes on while the first cycle runs
        recent_commit(h, held)
        second = deliver(world, served, REPO)
        late = orphan(h, "late/z")  # after the second delivery: only its event tells
        h.garbage(late, "orphaned after the last snapshot")
        wait_for(lambda: mark_records(service, REPO), "a first mark", service, poll=0.1)
        pause_cycles(service)  # the first cycle ends; the next one is the young object's
        assert marks.swept()
        assert [probe(url, p)[0] for p in ("/healthz", "/readyz")] == [200, 200]
        wait_for(
            lambda: value(scrape(url), "lakefs_gc_inventory_deliveries_total", outcome="ingested") == 2,
            "both deliveries ingested",
            service,
        )
        last = young_object_kept(service, h, marks, older=late)
        assert from_inventory(last, second), last["candidates"]
        assert collected(world, h)

        # every write and delete is notified by now (cycles paused): the service drains them all
        sent = world.drain_witness()
        wait_for(
            lambda: value(scrape(url), "lakefs_gc_events_received_total", source=SOURCE) == len(sent),
            f"the service to receive the {len(sent)} messages moto sent",
            service,
        )
        samples = scrape(url)
        assert [probe(url, p)[0] for p in ("/healthz", "/readyz")] == [200, 200]
        service.request_stop()
        assert service.wait() == 0
    assert not any(q.isActive for q in service.queries)
    assert probe_refused(url)

    assert h.problems(world.keys(REPO)) == []
    assert h.unreadable() == []
    check_metrics(samples, h, sent)


def probe_refused(url: str) -> bool:
    """After the stop nothing answers any more."""
    try:
        probe(url, "/healthz")
    except OSError:
        return True
    return False


def check_metrics(samples: Any, h: History, sent: list[str]) -> None:
    garbage = len(h.garbage_addresses)
    prefix = f"repos/{REPO}/"
    data = [
        (r["eventName"], _key(r)[len(prefix) :])
        for r in records(sent)
        if _key(r).startswith(prefix + "data/")
    ]
    # what moto notified, independently of the service: every upload was created (moto sends two
    # messages for pyarrow's multipart writes), and the sweeps removed exactly the garbage
    assert {k for e, k in data if e.startswith("ObjectCreated")} == {u.address for u in h.uploads}
    assert {k for e, k in data if e.startswith("ObjectRemoved")} == h.garbage_addresses
    assert sum(e.startswith("ObjectRemoved") for e, _ in data) == garbage
    assert sum("Records" not in json.loads(b) for b in sent) == 1  # the TestEvent
    assert value(samples, "lakefs_gc_events_received_total", source=SOURCE) == len(sent)
    assert value(samples, "lakefs_gc_events_skipped_total", source=SOURCE) == 1
    assert value(samples, "lakefs_gc_events_dead_lettered_total", source=SOURCE) == 0
    assert value(samples, "lakefs_gc_inventory_deliveries_total", outcome="ingested") == 2
    assert value(samples, "lakefs_gc_objects_deleted_total", repository=REPO) == garbage
    assert value(samples, "lakefs_gc_objects_delete_failed_total", repository=REPO) == 0
    started = h.uploads[0].written.timestamp()
    assert value(samples, "lakefs_gc_last_successful_cycle_timestamp_seconds", repository=REPO) > started
    assert value(samples, "lakefs_gc_candidate_set_objects", repository=REPO) > 0
    assert value(samples, "lakefs_gc_cycles_total", repository=REPO) >= 2
    assert total(samples, "lakefs_gc_lakefs_api_request_duration_seconds_count") > 0
    assert total(samples, "lakefs_gc_cycle_failures_total") == 0


def _key(record: dict[str, Any]) -> str:
    return unquote_plus(record["s3"]["object"]["key"])


# ---- duplicates, disorder and poison -------------------------------------------------------------


def s3_record(bucket: str, key: str, kind: str, *, sequencer: str, when: datetime) -> str:
    """A hand-made S3 notification (moto sends no sequencers: notifications.md, "What moto sends")."""
    created = kind == "created"
    obj: dict[str, Any] = {"key": quote_plus(key), "sequencer": sequencer}
    if created:
        obj.update(size=7, eTag="0123456789abcdef0123456789abcdef")
    record = {
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
        "eventName": "ObjectCreated:Put" if created else "ObjectRemoved:Delete",
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "gc", "bucket": {"name": bucket}, "object": obj},
    }  # fmt: skip
    return json.dumps({"Records": [record]})


def peek(world: S3World) -> str:
    """The body of a notification of a data object in the service's queue, left there (visible
    again at once): it will be delivered a second time."""
    got = world.sqs.receive_message(QueueUrl=world.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    data = f"repos/{REPO}/data/"
    bodies = [str(m["Body"]) for m in got["Messages"]]
    return next(b for b in bodies if any(_key(r).startswith(data) for r in records([b])))


def received(url: str) -> float:
    return value(scrape(url), "lakefs_gc_events_received_total", source=SOURCE)


def dead_letters(service: GcService) -> list[dict[str, Any]]:
    files = sorted((service.state_dir / "events" / "table" / "dead-letter").glob("*/*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def stored_events(service: GcService, address: str) -> list[tuple[str, str]]:
    """(kind, sequencer) of the event table's rows for ``address``."""
    table = service.state_dir / "events" / "table"
    parts = [
        table / r["part"]
        for r in event_records(EventTable(parse_location(str(table)), StorageOptions()))
        if r["part"]
    ]
    rows = [r for p in parts for r in pq.read_table(p).to_pylist() if r["address"] == address]
    return sorted((r["kind"], r["sequencer"]) for r in rows)


def test_duplicate_out_of_order_and_malformed_messages(
    spark: SparkSession, s3_world: S3World, s3_served: Served, tmp_path: Any
) -> None:
    """Poison goes to the dead-letter file, a redelivery is dropped, the sequencers order one
    object's events whatever their arrival, and the stream goes on."""
    world, served = s3_world, s3_served
    h = History(served.lakefs, REPO, world.namespace(REPO)).create()
    staging(h)
    deliver(world, served, REPO)  # the baseline: the events decide about what it does not list
    # one object, created then deleted (sequencers say so); the delete arrives a batch earlier
    # and was even stamped a millisecond earlier: only the sequencers order them right
    ghost = "data/ghost/object"
    when = datetime.now(timezone.utc) - timedelta(hours=1)
    key = f"repos/{REPO}/{ghost}"
    later, earlier = "0062A1B2C3D4E5F6A1", "0062A1B2C3D4E5F60F"
    deleted = s3_record(world.bucket, key, "deleted", sequencer=later, when=when)
    created = s3_record(
        world.bucket, key, "created", sequencer=earlier, when=when + timedelta(milliseconds=1)
    )
    real = peek(world)  # a notification moto sent for the history, to be delivered twice
    poison = ["this is not a notification {", json.dumps({"hello": "world"})]
    for body in [deleted, *poison]:
        world.send(body)
    ours = 3

    service = start(spark, world, served, tmp_path / "state")
    marks = Marks(service, REPO)
    pause_cycles(service)  # one cycle, once every message is in
    with running(service):
        url = service.status.url
        wait_for(
            lambda: len(dead_letters(service)) == 2 and stored_events(service, ghost),
            "the first batch",
            service,
        )
        sent = world.drain_witness()
        wait_for(lambda: received(url) == len(sent) + ours, "the first messages", service)
        duplicates = value(scrape(url), "lakefs_gc_events_deduplicated_total", source=SOURCE)
        world.send(created)
        world.send(real)  # a redelivery: the same body again
        ours += 2
        wait_for(lambda: received(url) == len(sent) + ours, "the late messages", service)
        # moto's own duplicates (a multipart write notified twice) came before: exactly one more
        assert value(scrape(url), "lakefs_gc_events_deduplicated_total", source=SOURCE) == duplicates + 1
        late = orphan(h, "late/z")  # the stream still runs: this garbage is known from its event only
        h.garbage(late, "orphaned after the snapshot")
        sent = world.drain_witness()
        wait_for(lambda: received(url) == len(sent) + ours, "every message received", service)
        order = sequencer_order
        assert stored_events(service, ghost) == [("created", order(earlier)), ("deleted", order(later))]
        wait_older(service, late)
        record, summary = one_cycle(service, marks, datetime.now(timezone.utc))
        assert from_inventory(summary) and ghost not in marked_addresses(service, REPO, record["mark_id"])
        assert late.address in marked_addresses(service, REPO, record["mark_id"])

        sent = world.drain_witness()
        wait_for(lambda: received(url) == len(sent) + ours, "the sweep's notifications", service)
        samples = scrape(url)
        assert [probe(url, p)[0] for p in ("/healthz", "/readyz")] == [200, 200]
        service.request_stop()
        assert service.wait() == 0

    letters = dead_letters(service)
    assert sorted(d["body"] for d in letters) == sorted(poison)
    assert all(d["reason"] and d["message_id"] for d in letters), letters
    assert value(samples, "lakefs_gc_events_dead_lettered_total", source=SOURCE) == 2
    assert value(samples, "lakefs_gc_objects_deleted_total", repository=REPO) == len(h.garbage_addresses)
    assert h.problems(world.keys(REPO)) == []
    assert h.unreadable() == []


# ---- a weekly inventory, completed by events -----------------------------------------------------


def test_events_complete_a_weekly_inventory(
    spark: SparkSession, s3_world: S3World, s3_served: Served, tmp_path: Any
) -> None:
    """An object written after the snapshot is collected at the next cycle, from its events alone."""
    world, served = s3_world, s3_served
    h = History(served.lakefs, REPO, world.namespace(REPO)).create()
    expired_commits(h)
    snapshot = deliver(world, served, REPO)
    service = start(spark, world, served, tmp_path / "state")
    marks = Marks(service, REPO)
    pause_cycles(service)
    with running(service):
        url = service.status.url
        wait_for(lambda: value(scrape(url), "lakefs_gc_inventory_deliveries_total", outcome="ingested") == 1,
                 "the snapshot ingested", service)  # fmt: skip
        weekly = orphan(h, "weekly/w")
        h.garbage(weekly, "written after the snapshot, orphaned: only its event tells")
        wait_for(lambda: event_stored(service, weekly.address), "its event", service)
        wait_older(service, weekly)
        record, summary = one_cycle(service, marks, datetime.now(timezone.utc))
        service.request_stop()
        assert service.wait() == 0

    candidates = summary["candidates"]
    assert from_inventory(summary, snapshot), candidates
    assert datetime.fromisoformat(candidates["snapshot_time"].replace("Z", "+00:00")) < weekly.written
    assert weekly.address in marked_addresses(service, REPO, record["mark_id"])
    assert record["deleted"] == len(h.garbage_addresses)
    assert h.problems(world.keys(REPO)) == []
    assert h.unreadable() == []
