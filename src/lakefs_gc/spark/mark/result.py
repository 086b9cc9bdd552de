"""What a mark tells its caller: :class:`MarkResult` (the report itself is in the namespace)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakefs_gc.gc.reports import int_or_none


@dataclass(frozen=True)
class MarkResult:
    repository: str
    mark_id: str
    success: bool
    summary: dict[str, Any]
    report_location: str
    storage_namespace: str

    @property
    def marked(self) -> int:
        """Objects marked (listed in ``deleted/``)."""
        return int(self.summary.get("num_deleted_objects", 0))

    @property
    def marked_bytes(self) -> int:
        """Their total size."""
        return int(self.summary.get("num_deleted_bytes", 0) or 0)

    @property
    def monthly_saving(self) -> str | None:
        """The estimated monthly saving of sweeping this mark, ``"<amount> <currency>"`` (None: unknown)."""
        cost = self.summary.get("cost") or {}
        return f"{cost['monthly_saving']} {cost['currency']}" if cost.get("monthly_saving") else None

    @property
    def listed(self) -> int | None:
        """The candidates the mark considered (``None``: a failed mark says nothing)."""
        return int_or_none(self.summary.get("num_listed_objects"))
