"""S3 notifications: every delivery shape, key decoding, event kinds, malformed messages, and real
messages from moto (SQS direct, SNS-wrapped, raw SNS, EventBridge)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_gc.events.model import EventFormatError, ObjectEvent
from lakefs_gc.events.parse import Parsed, parse_message
from tests.support.object_stores import s3_client
from tests.support.servers import MotoServer

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def fixture_doc(name: str) -> Any:
    return json.loads(fixture(name))


def record(event_name: str = "ObjectCreated:Put", key: str = "k", **object_fields: Any) -> dict[str, Any]:
    """A minimal notification-format record (what real S3 sends, without the ignorable fields)."""
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "eventTime": "2024-05-01T12:00:00.123Z",
        "eventName": event_name,
        "s3": {"bucket": {"name": "b"}, "object": {"key": key, **object_fields}},
    }


def records(*items: dict[str, Any]) -> str:
    return json.dumps({"Records": list(items)})


def only(parsed: Parsed) -> ObjectEvent:
    assert parsed.skipped is None
    assert len(parsed.events) == 1
    return parsed.events[0]


# --- canned shapes --------------------------------------------------------------------------------

PUT = ObjectEvent(
    store="s3",
    bucket="mybucket",
    key="data/Happy Face.jpg",
    kind="created",
    event_time=datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=timezone.utc),
    size=1024,
    etag="d41d8cd98f00b204e9800998ecf8427e",
    sequencer="0055AED6DCD90281E5",
    version_id="096fKKXTRTtl3on89fVO.nfljtsv6qko",
    event_name="ObjectCreated:Put",
)


def test_direct_notification() -> None:
    assert parse_message(fixture("s3_put.json")) == Parsed((PUT,))


def test_delete_has_no_size_and_null_version_is_none() -> None:
    event = only(parse_message(fixture("s3_delete.json")))
    assert (event.kind, event.key, event.size, event.etag) == ("deleted", "data/Happy Face.jpg", None, None)
    assert event.version_id is None  # "null": the object of an unversioned bucket
    assert event.sequencer == "0055AED6DCD90281F0"
    assert event.event_time == datetime(2024, 5, 1, 12, 0, 1, tzinfo=timezone.utc)


def test_sns_wrapped_notification_is_the_wrapped_one() -> None:
    envelope = fixture_doc("s3_sns_put.json")
    assert isinstance(envelope["Message"], str)
    assert parse_message(fixture("s3_sns_put.json")) == Parsed((PUT,))


def test_raw_sns_delivery_is_the_notification_itself() -> None:
    # RawMessageDelivery=true puts the S3 JSON itself in the SQS body: nothing to unwrap
    # (docs/formats/notifications.md, "Delivery wrappers")
    assert parse_message(json.dumps(json.loads(fixture("s3_put.json")))) == Parsed((PUT,))


@pytest.mark.parametrize("name", ["s3_test_event.json", "s3_sns_test_event.json"])
def test_test_event_is_skipped(name: str) -> None:
    assert parse_message(fixture(name)) == Parsed((), "s3:TestEvent")


def test_sns_subscription_confirmation_is_skipped() -> None:
    envelope = fixture_doc("s3_sns_put.json") | {"Type": "SubscriptionConfirmation", "Message": "confirm me"}
    assert parse_message(json.dumps(envelope)) == Parsed((), "SNS SubscriptionConfirmation")


def test_eventbridge_created_in_aws_format() -> None:
    event = only(parse_message(fixture("eventbridge_created.json")))
    assert event == ObjectEvent(
        store="s3",
        bucket="DOC-EXAMPLE-BUCKET1",
        key="example key+1",  # AWS URL-encodes EventBridge keys too: unquote_plus
        kind="created",
        event_time=datetime(2021, 11, 12, tzinfo=timezone.utc),
        size=5,
        etag="b1946ac92492d2347c6235b4d2611184",
        sequencer="617f08299329d189",
        version_id="IYV3p45BT0ac8hjHg1houSdS1a.Mro8e",
        event_name="Object Created:PutObject",
    )


def test_eventbridge_deleted_delete_marker_is_a_delete() -> None:
    event = only(parse_message(fixture("eventbridge_deleted.json")))
    assert (event.kind, event.key, event.size) == ("deleted", "example key+1", None)
    assert event.version_id == "1QW9g1Z99LUNbvaaYVpW9xDlOLU.qxgF"


def test_eventbridge_moto_deviations() -> None:
    """moto 5.2.5 (notifications.md, "What moto sends"): ``eTag`` not ``etag``, ``version-id:
    "null"``, no milliseconds, and the key *raw*. We decode EventBridge keys as AWS encodes them, so
    under moto a raw key holding ``+`` or ``%XX`` comes out wrong: ``a+b c%25.txt`` was put as
    exactly that, and reads as ``a b c%.txt``."""
    event = only(parse_message(fixture("eventbridge_moto_created.json")))
    assert event.etag == "9dd4e461268c8034f5c8564e155c67a6"
    assert event.version_id is None
    assert event.event_time == datetime(2026, 11, 21, 5, 15, 31, tzinfo=timezone.utc)
    assert event.key == "a b c%.txt"  # the deviation: the object is "a+b c%25.txt"
    assert event.event_name == "Object Created:ObjectCreated"


def test_eventbridge_other_detail_types_are_skipped() -> None:
    assert parse_message(fixture("eventbridge_moto_tags_added.json")) == Parsed((), "Object Tags Added")
    restore = fixture_doc("eventbridge_created.json") | {"detail-type": "Object Restore Completed"}
    assert parse_message(json.dumps(restore)) == Parsed((), "Object Restore Completed")


# --- kinds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event_name", "kind"),
    [
        ("ObjectCreated:Put", "created"),
        ("ObjectCreated:Post", "created"),
        ("ObjectCreated:Copy", "created"),
        ("ObjectCreated:CompleteMultipartUpload", "created"),
        ("s3:ObjectCreated:Put", "created"),  # S3-compatible stores (MinIO) keep the prefix
        ("ObjectRemoved:Delete", "deleted"),
        ("ObjectRemoved:DeleteMarkerCreated", "deleted"),
        ("LifecycleExpiration:Delete", "deleted"),
        ("LifecycleExpiration:DeleteMarkerCreated", "deleted"),
    ],
)
def test_event_kinds(event_name: str, kind: str) -> None:
    event = only(parse_message(records(record(event_name))))
    assert event.kind == kind
    assert event.event_name == event_name.removeprefix("s3:")


@pytest.mark.parametrize(
    "event_name",
    [
        "ObjectRestore:Post",
        "ObjectRestore:Completed",
        "ObjectRestore:Delete",
        "Replication:OperationFailedReplication",
        "ObjectTagging:Put",
        "ObjectTagging:Delete",
        "ObjectAcl:Put",
        "IntelligentTiering",
        "LifecycleTransition",
        "ReducedRedundancyLostObject",
    ],
)
def test_other_event_types_are_skipped(event_name: str) -> None:
    assert parse_message(records(record(event_name))) == Parsed((), event_name)


def test_several_records_in_one_message() -> None:
    body = records(
        record("ObjectRemoved:Delete", key="a"),
        record("ObjectTagging:Put", key="b"),
        record("ObjectRemoved:Delete", key="c"),
    )
    parsed = parse_message(body)
    assert parsed.skipped is None  # a skipped record beside events is not reported
    assert [(e.kind, e.key) for e in parsed.events] == [("deleted", "a"), ("deleted", "c")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=timezone.utc)),
        ("2024-05-01T12:00:00.5Z", datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=timezone.utc)),
        ("2024-05-01T12:00:00.123Z", datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)),
        ("2024-05-01T12:00:00.1234567Z", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)),
        ("2024-05-01T14:00:00+02:00", datetime(2024, 5, 1, 12, tzinfo=timezone.utc)),
    ],
)
def test_event_times_are_utc(text: str, expected: datetime) -> None:
    event = only(parse_message(records(record() | {"eventTime": text})))
    assert event.event_time == expected
    assert event.event_time.utcoffset() is not None


def test_quoted_etag_is_unquoted() -> None:
    assert only(parse_message(records(record(eTag='"abc"')))).etag == "abc"


# --- keys -----------------------------------------------------------------------------------------

AWKWARD_KEYS = [
    "red flower.jpg",
    "a+b",
    "100%",
    "100%25 literal",
    "x%2Fy",
    "dir/sub/file.txt",
    "dir/a b+c%&é.txt",
    "#hash#/?q=1&r;s",
    "日本語/ファイル 名",
    " leading and trailing ",
    "emoji 😀/~!*'()",
]


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_keys_round_trip_form_encoding(key: str) -> None:
    encoded = quote_plus(key, safe="")  # what moto (and S3, up to "/") sends
    assert only(parse_message(records(record(key=encoded)))).key == key
    # real S3 may leave "/" unencoded (notifications.md, "S3 notification records"): decodes the same
    assert only(parse_message(records(record(key=quote_plus(key, safe="/"))))).key == key


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40).filter(lambda k: "\x00" not in k))
def test_any_key_round_trips(key: str) -> None:
    assert only(parse_message(records(record(key=quote_plus(key, safe=""))))).key == key


def test_moto_fixture_key() -> None:
    event = only(parse_message(fixture("s3_moto_put.json")))
    assert (event.bucket, event.key, event.size) == ("src-bucket", "dir/a b+c%&é.txt", 5)
    assert (event.sequencer, event.version_id, event.account) == (None, None, "")


# --- malformed ------------------------------------------------------------------------------------


def without(doc: dict[str, Any], *path: str) -> dict[str, Any]:
    """``doc`` (a copy) without the member at ``path``."""
    copy = json.loads(json.dumps(doc))
    parent = copy
    for name in path[:-1]:
        parent = parent[name]
    del parent[path[-1]]
    return copy


MALFORMED: list[tuple[str, str]] = [
    (json.dumps({"Records": [without(record(), "s3")]}), "Records[0].s3: missing"),
    (
        json.dumps({"Records": [without(record(), "s3", "object", "key")]}),
        "Records[0].s3.object.key: missing",
    ),
    (json.dumps({"Records": [without(record(), "s3", "bucket")]}), "Records[0].s3.bucket: missing"),
    (records(record() | {"eventTime": "yesterday"}), "Records[0].eventTime: not an ISO 8601 time"),
    (records(record() | {"eventTime": "2024-05-01T12:00:00"}), "Records[0].eventTime: not an ISO 8601 time"),
    (records(record() | {"eventTime": "2024-02-30T12:00:00Z"}), "Records[0].eventTime: not a valid time"),
    (records(record() | {"eventVersion": "3.0"}), "Records[0].eventVersion: unsupported version '3.0'"),
    (records(record() | {"eventVersion": 2.1}), "Records[0].eventVersion: expected a non-empty string"),
    (records(record() | {"eventSource": "aws:sqs"}), "Records[0].eventSource: not an S3 event source"),
    (records(record(key="")), "Records[0].s3.object.key: expected a non-empty string"),
    (records(record(key="%ff")), "Records[0].s3.object.key: percent-escapes are not UTF-8"),
    (records(record(size=-1)), "Records[0].s3.object.size: expected a size in bytes"),
    (records(record(size="12")), "Records[0].s3.object.size: expected a size in bytes"),
    (records(record(eTag=12)), "Records[0].s3.object.eTag: expected a string"),
    (json.dumps({"Records": {}}), "Records: expected an array"),
    (json.dumps({"Records": []}), "Records: empty"),
    (json.dumps({"Records": ["x"]}), "Records[0]: expected an object, got a string"),
    (json.dumps({"Service": "Amazon S3", "Event": "s3:Other"}), "Event: unknown S3 service event 's3:Other'"),
    (
        json.dumps({"Type": "Notification", "TopicArn": "arn", "Message": {"Records": []}}),
        "Message: expected the S3 notification as a JSON string",
    ),
    (
        json.dumps({"Type": "Notification", "TopicArn": "arn", "Message": "hello"}),
        "Message: not a JSON object or array",
    ),
    (json.dumps({"Type": "Notification", "TopicArn": "arn"}), "Message: missing"),
    (
        json.dumps({"Type": "Weird", "TopicArn": "arn", "Message": "{}"}),
        "Type: unknown SNS message type 'Weird'",
    ),
    (
        json.dumps({"Type": "Notification", "TopicArn": "arn", "Message": records(without(record(), "s3"))}),
        "Message.Records[0].s3: missing",
    ),
    (json.dumps({"source": "aws.s3", "detail-type": "Object Created"}), "detail: missing"),
    (
        json.dumps(
            {"source": "aws.s3", "detail-type": "Object Created", "detail": {"bucket": {"name": "b"}}}
        ),
        "detail.object: missing",
    ),
]


@pytest.mark.parametrize(("body", "reason"), MALFORMED)
def test_malformed_messages_name_the_problem(body: str, reason: str) -> None:
    with pytest.raises(EventFormatError, match="^" + re.escape(reason)):
        parse_message(body)
    with pytest.raises(EventFormatError, match="^" + re.escape(reason)):
        parse_message(body, format="s3")


def test_not_an_s3_message_when_forced() -> None:
    with pytest.raises(EventFormatError, match=r"body: not an S3 notification \(an object with keys \[a\]\)"):
        parse_message('{"a": 1}', format="s3")
    with pytest.raises(EventFormatError, match=r"source: not an S3 EventBridge event: 'aws\.ec2'"):
        parse_message(json.dumps({"source": "aws.ec2", "detail-type": "x"}), format="s3")
    with pytest.raises(EventFormatError, match="body: not a JSON object or array"):
        parse_message("eyJSZWNvcmRzIjogW119", format="s3")  # base64 is an Azure queue convention only


# --- real moto messages ---------------------------------------------------------------------------


def aws_client(server: MotoServer, service: str) -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=server.endpoint_url,
        aws_access_key_id=server.access_key_id,
        aws_secret_access_key=server.secret_access_key,
        region_name=server.region,
    )


def new_queue(sqs: Any, name: str) -> tuple[str, str]:
    """(url, arn) of a new SQS queue."""
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    return url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def drain(sqs: Any, url: str) -> Iterator[str]:
    """Every message body in the queue (moto delivers notifications before the S3 call returns)."""
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in messages:
            yield message["Body"]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


MOTO_KEYS = ["dir/a b+c%&é.txt", "x#y/ü 100%.bin", "plain", "%2F literal+plus"]


def write_and_delete(s3: Any, bucket: str) -> None:
    """Puts MOTO_KEYS, copies the first, and deletes one key singly and two in a batch."""
    for key in MOTO_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=b"hello")
    s3.copy_object(Bucket=bucket, Key="copy of/é+1", CopySource={"Bucket": bucket, "Key": MOTO_KEYS[0]})
    s3.delete_object(Bucket=bucket, Key=MOTO_KEYS[1])
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": MOTO_KEYS[2]}, {"Key": MOTO_KEYS[3]}]})


EXPECTED_FROM_MOTO = sorted(
    [("created", k, "ObjectCreated:Put") for k in MOTO_KEYS]
    + [("created", "copy of/é+1", "ObjectCreated:Copy")]
    + [("deleted", k, "ObjectRemoved:Delete") for k in MOTO_KEYS[1:]]
)


def events_of(bodies: list[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(sorted (kind, key, event name) of all events, the skip reasons) of ``bodies``."""
    parsed = [parse_message(body) for body in bodies]
    events = sorted((e.kind, e.key, e.event_name) for p in parsed for e in p.events)
    return events, [p.skipped for p in parsed if p.skipped is not None]


