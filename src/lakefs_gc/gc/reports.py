"""Mark reports in lakeFS's layout, so lakeFS's Scala job and lakefs-gc can sweep each other's marks.

``<ns>/_lakefs/retention/gc/unified/<mark_id>/`` holds ``summary.json``, ``deleted/`` (parquet,
first column ``address``) and ``deleted.text/`` (docs/formats/lakefs-gc-api.md, "Mark reports").
``summary.json`` is one compact JSON line whose first keys are lakeFS's, in lakeFS's order; ours
follow them.

Written as a :class:`MarkSummary`, read back as a :class:`StoredSummary`: the same fields, typed,
for a summary of either tool, whose body is kept verbatim because a sweep rewrites it with its own
entries (lakeFS's keys first, unknown keys untouched, Java instants with all their digits).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from lakefs_gc.errors import ExitCode, GcError

REPORTS_PREFIX = "_lakefs/retention/gc/unified"
#: ``2025-11-10T10:34:37.245361091Z``: Java's ``Instant.toString`` (up to 9 fraction digits)
_INSTANT = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")


class MarkReportError(GcError):
    """A mark cannot be swept: missing, failed, or its summary is unreadable."""

    exit_code = ExitCode.EXPORT


class UnknownMarkError(MarkReportError):
    """The mark id names no mark of the repository (a wrong argument, not a broken report)."""

    exit_code = ExitCode.SETTINGS


class FailedMarkError(MarkReportError):
    """The mark did not succeed: it can never be swept (docs/invariants.md, invariant 5), whatever
    the flags say."""

    exit_code = ExitCode.REFUSED


def report_dir(mark_id: str) -> str:
    """Namespace-relative directory of a mark's reports."""
    if not mark_id or "/" in mark_id or mark_id in (".", ".."):
        raise UnknownMarkError(f"invalid mark id {mark_id!r}")
    return f"{REPORTS_PREFIX}/{mark_id}/"


@dataclass(frozen=True)
class MarkSummary:
    """A mark's ``summary.json`` as a mark writes it: lakeFS's fields, then ours in ``extra``."""

    run_id: str
    success: bool
    first_slice: str
    start_time_ns: int
    cutoff_time_ns: int
    num_deleted_objects: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "run_id": self.run_id,
            "success": self.success,
            "first_slice": self.first_slice,
            "start_time": format_java_instant(self.start_time_ns),
            "cutoff_time": format_java_instant(self.cutoff_time_ns // 1_000_000 * 1_000_000),
            "num_deleted_objects": self.num_deleted_objects,
        }
        for key, value in self.extra.items():
            if key in body:
                raise ValueError(f"extra summary key {key!r} would shadow lakeFS's")
            body[key] = value
        return json.dumps(body, separators=(",", ":"))


