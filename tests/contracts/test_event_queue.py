"""The event queue port's contract (:class:`EventQueueContract`), against each adapter's real
counterpart: SQS on moto, Azure Storage Queue on Azurite, an Event Grid namespace on the fake (the
real SDK client over HTTP), the directory queue on local files. Receive, acknowledge, redelivery
after the visibility timeout (lock), and receipts that can no longer delete (reported, never
raised)."""

from __future__ import annotations

import json
import os
import pickle
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from lakefs_gc.events.queues import EventQueue, QueueConfig, QueueError, QueueMessage, open_queue
from tests.support.eventgrid import FakeEventGridNamespace, fake_eventgrid
from tests.support.object_stores import unique_name
from tests.support.servers import AzuriteServer, MotoServer

#: seconds a received message stays hidden in these tests
VISIBILITY = 1
#: a busy queue: several receive and delete requests' worth of messages
MANY = 120
BUSY_VISIBILITY = 120


@dataclass
class Backend:
    queue: EventQueue
    send: Callable[[str], None]
    #: messages the queue holds, hidden or not (where the service can count them)
    held: Callable[[], int] | None = None


def cloud_event(n: int) -> str:
    """A message body every backend carries unchanged (Event Grid only carries CloudEvents)."""
    doc = {
        "specversion": "1.0",
        "id": f"ev-{n}-{uuid.uuid4().hex[:8]}",
        "source": "/test",
        "type": "Test.Event",
        "time": "2024-05-01T12:00:00Z",
        "data": {"n": n, "text": '<x> & "quoted" ü'},
    }
    return json.dumps(doc)


def sqs_backend(moto: MotoServer, name: str, visibility: int = VISIBILITY) -> Backend:
    import boto3

    client = boto3.client(
        "sqs",
        endpoint_url=moto.endpoint_url,
        region_name=moto.region,
        aws_access_key_id=moto.access_key_id,
        aws_secret_access_key=moto.secret_access_key,
    )
    url = client.create_queue(QueueName=name)["QueueUrl"]
    config = QueueConfig(
        type="sqs",
        queue_url=url,
        endpoint_url=moto.endpoint_url,
        region=moto.region,
        access_key_id=moto.access_key_id,
        secret_access_key=SecretStr(moto.secret_access_key),
        visibility_timeout_seconds=visibility,
    )

    def held() -> int:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        counts = client.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return sum(int(counts[n]) for n in names)

    return Backend(open_queue(config), lambda body: client.send_message(QueueUrl=url, MessageBody=body), held)


def azure_backend(azurite: AzuriteServer, name: str, visibility: int = VISIBILITY) -> Backend:
    from azure.storage.queue import QueueClient

    client = QueueClient.from_connection_string(azurite.connection_string, name)
    client.create_queue()
    config = QueueConfig(
        type="azure-queue",
        connection_string=SecretStr(azurite.connection_string),
        queue_name=name,
        visibility_timeout_seconds=visibility,
    )

    def held() -> int:
        return int(client.get_queue_properties().approximate_message_count)  # hidden ones included

    return Backend(open_queue(config), lambda body: client.send_message(body), held)


def eventgrid_backend(ns: FakeEventGridNamespace, name: str) -> Backend:
    ns.create_subscription(name, "gc")
    config = QueueConfig(
        type="eventgrid",
        endpoint_url=ns.endpoint,
        access_key=SecretStr(ns.key),
        namespace_topic=name,
        subscription="gc",
    )
    return Backend(open_queue(config), lambda body: ns.publish(name, [json.loads(body)]))


