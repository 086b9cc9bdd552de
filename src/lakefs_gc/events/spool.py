"""The spool: queue messages written to files before Spark logs the offset that names them.

Queues are not replayable, and Spark replays a micro-batch after a crash by asking the source for
the same offsets again (docs/formats/spark-data-sources.md, "Replaying a queue"). So the event
source drains the queue on the driver into a spool file ``<seq:012d>.json``, written whole and
under a name written once (:class:`~lakefs_gc.storage.directories.StoreDirectory`: a local file
is flushed and renamed, an object is one PUT), and the offset is that sequence number: a batch is
the spool files in ``(start, end]``, read again identically if Spark re-plans it. A file is
deleted only once its messages are acknowledged. The spool may be on an object store: the
executors that read it need not see the driver's disk.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lakefs_gc.errors import GcError
from lakefs_gc.events.queues import QueueMessage
from lakefs_gc.events.routing import utc
from lakefs_gc.storage.directories import StoreDirectory


class Spool:
    """Spool files ``<seq:012d>.json`` in a directory on any store, each written once, whole."""

    _NAME = re.compile(r"^(\d{12})\.json$")

    def __init__(self, directory: StoreDirectory | Path | str) -> None:
        self.directory = directory if isinstance(directory, StoreDirectory) else StoreDirectory.of(directory)

    @staticmethod
    def name(seq: int) -> str:
        return f"{seq:012d}.json"

    def path(self, seq: int) -> str:
        """Where spool file ``seq`` is (a URI or a local path, for messages)."""
        return self.directory.uri(self.name(seq))

    def sequences(self) -> list[int]:
        return sorted(int(m.group(1)) for n in self.directory.names() if (m := self._NAME.match(n)))

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
        self.directory.write(self.name(seq), json.dumps(body, ensure_ascii=False).encode("utf-8"))

    def read(self, seq: int) -> list[dict[str, Any]]:
        return self.read_file(seq)["messages"]  # type: ignore[no-any-return]

    def read_file(self, seq: int) -> dict[str, Any]:
        """Spool file ``seq`` as written; a missing or unreadable one raises, naming it."""
        data = self.directory.read(self.name(seq))
        if data is None:
            raise GcError(f"spool file {self.path(seq)} is missing")
        try:
            body: dict[str, Any] = json.loads(data.decode("utf-8"))
        except ValueError as e:
            raise GcError(f"spool file {self.path(seq)} is unreadable: {e}") from e
        return body

    def delete(self, seq: int) -> None:
        self.directory.delete(self.name(seq))
