"""The demo's local queue: a directory of message files (:mod:`lakefs_gc.events.local` writes them).

Writers create ``<name>.json.tmp`` and rename it to ``<name>.json``, so a file with the
``.json`` suffix is always complete; anything else is ignored. Receiving hands out the oldest
files by name that are not hidden; a handed-out file is hidden from this process for the
visibility timeout, like a queue message, and acknowledging deletes it. Only one process should
drain a directory (the hiding is in memory): after a restart every file not yet acknowledged is
handed out again, which the event table deduplicates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from lakefs_gc.events.queues.base import QueueError, QueueMessage, poll
from lakefs_gc.events.queues.config import QueueConfig

#: a message file's suffix (the same as :data:`lakefs_gc.events.local.MESSAGE_SUFFIX`)
MESSAGE_SUFFIX = ".json"
#: how often an empty directory is looked at again while a receive waits
POLL_S = 0.1


class DirectoryQueue:
    """``*.json`` files in a directory, in name order."""

    def __init__(self, config: QueueConfig) -> None:
        assert config.path is not None  # QueueConfig requires it
        self.path = Path(config.path)
        self.description = config.describe()
        self.visibility_timeout = float(config.visibility_timeout_seconds)
        self._hidden: dict[str, float] = {}  # file name -> monotonic time it becomes visible again

    def receive(self, max_messages: int, wait_seconds: float) -> list[QueueMessage]:
        return poll(lambda: self._receive_once(max(1, max_messages)), wait_seconds, POLL_S)

    def acknowledge(self, receipts: Sequence[str]) -> list[str]:
        failed: list[str] = []
        for name in receipts:
            if os.sep in name or not name.endswith(MESSAGE_SUFFIX):
                failed.append(name)  # not a receipt of ours: never delete outside the directory
                continue
            try:
                (self.path / name).unlink()
            except FileNotFoundError:
                failed.append(name)
            except OSError as e:
                raise QueueError(f"{self.description}: cannot delete {name}: {e}") from e
            self._hidden.pop(name, None)
        return failed

    def close(self) -> None:
        """Nothing to release."""

    def _receive_once(self, max_messages: int) -> list[QueueMessage]:
        now = time.monotonic()
        names = self._names()
        present = set(names)
        self._hidden = {n: t for n, t in self._hidden.items() if n in present}  # forget deleted files
        got: list[QueueMessage] = []
        for name in names:
            if self._hidden.get(name, 0.0) > now:
                continue
            message = self._read(name)
            if message is None:  # acknowledged meanwhile (or by another reader)
                continue
            self._hidden[name] = now + self.visibility_timeout
            got.append(message)
            if len(got) >= max_messages:
                break
        return got

    def _names(self) -> list[str]:
        try:
            with os.scandir(self.path) as entries:
                return sorted(e.name for e in entries if e.name.endswith(MESSAGE_SUFFIX) and e.is_file())
        except FileNotFoundError:
            return []  # nothing was ever written
        except OSError as e:
            raise QueueError(f"{self.description}: cannot list: {e}") from e

    def _read(self, name: str) -> QueueMessage | None:
        path = self.path / name
        try:
            body = path.read_bytes().decode("utf-8", errors="replace")
            sent = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise QueueError(f"{self.description}: cannot read {name}: {e}") from e
        return QueueMessage(id=name, body=body, receipt=name, sent_time=sent)
