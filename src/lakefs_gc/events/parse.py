"""One entry point for every queue message: which shape it is, and its object events.

A queue can carry several shapes (docs/formats/notifications.md, "Delivery wrappers" and "Delivery
options"): the S3 notification JSON, the same
wrapped in an SNS envelope, EventBridge events, Event Grid events and CloudEvents (one or an array,
possibly base64-encoded by the Storage Queue convention) and our own local format.
:func:`parse_message` tells them apart, so one misconfigured subscription does not need its own
source option.

The contract the streaming source relies on: a message is either parsed (events, or a reason it
carries none, which is counted) or raises :class:`EventFormatError` naming the field path (the
message goes to the dead-letter file). Nothing else escapes, whatever the body holds: a parser
crash on one poisoned message must not stall the stream.

The field readers the parsers share are in :mod:`.fields`.
"""

from __future__ import annotations

from typing import Literal

from lakefs_gc.events.fields import Parsed, describe, load_json
from lakefs_gc.events.model import EventFormatError

Format = Literal["s3", "azure", "local", "auto"]


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