def directory_backend(path: Path) -> Backend:
    config = QueueConfig(type="directory", path=str(path), visibility_timeout_seconds=VISIBILITY)
    counter = iter(range(1_000_000))

    def send(body: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        final = path / f"{next(counter):08d}.json"
        temp = path / (final.name + ".tmp")
        temp.write_text(body)
        os.replace(temp, final)

    return Backend(open_queue(config), send)


@pytest.fixture
def eventgrid() -> Iterator[FakeEventGridNamespace]:
    with fake_eventgrid(lock_duration=VISIBILITY) as ns:
        yield ns


def receive_all(queue: EventQueue, count: int, timeout: float = 10.0) -> list[QueueMessage]:
    """Receive until ``count`` messages came (queues may hand out fewer per call)."""
    got: list[QueueMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got.extend(queue.receive(count - len(got), 0.2))
    return got


class EventQueueContract:
    """What every :class:`~lakefs_gc.events.queues.EventQueue` does; a subclass per adapter gives
    ``backend``: the adapter and a way to send it a message natively."""

    def test_receive_and_acknowledge(self, backend: Backend) -> None:
        bodies = [cloud_event(n) for n in range(3)]
        for body in bodies:
            backend.send(body)
        got = receive_all(backend.queue, 3)
        assert sorted(json.loads(m.body)["id"] for m in got) == sorted(json.loads(b)["id"] for b in bodies)
        assert sorted(json.loads(m.body)["data"]["text"] for m in got) == ['<x> & "quoted" ü'] * 3
        assert len({m.id for m in got}) == 3 and len({m.receipt for m in got}) == 3
        assert all(m.sent_time is None or m.sent_time.tzinfo is not None for m in got)
        assert backend.queue.receive(10, 0) == []  # all three in flight

        assert backend.queue.acknowledge([m.receipt for m in got]) == []
        time.sleep(VISIBILITY + 0.3)
        assert backend.queue.receive(10, 0) == []  # deleted, not just hidden

    def test_unacknowledged_message_comes_again(self, backend: Backend) -> None:
        body = cloud_event(7)
        backend.send(body)
        [first] = receive_all(backend.queue, 1)
        assert backend.queue.receive(10, 0) == []
        time.sleep(VISIBILITY + 0.3)

        [again] = receive_all(backend.queue, 1)
        assert json.loads(again.body) == json.loads(first.body) == json.loads(body)
        assert again.id == first.id
        if not _is_directory(backend.queue):  # a file name is the same receipt on every delivery
            assert again.receipt != first.receipt
        assert backend.queue.acknowledge([again.receipt]) == []
        time.sleep(VISIBILITY + 0.3)
        assert backend.queue.receive(10, 0) == []

    def test_receipts_that_cannot_delete_are_returned(self, backend: Backend) -> None:
        backend.send(cloud_event(1))
        [message] = receive_all(backend.queue, 1)
        assert backend.queue.acknowledge([message.receipt]) == []
        bogus = {
            "SqsQueue": "bogus-receipt-handle",
            "AzureStorageQueue": json.dumps(["00000000-0000-0000-0000-000000000000", "AgAAAAMAAAAAAAAA"]),
            "EventGridNamespaceQueue": "no-such-lock-token",
            "DirectoryQueue": "99999999.json",
        }[type(backend.queue).__name__]
        failed = backend.queue.acknowledge([bogus])
        assert failed == [bogus]


class TestSqsQueue(EventQueueContract):
    @pytest.fixture
    def backend(self, request: pytest.FixtureRequest, moto: MotoServer) -> Iterator[Backend]:
        made = sqs_backend(moto, unique_name(request))
        yield made
        made.queue.close()


class TestAzureStorageQueue(EventQueueContract):
    @pytest.fixture
    def backend(self, request: pytest.FixtureRequest, azurite: AzuriteServer) -> Iterator[Backend]:
        made = azure_backend(azurite, unique_name(request))
        yield made
        made.queue.close()


class TestEventGridQueue(EventQueueContract):
    @pytest.fixture
    def backend(self, request: pytest.FixtureRequest, eventgrid: FakeEventGridNamespace) -> Iterator[Backend]:
        made = eventgrid_backend(eventgrid, unique_name(request))
        yield made
        made.queue.close()


class TestDirectoryQueue(EventQueueContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Backend]:
        made = directory_backend(tmp_path / "queue")
        yield made
        made.queue.close()


@pytest.mark.parametrize("kind", ["sqs", "azure-queue"])
def test_a_busy_queue_hands_each_message_out_once(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """SQS and Storage Queue adapters receive and delete ``concurrency`` requests at once: every
    message of a busy queue comes exactly once, and acknowledging them all deletes them all.
    (A visibility timeout longer than the test, so a slow emulator cannot redeliver.)"""
    name = unique_name(request)
    if kind == "sqs":
        backend = sqs_backend(request.getfixturevalue("moto"), name, visibility=BUSY_VISIBILITY)
    else:
        backend = azure_backend(request.getfixturevalue("azurite"), name, visibility=BUSY_VISIBILITY)
    try:
        for n in range(MANY):
            backend.send(cloud_event(n))
        got = receive_all(backend.queue, MANY, timeout=60)
        assert sorted(json.loads(m.body)["data"]["n"] for m in got) == list(range(MANY))  # once each
        assert backend.queue.receive(MANY, 0) == []
        assert backend.held is not None and backend.held() == MANY
        assert backend.queue.acknowledge([m.receipt for m in got]) == []
        assert backend.held() == 0  # no delete lost
    finally:
        backend.queue.close()


def test_wait_returns_when_a_message_arrives_on_an_idle_directory(tmp_path: Path) -> None:
    backend = directory_backend(tmp_path / "q")
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "half-written.json.tmp").write_text("{")  # a writer mid-way: never read
    started = time.monotonic()
    assert backend.queue.receive(5, 0.3) == []
    assert time.monotonic() - started >= 0.3
    backend.send(cloud_event(1))
    [message] = backend.queue.receive(5, 5)
    assert message.receipt == message.id == "00000000.json"


def test_expired_event_grid_lock_is_reported_and_redelivered(eventgrid: FakeEventGridNamespace) -> None:
    backend = eventgrid_backend(eventgrid, "topic-a")
    backend.send(cloud_event(1))
    [first] = backend.queue.receive(10, 0)
    time.sleep(VISIBILITY + 0.3)
    assert backend.queue.acknowledge([first.receipt]) == [first.receipt]  # the lock is gone
    [again] = backend.queue.receive(10, 0)
    assert again.id == first.id
    assert backend.queue.acknowledge([again.receipt]) == []
    assert eventgrid.counts("topic-a", "gc") == {"available": 0, "locked": 0}
    assert {r.split()[0] for r in eventgrid.requests} == {"receive", "acknowledge"}


def test_receive_errors_name_the_queue(moto: MotoServer) -> None:
    config = QueueConfig(
        type="sqs",
        queue_url=f"{moto.endpoint_url}/123456789012/no-such-queue",
        endpoint_url=moto.endpoint_url,
        region=moto.region,
        access_key_id="testing",
        secret_access_key=SecretStr("testing"),
    )
    with pytest.raises(QueueError, match="no-such-queue"):
        open_queue(config).receive(1, 0)


def test_config_defaults_checks_and_pickles() -> None:
    config = QueueConfig(type="sqs", queue_url="https://sqs.eu-west-1.amazonaws.com/1/q")
    assert config.format == "s3" and config.visibility_timeout_seconds == 900
    assert QueueConfig(type="eventgrid", endpoint_url="https://x", access_key=SecretStr("k"),
                       namespace_topic="t", subscription="s").format == "azure"  # fmt: skip
    assert QueueConfig(type="directory", path="/q", format="auto").format == "auto"
    secret = QueueConfig(type="azure-queue", queue_name="q", connection_string=SecretStr("AccountKey=s3cr3t"))
    assert "s3cr3t" not in repr(secret) and "s3cr3t" not in secret.describe()
    assert pickle.loads(pickle.dumps(secret)) == secret
    with pytest.raises(ValidationError, match="needs queue_url"):
        QueueConfig(type="sqs")
    with pytest.raises(ValidationError, match="does not take path"):
        QueueConfig(type="sqs", queue_url="u", path="/q")


def _is_directory(queue: Any) -> bool:
    return type(queue).__name__ == "DirectoryQueue"
