"""Mark reports in lakeFS's layout, so lakeFS's Scala job and lakefs-gc can sweep each other's marks.

``<ns>/_lakefs/retention/gc/unified/<mark_id>/`` holds ``summary.json``, ``deleted/`` (parquet,
first column ``address``) and ``deleted.text/`` (internals §2.5). ``summary.json`` is one compact
JSON line whose first keys are lakeFS's, in lakeFS's order; ours follow them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from lakefs_gc.errors import ExitCode, GcError

REPORTS_PREFIX = "_lakefs/retention/gc/unified"


class MarkReportError(GcError):
    """A mark cannot be swept: missing, failed, or its summary is unreadable."""

    exit_code = ExitCode.EXPORT


class UnknownMarkError(MarkReportError):
    """The mark id names no mark of the repository (a wrong argument, not a broken report)."""

    exit_code = ExitCode.SETTINGS


class FailedMarkError(MarkReportError):
    """The mark did not succeed: it can never be swept (invariant 5), whatever the flags say."""

    exit_code = ExitCode.REFUSED


def report_dir(mark_id: str) -> str:
    """Namespace-relative directory of a mark's reports."""
    if not mark_id or "/" in mark_id or mark_id in (".", ".."):
        raise UnknownMarkError(f"invalid mark id {mark_id!r}")
    return f"{REPORTS_PREFIX}/{mark_id}/"


@dataclass(frozen=True)
class MarkSummary:
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


def parse_summary(text: str, where: str) -> dict[str, Any]:
    """The summary as a dict, checked to be one a sweep may follow (lakeFS's own checks)."""
    try:
        body = json.loads(text)
    except ValueError as e:
        raise MarkReportError(f"{where}: summary.json is not JSON: {e}") from e
    if not isinstance(body, dict) or "run_id" not in body or "success" not in body:
        raise MarkReportError(f"{where}: summary.json lacks run_id/success")
    if body["success"] is not True:
        raise FailedMarkError(f"Provided mark ({body['run_id']}) is of a failed run ({where})")
    return body
