"""S3 event notifications, however they reach the queue
(docs/formats/notifications.md, "S3 notification records").

Shapes: the notification JSON (``{"Records": [...]}``) sent to SQS directly or by SNS with raw
delivery; the same as a string in the ``Message`` of an SNS envelope; EventBridge events
(``source: aws.s3``); and the ``s3:TestEvent`` S3 sends when a configuration is saved (plain or
SNS-wrapped), which carries no object and is skipped.

Keys: the notification format URL-encodes keys form style (``red flower.jpg`` arrives as
``red+flower.jpg``, moto also encodes ``/`` as ``%2F``), so they are decoded with
``unquote_plus``. EventBridge keys are decoded the same way, as AWS encodes them too
(notifications.md, "Delivery wrappers"); moto 5.2.5 sends EventBridge keys raw (notifications.md,
"What moto sends"), so under moto a key holding ``+`` or ``%XX`` comes out wrong — a test
deviation we accept rather than guess per message.

Kinds: ``ObjectCreated:*`` is a create; ``ObjectRemoved:Delete``/``DeleteMarkerCreated`` and
``LifecycleExpiration:Delete``/``DeleteMarkerCreated`` are deletes; everything else (restore,
replication, tagging, ACL, tiering, lifecycle transition...) is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote_plus

from lakefs_gc.events.fields import (
    Parsed,
    as_mapping,
    at,
    describe,
    first_skip,
    load_json,
    mapping_field,
    member,
    optional_size,
    optional_text,
    text_field,
    time_field,
    unquote_etag,
    where,
)
from lakefs_gc.events.model import EventFormatError, Kind, ObjectEvent

TEST_EVENT = "s3:TestEvent"
_DELETES = frozenset(
    {
        "ObjectRemoved:Delete",
        "ObjectRemoved:DeleteMarkerCreated",
        "LifecycleExpiration:Delete",
        "LifecycleExpiration:DeleteMarkerCreated",
    }
)
_EVENTBRIDGE_KINDS: dict[str, Kind] = {"Object Created": "created", "Object Deleted": "deleted"}
#: SNS envelope types that are not notifications (SQS subscriptions across accounts get these)
_SNS_CONTROL = frozenset({"SubscriptionConfirmation", "UnsubscribeConfirmation"})


def is_s3(doc: object) -> bool:
    """Whether ``doc`` has one of the S3 shapes (a cheap look at its top-level keys)."""
    if not isinstance(doc, dict):
        return False
    return (
        "Records" in doc
        or "Event" in doc
        or _is_sns_envelope(doc)
        or (doc.get("source") == "aws.s3" and "detail-type" in doc)
    )


def shape_of(doc: object) -> str:
    """``s3``, ``s3-sns``, ``s3-eventbridge`` or ``s3-test`` (for logs)."""
    if not isinstance(doc, dict):
        return "unknown"
    if _is_sns_envelope(doc):
        return "s3-sns"
    if "detail-type" in doc:
        return "s3-eventbridge"
    return "s3-test" if "Event" in doc and "Records" not in doc else "s3"


def parse_s3(doc: object, path: str = "") -> Parsed:
    """The events of one S3-family document; :class:`EventFormatError` for anything else."""
    obj = as_mapping(doc, path)
    if _is_sns_envelope(obj):
        if path:
            raise EventFormatError(f"{path}: an SNS envelope inside an SNS envelope")
        return _parse_sns(obj)
    if "Records" in obj:
        return _parse_records(obj, path)
    if "Event" in obj:
        return _parse_service_event(obj, path)
    if obj.get("source") == "aws.s3" or "detail-type" in obj:
        return _parse_eventbridge(obj, path)
    raise EventFormatError(f"{where(path)}: not an S3 notification ({describe(obj)})")


def _is_sns_envelope(doc: Mapping[str, object]) -> bool:
    return "TopicArn" in doc and "Type" in doc


def _parse_sns(envelope: Mapping[str, object]) -> Parsed:
    kind = text_field(envelope, "Type", "")
    if kind in _SNS_CONTROL:
        return Parsed((), f"SNS {kind}")
    if kind != "Notification":
        raise EventFormatError(f"Type: unknown SNS message type {kind!r}")
    message = member(envelope, "Message", "")
    if not isinstance(message, str):
        raise EventFormatError(
            f"Message: expected the S3 notification as a JSON string, got {describe(message)}"
        )
    return parse_s3(load_json(message, allow_base64=False, path="Message"), "Message")


def _parse_service_event(obj: Mapping[str, object], path: str) -> Parsed:
    event = text_field(obj, "Event", path)
    if event != TEST_EVENT:
        raise EventFormatError(f"{at(path, 'Event')}: unknown S3 service event {event!r} (no Records)")
    return Parsed((), TEST_EVENT)


def _parse_records(obj: Mapping[str, object], path: str) -> Parsed:
    records_path = at(path, "Records")
    records = member(obj, "Records", path)
    if not isinstance(records, list):
        raise EventFormatError(f"{records_path}: expected an array, got {describe(records)}")
    if not records:
        raise EventFormatError(f"{records_path}: empty")
    events: list[ObjectEvent] = []
    skipped: list[str] = []
    for i, record in enumerate(records):
        parsed = _parse_record(as_mapping(record, at(records_path, i)), at(records_path, i))
        if isinstance(parsed, str):
            skipped.append(parsed)
        else:
            events.append(parsed)
    return first_skip(skipped, events)


def _record_kind(event_name: str) -> Kind | None:
    if event_name.startswith("ObjectCreated:"):
        return "created"
    return "deleted" if event_name in _DELETES else None


def _parse_record(record: Mapping[str, object], path: str) -> ObjectEvent | str:
    """One record's event, or its event name when the kind is skipped."""
    version = text_field(record, "eventVersion", path)
    if version.split(".")[0] != "2":
        raise EventFormatError(f"{at(path, 'eventVersion')}: unsupported version {version!r} (expected 2.x)")
    source = optional_text(record, "eventSource", path)
    if source is not None and not source.endswith(":s3"):
        raise EventFormatError(f"{at(path, 'eventSource')}: not an S3 event source: {source!r}")
    # S3-compatible stores (MinIO) prefix names with "s3:"; AWS does not
    event_name = text_field(record, "eventName", path).removeprefix("s3:")
    kind = _record_kind(event_name)
    if kind is None:
        return event_name
    s3_path = at(path, "s3")
    s3 = mapping_field(record, "s3", path)
    bucket = mapping_field(s3, "bucket", s3_path)
    object_path = at(s3_path, "object")
    obj = mapping_field(s3, "object", s3_path)
    return ObjectEvent(
        store="s3",
        bucket=text_field(bucket, "name", at(s3_path, "bucket")),
        key=_decode_key(obj, "key", object_path),
        kind=kind,
        event_time=time_field(record, "eventTime", path),
        size=optional_size(obj, "size", object_path),
        etag=unquote_etag(optional_text(obj, "eTag", object_path)),
        sequencer=optional_text(obj, "sequencer", object_path) or None,
        version_id=_version_id(optional_text(obj, "versionId", object_path)),
        event_name=event_name,
    )


