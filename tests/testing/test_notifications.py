"""Object notifications from the test server: the local event directory and Event Grid via Azurite."""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lakefs_gc.events.local import LocalEventWriter, parse_local_body
from lakefs_gc.events.model import EventFormatError, ObjectEvent
from lakefs_gc.events.parse import parse_message
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.storage.filesystems import S3Options, StorageOptions
from lakefs_gc.storage.locations import parse_storage_namespace
from lakefs_gc.testing.blockstore import NamespaceStore
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.notifications import AzureQueueNotifier, DirectoryNotifier, NotifierGroup
from lakefs_gc.testing.server import LakeFSTestServer
from tests.support.object_stores import azure_options, unique_name
from tests.support.servers import AzuriteServer
from tests.testing.sdk import Lakefs
from tests.testing.test_server_lifecycle import client, server_process

T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


# --- the local format ------------------------------------------------------------------------------


def read_events(directory: Path) -> list[ObjectEvent]:
    """Every event in the directory, in the order a DirectoryQueue reads the files."""
    return [e for f in sorted(directory.glob("*.json")) for e in parse_local_body(f.read_bytes())]


def test_writer_round_trip(tmp_path: Path) -> None:
    writer = LocalEventWriter(tmp_path / "events")
    first = writer.created("/data/r/a b.bin", 42, T0)
    second = writer.deleted(Path("/data/r/a b.bin"), T0 + timedelta(seconds=1))
    assert first.name < second.name and re.fullmatch(r"\d{20}-\d+-\d{6}\.json", first.name)
    created, deleted = read_events(tmp_path / "events")
    assert created == ObjectEvent(
        store="local", bucket="", key="data/r/a b.bin", kind="created", event_time=T0, size=42,
        sequencer=created.sequencer, event_name="local:created",
    )  # fmt: skip
    assert (deleted.kind, deleted.key, deleted.size) == ("deleted", "data/r/a b.bin", None)
    assert deleted.event_time == T0 + timedelta(seconds=1)
    assert created.sequencer is not None and deleted.sequencer is not None
    assert len(created.sequencer) >= 16 and created.sequencer < deleted.sequencer
    assert json.loads(first.read_text())["time"] == "2024-05-01T12:00:00.123456Z"


def test_local_key_is_what_the_namespace_route_matches(tmp_path: Path) -> None:
    namespace = parse_storage_namespace("local://demo/x", local_root=str(tmp_path))
    route = NamespaceRoute.of("r", namespace)
    writer = LocalEventWriter(tmp_path / "events")
    writer.created(namespace.join("data/obj").key, 1, T0)
    (event,) = read_events(tmp_path / "events")
    assert event.key == route.prefix + "data/obj" and event.bucket == route.container


def test_writer_is_thread_safe_and_ordered(tmp_path: Path) -> None:
    writer = LocalEventWriter(tmp_path)

    def write(thread: int) -> None:
        for i in range(50):
            writer.created(f"/t{thread}/o{i}", i, T0)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not list(tmp_path.glob("*.tmp")) and len(list(tmp_path.iterdir())) == 200
    events = read_events(tmp_path)
    sequencers = [e.sequencer or "" for e in events]
    assert sequencers == sorted(sequencers) and len(set(sequencers)) == 200
    for n in range(4):  # each thread's own writes in its order
        assert [e.key for e in events if e.key.startswith(f"t{n}/")] == [f"t{n}/o{i}" for i in range(50)]


def test_array_body() -> None:
    body = json.dumps(
        [
            {"lakefs_gc_event": 1, "kind": "created", "path": "/a/b", "time": "2024-05-01T12:00:00Z",
             "size": 0, "sequencer": "00000000000000000001", "extra": "ignored"},
            {"lakefs_gc_event": 1, "kind": "deleted", "path": "/a/b", "time": "2024-05-01T14:00:00+02:00",
             "sequencer": "00000000000000000002"},
        ]
    )  # fmt: skip
    created, deleted = parse_local_body(body.encode())
    assert (created.kind, created.size, deleted.kind) == ("created", 0, "deleted")
    assert created.event_time == deleted.event_time == datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert parse_local_body("[]") == []


