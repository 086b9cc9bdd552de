"""The field readers every notification parser shares (:mod:`.s3`, :mod:`.azure`), and
:class:`Parsed`, what a parser returns.

They exist so that every error says *where* (``Records[0].s3.object.key: missing``), never just
"bad JSON": a malformed message goes to the dead-letter file with that reason.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from lakefs_gc.events.model import EventFormatError, ObjectEvent


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


def load_json(text: str, *, allow_base64: bool, path: str = "body") -> object:
    """The JSON document in ``text`` (the member at ``path``); with ``allow_base64`` also a
    base64-encoded one.

    Storage Queue bodies are commonly base64 (notifications.md, "Delivery options"). A JSON
    notification always starts with ``{`` or ``[``, so only a body that does not is tried as base64: a JSON
    body is never mis-decoded.
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
    """ETags arrive both quoted and bare (notifications.md); the model keeps them bare."""
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