def _parse_eventbridge(obj: Mapping[str, object], path: str) -> Parsed:
    source = member(obj, "source", path)
    if source != "aws.s3":
        raise EventFormatError(f"{at(path, 'source')}: not an S3 EventBridge event: {source!r}")
    detail_type = text_field(obj, "detail-type", path)
    kind = _EVENTBRIDGE_KINDS.get(detail_type)
    if kind is None:
        return Parsed((), detail_type)
    detail_path = at(path, "detail")
    detail = mapping_field(obj, "detail", path)
    object_path = at(detail_path, "object")
    target = mapping_field(detail, "object", detail_path)
    reason = optional_text(detail, "reason", detail_path)
    # AWS spells it "etag"; moto 5.2.5 "eTag" (notifications.md, "What moto sends")
    etag = optional_text(target, "etag", object_path) or optional_text(target, "eTag", object_path)
    event = ObjectEvent(
        store="s3",
        bucket=text_field(mapping_field(detail, "bucket", detail_path), "name", at(detail_path, "bucket")),
        key=_decode_key(target, "key", object_path),
        kind=kind,
        event_time=time_field(obj, "time", path),
        size=optional_size(target, "size", object_path),
        etag=unquote_etag(etag),
        sequencer=optional_text(target, "sequencer", object_path) or None,
        version_id=_version_id(optional_text(target, "version-id", object_path)),
        event_name=f"{detail_type}:{reason}" if reason else detail_type,
    )
    return Parsed((event,))


def _decode_key(obj: Mapping[str, object], name: str, path: str) -> str:
    raw = text_field(obj, name, path)
    try:
        key = unquote_plus(raw, errors="strict")
    except UnicodeDecodeError as e:
        raise EventFormatError(f"{at(path, name)}: percent-escapes are not UTF-8: {raw!r}") from e
    if not key:
        raise EventFormatError(f"{at(path, name)}: decodes to an empty key: {raw!r}")
    return key


def _version_id(value: str | None) -> str | None:
    """S3 (and moto's EventBridge) write ``"null"`` for an object of an unversioned bucket."""
    return None if value in (None, "", "null") else value
