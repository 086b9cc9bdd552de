"""Azure Event Grid blob events, in either schema and any delivery
(docs/formats/notifications.md, "Event Grid schemas").

Shapes: the EventGridEvent schema (``topic``/``subject``/``eventType``/``eventTime``) and
CloudEvents 1.0 (``source``/``subject``/``type``/``time``/``specversion``); a body holds one event or
an array of them (webhook batches); a Storage Queue body may be base64 (decoded by
:func:`lakefs_gc.events.parse.load_json`).

Kinds: ``BlobCreated`` is a create whatever its ``api`` (``PutBlob``, ``PutBlockList``,
``CopyBlob``, HNS ``CreateFile``/``FlushWithClose``): a create the GC hears too early only keeps
an object longer. ``BlobDeleted`` is a delete; ``BlobRenamed`` (HNS) is a delete of the source and
a create of the destination. Every other type (``SubscriptionValidationEvent``, ``BlobTierChanged``,
``DirectoryRenamed``...) is skipped.

Names: container and blob come from ``subject``
(``/blobServices/default/containers/<container>/blobs/<blob>``), as-is: whether ``data.url``
percent-encodes the name is undocumented (notifications.md, "Event Grid data"). ``url`` is
decoded with ``unquote`` (never ``unquote_plus``: ``+`` is a literal in blob URLs) and cross-checked; when
the two disagree the subject wins and the disagreement is only logged, because failing would dead-letter a
real event.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from lakefs_gc.events.fields import (
    Parsed,
    as_mapping,
    at,
    describe,
    first_skip,
    load_json,
    mapping_field,
    optional_size,
    optional_text,
    text_field,
    time_field,
    unquote_etag,
    where,
)
from lakefs_gc.events.model import EventFormatError, Kind, ObjectEvent

if TYPE_CHECKING:
    from azure.core.messaging import CloudEvent

log = logging.getLogger(__name__)

BLOB_CREATED = "Microsoft.Storage.BlobCreated"
BLOB_DELETED = "Microsoft.Storage.BlobDeleted"
BLOB_RENAMED = "Microsoft.Storage.BlobRenamed"
_KINDS: dict[str, Kind] = {BLOB_CREATED: "created", BLOB_DELETED: "deleted"}


@dataclass(frozen=True)
class _Names:
    """Where the two schemas keep the same things."""

    type: str
    time: str
    source: str


_EVENT_GRID_NAMES = _Names(type="eventType", time="eventTime", source="topic")
_CLOUD_EVENT_NAMES = _Names(type="type", time="time", source="source")


def is_azure(doc: object) -> bool:
    """Whether ``doc`` is an Event Grid event, a CloudEvent or a non-empty array of them."""
    if isinstance(doc, list):
        return bool(doc) and _is_event(doc[0])
    return _is_event(doc)


def _is_event(doc: object) -> bool:
    return isinstance(doc, dict) and ("eventType" in doc or "specversion" in doc)


def shape_of(doc: object) -> str:
    """``eventgrid`` or ``cloudevents`` (for logs)."""
    first = doc[0] if isinstance(doc, list) and doc else doc
    return "cloudevents" if isinstance(first, dict) and "specversion" in first else "eventgrid"


def parse_azure(doc: object) -> Parsed:
    """The events of one event or an array of events; :class:`EventFormatError` for anything else."""
    if not isinstance(doc, list):
        return _parse_events([_parse_event(as_mapping(doc, ""), "")])
    if not doc:
        raise EventFormatError("body: an empty array of events")
    return _parse_events([_parse_event(as_mapping(item, at("", i)), at("", i)) for i, item in enumerate(doc)])


def _parse_events(results: list[list[ObjectEvent] | str]) -> Parsed:
    events = [event for result in results if not isinstance(result, str) for event in result]
    return first_skip([result for result in results if isinstance(result, str)], events)


def _parse_event(event: Mapping[str, object], path: str) -> list[ObjectEvent] | str:
    """One event's object events, or its type when skipped."""
    if "specversion" in event:
        version = text_field(event, "specversion", path)
        if version.split(".")[0] != "1":
            raise EventFormatError(f"{at(path, 'specversion')}: unsupported CloudEvents version {version!r}")
        names = _CLOUD_EVENT_NAMES
    elif "eventType" in event:
        names = _EVENT_GRID_NAMES
    else:
        raise EventFormatError(f"{where(path)}: not an Event Grid event or CloudEvent ({describe(event)})")
    event_type = text_field(event, names.type, path)
    if event_type not in (BLOB_CREATED, BLOB_DELETED, BLOB_RENAMED):
        return event_type
    data = _data(event, path)
    blob_event = _blob_event(event, data, names, event_type, path)
    if event_type == BLOB_RENAMED:
        return _renamed(blob_event, data, at(path, "data"))
    return [blob_event]


