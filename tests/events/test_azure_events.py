"""Azure Event Grid blob events: both schemas, arrays, base64 queue bodies, renames, skipped types,
names from the subject, accounts, malformed events, and CloudEvents from the consumer client."""

from __future__ import annotations

import base64
import json
import logging
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from azure.core.messaging import CloudEvent

from lakefs_gc.events.azure import cloud_event_body
from lakefs_gc.events.model import EventFormatError, ObjectEvent
from lakefs_gc.events.parse import Parsed, parse_message

FIXTURES = Path(__file__).parent / "fixtures"
TOPIC = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/Storage/providers/"
    "Microsoft.Storage/storageAccounts/my-storage-account"
)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def fixture_doc(name: str) -> Any:
    return json.loads(fixture(name))


def only(parsed: Parsed) -> ObjectEvent:
    assert parsed.skipped is None
    assert len(parsed.events) == 1
    return parsed.events[0]


def blob_event(
    container: str = "c", blob: str = "b", *, event_type: str = "Microsoft.Storage.BlobCreated", **data: Any
) -> dict[str, Any]:
    """An EventGridEvent of ``container``/``blob`` with ``data`` (no url unless given)."""
    return {
        "topic": TOPIC,
        "subject": f"/blobServices/default/containers/{container}/blobs/{blob}",
        "eventType": event_type,
        "eventTime": "2024-05-01T12:00:00.1234567Z",
        "id": "1",
        "data": {"api": "PutBlob", **data},
    }


CREATED = ObjectEvent(
    store="azure",
    account="my-storage-account",
    bucket="test-container",
    key="new-file.txt",
    kind="created",
    event_time=datetime(2017, 6, 26, 18, 41, 0, 958410, tzinfo=timezone.utc),  # 7 digits, truncated
    size=524288,
    etag="0x8D4BCC2E4835CD0",
    sequencer="00000000000004420000000000028963",
    event_name="BlobCreated:PutBlockList",
)
DELETED = ObjectEvent(
    store="azure",
    account="my-storage-account",
    bucket="testcontainer",
    key="file-to-delete.txt",
    kind="deleted",
    event_time=datetime(2017, 11, 7, 20, 9, 22, 567400, tzinfo=timezone.utc),
    sequencer="0000000000000281000000000002F5CA",
    event_name="BlobDeleted:DeleteBlob",
)


# --- shapes ---------------------------------------------------------------------------------------


def test_event_grid_array() -> None:
    assert parse_message(fixture("eventgrid_created.json")) == Parsed((CREATED,))


def test_event_grid_single_event() -> None:
    (event,) = fixture_doc("eventgrid_created.json")
    assert parse_message(json.dumps(event)) == Parsed((CREATED,))


def test_cloud_event() -> None:
    assert parse_message(fixture("cloudevent_deleted.json")) == Parsed((DELETED,))


def test_array_of_several_events() -> None:
    (created,) = fixture_doc("eventgrid_created.json")
    (validation,) = fixture_doc("eventgrid_subscription_validation.json")
    deleted = fixture_doc("cloudevent_deleted.json")
    parsed = parse_message(json.dumps([created, validation, deleted]))
    assert parsed == Parsed((CREATED, DELETED))  # the validation event among them is not reported


@pytest.mark.parametrize(
    "name", ["eventgrid_created.json", "cloudevent_deleted.json", "eventgrid_renamed.json"]
)
def test_base64_queue_bodies(name: str) -> None:
    encoded = base64.b64encode(fixture(name).encode("utf-8")).decode("ascii")
    assert parse_message(encoded) == parse_message(fixture(name))
    assert parse_message(f"\n{encoded}\n", format="azure") == parse_message(fixture(name))
    assert parse_message(encoded.encode("ascii")) == parse_message(fixture(name))


def test_blob_renamed_is_a_delete_and_a_create() -> None:
    source, destination = parse_message(fixture("eventgrid_renamed.json")).events
    assert (source.kind, source.bucket, source.key) == ("deleted", "my-filesystem", "old dir/file+1.txt")
    assert (destination.kind, destination.bucket, destination.key) == (
        "created",
        "my-filesystem",
        "new dir/file+1.txt",  # unquote, not unquote_plus: "+" is a literal in blob URLs
    )
    for event in (source, destination):
        assert event.account == "my-storage-account"
        assert event.sequencer == "00000000000004420000000000028964"
        assert event.event_name == "BlobRenamed:RenameFile"
        assert (event.size, event.etag) == (None, None)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("eventgrid_subscription_validation.json", "Microsoft.EventGrid.SubscriptionValidationEvent"),
        ("eventgrid_tier_changed.json", "Microsoft.Storage.BlobTierChanged"),
    ],
)
def test_other_types_are_skipped(name: str, reason: str) -> None:
    assert parse_message(fixture(name)) == Parsed((), reason)


