"""The spool: queue messages written to files before Spark logs the offset that names them.

Queues are not replayable, and Spark replays a micro-batch after a crash by asking the source for
the same offsets again (docs/formats/spark-data-sources.md, "Replaying a queue"). So the event
source drains the queue on the driver into a spool file ``<seq:012d>.json``, written whole
(:func:`~lakefs_gc.storage.writes.replace_local_file`: flushed, then renamed), and the offset is
that sequence number: a batch is the spool files in ``(start, end]``, read again identically if
Spark re-plans it. A file is deleted only once its messages are acknowledged.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lakefs_gc.errors import GcError
from lakefs_gc.events.queues import QueueMessage
from lakefs_gc.events.routing import utc
from lakefs_gc.storage.writes import replace_local_file


class Spool:
    """Spool files ``<seq:012d>.json`` in a directory, each written once (tmp + rename)."""

    _NAME = re.compile(r"^(\d{12})\.json$")

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, seq: int) -> Path:
        return self.directory / f"{seq:012d}.json"

    def sequences(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := self._NAME.match(n)))

    def write(self, seq: int, messages: Sequence[QueueMessage], received: datetime) -> None:
        """Write ``messages`` as spool file ``seq``, durably: the offset Spark logs next must never
        name a file lost in a crash."""
        body = {
            "seq": seq,
            "received_time": received.isoformat(),
            "messages": [
                {
                    "id": m.id,
                    "receipt": m.receipt,
                    "sent_time": utc(m.sent_time).isoformat() if m.sent_time else None,
                    "body": m.body,
                }
                for m in messages
            ],
        }
        replace_local_file(self.path(seq), json.dumps(body, ensure_ascii=False).encode("utf-8"))

    def read(self, seq: int) -> list[dict[str, Any]]:
        return read_spool_file(self.path(seq))["messages"]  # type: ignore[no-any-return]

    def delete(self, seq: int) -> None:
        self.path(seq).unlink(missing_ok=True)


def read_spool_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            body: dict[str, Any] = json.load(f)
    except (OSError, ValueError) as e:
        raise GcError(f"spool file {path} is unreadable: {e}") from e
    return body
