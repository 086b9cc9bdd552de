"""Cycle records: what each GC micro-batch of a repository did, kept in the service's state.

One JSON file per micro-batch that did something, ``<state>/cycles/<repo>/batches/<batch>.json``,
rewritten atomically (temp file + rename) after every step. This is what makes a cycle
idempotent per batch id (docs/formats/spark-data-sources.md, "Idempotent sinks"): Spark replays
the batch it did not commit after a crash, and the replay reads the record and continues after the last step
it finished, instead of marking twice or forgetting a sweep. A mark that was started but has no recorded
outcome was killed; its report has no ``summary.json`` (or ``success=false``), so it can never be swept, and
the replay marks again.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from lakefs_gc.errors import StorageError


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

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.batches: dict[int, BatchRecord] = {}
        directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(directory.glob("*.json")):
            try:
                body = json.loads(path.read_text())
                marks = [MarkRecord(**m) for m in body.pop("marks", [])]
                self.batches[int(body["batch_id"])] = BatchRecord(**body, marks=marks)
            except (OSError, ValueError, TypeError, KeyError) as e:
                raise StorageError(f"{path}: unreadable cycle record ({e}); move it away to continue") from e

    def get(self, batch_id: int, now: datetime) -> BatchRecord:
        record = self.batches.get(batch_id)
        return record if record is not None else BatchRecord(batch_id, now.isoformat())

    def save(self, record: BatchRecord) -> None:
        self.batches[record.batch_id] = record
        path = self.directory / f"{record.batch_id:012d}.json"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(asdict(record), indent=1))
            os.replace(tmp, path)
        except OSError as e:
            raise StorageError(f"cannot write cycle record {path}: {e}") from e

    def forget(self, batch_id: int) -> None:
        """Remove a batch's record (retention: ``service.keep_reports``)."""
        self.batches.pop(batch_id, None)
        (self.directory / f"{batch_id:012d}.json").unlink(missing_ok=True)

    def marks(self) -> list[tuple[BatchRecord, MarkRecord]]:
        """Every mark ever started, oldest first."""
        return [(b, m) for _, b in sorted(self.batches.items()) for m in b.marks]

    def last_mark_start(self) -> MarkRecord | None:
        marks = self.marks()
        return marks[-1][1] if marks else None

    def pending_sweeps(self) -> list[tuple[BatchRecord, MarkRecord]]:
        """Successful marks whose sweep has not ended, with the batch records holding them."""
        return [(b, m) for b, m in self.marks() if m.success and m.sweep is None]

    def summary(self) -> dict[str, Any]:
        done = [m for _, m in self.marks() if m.success]
        return {"marks": len(done), "last_mark": done[-1].mark_id if done else None}