@pytest.mark.parametrize(
    "event_type",
    [
        "Microsoft.Storage.DirectoryCreated",
        "Microsoft.Storage.BlobInventoryPolicyCompleted",
        "Contoso.Items.Sold",
    ],
)
def test_unknown_types_are_skipped_unread(event_type: str) -> None:
    event = {"eventType": event_type, "subject": "whatever", "data": "anything"}
    assert parse_message(json.dumps(event)) == Parsed((), event_type)


@pytest.mark.parametrize(
    "api", ["PutBlob", "PutBlockList", "CopyBlob", "CreateFile", "FlushWithClose", "SftpCommit"]
)
def test_blob_created_is_a_create_whatever_the_api(api: str) -> None:
    event = only(parse_message(json.dumps(blob_event(api=api, contentLength=0))))
    assert (event.kind, event.event_name, event.size) == ("created", f"BlobCreated:{api}", 0)


# --- names and accounts ---------------------------------------------------------------------------

AWKWARD_BLOBS = ["a b+c%20 é.txt", "dir/sub/#x?y=1&z", "日本語/ファイル", "100%", "blobs/inner/blobs/x"]


@pytest.mark.parametrize("blob", AWKWARD_BLOBS)
def test_blob_names_are_the_subject_as_is(blob: str, caplog: pytest.LogCaptureFixture) -> None:
    url = f"https://acct.blob.core.windows.net/c/{quote(blob, safe='/')}"
    with caplog.at_level(logging.WARNING, logger="lakefs_gc.events.azure"):
        event = only(parse_message(json.dumps(blob_event(blob=blob, url=url))))
    assert (event.bucket, event.key) == ("c", blob)
    assert caplog.records == []  # the percent-encoded url agrees with the subject


def test_subject_wins_over_a_disagreeing_url(caplog: pytest.LogCaptureFixture) -> None:
    url = "https://acct.blob.core.windows.net/other/else.txt"
    with caplog.at_level(logging.WARNING, logger="lakefs_gc.events.azure"):
        event = only(parse_message(json.dumps(blob_event("c", "mine.txt", url=url))))
    assert (event.bucket, event.key) == ("c", "mine.txt")
    assert "data.url names other/else.txt but the subject c/mine.txt" in caplog.text


def test_an_unreadable_url_is_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="lakefs_gc.events.azure"):
        event = only(
            parse_message(json.dumps(blob_event("c", "b", url="https://acct.blob.core.windows.net/")))
        )
    assert (event.bucket, event.key) == ("c", "b")
    assert "data.url: not a blob URL" in caplog.text


@pytest.mark.parametrize(
    ("topic", "url", "account"),
    [
        (TOPIC, "https://other.blob.core.windows.net/c/b", "my-storage-account"),  # the topic first
        (None, "https://acct2.blob.core.windows.net/c/b", "acct2"),
        (None, "https://acct3.dfs.core.windows.net/c/b", "acct3"),
        (None, "http://127.0.0.1:10000/devstoreaccount1/c/b", "devstoreaccount1"),  # Azurite, path style
        (None, "http://localhost:10000/devstoreaccount1/c/b", "devstoreaccount1"),
        (None, "http://azurite:10000/devstoreaccount1/c/b", "devstoreaccount1"),  # a compose service name
        ("/subscriptions/s/resourceGroups/g", None, ""),
        (None, None, ""),
    ],
)
def test_account(topic: str | None, url: str | None, account: str, caplog: pytest.LogCaptureFixture) -> None:
    event = blob_event("c", "b") | {"topic": topic}
    if url is not None:
        event["data"]["url"] = url
    with caplog.at_level(logging.WARNING, logger="lakefs_gc.events.azure"):
        assert only(parse_message(json.dumps(event))).account == account
    assert caplog.records == []  # path-style urls name the same container and blob


def test_cloud_event_source_gives_the_account() -> None:
    event = fixture_doc("cloudevent_deleted.json")
    del event["data"]["url"]
    assert only(parse_message(json.dumps(event))).account == "my-storage-account"


def test_etags_quoted_or_not() -> None:
    assert only(parse_message(json.dumps(blob_event(eTag="0x8D4")))).etag == "0x8D4"
    assert only(parse_message(json.dumps(blob_event(eTag='"0x8D4"')))).etag == "0x8D4"


# --- malformed ------------------------------------------------------------------------------------


def changed(event: dict[str, Any], **members: Any) -> str:
    return json.dumps(event | members)


def without(event: dict[str, Any], *names: str) -> str:
    return json.dumps({k: v for k, v in event.items() if k not in names})


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