def test_moto_sqs_notifications(moto: MotoServer, s3_bucket: str) -> None:
    s3, sqs = s3_client(moto), aws_client(moto, "sqs")
    url, arn = new_queue(sqs, s3_bucket)
    events = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
    s3.put_bucket_notification_configuration(
        Bucket=s3_bucket,
        NotificationConfiguration={"QueueConfigurations": [{"Id": "gc", "QueueArn": arn, "Events": events}]},
    )
    write_and_delete(s3, s3_bucket)
    bodies = list(drain(sqs, url))
    got, skipped = events_of(bodies)
    assert got == EXPECTED_FROM_MOTO
    assert skipped == ["s3:TestEvent"]
    assert {e.bucket for body in bodies for e in parse_message(body).events} == {s3_bucket}


def test_moto_sns_wrapped_and_raw_notifications(moto: MotoServer, s3_bucket: str) -> None:
    s3, sqs, sns = s3_client(moto), aws_client(moto, "sqs"), aws_client(moto, "sns")
    wrapped_url, wrapped_arn = new_queue(sqs, f"{s3_bucket}-sns")
    raw_url, raw_arn = new_queue(sqs, f"{s3_bucket}-raw")
    topic = sns.create_topic(Name=s3_bucket)["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=wrapped_arn)
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=raw_arn, Attributes={"RawMessageDelivery": "true"})
    events = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
    s3.put_bucket_notification_configuration(
        Bucket=s3_bucket,
        NotificationConfiguration={"TopicConfigurations": [{"TopicArn": topic, "Events": events}]},
    )
    write_and_delete(s3, s3_bucket)
    wrapped = list(drain(sqs, wrapped_url))
    assert all(json.loads(body)["Type"] == "Notification" for body in wrapped)
    assert events_of(wrapped) == (EXPECTED_FROM_MOTO, ["s3:TestEvent"])
    assert events_of(list(drain(sqs, raw_url))) == (EXPECTED_FROM_MOTO, ["s3:TestEvent"])


