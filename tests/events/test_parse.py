"""The one entry point: recognising every shape, forcing a format, bodies that are not notifications,
and the contract that nothing but EventFormatError ever escapes (hypothesis)."""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_gc.errors import GcError
from lakefs_gc.events.local import local_event
from lakefs_gc.events.model import EventFormatError
from lakefs_gc.events.parse import Parsed, format_of, parse_message

FIXTURES = Path(__file__).parent / "fixtures"
SHAPES = {
    "s3_put.json": "s3",
    "s3_delete.json": "s3",
    "s3_moto_put.json": "s3",
    "s3_test_event.json": "s3-test",
    "s3_sns_put.json": "s3-sns",
    "s3_sns_test_event.json": "s3-sns",
    "eventbridge_created.json": "s3-eventbridge",
    "eventbridge_deleted.json": "s3-eventbridge",
    "eventbridge_moto_created.json": "s3-eventbridge",
    "eventbridge_moto_tags_added.json": "s3-eventbridge",
    "eventgrid_created.json": "eventgrid",
    "eventgrid_renamed.json": "eventgrid",
    "eventgrid_subscription_validation.json": "eventgrid",
    "eventgrid_tier_changed.json": "eventgrid",
    "cloudevent_deleted.json": "cloudevents",
}
LOCAL_BODY = json.dumps(
    local_event("created", "/data/repo/obj", datetime(2024, 5, 1, tzinfo=timezone.utc), "0" * 16, 3)
)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_every_fixture_is_known() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(SHAPES)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_auto_recognises_every_shape(name: str) -> None:
    family = "azure" if SHAPES[name] in ("eventgrid", "cloudevents") else "s3"
    other = "s3" if family == "azure" else "azure"
    parsed = parse_message(fixture(name))
    assert parsed.events or parsed.skipped
    assert parse_message(fixture(name), format=family) == parsed
    with pytest.raises(EventFormatError):
        parse_message(fixture(name), format=other)
    assert format_of(fixture(name)) == SHAPES[name]


def test_local_events() -> None:
    (event,) = parse_message(LOCAL_BODY).events
    assert (event.store, event.key, event.kind, event.size) == ("local", "data/repo/obj", "created", 3)
    assert parse_message(LOCAL_BODY, format="local") == parse_message(LOCAL_BODY)
    assert parse_message(f"[{LOCAL_BODY}]") == parse_message(LOCAL_BODY)
    assert format_of(LOCAL_BODY) == "local"
    with pytest.raises(EventFormatError):
        parse_message(fixture("s3_put.json"), format="local")


def test_bytes_bodies() -> None:
    text = fixture("s3_put.json")
    assert parse_message(text.encode("utf-8")) == parse_message(text)
    assert parse_message(b"\xef\xbb\xbf" + text.encode("utf-8")) == parse_message(text)  # a BOM
    with pytest.raises(EventFormatError, match=r"^body: not UTF-8 text \(byte 0\)"):
        parse_message(b"\xff{}")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "body: empty"),
        ("  \n ", "body: empty"),
        ("hello world", "body: neither JSON nor base64-encoded JSON"),
        ("42", "body: neither JSON nor base64-encoded JSON"),
        ('"a string"', "body: neither JSON nor base64-encoded JSON"),
        ("{", "body: not valid JSON"),
        ('{"Records": [}', "body: not valid JSON"),
        ("[" * 100_000, "body: "),
        ("{}", "body: not an S3, Event Grid, CloudEvents or local notification (an object with keys [])"),
        ('{"foo": 1, "bar": 2}', "body: not an S3, Event Grid, CloudEvents or local notification (an object"),
        ("[1, 2]", "body: not an S3, Event Grid, CloudEvents or local notification (an array)"),
        ("[]", "body: not an S3, Event Grid, CloudEvents or local notification (an array)"),
    ],
)
def test_bodies_that_are_not_notifications(body: str, reason: str) -> None:
    with pytest.raises(EventFormatError, match="^" + re.escape(reason)) as raised:
        parse_message(body)
    assert isinstance(raised.value, GcError)
    assert format_of(body) == "unknown"