EVENT = blob_event()
MALFORMED: list[tuple[str, str]] = [
    (
        changed(EVENT, subject="/containers/c/b"),
        "subject: expected /blobServices/default/containers/<container>",
    ),
    (changed(EVENT, subject="/blobServices/default/containers//blobs/x"), "subject: expected /blobServices"),
    (changed(EVENT, subject="/blobServices/default/containers/c/blobs/"), "subject: expected /blobServices"),
    (without(EVENT, "subject"), "subject: missing"),
    (without(EVENT, "data"), "data: missing"),
    (changed(EVENT, data="x"), "data: expected an object, got a string"),
    (changed(EVENT, data={"contentLength": "5"}), "data.contentLength: expected a size in bytes"),
    (changed(EVENT, eventTime="2024-05-01 12:00"), "eventTime: not an ISO 8601 time"),
    (without(EVENT, "eventTime"), "eventTime: missing"),
    (changed(EVENT, eventType=7), "eventType: expected a non-empty string, got a number"),
    (json.dumps({"specversion": "2.0", "type": "x"}), "specversion: unsupported CloudEvents version '2.0'"),
    (
        json.dumps(
            {"specversion": "1.0", "type": "Microsoft.Storage.BlobDeleted", "subject": EVENT["subject"]}
        ),
        "data: missing",
    ),
    (json.dumps([EVENT, "x"]), "[1]: expected an object, got a string"),
    (json.dumps([EVENT, {**EVENT, "subject": None}]), "[1].subject: expected a non-empty string, got null"),
    (
        changed(EVENT, eventType="Microsoft.Storage.BlobRenamed"),
        "data.sourceUrl: missing",
    ),
    (
        changed(EVENT, eventType="Microsoft.Storage.BlobRenamed", data={"sourceUrl": "https://a.dfs.x/c"}),
        "data.sourceUrl: not a blob URL",
    ),
    ("!!!not base64!!!", "body: neither JSON nor base64-encoded JSON"),
    (_b64("hello, world"), "body: base64-decoded, but not a JSON object or array"),
    (_b64("{not json"), "body (base64-decoded): not valid JSON"),
    (base64.b64encode(b"\xff\xfe{").decode(), "body: neither JSON nor base64-encoded JSON"),
]


@pytest.mark.parametrize(("body", "reason"), MALFORMED)
def test_malformed_events_name_the_problem(body: str, reason: str) -> None:
    with pytest.raises(EventFormatError, match="^" + re.escape(reason)):
        parse_message(body, format="azure")


def test_not_an_azure_message_when_forced() -> None:
    with pytest.raises(EventFormatError, match=r"^body: not an Event Grid event or CloudEvent"):
        parse_message(fixture("s3_put.json"), format="azure")
    with pytest.raises(EventFormatError, match=r"^body: an empty array of events"):
        parse_message("[]", format="azure")


# --- CloudEvents from EventGridConsumerClient -----------------------------------------------------


@pytest.mark.parametrize("name", ["cloudevent_deleted.json"])
def test_cloud_event_body_round_trips(name: str) -> None:
    event: CloudEvent[Any] = CloudEvent.from_dict(fixture_doc(name))
    body = cloud_event_body(event)
    assert parse_message(body) == parse_message(fixture(name))
    assert json.loads(body)["specversion"] == "1.0"


def test_cloud_event_body_of_a_received_created_event() -> None:
    (grid_event,) = fixture_doc("eventgrid_created.json")
    event: CloudEvent[Any] = CloudEvent(
        source=grid_event["topic"],
        type=grid_event["eventType"],
        subject=grid_event["subject"],
        time=datetime(2017, 6, 26, 18, 41, 0, 958410, tzinfo=timezone.utc),
        data=grid_event["data"],
        extensions={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )
    body = json.loads(cloud_event_body(event))
    assert body["time"] == "2017-06-26T18:41:00.958410Z"
    assert body["traceparent"].startswith("00-")  # extensions are top-level attributes
    assert parse_message(json.dumps(body)) == Parsed((CREATED,))


def test_cloud_event_body_with_binary_data() -> None:
    data = json.dumps(fixture_doc("cloudevent_deleted.json")["data"]).encode()
    event: CloudEvent[Any] = CloudEvent(
        source=TOPIC,
        type="Microsoft.Storage.BlobDeleted",
        subject="/blobServices/default/containers/testcontainer/blobs/file-to-delete.txt",
        time=datetime(2017, 11, 7, 20, 9, 22, 567400),  # naive: taken as UTC
        data=data,
    )
    body = cloud_event_body(event)
    assert "data_base64" in json.loads(body)
    assert parse_message(body) == Parsed((DELETED,))