def _blob_event(
    event: Mapping[str, object], data: Mapping[str, object], names: _Names, event_type: str, path: str
) -> ObjectEvent:
    """The event of the subject's blob (for a rename: the destination, created)."""
    data_path = at(path, "data")
    container, blob = _subject(text_field(event, "subject", path), at(path, "subject"))
    url = optional_text(data, "url", data_path)
    url_account = _cross_check(url, container, blob, at(data_path, "url")) if url else None
    api = optional_text(data, "api", data_path)
    return ObjectEvent(
        store="azure",
        account=_topic_account(optional_text(event, names.source, path)) or url_account or "",
        bucket=container,
        key=blob,
        kind=_KINDS.get(event_type, "created"),
        event_time=time_field(event, names.time, path),
        size=optional_size(data, "contentLength", data_path),
        etag=unquote_etag(optional_text(data, "eTag", data_path)),
        sequencer=optional_text(data, "sequencer", data_path) or None,
        event_name=event_type.removeprefix("Microsoft.Storage.") + (f":{api}" if api else ""),
    )


def _renamed(destination: ObjectEvent, data: Mapping[str, object], path: str) -> list[ObjectEvent]:
    """A rename (HNS) is a delete of ``data.sourceUrl`` and a create of the subject."""
    source_account, container, blob = _url_parts(text_field(data, "sourceUrl", path), at(path, "sourceUrl"))
    destination_url = optional_text(data, "destinationUrl", path)
    if destination_url:
        _cross_check(destination_url, destination.bucket, destination.key, at(path, "destinationUrl"))
    source = replace(
        destination,
        account=destination.account or source_account,
        bucket=container,
        key=blob,
        kind="deleted",
        size=None,
        etag=None,
    )
    return [source, destination]


def _data(event: Mapping[str, object], path: str) -> Mapping[str, object]:
    """``data``, or a CloudEvent's ``data_base64`` holding JSON."""
    if "data" not in event and isinstance(event.get("data_base64"), str):
        try:
            decoded = base64.b64decode(str(event["data_base64"]), validate=True).decode("utf-8")
        except ValueError as e:
            raise EventFormatError(f"{at(path, 'data_base64')}: not base64-encoded UTF-8 ({e})") from e
        data_path = at(path, "data_base64")
        return as_mapping(load_json(decoded, allow_base64=False, path=data_path), data_path)
    return mapping_field(event, "data", path)


def _subject(subject: str, path: str) -> tuple[str, str]:
    """(container, blob) of ``/blobServices/default/containers/<container>/blobs/<blob>``."""
    head, sep, rest = subject.partition("/containers/")
    container, sep2, blob = rest.partition("/blobs/")
    if not (sep and sep2 and head.startswith("/blobServices/") and container and blob):
        raise EventFormatError(
            f"{path}: expected /blobServices/default/containers/<container>/blobs/<blob>, got {subject!r}"
        )
    return container, blob


def _topic_account(topic: str | None) -> str | None:
    """The storage account in ``.../storageAccounts/<account>`` (topic or source), if there."""
    if not topic:
        return None
    _, sep, rest = topic.partition("/storageAccounts/")
    account = rest.split("/", 1)[0]
    return account if sep and account else None


def _url_parts(url: str, path: str) -> tuple[str, str, str]:
    """(account, container, blob) of a blob URL, the name decoded with ``unquote``.

    Host style ``https://<account>.blob.core.windows.net/<container>/<blob>`` (also ``.dfs.``);
    path style (Azurite, an IP or ``localhost`` host) ``http://127.0.0.1:10000/<account>/<container>/<blob>``.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError as e:
        raise EventFormatError(f"{path}: not a URL: {url!r}") from e
    segments = parts.path.lstrip("/")
    if _is_path_style(host):
        account, _, segments = segments.partition("/")
    else:
        account = host.split(".", 1)[0]
    container, _, blob = segments.partition("/")
    if not (account and container and blob):
        raise EventFormatError(f"{path}: not a blob URL (account, container and blob): {url!r}")
    return account, unquote(container), unquote(blob)


def _is_path_style(host: str) -> bool:
    if host == "localhost" or "." not in host:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _cross_check(url: str, container: str, blob: str, path: str) -> str | None:
    """The account of ``url``, after checking that it names the subject's blob.

    A mismatch or an unreadable URL is logged, never an error: the subject is what counts.
    """
    try:
        account, url_container, url_blob = _url_parts(url, path)
    except EventFormatError as e:
        log.warning("%s; using the subject", e)
        return None
    if (url_container, url_blob) != (container, blob):
        log.warning(
            "%s names %s/%s but the subject %s/%s; using the subject",
            path,
            url_container,
            url_blob,
            container,
            blob,
        )
    return account


def cloud_event_body(event: CloudEvent[Any]) -> str:
    """The CloudEvents JSON of ``event`` (as :class:`EventGridConsumerClient` hands it out), which
    :func:`parse_azure` reads back: the queue adapter spools message bodies as strings.

    Extension attributes are top-level members, as in the CloudEvents JSON format; binary data is
    ``data_base64``.
    """
    doc: dict[str, object] = dict(event.extensions or {})
    doc.update(specversion=event.specversion, id=event.id, source=event.source, type=event.type)
    for name in ("subject", "datacontenttype", "dataschema"):
        value = getattr(event, name, None)
        if value is not None:
            doc[name] = value
    if event.time is not None:
        doc["time"] = _iso_utc(event.time)
    if isinstance(event.data, (bytes, bytearray)):
        doc["data_base64"] = base64.b64encode(bytes(event.data)).decode("ascii")
    elif event.data is not None:
        doc["data"] = event.data
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str)


def _iso_utc(when: datetime) -> str:
    """``when`` as ISO 8601 UTC with ``Z`` (a naive time is taken as UTC)."""
    aware = when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
    return aware.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
