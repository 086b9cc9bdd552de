"""The queue port: receive messages, acknowledge them once their batch is committed.

Every notification service we read (SQS, Azure Storage Queue, Event Grid namespace pull
delivery, the demo's directory) delivers at least once and hides a received message for a while
(visibility timeout, lock). The streaming source spools what it receives before Spark logs a
batch and acknowledges only after the batch is committed (docs/formats/spark-data-sources.md,
"Replaying a queue"), so the port needs just three operations; everything cloud-specific stays in the
adapters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from lakefs_gc.errors import StorageError


class QueueError(StorageError):
    """A queue could not be read or written (unreachable, refused, misconfigured).

    Always names the queue (:attr:`EventQueue.description`). Receipts that are merely expired or
    unknown are not errors: :meth:`EventQueue.acknowledge` returns them.
    """


@dataclass(frozen=True)
class QueueMessage:
    """One received message.

    ``receipt`` is whatever :meth:`EventQueue.acknowledge` needs to delete this delivery of the
    message (an SQS receipt handle, an Azure id and pop receipt, an Event Grid lock token, a
    file name); it changes with every delivery. ``sent_time`` is when the queue accepted the
    message, if it says (an ``availableNow`` run stops at messages sent after it started).
    """

    id: str
    body: str
    receipt: str
    sent_time: datetime | None = None


class EventQueue(Protocol):
    """A notification queue, as the streaming source drains it (on the Spark driver only)."""

    #: names the queue in errors and logs, never a secret
    description: str

    def receive(self, max_messages: int, wait_seconds: float) -> list[QueueMessage]:
        """Up to ``max_messages`` messages (fewer is normal), waiting at most about ``wait_seconds``
        for the first one; ``[]`` when the queue is empty. Raises :class:`QueueError`."""
        ...

    def acknowledge(self, receipts: Sequence[str]) -> list[str]:
        """Delete the deliveries ``receipts`` name; return those that could not be (expired or
        unknown receipts: the message will come again and be deduplicated). Raises
        :class:`QueueError` only when the queue itself cannot be reached."""
        ...

    def close(self) -> None:
        """Release the client's connections."""
        ...


def chunks(items: Sequence[str], size: int) -> list[Sequence[str]]:
    """``items`` in slices of at most ``size`` (the services' batch limits)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def poll(
    receive_once: Callable[[], list[QueueMessage]], wait_seconds: float, every: float
) -> list[QueueMessage]:
    """``receive_once`` until it returns messages or ``wait_seconds`` passed, pausing ``every``
    seconds: a long poll for the queues whose API has none (Storage Queue, a directory)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        got = receive_once()
        left = deadline - time.monotonic()
        if got or left <= 0:
            return got
        time.sleep(min(every, left))


T = TypeVar("T")
R = TypeVar("R")


class Requests:
    """Up to ``concurrency`` requests in flight at once, on threads started when first needed.

    A queue request is a round trip that moves a handful of messages (SQS: 10), so one at a time
    drains at most 10 messages per round trip: slower than a busy bucket writes (the soak's
    50 writes/s plus the sweep's deletes outran it). The queue clients are thread-safe; the
    services are built for concurrent consumers (a message is handed to one receive at a time).
    """

    def __init__(self, concurrency: int, name: str) -> None:
        self.concurrency = max(1, concurrency)
        self._name = name
        self._pool: ThreadPoolExecutor | None = None

    def map(self, call: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``call`` of each item, in order; the first error is raised once all calls ended."""
        if self.concurrency == 1 or len(items) <= 1:
            return [call(item) for item in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=self._name)
        futures = [self._pool.submit(call, item) for item in items]
        wait(futures)  # none left running behind a raised error
        return [f.result() for f in futures]

    def receive(
        self,
        receive_once: Callable[[int, float], list[QueueMessage]],
        max_messages: int,
        per_request: int,
        wait_seconds: float,
    ) -> list[QueueMessage]:
        """Enough ``receive_once(count, wait)`` calls at once for ``max_messages`` (at most
        ``concurrency``). Only the first waits for messages: the others take what is there, so a
        quiet queue costs one long poll, not ``concurrency`` of them."""
        wanted = max(1, max_messages)
        calls = min(self.concurrency, -(-wanted // per_request))
        counts = [min(per_request, wanted - i * per_request) for i in range(calls)]
        plan = [(count, wait_seconds if i == 0 else 0.0) for i, count in enumerate(counts)]
        return [message for batch in self.map(lambda call: receive_once(*call), plan) for message in batch]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
