"""The delivery log: which inventory deliveries the streaming ingest has admitted, in order.

Spark's exactly-once needs a *replayable* source: after a crash, batch N is re-planned from the
offsets in its write-ahead log and must yield the same data (docs/formats/spark-data-sources.md,
"Replaying a queue").
An inventory destination is not replayable on its own: deliveries appear late (a checksum
written hours after its manifest), expire (lifecycle rules), and are discovered in any order.
So the source appends every newly found delivery, complete or rejected, to this log *before*
offering it in an offset, and an offset is simply "the first N entries of the log". Entry N is
one small JSON file (``<log>/<N:08d>.json``), written once and never changed, so the log works
on any store ``pyarrow.fs`` reaches and replays the verified manifest even if the destination
later loses it.

A rejected delivery is admitted too, with its reason: the ingest report must name it once, and
it must not be re-examined (and re-reported) on every trigger.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import pyarrow.fs as pafs

from lakefs_gc.inventory.delivery import DataFile, Delivery, DiscoveryResult, InventoryError
from lakefs_gc.storage.reads import read_whole
from lakefs_gc.storage.writes import write_whole


@dataclass(frozen=True)
class LogEntry:
    """One admitted delivery: a verified manifest to ingest, or the reason it was rejected."""

    seq: int  # position in the log, from 0
    id: str  # the manifest path (Delivery.id)
    delivery: Delivery | None  # None when rejected at discovery
    error: str | None = None

    @property
    def rejected(self) -> bool:
        return self.delivery is None


class DeliveryLog:
    """An append-only log of admitted deliveries under ``path`` in ``fs``."""

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self.fs, self.path = fs, path.rstrip("/")

    def entries(self) -> list[LogEntry]:
        """Every entry, in order; a gap or an unreadable entry is an error (never a shorter log)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        # a hidden name is an entry's write a kill interrupted (storage.writes.write_whole), not an entry
        files = (i.base_name for i in infos if i.type == pafs.FileType.File)
        names = sorted(n for n in files if not n.startswith("."))
        if names != [_name(seq) for seq in range(len(names))]:
            raise InventoryError(f"{self.path}: the delivery log has gaps or foreign files: {names[:3]}")
        return [self.entry(seq) for seq in range(len(names))]

    def entry(self, seq: int) -> LogEntry:
        path = f"{self.path}/{_name(seq)}"
        try:
            return _entry_from_json(json.loads(read_whole(self.fs, path)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InventoryError(f"{path}: unreadable delivery log entry: {e}") from e

    def admit(self, found: DiscoveryResult) -> list[LogEntry]:
        """Append the deliveries of ``found`` not yet in the log; return the new entries.

        Complete deliveries go oldest snapshot first; rejected ones (known by manifest path)
        after them. Pending deliveries are not admitted: they are "not yet".
        """
        known = {e.id for e in self.entries()}
        seq = len(known)
        added: list[LogEntry] = []
        for delivery in sorted(found.complete, key=lambda d: (d.snapshot_time, d.id)):
            if delivery.id not in known:
                added.append(LogEntry(seq + len(added), delivery.id, delivery))
                known.add(delivery.id)
        for error in found.rejected:
            manifest = error.manifest_path or str(error)
            if manifest not in known:
                added.append(LogEntry(seq + len(added), manifest, None, str(error)))
                known.add(manifest)
        for entry in added:
            self._write(entry)
        return added

    def _write(self, entry: LogEntry) -> None:
        body = json.dumps(_entry_to_json(entry), indent=1).encode()
        write_whole(self.fs, f"{self.path}/{_name(entry.seq)}", body)


def _name(seq: int) -> str:
    return f"{seq:08d}.json"


def delivery_to_json(delivery: Delivery) -> dict[str, Any]:
    body = asdict(delivery)
    body["snapshot_time"] = delivery.snapshot_time.isoformat()
    return body


def delivery_from_json(body: dict[str, Any]) -> Delivery:
    files = tuple(DataFile(**f) for f in body["files"])
    return Delivery(
        id=body["id"],
        flavour=body["flavour"],
        manifest_path=body["manifest_path"],
        snapshot_time=datetime.fromisoformat(body["snapshot_time"]),
        source=body["source"],
        columns=tuple(body["columns"]),
        files=files,
        versioned=bool(body.get("versioned", False)),
    )


def _entry_to_json(entry: LogEntry) -> dict[str, Any]:
    delivery = delivery_to_json(entry.delivery) if entry.delivery else None
    return {"seq": entry.seq, "id": entry.id, "error": entry.error, "delivery": delivery}


def _entry_from_json(body: dict[str, Any]) -> LogEntry:
    delivery = delivery_from_json(body["delivery"]) if body.get("delivery") else None
    return LogEntry(int(body["seq"]), str(body["id"]), delivery, body.get("error"))
