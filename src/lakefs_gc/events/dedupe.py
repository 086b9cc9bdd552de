"""Redelivery dedupe bounded by a horizon: the keys of events stored recently, and only those.

Queues deliver at least once: a message whose acknowledgement failed (its receipt expired, the
service was killed between storing a batch and acknowledging it) comes again once its visibility
timeout passes. A redelivery therefore arrives within a window of the first delivery (SQS: the
visibility timeout, at most the retention period; Azure Storage Queues: the same), so the event
table only needs the keys of events it stored within ``horizon`` (``service.dedupe_horizon``) to
drop redeliveries; older keys are forgotten, and memory is bounded by the event rate times the
horizon instead of by the service's uptime.

A redelivery later than the horizon is stored a second time. That is harmless: the candidate set
takes, per address, the newest event by (sequencer, event time), and a duplicate row changes no
maximum (:mod:`lakefs_gc.gc.candidate_set`); the event table's compaction drops it
(:mod:`lakefs_gc.gc.compaction`).

Keys are held as 16-byte BLAKE2b digests of the event's dedupe key (about 100 bytes per key in a
Python dict, instead of five strings). Two distinct events colliding is a 2^-64 chance at four
billion keys; the cost would be one event not stored, which the candidate set tolerates the same
way as a lost notification (an object collected a cycle later, or a ``missing`` in a sweep).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from lakefs_gc.errors import ConfigError

#: an event's dedupe key as the event table stores it (repository, address, kind, sequencer or
#: event time, version id)
DedupeKey = tuple[str, str, str, str, str]


def key_digest(key: Sequence[str]) -> bytes:
    """16 bytes standing for ``key`` (fields joined by a separator no key field contains)."""
    return hashlib.blake2b("\x1f".join(key).encode("utf-8"), digest_size=16).digest()


class RecentKeys:
    """Digests of the keys stored within ``horizon`` of the newest :meth:`expire` time."""

    def __init__(self, horizon: timedelta) -> None:
        if horizon <= timedelta(0):
            raise ConfigError(f"dedupe horizon must be positive, got {horizon}")
        self.horizon = horizon
        self._stored: dict[bytes, datetime] = {}  # digest -> when it was (last) stored
        self._batches: deque[tuple[datetime, list[bytes]]] = deque()  # oldest first

    def __len__(self) -> int:
        return len(self._stored)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple):
            return False
        return key_digest(key) in self._stored

    def add(self, keys: Iterable[Sequence[str]], at: datetime) -> None:
        """Remember ``keys`` as stored at ``at`` (times are expected to grow, as a clock's do)."""
        digests = [key_digest(k) for k in keys]
        if not digests:
            return
        for digest in digests:
            self._stored[digest] = at
        self._batches.append((at, digests))

    def add_stored(self, stored: Iterable[tuple[Sequence[str], datetime]]) -> None:
        """Remember keys each stored at its own time (as the table has them after a restart)."""
        by_time: dict[datetime, list[Sequence[str]]] = {}
        for key, at in stored:
            by_time.setdefault(at, []).append(key)
        for at in sorted(by_time):
            self.add(by_time[at], at)

    def expire(self, now: datetime) -> int:
        """Forget the keys stored before ``now - horizon``; how many were forgotten."""
        oldest = now - self.horizon
        forgotten = 0
        while self._batches and self._batches[0][0] < oldest:
            at, digests = self._batches.popleft()
            for digest in digests:
                if self._stored.get(digest) == at:  # not stored again later
                    del self._stored[digest]
                    forgotten += 1
        return forgotten
