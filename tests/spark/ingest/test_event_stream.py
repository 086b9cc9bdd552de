"""The event source into the event table, with real queues and Spark's ``availableNow`` runs.

S3 notifications go from a moto bucket to SQS; Event Grid events sit in an Azurite queue; local
events in a directory. The table gets each routed event once; duplicates, test events, malformed
messages and keys outside every namespace are counted; messages leave the queue only when their
batch's commit comes (at the next run: docs/formats/spark-data-sources.md, "When commit() runs");
a lost Spark commit replays the spool.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from pydantic import SecretStr
from pyspark.sql import SparkSession

from lakefs_gc.events.local import LocalEventWriter
from lakefs_gc.events.queues import QueueConfig
from lakefs_gc.events.routing import EventRoute, route_event
from lakefs_gc.events.spool import Spool
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.spark.ingest.events.source import EventSourceConfig
from lakefs_gc.spark.ingest.events.table import (
    BatchCounts,
    EventTable,
    event_records,
    events_frame,
    run_event_stream,
)
from lakefs_gc.spark.runtime.checkpoint import STREAM_ID
from lakefs_gc.storage.checkpoints import CheckpointRoot
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location
from tests.support.object_stores import s3_client, unique_name
from tests.support.servers import AzuriteServer, MotoServer

Row = tuple[Any, ...]


class Stream:
    """One event source, its table, checkpoint and spool under ``tmp_path``."""

    def __init__(
        self, spark: SparkSession, tmp_path: Path, name: str, queue: QueueConfig, routes: Any
    ) -> None:
        self.spark, self.tmp_path = spark, tmp_path
        self.config = EventSourceConfig(
            name=name, queue=queue, routes=routes, spool=str(tmp_path / "spool"), receive_wait_seconds=0
        )
        self.table = EventTable(parse_location(str(tmp_path / "table")), StorageOptions())
        self.checkpoint = tmp_path / "checkpoint"

    def run(self) -> list[BatchCounts]:
        counts: list[BatchCounts] = []
        query = run_event_stream(
            self.spark,
            self.config,
            self.table,
            self.checkpoint,
            trigger={"availableNow": True},
            on_batch=counts.append,
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return counts

    def rows(self) -> list[Row]:
        frame = events_frame(self.spark, self.table)
        return sorted((r.repository, r.address, r.kind, r.sequencer) for r in frame.collect())

    def spools(self) -> list[int]:
        return Spool(Path(self.config.spool)).sequences()


class S3Setup:
    """A bucket whose notifications go to an SQS queue (moto sends an s3:TestEvent on setup)."""

    def __init__(self, moto: MotoServer, name: str) -> None:
        import boto3

        self.bucket, self.s3 = name, s3_client(moto)
        self.sqs = boto3.client(
            "sqs", endpoint_url=moto.endpoint_url, region_name=moto.region,
            aws_access_key_id=moto.access_key_id, aws_secret_access_key=moto.secret_access_key,
        )  # fmt: skip
        self.url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        self.s3.create_bucket(Bucket=name)
        self.s3.put_bucket_notification_configuration(
            Bucket=name,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {"Id": "gc", "QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}
                ]
            },
        )
        self.queue = QueueConfig(
            type="sqs", queue_url=self.url, endpoint_url=moto.endpoint_url, region=moto.region,
            access_key_id=moto.access_key_id, secret_access_key=SecretStr(moto.secret_access_key),
        )  # fmt: skip

    def put(self, *keys: str) -> None:
        for key in keys:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=b"hello")

    def in_queue(self) -> tuple[int, int]:
        """(visible, in flight) messages."""
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=names)["Attributes"]
        return int(attributes[names[0]]), int(attributes[names[1]])


def s3_record_body(bucket: str, key: str, sequencer: str) -> str:
    record = {
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2024-05-01T12:00:00.000Z", "eventName": "ObjectCreated:Put",
        "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": bucket},
               "object": {"key": quote_plus(key), "size": 5, "eTag": "abc", "sequencer": sequencer}},
    }  # fmt: skip
    return json.dumps({"Records": [record]})


@pytest.fixture
def s3_stream(spark: SparkSession, moto: MotoServer, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    setup = S3Setup(moto, unique_name(request))
    stream = Stream(
        spark, tmp_path, f"s3-{setup.bucket}", setup.queue, (NamespaceRoute("repo", setup.bucket, "ns/"),)
    )
    return setup, stream


def test_s3_notifications_to_the_table_acknowledged_after_the_next_commit(s3_stream: Any) -> None:
    setup, stream = s3_stream
    setup.put("ns/data/s1/a b+c", "ns/data/s1/b", "ns/_lakefs/meta", "elsewhere/x")
    setup.s3.delete_object(Bucket=setup.bucket, Key="ns/data/s1/b")
    duplicate = s3_record_body(setup.bucket, "ns/data/s2/d", "0055AED6DCD90281E5")
    for body in (duplicate, duplicate, "this is not a notification"):
        setup.sqs.send_message(QueueUrl=setup.url, MessageBody=body)

    [counts] = stream.run()
    assert (counts.received, counts.events, counts.deduplicated) == (9, 4, 1)  # + the TestEvent
    assert (counts.skipped, counts.dead_lettered, counts.unrouted, counts.not_deletable) == (1, 1, 1, 1)
    assert counts.repositories == {"repo": 4} and counts.spools == (1,)
    assert stream.rows() == [
        ("repo", "data/s1/a b+c", "created", ""),
        ("repo", "data/s1/b", "created", ""),
        ("repo", "data/s1/b", "deleted", ""),
        ("repo", "data/s2/d", "created", "0055AED6DCD90281E5".ljust(64, "0")),
    ]
    [record] = event_records(stream.table)
    [dead] = [
        json.loads(line)
        for line in (stream.tmp_path / "table" / record["dead_letter"]).read_text().splitlines()
    ]
    assert dead["body"] == "this is not a notification" and "JSON" in dead["reason"] and dead["message_id"]
    assert setup.in_queue() == (0, 9)  # the batch's commit comes with the next batch

    setup.put("ns/data/s3/e")
    setup.sqs.send_message(QueueUrl=setup.url, MessageBody=duplicate)  # redelivered long after
    [later] = stream.run()
    assert (later.batch_id, later.received, later.events, later.deduplicated) == (1, 2, 1, 1)
    assert setup.in_queue() == (0, 2)  # the first run's 9 are gone, this run's 2 wait for their commit
    assert stream.spools() == [2]
    assert len(stream.rows()) == 5


def test_lost_spark_commit_replays_the_spool(s3_stream: Any) -> None:
    setup, stream = s3_stream
    setup.put("ns/data/s1/a", "ns/data/s1/b")
    [first] = stream.run()
    rows = stream.rows()
    assert len(rows) == 2 and first.batch_id == 0
    for name in ("0", ".0.crc"):
        (stream.checkpoint / "commits" / name).unlink()  # as if killed before Spark's commit...
    for record in (stream.tmp_path / "table" / "_batches").iterdir():
        record.unlink()  # ...and before the sink's record

    [replayed] = stream.run()
    assert (replayed.batch_id, replayed.received, replayed.events, replayed.deduplicated) == (0, 3, 2, 0)
    assert stream.rows() == rows
    assert len(event_records(stream.table)) == 1
    assert setup.in_queue() == (0, 3) and stream.spools() == [1]  # still waiting for their commit


def test_a_running_query_acknowledges_at_the_next_trigger(s3_stream: Any) -> None:
    """Not only when a next batch comes (spark-data-sources.md, "When commit() runs"): on an idle
    queue that would be never."""
    setup, stream = s3_stream
    setup.put("ns/data/s1/a", "ns/data/s1/b")
    counts: list[BatchCounts] = []
    query = run_event_stream(
        stream.spark, stream.config, stream.table, stream.checkpoint,
        trigger={"processingTime": "1 second"}, on_batch=counts.append,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (counts and setup.in_queue() == (0, 0)):
            assert query.exception() is None and time.monotonic() < deadline, (counts, setup.in_queue())
            time.sleep(0.2)
    finally:
        query.stop()
    assert [(c.batch_id, c.received, c.events) for c in counts] == [(0, 3, 2)]
    assert stream.spools() == []


def eventgrid_event(account: str, blob: str, *, deleted: bool = False) -> dict[str, Any]:
    return {
        "topic": f"/subscriptions/0/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/{account}",
        "subject": f"/blobServices/default/containers/cont/blobs/{blob}",
        "eventType": "Microsoft.Storage.BlobDeleted" if deleted else "Microsoft.Storage.BlobCreated",
        "eventTime": "2024-05-01T12:00:00.9584103Z",
        "id": f"{account}-{blob}",
        "data": {
            "api": "DeleteBlob" if deleted else "PutBlob", "blobType": "BlockBlob", "contentLength": 5,
            "url": f"https://{account}.blob.core.windows.net/cont/{blob}",
            "sequencer": "0000000000000442000000000002896a",
        },
        "dataVersion": "", "metadataVersion": "1",
    }  # fmt: skip


def cloud_event(account: str, blob: str) -> dict[str, Any]:
    doc = eventgrid_event(account, blob)
    return {
        "specversion": "1.0", "id": doc["id"], "source": doc["topic"], "subject": doc["subject"],
        "type": doc["eventType"], "time": doc["eventTime"], "data": doc["data"],
    }  # fmt: skip


def test_event_grid_events_in_a_storage_queue(
    spark: SparkSession, azurite: AzuriteServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from azure.storage.queue import QueueClient

    name = unique_name(request)
    client = QueueClient.from_connection_string(azurite.connection_string, name)
    client.create_queue()
    base64_body = base64.b64encode(json.dumps([eventgrid_event("acct", "ns/data/s1/x")]).encode()).decode()
    for body in (
        base64_body,
        json.dumps(eventgrid_event("acct", "ns/data/s1/x", deleted=True)),
        json.dumps(cloud_event("acct", "ns/data/s1/y")),
        json.dumps(cloud_event("otheracct", "ns/data/s1/z")),  # same container, another account
    ):
        client.send_message(body)
    queue = QueueConfig(
        type="azure-queue", connection_string=SecretStr(azurite.connection_string), queue_name=name
    )
    route = EventRoute.of("az", parse_location("https://acct.blob.core.windows.net/cont/ns/"))
    stream = Stream(spark, tmp_path, f"az-{name}", queue, (route,))

    [counts] = stream.run()
    assert (counts.received, counts.events, counts.unrouted, counts.dead_lettered) == (4, 3, 1, 0)
    assert [r[:3] for r in stream.rows()] == [
        ("az", "data/s1/x", "created"),
        ("az", "data/s1/x", "deleted"),
        ("az", "data/s1/y", "created"),
    ]
    assert counts.oldest_event_time == datetime(2024, 5, 1, 12, 0, 0, 958410, tzinfo=timezone.utc)
    assert events_frame(spark, stream.table, ["az"]).count() == 3
    assert events_frame(spark, stream.table, ["other"]).count() == 0


def test_local_events_and_a_spool_left_by_a_crash(spark: SparkSession, tmp_path: Path) -> None:
    store = tmp_path / "store"
    writer = LocalEventWriter(tmp_path / "queue")
    when = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    writer.created(store / "ns/data/s1/a", 5, when)
    writer.created(store / "ns/data/s1/b", 5, when)
    writer.deleted(store / "ns/data/s1/a", when)
    writer.created(store / "ns/_lakefs/x", 5, when)
    queue = QueueConfig(type="directory", path=str(tmp_path / "queue"))
    route = EventRoute.of("loc", parse_location(f"{store}/ns/"))
    stream = Stream(spark, tmp_path, "local", queue, (route,))

    [counts] = stream.run()
    assert (counts.received, counts.events, counts.unrouted, counts.not_deletable) == (4, 3, 0, 1)
    # a crash after the spool was written but before Spark logged its offset: no trace in the
    # checkpoint, the messages still in the queue; the spool is replayed, then the queue drained
    shutil.rmtree(stream.checkpoint)
    shutil.rmtree(stream.tmp_path / "table")
    c = writer.created(store / "ns/data/s1/c", 5, when)
    first, second = stream.run()
    assert (first.spools, first.events) == ((1,), 3)
    assert (second.spools, second.received, second.events, second.deduplicated) == ((2,), 5, 1, 3)
    assert [r[1:3] for r in stream.rows()] == [
        ("data/s1/a", "created"), ("data/s1/a", "deleted"),
        ("data/s1/b", "created"), ("data/s1/c", "created"),
    ]  # fmt: skip
    assert [p.name for p in (tmp_path / "queue").glob("*.json")] == [c.name]  # spool 1 acknowledged


def test_a_hadoop_uri_checkpoint_goes_to_spark_as_it_is(spark: SparkSession, tmp_path: Path) -> None:
    """``file://`` stands for the Hadoop URIs of a cluster (``s3a://``, ``abfss://``): Spark writes its
    logs there, and the stream id beside them goes through ``pyarrow``."""
    writer = LocalEventWriter(tmp_path / "queue")
    writer.created(tmp_path / "store/ns/data/s1/a", 5, datetime(2024, 5, 1, 12, tzinfo=timezone.utc))
    queue = QueueConfig(type="directory", path=str(tmp_path / "queue"))
    route = EventRoute.of("loc", parse_location(f"{tmp_path}/store/ns/"))
    stream = Stream(spark, tmp_path, "local", queue, (route,))
    stream.checkpoint = CheckpointRoot.of((tmp_path / "ck").as_uri())  # type: ignore[assignment]
    [counts] = stream.run()
    assert counts.events == 1
    assert (tmp_path / "ck/offsets/0").is_file() and (tmp_path / "ck/commits/0").is_file()
    assert (tmp_path / "ck" / STREAM_ID).is_file()


def test_a_queue_that_cannot_be_read_fails_the_stream(
    spark: SparkSession, moto: MotoServer, tmp_path: Path
) -> None:
    queue = QueueConfig(
        type="sqs", queue_url=f"{moto.endpoint_url}/123456789012/no-such-queue",
        endpoint_url=moto.endpoint_url, region=moto.region,
        access_key_id="testing", secret_access_key=SecretStr("testing"),
    )  # fmt: skip
    stream = Stream(spark, tmp_path, "broken", queue, (NamespaceRoute("repo", "b", ""),))
    query = run_event_stream(
        spark, stream.config, stream.table, stream.checkpoint, trigger={"availableNow": True}
    )
    with pytest.raises(Exception, match=r"event source broken: sqs .*no-such-queue"):
        query.awaitTermination(60)
    assert stream.spools() == [] and not (tmp_path / "table").exists()
    assert events_frame(spark, stream.table).count() == 0  # an empty table reads as no events


def test_routes_longest_prefix_store_and_account() -> None:
    from lakefs_gc.events.model import ObjectEvent

    routes = EventSourceConfig(
        name="r",
        queue=QueueConfig(type="directory", path="/q"),
        routes=(
            EventRoute.of("outer", parse_location("https://acct.blob.core.windows.net/cont/ns/")),
            EventRoute.of("inner", parse_location("https://acct.blob.core.windows.net/cont/ns/inner/")),
            NamespaceRoute("any", "bkt", ""),  # a bare route: any store, any account
        ),
        spool="/spool",
    ).event_routes()
    when = datetime(2024, 5, 1, tzinfo=timezone.utc)

    def route(store: Any, account: str, bucket: str, key: str) -> tuple[str, str] | None:
        return route_event(ObjectEvent(store, bucket, key, "created", when, account=account), routes)

    assert route("azure", "acct", "cont", "ns/data/a/b") == ("outer", "data/a/b")
    assert route("azure", "ACCT", "cont", "ns/inner/data/a/b") == ("inner", "data/a/b")
    assert route("azure", "", "cont", "ns/data/a/b") == ("outer", "data/a/b")  # account unknown
    assert route("azure", "other", "cont", "ns/data/a/b") is None
    assert route("s3", "", "cont", "ns/data/a/b") is None
    assert route("s3", "", "bkt", "x/y") == route("azure", "z", "bkt", "x/y") == ("any", "x/y")
