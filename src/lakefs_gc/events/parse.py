"""One entry point for every queue message: which shape it is, and its object events.

A queue can carry several shapes (cloud-formats.md §3.2, §4.4): the S3 notification JSON, the same
wrapped in an SNS envelope, EventBridge events, Event Grid events and CloudEvents (one or an array,
possibly base64-encoded by the Storage Queue convention) and our own local format.
:func:`parse_message` tells them apart, so one misconfigured subscription does not need its own
source option.

The contract the streaming source relies on: a message is either parsed (events, or a reason it
carries none, which is counted) or raises :class:`EventFormatError` naming the field path (the
message goes to the dead-letter file). Nothing else escapes, whatever the body holds: a parser
crash on one poisoned message must not stall the stream.

The small field readers below are shared by :mod:`.s3` and :mod:`.azure`; they exist so that
every error says *where* (``Records[0].s3.object.key: missing``), never just "bad JSON".
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from lakefs_gc.events.model import EventFormatError, ObjectEvent

Format = Literal["s3", "azure", "local", "auto"]


@dataclass(frozen=True)
class Parsed:
    """The object events of one queue message.

    ``skipped`` says why a well-formed message carries no object event (``"s3:TestEvent"``,
    ``"Object Tags Added"``, ``"Microsoft.EventGrid.SubscriptionValidationEvent"``...): such
    messages are counted and acknowledged, not dead-lettered. It is ``None`` whenever ``events``
    is not empty (a message mixing kept and skipped records reports only its events).
    """

    events: tuple[ObjectEvent, ...]
    skipped: str | None = None


#: what a parser that meets an unexpected type or value may raise before we turn it into
#: EventFormatError (UnicodeError and binascii.Error are ValueErrors; deep JSON nesting raises
#: RecursionError; far-off dates OverflowError)
_PARSE_FAILURES = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, OverflowError)


def parse_message(body: str | bytes, *, format: Format = "auto") -> Parsed:
    """The object events in one queue message ``body``; ``format`` forces one family of shapes.

    Raises :class:`EventFormatError` (and nothing else) for a body that is not a notification we
    understand; its message names the field path.
    """
    try:
        return _dispatch(body, format)
    except EventFormatError:
        raise
    except _PARSE_FAILURES as e:
        raise EventFormatError(f"unreadable {format} notification: {type(e).__name__}: {e}") from e


def format_of(body: str | bytes) -> str:
    """A short name of the body's shape for logs (``s3``, ``s3-sns``, ``s3-eventbridge``,
    ``eventgrid``, ``cloudevents``, ``local``, ``unknown``); never raises."""
    from lakefs_gc.events import azure, s3

    try:
        doc = load_json(_decode(body), allow_base64=True)
        if s3.is_s3(doc):
            return s3.shape_of(doc)
        if azure.is_azure(doc):
            return azure.shape_of(doc)
    except (EventFormatError, *_PARSE_FAILURES):
        return "unknown"
    return "local" if _is_local(doc) else "unknown"


def _dispatch(body: str | bytes, format: Format) -> Parsed:
    from lakefs_gc.events import azure, s3

    text = _decode(body)
    if format == "local":
        return _parse_local(text)
    doc = load_json(text, allow_base64=format != "s3")
    if format == "s3":
        return s3.parse_s3(doc)
    if format == "azure":
        return azure.parse_azure(doc)
    if s3.is_s3(doc):
        return s3.parse_s3(doc)
    if azure.is_azure(doc):
        return azure.parse_azure(doc)
    if _is_local(doc):
        return _parse_local(text)
    raise EventFormatError(
        f"body: not an S3, Event Grid, CloudEvents or local notification ({describe(doc)})"
    )


def _is_local(doc: object) -> bool:
    """Whether ``doc`` is in :mod:`.local`'s format: its events carry a ``lakefs_gc_event`` version."""
    first = doc[0] if isinstance(doc, list) and doc else doc
    return isinstance(first, dict) and "lakefs_gc_event" in first


def _parse_local(text: str) -> Parsed:
    """The local format is parsed by its owner module, imported only when a local message comes."""
    from lakefs_gc.events.local import parse_local_body

    return Parsed(tuple(parse_local_body(text)))


def _decode(body: str | bytes) -> str:
    if isinstance(body, str):
        return body
    try:
        return bytes(body).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise EventFormatError(f"body: not UTF-8 text (byte {e.start})") from e