def test_moto_eventbridge(moto: MotoServer, s3_bucket: str) -> None:
    s3, sqs, eventbridge = s3_client(moto), aws_client(moto, "sqs"), aws_client(moto, "events")
    url, arn = new_queue(sqs, s3_bucket)
    rule = f"gc-{uuid.uuid4().hex[:12]}"
    pattern = {"source": ["aws.s3"], "detail": {"bucket": {"name": [s3_bucket]}}}
    eventbridge.put_rule(Name=rule, EventPattern=json.dumps(pattern))
    eventbridge.put_targets(Rule=rule, Targets=[{"Id": "queue", "Arn": arn}])
    s3.put_bucket_notification_configuration(
        Bucket=s3_bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    s3.put_object(Bucket=s3_bucket, Key="plain/key.bin", Body=b"hello")
    s3.put_object(Bucket=s3_bucket, Key="a+b c%25.txt", Body=b"hello")
    s3.delete_object(Bucket=s3_bucket, Key="plain/key.bin")
    got, skipped = events_of(list(drain(sqs, url)))
    assert [(kind, key) for kind, key, _ in got] == [
        # moto sends EventBridge keys raw; we decode as AWS encodes (notifications.md, "What moto sends")
        ("created", "a b c%.txt"),
        ("created", "plain/key.bin"),
        ("deleted", "plain/key.bin"),
    ]
    assert skipped == ["Object Tags Added", "Object Tags Added"]  # moto's extra event per put
