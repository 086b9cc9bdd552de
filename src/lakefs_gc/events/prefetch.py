"""Draining a queue into the spool ahead of Spark, and acknowledging behind it, on one thread.

A running event query used to receive only when Spark planned a batch (``latestOffset``) and to
acknowledge the previous batch in the same call, so receiving, acknowledging and Spark's batch
took turns: the query moved 0.5-0.7x the messages per second its queue adapter moves alone
(bench/README.md, "Event sources"). With a :class:`SpoolPrefetcher` they overlap: while Spark runs
batch N, the thread acknowledges batch N-1 and drains the messages of batch N+1 into spool files,
and planning a batch only picks files that are already there.

What stays as it was (docs/formats/spark-data-sources.md, "Replaying a queue"):

* a spool file is written whole before Spark logs an offset naming it; a file a crash leaves
  beyond the checkpoint's offset is replayed first after a restart, as any leftover;
* a message is acknowledged only after the batch that stored it is in Spark's commit log (Spark
  asks for the offset after ``N`` once batch ``N`` is committed), and a failed acknowledgement only
  means the message comes again and is deduplicated;
* a receive error stops the query (raised by the next ``take``), never swallowed.

Bounds: at most ``ahead`` files wait beyond the newest one Spark has taken, each of at most ``cap``
messages, so the spool and the time a message waits unacknowledged grow by at most ``ahead``
batches; once the files are full the thread only acknowledges.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from lakefs_gc.events.queues import EventQueue, QueueError, QueueMessage
from lakefs_gc.events.spool import Spool

log = logging.getLogger(__name__)

#: seconds the thread waits before trying a failed acknowledgement again
ACK_RETRY_S = 5.0
#: seconds between receives that find nothing, besides the receive's own wait (a queue asked with
#: no long poll would otherwise be asked again at once, for as long as it stays empty)
IDLE_S = 0.25


@dataclass
class _File:
    seq: int
    messages: int | None  # None: found in the spool (a leftover), not written here
    receipts: list[str] | None


class SpoolPrefetcher:
    """A thread between a queue and its spool, for a running (not ``availableNow``) event query.

    ``after`` is the offset Spark starts from: files above it in the spool are leftovers, offered
    first. ``cap`` bounds a file's messages, ``wait_seconds`` a receive's long poll.
    """

    def __init__(
        self,
        name: str,
        queue: Callable[[], EventQueue],
        spool: Spool,
        *,
        after: int,
        cap: int,
        wait_seconds: float,
        ahead: int,
    ) -> None:
        present = spool.sequences()
        self.name, self._queue, self._spool = name, queue, spool
        self._cap, self._wait, self._ahead = max(1, cap), wait_seconds, max(1, ahead)
        self._files = {seq: _File(seq, None, None) for seq in present}
        self._next = max([after, *present]) + 1
        self._taken = after  # the newest file Spark has in a batch
        self._ack_through = -1  # files up to here are to be acknowledged
        self._retry_ack_at = 0.0
        self._drained = False  # the first drain is over: until then take() waits for it
        self._error: BaseException | None = None
        self._stopping = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"spool-prefetch-{name}", daemon=True)
        self._thread.start()

    # ---- Spark's side ----------------------------------------------------------------------

    def take(self, after: int, max_messages: int, timeout: float) -> int | None:
        """The end offset of the next batch after ``after`` (whose files are acknowledged from now
        on): the waiting files in order, as many as fit in ``max_messages`` (at least one); None
        when none arrived within ``timeout`` (and the first drain is over: a query's first batch
        holds what the queue held when it started). Raises what stopped the thread."""
        with self._cond:
            self._ack_through = max(self._ack_through, after)
            self._taken = max(self._taken, after)
            self._cond.notify_all()
            deadline = time.monotonic() + timeout
            while not (waiting := sorted(s for s in self._files if s > after)):
                self._raise_failure()
                remaining = deadline - time.monotonic()
                if remaining <= 0 and self._drained:
                    return None
                self._cond.wait(remaining if self._drained else 1.0)
            self._raise_failure()
            end, total = waiting[0], self._files[waiting[0]].messages
            for seq in waiting[1:]:  # a leftover (size unknown) goes alone, first or not
                count = self._files[seq].messages
                if total is None or count is None or total + count > max_messages:
                    break
                end, total = seq, total + count
            self._taken = max(self._taken, end)
            self._cond.notify_all()
            return end

    def acknowledge_through(self, end: int) -> None:
        """Acknowledge (on the thread) every file up to ``end``: Spark committed their batch."""
        with self._cond:
            self._ack_through = max(self._ack_through, end)
            self._cond.notify_all()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the thread (after its receive or acknowledgement in flight)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _raise_failure(self) -> None:
        if self._error is not None:
            if isinstance(self._error, QueueError):
                raise QueueError(f"event source {self.name}: {self._error}") from self._error
            raise self._error

    # ---- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stopping and not (due := self._due()) and not self._room():
                        self._cond.wait(1.0)
                    if self._stopping:
                        return
                    room = self._room()
                if due:
                    self._acknowledge(due)
                elif room and not self._drain():
                    with self._cond:  # an empty queue: woken early by take() or an acknowledgement
                        self._cond.wait(IDLE_S)
        except BaseException as e:  # handed to Spark's thread by take()
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def _due(self) -> list[_File]:
        if time.monotonic() < self._retry_ack_at:
            return []
        return [self._files[s] for s in sorted(self._files) if s <= self._ack_through]

    def _room(self) -> bool:
        return sum(1 for s in self._files if s > self._taken) < self._ahead

    def _acknowledge(self, files: list[_File]) -> None:
        for file in files:
            receipts = file.receipts
            if receipts is None:
                receipts = [m["receipt"] for m in self._spool.read(file.seq)]
            try:
                failed = self._queue().acknowledge(receipts)
            except QueueError as e:
                log.warning("%s: spool %d not acknowledged, tried again later: %s", self.name, file.seq, e)
                self._retry_ack_at = time.monotonic() + ACK_RETRY_S
                return
            if failed:
                log.warning(
                    "%s: %d of %d messages of spool %d could not be acknowledged (receipts expired); "
                    "they will be delivered again and deduplicated",
                    *(self.name, len(failed), len(receipts), file.seq),
                )
            self._spool.delete(file.seq)
            with self._cond:
                del self._files[file.seq]

    def _drain(self) -> bool:
        """Receive until the queue is empty or a file is full; spool what came; False: nothing came."""
        drained: list[QueueMessage] = []
        while len(drained) < self._cap:
            got = self._queue().receive(self._cap - len(drained), self._wait if not drained else 0)
            if not got:
                break
            drained.extend(got)
            with self._cond:
                if self._stopping or self._due():
                    break  # acknowledgements first: their messages' visibility is running out
        if not drained:
            with self._cond:
                self._drained = True
                self._cond.notify_all()
            return False
        seq = self._next
        self._spool.write(seq, drained, datetime.now(timezone.utc))
        with self._cond:
            self._files[seq] = _File(seq, len(drained), [m.receipt for m in drained])
            self._next, self._drained = seq + 1, True
            self._cond.notify_all()
        return True