GOOD: dict[str, Any] = {
    "lakefs_gc_event": 1, "kind": "created", "path": "/a/b", "time": "2024-05-01T12:00:00Z",
    "size": 3, "sequencer": "0123456789abcdef",
}  # fmt: skip


def body(**changes: Any) -> str:
    event = {k: v for k, v in {**GOOD, **changes}.items() if v is not ...}
    return json.dumps(event)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"\xff\xfe", "not UTF-8"),
        ("{not json", "not JSON"),
        ("", "not JSON"),
        ("42", "$: expected a JSON object, got a number"),
        ('[{"lakefs_gc_event": 1}, "x"]', "$[0].kind: missing"),
        ("[" + body() + ", null]", "$[1]: expected a JSON object, got null"),
        (body(lakefs_gc_event=...), "$.lakefs_gc_event: expected 1, got missing"),
        (body(lakefs_gc_event=2), "$.lakefs_gc_event: expected 1, got 2"),
        (body(lakefs_gc_event=True), "$.lakefs_gc_event: expected 1, got True"),
        (body(kind="ObjectCreated:Put"), "$.kind: expected 'created' or 'deleted'"),
        (body(kind=...), "$.kind: missing"),
        (body(path=...), "$.path: missing"),
        (body(path=7), "$.path: expected a string, got a number"),
        (body(path="a/b"), "$.path: expected an absolute file path"),
        (body(path="/a/"), "$.path: expected an absolute file path"),
        (body(path="/a/../b"), "$.path: not a normalized path"),
        (body(path="/a//b"), "$.path: not a normalized path"),
        (body(time=...), "$.time: missing"),
        (body(time="yesterday"), "$.time: not an ISO 8601 time"),
        (body(time="2024-05-01T12:00:00"), "$.time: expected a date and time with a UTC offset"),
        (body(time="2024-05-01"), "$.time: expected a date and time with a UTC offset"),
        (body(size=...), "$.size: missing (required on 'created')"),
        (body(size=-1), "$.size: expected a non-negative integer"),
        (body(size="3"), "$.size: expected a non-negative integer"),
        (body(size=1.5), "$.size: expected a non-negative integer"),
        (body(kind="deleted"), "$.size: a 'deleted' event has no size"),
        (body(sequencer=...), "$.sequencer: missing"),
        (body(sequencer="0123"), "$.sequencer: expected 16 or more hex digits"),
        (body(sequencer="0123456789abcdefg"), "$.sequencer: expected 16 or more hex digits"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_malformed_bodies(message: str | bytes, reason: str) -> None:
    with pytest.raises(EventFormatError) as error:
        parse_local_body(message)
    assert reason in str(error.value)


def test_deleted_event_with_null_size_is_fine() -> None:
    (event,) = parse_local_body(body(kind="deleted", size=None))
    assert event.kind == "deleted" and event.size is None


# --- the test server with a local namespace --------------------------------------------------------


@pytest.fixture
def local_server(tmp_path: Path) -> Iterator[tuple[LakeFSTestServer, Lakefs, Path]]:
    events = tmp_path / "events"
    (tmp_path / "storage").mkdir()
    settings = ServerSettings(notifications=DirectoryNotifier(events))
    with (
        LakeFSTestServer(storage_root=tmp_path / "storage", settings=settings) as server,
        server.sdk_client() as client,
    ):
        yield server, Lakefs(client), events


def files_under(directory: Path) -> dict[str, int]:
    """``{path without leading '/': size}`` of every file under ``directory``."""
    return {
        os.path.join(root, name)[1:]: os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(directory)
        for name in names
    }


def test_local_namespace_notifies_every_write_and_delete(
    local_server: tuple[LakeFSTestServer, Lakefs, Path], tmp_path: Path
) -> None:
    server, lakefs, events = local_server
    lakefs.create_repo("repo", "local://repo")
    lakefs.set_rules("repo", 1)
    kept = lakefs.upload("repo", "main", "t/a", b"aaa").physical_address
    lakefs.commit("repo", "main", "c1")
    staged = lakefs.upload("repo", "main", "t/s", b"ss").physical_address
    lakefs.delete("repo", "main", "t/s")  # a staged delete leaves the physical object (lakeFS does too)
    namespace_dir = tmp_path / "storage" / "repo"

    created = read_events(events)
    assert not list(events.glob("*.tmp"))
    dispatched = [e for f in sorted(events.glob("*.json")) for e in parse_message(f.read_text()).events]
    assert dispatched == created
    assert all(e.kind == "created" and e.store == "local" for e in created)
    assert {e.key: e.size for e in created} == files_under(namespace_dir)
    keys = {e.key for e in created}
    assert kept.removeprefix("local:///") in keys and staged.removeprefix("local:///") in keys
    assert any("/_lakefs/" in k for k in keys) and (namespace_dir / "_lakefs" / "dummy").is_file()
    for e in created:  # the event time is the file's mtime right after the write
        assert abs(e.event_time.timestamp() - os.path.getmtime("/" + e.key)) < 1e-3

    store = server.ctx.namespace_store("local://repo")
    address = staged.removeprefix(store.qualified(""))
    store.delete(address)
    store.delete(address)  # gone already: nothing happened, nothing is notified
    deletes = read_events(events)[len(created) :]
    assert [(e.kind, e.key) for e in deletes] == [("deleted", staged.removeprefix("local:///"))]
    assert not (namespace_dir / address).exists()


def test_cli_events_dir(tmp_path: Path) -> None:
    events = tmp_path / "events"
    with server_process("--storage-root", str(tmp_path / "root"), "--events-dir", str(events)) as info:
        lakefs = Lakefs(client(info))
        lakefs.create_repo("cli", "local://cli")
        address = lakefs.upload("cli", "main", "a", b"abc").physical_address
    written = {e.key: e.size for e in read_events(events)}
    assert written[address.removeprefix("local:///")] == 3
    assert written == files_under(tmp_path / "root" / "cli")


def test_notifications_are_off_by_default(tmp_path: Path) -> None:
    store = NamespaceStore("local://quiet", StorageOptions(local_root=str(tmp_path)))
    assert store.notifier is None
    store.put("x", b"1")
    store.delete("x")


def test_only_the_notifiers_store_kinds_are_notified(tmp_path: Path) -> None:
    notifier = NotifierGroup([DirectoryNotifier(tmp_path / "events")])
    options = StorageOptions(local_root=str(tmp_path), s3=S3Options(endpoint_url="http://127.0.0.1:9"))
    assert NamespaceStore("s3://bucket/prefix", options, notifier).notifier is None
    local = NamespaceStore("local://ns", options, notifier)
    local.put("k", b"12")
    (event,) = read_events(tmp_path / "events")
    assert (event.key, event.size) == (str(tmp_path / "ns" / "k")[1:], 2)


# --- Azure: Event Grid events in an Azurite queue ------------------------------------------------


def drain(azurite: AzuriteServer, queue: str) -> list[str]:
    """Every message body of the queue, as stored (no decode policy), in order of arrival."""
    from azure.storage.queue import QueueClient

    client = QueueClient.from_connection_string(azurite.connection_string, queue)
    bodies: list[str] = []
    while batch := list(client.receive_messages(max_messages=32, visibility_timeout=60)):
        for m in batch:
            bodies.append(m.content)
            client.delete_message(m)
    return bodies


@pytest.fixture
def azure_server(
    tmp_path: Path, azurite: AzuriteServer, azure_container: str, request: pytest.FixtureRequest
) -> Iterator[tuple[LakeFSTestServer, Lakefs, str]]:
    queue = unique_name(request)
    notifier = AzureQueueNotifier(azurite.connection_string, queue)
    settings = replace(
        ServerSettings(storage=StorageOptions(azure=azure_options(azurite))),
        blockstores=("local", "azure"),
        notifications=notifier,
    )
    with (
        LakeFSTestServer(storage_root=tmp_path, settings=settings) as server,
        server.sdk_client() as client,
    ):
        yield server, Lakefs(client), queue


def test_azure_namespace_sends_event_grid_events(
    azure_server: tuple[LakeFSTestServer, Lakefs, str], azurite: AzuriteServer, azure_container: str
) -> None:
    server, lakefs, queue = azure_server
    account = azurite.account_name
    namespace = f"https://{account}.blob.core.windows.net/{azure_container}/repos/two"
    lakefs.create_repo("on-azure", namespace)
    staged = lakefs.upload("on-azure", "main", "t/a", b"hello").physical_address
    address = staged.removeprefix(namespace + "/")
    server.ctx.namespace_store(namespace).delete(address)
    bodies = drain(azurite, queue)
    events = [json.loads(base64.b64decode(b, validate=True)) for b in bodies]

    blob = f"repos/two/{address}"
    topic = f"/subscriptions/{'0' * 8}-0000-0000-0000-{'0' * 12}/resourceGroups/test"
    topic += f"/providers/Microsoft.Storage/storageAccounts/{account}"
    assert {e["topic"] for e in events} == {topic}
    subjects = [e["subject"] for e in events]
    assert f"/blobServices/default/containers/{azure_container}/blobs/repos/two/_lakefs/dummy" in subjects
    created = next(e for e in events if e["subject"].endswith("/blobs/" + blob))
    deleted = events[-1]
    assert created["eventType"] == "Microsoft.Storage.BlobCreated"
    assert (
        deleted["eventType"] == "Microsoft.Storage.BlobDeleted" and deleted["subject"] == created["subject"]
    )
    assert created["data"]["api"] == "PutBlob" and deleted["data"]["api"] == "DeleteBlob"
    assert created["data"]["contentLength"] == 5 and "contentLength" not in deleted["data"]
    assert re.fullmatch(r'"0x[0-9A-F]+"', created["data"]["eTag"])
    url = f"{azurite.blob_endpoint}/{azure_container}/{blob}"
    assert created["data"]["url"] == deleted["data"]["url"] == url
    sequencers = [e["data"]["sequencer"] for e in events]
    assert all(re.fullmatch(r"[0-9a-f]{32}", s) for s in sequencers) and sequencers == sorted(sequencers)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z", created["eventTime"])
    assert {e["metadataVersion"] for e in events} == {"1"}

    parsed = [parse_message(b, format="azure").events for b in bodies]
    assert all(len(p) == 1 for p in parsed)
    mine = [p[0] for p in parsed if p[0].key == blob]
    assert [(e.kind, e.size, e.sequencer) for e in mine] == [
        ("created", 5, created["data"]["sequencer"]),
        ("deleted", None, deleted["data"]["sequencer"]),
    ]
    assert {(e.store, e.account, e.bucket) for p in parsed for e in p} == {
        ("azure", account, azure_container)
    }
    assert mine[0].etag == created["data"]["eTag"].strip('"')


def test_azure_cloud_events_without_base64(
    azurite: AzuriteServer, azure_container: str, request: pytest.FixtureRequest
) -> None:
    from azure.storage.queue import QueueClient

    queue = unique_name(request)
    notifier = AzureQueueNotifier(azurite.connection_string, queue, schema="CloudEvent", base64=False)
    AzureQueueNotifier(azurite.connection_string, queue)  # an existing queue is fine
    namespace = f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}/ns"
    store = NamespaceStore(namespace, StorageOptions(azure=azure_options(azurite)), notifier)
    store.put("dir/a b%c.txt", b"xy")
    client = QueueClient.from_connection_string(azurite.connection_string, queue)
    (message,) = client.receive_messages()
    event = json.loads(message.content)  # plain JSON text
    (parsed,) = parse_message(message.content).events
    assert (parsed.key, parsed.size, parsed.kind) == ("ns/dir/a b%c.txt", 2, "created")
    assert event["specversion"] == "1.0" and event["type"] == "Microsoft.Storage.BlobCreated"
    assert event["subject"] == f"/blobServices/default/containers/{azure_container}/blobs/ns/dir/a b%c.txt"
    assert event["data"]["url"].endswith(f"/{azure_container}/" + quote("ns/dir/a b%c.txt", safe="/"))
    assert event["data"]["url"].endswith("/ns/dir/a%20b%25c.txt")
    assert event["source"].endswith(f"/storageAccounts/{azurite.account_name}")
    assert "topic" not in event and "eventType" not in event