def load_json(text: str, *, allow_base64: bool, path: str = "body") -> object:
    """The JSON document in ``text`` (the member at ``path``); with ``allow_base64`` also a
    base64-encoded one.

    Storage Queue bodies are commonly base64 (§4.4). A JSON notification always starts with ``{``
    or ``[``, so only a body that does not is tried as base64: a JSON body is never mis-decoded.
    """
    stripped = text.strip().lstrip("\ufeff")
    if not stripped:
        raise EventFormatError(f"{path}: empty")
    if stripped[0] in "{[":
        return _loads(stripped, path)
    if not allow_base64:
        raise EventFormatError(f"{path}: not a JSON object or array (starts with {stripped[:16]!r})")
    try:
        decoded = base64.b64decode(stripped, validate=True).decode("utf-8").strip()
    except (binascii.Error, UnicodeDecodeError) as e:
        raise EventFormatError(
            f"{path}: neither JSON nor base64-encoded JSON (starts with {stripped[:16]!r}: {e})"
        ) from e
    if not decoded.startswith(("{", "[")):
        raise EventFormatError(f"{path}: base64-decoded, but not a JSON object or array ({decoded[:16]!r})")
    return _loads(decoded, f"{path} (base64-decoded)")


def _loads(text: str, path: str) -> object:
    try:
        return json.loads(text)
    except RecursionError as e:
        raise EventFormatError(f"{path}: JSON nested too deeply") from e
    except ValueError as e:
        raise EventFormatError(f"{path}: not valid JSON ({e})") from e


# --- field readers shared by the parsers ----------------------------------------------------------


def at(path: str, name: str | int) -> str:
    """The path of member ``name`` (a key or an array index) of the value at ``path``."""
    if isinstance(name, int):
        return f"{path}[{name}]"
    return f"{path}.{name}" if path else name


def where(path: str) -> str:
    return path or "body"


def describe(value: object) -> str:
    """What a JSON value is, for error messages (an object by its first keys)."""
    if isinstance(value, dict):
        keys = ", ".join(sorted(str(k) for k in value)[:8])
        return f"an object with keys [{keys}]"
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def as_mapping(value: object, path: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise EventFormatError(f"{where(path)}: expected an object, got {describe(value)}")
    return value


def member(obj: Mapping[str, object], name: str, path: str) -> object:
    if name not in obj:
        raise EventFormatError(f"{at(path, name)}: missing")
    return obj[name]


def mapping_field(obj: Mapping[str, object], name: str, path: str) -> Mapping[str, object]:
    return as_mapping(member(obj, name, path), at(path, name))


def text_field(obj: Mapping[str, object], name: str, path: str) -> str:
    """A required, non-empty string member."""
    value = member(obj, name, path)
    if not isinstance(value, str) or not value:
        raise EventFormatError(f"{at(path, name)}: expected a non-empty string, got {describe(value)}")
    return value


def optional_text(obj: Mapping[str, object], name: str, path: str) -> str | None:
    value = obj.get(name)
    if value is None or isinstance(value, str):
        return value
    raise EventFormatError(f"{at(path, name)}: expected a string, got {describe(value)}")


def optional_size(obj: Mapping[str, object], name: str, path: str) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EventFormatError(f"{at(path, name)}: expected a size in bytes, got {value!r}")
    return value


def unquote_etag(etag: str | None) -> str | None:
    """ETags arrive both quoted and bare (§3.1, §4.3); the model keeps them bare."""
    if etag is None:
        return None
    return etag.strip().strip('"') or None


_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})", re.IGNORECASE)


def time_field(obj: Mapping[str, object], name: str, path: str) -> datetime:
    """An ISO 8601 time with a zone (``Z`` or an offset), as tz-aware UTC.

    Any number of fraction digits is accepted and truncated to microseconds: S3 sends 3 or none,
    Event Grid 7 (``2017-06-26T18:41:00.9584103Z``), which ``datetime.fromisoformat`` rejects on
    Python 3.10. A time without a zone is refused rather than guessed.
    """
    value = text_field(obj, name, path)
    match = _TIME.fullmatch(value.strip())
    if match is None:
        raise EventFormatError(f"{at(path, name)}: not an ISO 8601 time with a zone: {value!r}")
    date, clock, fraction, zone = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    offset = "+00:00" if zone.upper() == "Z" else zone
    try:
        return datetime.fromisoformat(f"{date}T{clock}.{micros}{offset}").astimezone(timezone.utc)
    except (ValueError, OverflowError) as e:
        raise EventFormatError(f"{at(path, name)}: not a valid time: {value!r} ({e})") from e


def first_skip(reasons: list[str], events: list[ObjectEvent]) -> Parsed:
    """The Parsed of a message whose parts gave ``events`` and skipped ``reasons``."""
    if events:
        return Parsed(tuple(events))
    return Parsed((), reasons[0] if reasons else None)