def format_java_instant(epoch_ns: int) -> str:
    """ISO-8601 as Java's ``Instant.toString``: fraction in groups of 3 digits, omitted if zero."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    base = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos == 0:
        return base + "Z"
    digits = f"{nanos:09d}"
    for width in (3, 6):
        if digits[width:] == "0" * (9 - width):
            return f"{base}.{digits[:width]}Z"
    return f"{base}.{digits}Z"


def parse_instant(value: Any) -> datetime | None:
    """``2025-11-10T10:34:37.245361091Z`` (Java's ``Instant``, ns) as a UTC datetime (to the
    microsecond); ``None`` if not one. The inverse of :func:`format_java_instant`."""
    if not isinstance(value, str):
        return None
    match = _INSTANT.fullmatch(value.strip())
    if match is None:
        return None
    base, fraction, zone = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    try:
        parsed = datetime.fromisoformat(f"{base}.{micros}{'+00:00' if zone == 'Z' else zone}")
    except ValueError:
        return None
    return parsed.astimezone(timezone.utc)


def int_or_none(value: Any) -> int | None:
    """A count from a summary: ``None`` when absent or not a number (a bool is not a count)."""
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class StoredSummary:
    """A ``summary.json`` as read back: ours or lakeFS's, checked to be one a sweep may follow.

    The typed properties are what a sweep, a backup and the service read; ``body`` is the JSON
    object verbatim (key order kept), because a sweep rewrites the file with its own entries and
    must leave everything else exactly as it was. Times and counts that are missing or unreadable
    are ``None``: each reader decides what that means (the mark-age guard: an unknown age).
    """

    body: Mapping[str, Any]

    @property
    def run_id(self) -> str:
        return str(self.body.get("run_id"))

    @property
    def success(self) -> bool:
        return self.body.get("success") is True

    @property
    def start_time(self) -> datetime | None:
        """When the mark asked lakeFS what is referenced."""
        return parse_instant(self.body.get("start_time"))

    @property
    def cutoff_time(self) -> datetime | None:
        return parse_instant(self.body.get("cutoff_time"))

    @property
    def num_deleted_objects(self) -> int | None:
        """How many addresses ``deleted/`` lists."""
        return int_or_none(self.body.get("num_deleted_objects"))

    @property
    def num_deleted_bytes(self) -> int | None:
        """Their total size (ours only: lakeFS's ``deleted/`` has no sizes)."""
        return int_or_none(self.body.get("num_deleted_bytes"))

    @property
    def num_listed_objects(self) -> int | None:
        """The namespace's objects the mark considered (ours only): the delete-fraction guard's base."""
        return int_or_none(self.body.get("num_listed_objects"))

    def text(self, key: str) -> str:
        """A field as the file spells it, for messages (``None`` when absent)."""
        return str(self.body.get(key))

    def with_entries(self, entries: Mapping[str, Any]) -> StoredSummary:
        """This summary with ``entries`` set: existing keys keep their place, new ones follow."""
        return StoredSummary({**self.body, **entries})

    def to_json(self) -> str:
        return json.dumps(dict(self.body), separators=(",", ":"))


def parse_summary(text: str, where: str) -> StoredSummary:
    """The summary, checked to be one a sweep may follow (lakeFS's own checks)."""
    try:
        body = json.loads(text)
    except ValueError as e:
        raise MarkReportError(f"{where}: summary.json is not JSON: {e}") from e
    if not isinstance(body, dict) or "run_id" not in body or "success" not in body:
        raise MarkReportError(f"{where}: summary.json lacks run_id/success")
    if body["success"] is not True:
        raise FailedMarkError(f"Provided mark ({body['run_id']}) is of a failed run ({where})")
    return StoredSummary(body)


def check_mark_id(summary: StoredSummary, mark_id: str, where: str) -> None:
    """A summary that names another mark is not this mark's (a copied or misplaced report)."""
    if summary.run_id != mark_id:
        raise MarkReportError(
            f"{where}: summary.json belongs to mark {summary.body.get('run_id')!r}, not {mark_id!r}"
        )


#: where lakeFS writes the exports of a GC run (docs/formats/lakefs-storage.md)
EXPORTS_PREFIX = "_lakefs/retention/gc"
#: a lakeFS run id (an xid): one path segment, nothing a path could climb out with
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
#: the summary keys naming the commits export a mark or its sweep's revalidation asked lakeFS for
COMMITS_EXPORT_RUN_ID = "commits_export_run_id"


def lakefs_exports(mark_id: str, summary: Mapping[str, Any] | None) -> list[str]:
    """The directories (relative to the namespace) of the exports lakeFS wrote for mark ``mark_id``
    and its sweep, as its ``summary`` (None: unreadable) names them: the uncommitted dumps (the
    mark's run id is the mark id; the revalidation's is ``revalidation.run_id``) and the commits
    CSVs (``commits_export_run_id``, at the top and under ``revalidation``).

    Only these are ever removed under ``_lakefs/`` (docs/invariants.md, invariant 3): every
    directory is built from a run id that must be one path segment; anything else is left out.
    """
    summary = summary or {}
    revalidation = summary.get("revalidation")
    revalidation = revalidation if isinstance(revalidation, Mapping) else {}
    dumps = [mark_id, revalidation.get("run_id")]
    commits = [summary.get(COMMITS_EXPORT_RUN_ID), revalidation.get(COMMITS_EXPORT_RUN_ID)]
    found = [f"{EXPORTS_PREFIX}/uncommitted/{r}/" for r in dumps if _is_run_id(r)]
    found += [f"{EXPORTS_PREFIX}/commits/run_id={r}/" for r in commits if _is_run_id(r)]
    return list(dict.fromkeys(found))


def _is_run_id(value: Any) -> bool:
    return isinstance(value, str) and _RUN_ID.match(value) is not None
