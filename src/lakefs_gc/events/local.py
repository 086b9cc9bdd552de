"""The demo's own notification format: one JSON file per message in a directory ("local queue").

A local blockstore has no notification service, so the lakeFS-compatible test server writes one
(:class:`LocalEventWriter`) and the streaming service drains the directory like a queue (its
``DirectoryQueue`` reads ``*.json`` in name order, ignores ``*.tmp`` and deletes a file once
acknowledged). A message body is one event object or a JSON array of them::

    {"lakefs_gc_event": 1, "kind": "created", "path": "/abs/path/of/object",
     "time": "2024-05-01T12:00:00.123456Z", "size": 42, "sequencer": "0017d1c0a2b3c4d5000001"}

``size`` is present on ``created`` only. ``sequencer`` is 16 or more hex digits that increase per
writer, so two events of one object order like S3's and Azure's (:func:`~.model.sequencer_order`).
The key of a local event is the absolute path without its leading ``/``, which is how
:class:`~lakefs_gc.inventory.mapping.NamespaceRoute` routes a ``local://`` namespace.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time as _time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakefs_gc.events.model import EventFormatError, Kind, ObjectEvent

#: the value of the ``lakefs_gc_event`` field this module writes and reads
LOCAL_EVENT_VERSION = 1
#: a message file's name ends with this; anything else in the directory is not a message
MESSAGE_SUFFIX = ".json"
#: a message being written; renamed to its final name once complete
TEMP_SUFFIX = ".tmp"

_SEQUENCER = re.compile(r"[0-9a-f]{16,}")
_KINDS: tuple[Kind, ...] = ("created", "deleted")


def parse_local_body(body: str | bytes) -> list[ObjectEvent]:
    """The events of one message, or :class:`EventFormatError` naming the offending field.

    Unknown fields are ignored (a newer writer may add some); everything this format defines is
    checked, because a wrong path or time would make the collector reason about the wrong object.
    """
    if isinstance(body, bytes | bytearray):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError as e:
            raise EventFormatError(f"local event message is not UTF-8 text (byte {e.start})") from e
    try:
        document = json.loads(body)
    except json.JSONDecodeError as e:
        raise EventFormatError(
            f"local event message is not JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from e
    except RecursionError as e:
        raise EventFormatError("local event message is not JSON: nested too deeply") from e
    if isinstance(document, list):
        return [_parse_event(item, f"$[{i}]") for i, item in enumerate(document)]
    return [_parse_event(document, "$")]


def _parse_event(item: Any, where: str) -> ObjectEvent:
    if not isinstance(item, dict):
        raise EventFormatError(f"local event {where}: expected a JSON object, got {_type(item)}")
    version = item.get("lakefs_gc_event")
    if version != LOCAL_EVENT_VERSION or isinstance(version, bool):
        got = "missing" if "lakefs_gc_event" not in item else repr(version)
        raise EventFormatError(
            f"local event {where}.lakefs_gc_event: expected {LOCAL_EVENT_VERSION}, got {got} "
            "(not a lakefs-gc local event, or a version this release does not read)"
        )
    kind = _kind(item, where)
    return ObjectEvent(
        store="local",
        bucket="",
        key=_path(item, where)[1:],
        kind=kind,
        event_time=_time_field(item, where),
        size=_size(item, where, kind),
        sequencer=_sequencer(item, where),
        event_name=f"local:{kind}",
    )


def _kind(item: Mapping[str, Any], where: str) -> Kind:
    kind = _required(item, "kind", where)
    for known in _KINDS:
        if kind == known:
            return known
    raise EventFormatError(f"local event {where}.kind: expected 'created' or 'deleted', got {kind!r}")


def _path(item: Mapping[str, Any], where: str) -> str:
    path = _string(item, "path", where)
    segments = path.split("/")[1:]
    if not path.startswith("/") or path.endswith("/") or "\x00" in path:
        raise EventFormatError(f"local event {where}.path: expected an absolute file path, got {path!r}")
    if any(s in ("", ".", "..") for s in segments):
        raise EventFormatError(f"local event {where}.path: not a normalized path: {path!r}")
    return path


def _time_field(item: Mapping[str, Any], where: str) -> datetime:
    text = _string(item, "time", where)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as e:
        raise EventFormatError(f"local event {where}.time: not an ISO 8601 time: {text!r}") from e
    if parsed.tzinfo is None or "T" not in text.upper():
        raise EventFormatError(
            f"local event {where}.time: expected a date and time with a UTC offset (…Z), got {text!r}"
        )
    return parsed.astimezone(timezone.utc)


def _size(item: Mapping[str, Any], where: str, kind: Kind) -> int | None:
    size = item.get("size")
    if kind == "deleted":
        if size is not None:
            raise EventFormatError(f"local event {where}.size: a 'deleted' event has no size, got {size!r}")
        return None
    if size is None:
        raise EventFormatError(f"local event {where}.size: missing (required on 'created')")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise EventFormatError(f"local event {where}.size: expected a non-negative integer, got {size!r}")
    return size


def _sequencer(item: Mapping[str, Any], where: str) -> str:
    sequencer = _string(item, "sequencer", where).lower()
    if not _SEQUENCER.fullmatch(sequencer):
        raise EventFormatError(
            f"local event {where}.sequencer: expected 16 or more hex digits, got {item['sequencer']!r}"
        )
    return sequencer


def _required(item: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in item or item[name] is None:
        raise EventFormatError(f"local event {where}.{name}: missing")
    return item[name]


def _string(item: Mapping[str, Any], name: str, where: str) -> str:
    value = _required(item, name, where)
    if not isinstance(value, str):
        raise EventFormatError(f"local event {where}.{name}: expected a string, got {_type(value)}")
    return value


def _type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def format_event_time(when: datetime) -> str:
    """ISO 8601 in UTC with ``Z`` and microseconds, as the ``time`` field carries it."""
    if when.tzinfo is None:
        raise ValueError(f"event time {when!r} has no time zone")
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def local_event(
    kind: Kind, path: str, when: datetime, sequencer: str, size: int | None = None
) -> dict[str, Any]:
    """One event object of a message body (the inverse of :func:`parse_local_body`)."""
    event: dict[str, Any] = {
        "lakefs_gc_event": LOCAL_EVENT_VERSION,
        "kind": kind,
        "path": path,
        "time": format_event_time(when),
    }
    if kind == "created":
        event["size"] = size
    event["sequencer"] = sequencer
    return event


class LocalEventWriter:
    """Writes one message file per event into ``directory``, atomically and in order.

    Files are written as ``<name>.tmp`` and renamed, so a reader never sees half a message. The
    name starts with a per-writer strictly increasing nanosecond stamp, and the write and rename
    happen under one lock, so within one writer a file never appears after a later-named one: a
    reader going through the directory in name order cannot skip a message that shows up late.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._last_stamp = 0
        self._counter = 0
        self._pid = os.getpid()

    def created(self, path: str | os.PathLike[str], size: int, time: datetime) -> Path:
        """Record that the object at absolute ``path`` was written with ``size`` bytes at ``time``."""
        if size < 0:
            raise ValueError(f"object size {size} is negative")
        return self._write("created", os.fspath(path), time, size)

    def deleted(self, path: str | os.PathLike[str], time: datetime) -> Path:
        """Record that the object at absolute ``path`` was deleted at ``time``."""
        return self._write("deleted", os.fspath(path), time, None)

    def _write(self, kind: Kind, path: str, when: datetime, size: int | None) -> Path:
        if not path.startswith("/"):
            raise ValueError(f"event path {path!r} is not absolute")
        with self._lock:
            stamp = max(_time.time_ns(), self._last_stamp + 1)
            self._last_stamp = stamp
            self._counter += 1
            sequencer = f"{stamp:020x}{self._counter:06x}"
            body = json.dumps(local_event(kind, path, when, sequencer, size), separators=(",", ":"))
            name = f"{stamp:020d}-{self._pid}-{self._counter:06d}{MESSAGE_SUFFIX}"
            final = self.directory / name
            temp = self.directory / (name + TEMP_SUFFIX)
            temp.write_text(body + "\n", encoding="utf-8")
            os.replace(temp, final)
            return final
