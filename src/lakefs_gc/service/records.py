"""Cycle records: what each GC micro-batch of a repository did, kept in the service's state.

One JSON file per micro-batch that did something, ``<state>/cycles/<repo>/batches/<batch>.json``,
rewritten whole after every step (a local file: temp file + rename; an object: one PUT, which
readers see whole or not at all). This is what makes a cycle
idempotent per batch id (docs/formats/spark-data-sources.md, "Idempotent sinks"): Spark replays
the batch it did not commit after a crash, and the replay reads the record and continues after the last step
it finished, instead of marking twice or forgetting a sweep. A mark that was started but has no recorded
outcome was killed; its report has no ``summary.json`` (or ``success=false``), so it can never be swept, and
the replay marks again. If the replay never comes (Spark committed the batch while the service was
stopping), the next batch records the mark as failed (:data:`~lakefs_gc.service.cycle.INTERRUPTED`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.directories import StoreDirectory


@dataclass
class MarkRecord:
    """A mark a cycle started; ``mark_id`` and ``success`` are set once it ended."""

    started: str  # ISO-8601 UTC
    mark_id: str | None = None
    success: bool | None = None
    ended: str | None = None
    marked: int = 0
    marked_bytes: int = 0
    candidates: int | None = None
    error: str | None = None
    # the sweep of this mark
    sweep: str | None = None  # None: not yet; "done" | "refused" | "failed" | "skipped"
    swept: str | None = None  # when the sweep finished (the candidate set's "deleted at")
    deleted: int = 0
    failed: int = 0  # deletes the sweep reported failed
    sweep_error: str | None = None


@dataclass
class BatchRecord:
    """One micro-batch of a repository's GC query."""

    batch_id: int
    started: str
    marks: list[MarkRecord] = field(default_factory=list)  # started in this batch (at most one)
    swept: list[str] = field(default_factory=list)  # mark ids swept in this batch
    finished: str | None = None


class CycleRecords:
    """All batch records of one repository (loaded once, then kept in memory and on disk)."""

    def __init__(self, directory: Path | StoreDirectory) -> None:
        self.directory = directory if isinstance(directory, StoreDirectory) else StoreDirectory.of(directory)
        self.batches: dict[int, BatchRecord] = {}
        if self.directory.is_local:
            self.directory.local_path.mkdir(parents=True, exist_ok=True)
        for name in self.directory.names():
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = self.directory.uri(name)
            try:
                body = json.loads((self.directory.read(name) or b"").decode())
                marks = [MarkRecord(**m) for m in body.pop("marks", [])]
                self.batches[int(body["batch_id"])] = BatchRecord(**body, marks=marks)
            except (ValueError, TypeError, KeyError) as e:
                raise StorageError(f"{path}: unreadable cycle record ({e}); move it away to continue") from e

    def get(self, batch_id: int, now: datetime) -> BatchRecord:
        record = self.batches.get(batch_id)
        return record if record is not None else BatchRecord(batch_id, now.isoformat())

    def save(self, record: BatchRecord) -> None:
        self.batches[record.batch_id] = record
        self.directory.write(f"{record.batch_id:012d}.json", json.dumps(asdict(record), indent=1).encode())

    def forget(self, batch_id: int) -> None:
        """Remove a batch's record (retention: ``service.keep_reports``)."""
        self.batches.pop(batch_id, None)
        self.directory.delete(f"{batch_id:012d}.json")

    def marks(self) -> list[tuple[BatchRecord, MarkRecord]]:
        """Every mark ever started, oldest first."""
        return [(b, m) for _, b in sorted(self.batches.items()) for m in b.marks]

    def last_mark_start(self) -> MarkRecord | None:
        marks = self.marks()
        return marks[-1][1] if marks else None

    def pending_sweeps(self) -> list[tuple[BatchRecord, MarkRecord]]:
        """Successful marks whose sweep has not ended, with the batch records holding them."""
        return [(b, m) for b, m in self.marks() if m.success and m.sweep is None]

    def last_success(self, *, sweeps: bool = True) -> datetime | None:
        """When the newest successful cycle ended: its sweep deleted everything it was asked to,
        or, for a mark-only repository (``sweeps=False``), its mark succeeded."""
        if sweeps:
            ends = [m.swept for _, m in self.marks() if m.success and m.sweep == "done" and not m.failed]
        else:
            ends = [m.ended for _, m in self.marks() if m.success]
        return max((datetime.fromisoformat(e) for e in ends if e), default=None)

    def summary(self) -> dict[str, Any]:
        done = [m for _, m in self.marks() if m.success]
        return {"marks": len(done), "last_mark": done[-1].mark_id if done else None}