def test_format_of_is_the_shape_not_a_validation() -> None:
    body = '{"Records": [{"eventVersion": "2.1"}]}'
    assert format_of(body) == "s3"
    with pytest.raises(EventFormatError, match=r"^Records\[0\]\.eventName: missing"):
        parse_message(body)


# --- nothing but EventFormatError -----------------------------------------------------------------

KEY_NAMES = [
    "Records",
    "eventVersion",
    "eventSource",
    "eventName",
    "eventTime",
    "s3",
    "bucket",
    "object",
    "name",
    "key",
    "size",
    "eTag",
    "versionId",
    "sequencer",
    "Type",
    "TopicArn",
    "Message",
    "Event",
    "source",
    "detail-type",
    "detail",
    "etag",
    "version-id",
    "time",
    "eventType",
    "subject",
    "data",
    "topic",
    "specversion",
    "type",
    "url",
    "contentLength",
    "sourceUrl",
    "destinationUrl",
    "data_base64",
    "lakefs_gc_event",
    "kind",
    "path",
]
#: strings that reach deeper into the parsers than random text does
SCALAR_SAMPLES = [
    "2.1",
    "3.0",
    "1.0",
    "aws.s3",
    "aws:s3",
    "Notification",
    "s3:TestEvent",
    "ObjectCreated:Put",
    "ObjectRemoved:Delete",
    "Object Created",
    "Microsoft.Storage.BlobCreated",
    "Microsoft.Storage.BlobRenamed",
    "/blobServices/default/containers/c/blobs/b",
    "2024-05-01T12:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "%ff",
    "null",
    "https://a.blob.core.windows.net/c/b",
    "http://[::1/x",
    "created",
    "/a/b",
]
KEYS = st.sampled_from(KEY_NAMES) | st.text(max_size=6)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from(SCALAR_SAMPLES)
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=6),
    max_leaves=25,
)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every member path in ``doc`` (the document itself first)."""
    yield prefix
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for name, value in items:
        yield from paths(value, (*prefix, name))


def mutated(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    """A copy of ``doc`` with the member at ``path`` replaced by ``value`` (or removed)."""
    if not path:
        return value
    out = copy.deepcopy(doc)
    parent = out
    for name in path[:-1]:
        parent = parent[name]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def wrapped(doc: Any, how: str) -> str:
    """``doc`` as a queue body: plain JSON, base64 JSON, or the Message of an SNS envelope."""
    text = json.dumps(doc)
    if how == "base64":
        return base64.b64encode(text.encode()).decode()
    if how == "sns":
        return json.dumps({"Type": "Notification", "TopicArn": "arn", "Message": text})
    return text


def check(body: str | bytes) -> None:
    """The contract: a Parsed or an EventFormatError, never anything else."""
    for format in ("auto", "s3", "azure", "local"):
        try:
            parsed = parse_message(body, format=format)  # type: ignore[arg-type]
        except EventFormatError as e:
            assert str(e)
        else:
            assert isinstance(parsed, Parsed)
            assert all(e.event_time.utcoffset() is not None for e in parsed.events)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.binary(max_size=200))
def test_arbitrary_text_never_raises_anything_else(body: str | bytes) -> None:
    check(body)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON, st.sampled_from(["plain", "base64", "sns"]))
def test_arbitrary_json_never_raises_anything_else(doc: Any, how: str) -> None:
    check(wrapped(doc, how))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(SHAPES)), st.data(), JSON, st.booleans(), st.sampled_from(["plain", "base64"]))
def test_mutated_notifications_never_raise_anything_else(
    name: str, data: st.DataObject, value: Any, delete: bool, how: str
) -> None:
    doc = json.loads(fixture(name))
    path = data.draw(st.sampled_from(list(paths(doc))))
    check(wrapped(mutated(doc, path, value, delete and bool(path)), how))
