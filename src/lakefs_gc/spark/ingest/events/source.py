"""The event streaming source: object notifications from a queue, each batch replayable.

A PySpark Python Data Source (docs/formats/spark-data-sources.md). Queues are not replayable, so
the source uses the spool pattern (:mod:`lakefs_gc.events.spool`): ``latestOffset`` drains the
queue on the driver into a spool file ``<spool>/<seq:012d>.json`` (written whole) and returns the offset
``{"spool": seq}``; a batch is the spool files in ``(start, end]``, read again identically if
Spark re-plans it after a crash. A spool file written but never logged as an offset (a crash in
between) is picked up by the next ``latestOffset``, never lost. The messages are deleted from the
queue only in ``commit(end)``, which Spark calls when it plans the *next* batch (for the last
batch of an ``availableNow`` run: in the next run that has data; spark-data-sources.md,
"When commit() runs"); a running query also
acknowledges at the next trigger's ``latestOffset``, so an idle queue does not hand the last
batch out again every visibility timeout. A message seen again is spooled again and the event
table drops the duplicate.

``read()`` runs on executors, on a pickled copy of the reader (spark-data-sources.md, "Pickled
readers"): it reads the spool file and turns each message into status rows (:data:`SOURCE_DDL`)
by :func:`lakefs_gc.events.routing.message_rows`. The spool directory must be readable by the
executors: on a cluster, put it on an object store (``service.state``: ``s3://``, Azure).

Configuration travels as a class attribute of a subclass made per query
(:func:`event_source_class`), never as string options, so queue secrets stay out of query plans;
each config gets its own source name, because one service runs several event sources.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from lakefs_gc.errors import ConfigError, GcError
from lakefs_gc.events.model import EVENT_DDL, EVENT_SCHEMA
from lakefs_gc.events.prefetch import SpoolPrefetcher
from lakefs_gc.events.queues import EventQueue, QueueConfig, QueueError, QueueMessage, open_queue
from lakefs_gc.events.routing import (
    EventRoute,
    drop_undeletable,
    longest_prefix_first,
    message_rows,
    utc,
)
from lakefs_gc.events.spool import Spool
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.spark.runtime.failures import encode_errors
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.filesystems import StorageOptions

log = logging.getLogger(__name__)

SOURCE_PREFIX = "lakefs_gc_events"
#: EVENT_SCHEMA plus what happened to the message; one row per event, or per message without one
SOURCE_SCHEMA = pa.schema(
    [
        *EVENT_SCHEMA,
        ("status", pa.string()),  # "event" | "skipped" | "dead" | "unrouted" | "not_deletable"
        ("reason", pa.string()),  # why skipped, dead or unrouted
        ("body", pa.string()),  # the message body (dead rows only)
        ("spool", pa.int64()),  # the spool file the message came in
    ]
)
SOURCE_DDL = f"{EVENT_DDL}, status string, reason string, body string, spool long"
#: rows per Arrow batch yielded by read()
ROWS_PER_BATCH = 10_000


@dataclass(frozen=True)
class EventSourceConfig:
    """One queue, the namespaces its events are routed to, and where its spool lives."""

    name: str  # the query's name; also names the source and its files in the event table
    queue: QueueConfig
    routes: tuple[NamespaceRoute | EventRoute, ...]
    spool: str  # a directory or location URI; survives restarts with the checkpoint (messages not yet acked)
    max_messages_per_batch: int = 10_000  # bounds a batch's memory and the spool file's size
    receive_wait_seconds: float = 1.0  # long-poll per receive; a drain ends on an empty receive
    #: spool files drained ahead of a running query (events.prefetch); 0: drain in latestOffset
    prefetch_files: int = 2
    spool_storage: StorageOptions = field(default_factory=StorageOptions)  # reaching the spool

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name):
            raise ConfigError(f"event source name {self.name!r}: use letters, digits, '_', '.', '-'")
        if not self.routes:
            raise ConfigError(f"event source {self.name}: no repository namespace to route events to")
        if self.max_messages_per_batch < 1:
            raise ConfigError(f"event source {self.name}: max_messages_per_batch must be positive")

    def event_routes(self) -> tuple[EventRoute, ...]:
        """Longest prefix first: nested namespaces route to the innermost."""
        return longest_prefix_first(self.routes)


def source_name(config: EventSourceConfig) -> str:
    """A data source name unique to ``config.name`` (Spark's short names are case-insensitive)."""
    digest = hashlib.sha256(config.name.encode()).hexdigest()[:8]
    return f"{SOURCE_PREFIX}_{re.sub(r'[^a-z0-9]+', '_', config.name.lower())}_{digest}"


def event_source_class(config: EventSourceConfig) -> type[DataSource]:
    """A data source class carrying ``config`` (pickled by value to the Python workers)."""
    return type("EventSource", (EventSource,), {"config": config})


class EventSource(DataSource):
    """``spark.readStream.format(source_name(config))`` once :func:`event_source_class` is registered."""

    config: EventSourceConfig

    @classmethod
    def name(cls) -> str:
        return source_name(cls.config)

    def schema(self) -> str:
        return SOURCE_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return EventStreamReader(self.config)


class SpoolPartition(InputPartition):
    """One spool file: the messages of one drain."""

    def __init__(self, seq: int, path: str) -> None:
        super().__init__(seq)
        self.seq, self.path = seq, path


class EventStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets over spool files; drains on the driver, parses and routes on the executors."""

    def __init__(self, config: EventSourceConfig) -> None:
        self.config = config
        self.spool = spool_of(config)
        self._queue: EventQueue | None = None  # opened on first use (driver reader only)
        self._prefetcher: SpoolPrefetcher | None = None  # a running query's (driver reader only)
        self._run_started: datetime | None = None  # set for an availableNow run
        self._exhausted = False  # an availableNow run has drained what was there when it started

    def __getstate__(self) -> dict[str, Any]:
        # clients and threads hold locks: never pickled (spark-data-sources.md)
        return {**self.__dict__, "_queue": None, "_prefetcher": None}

    def initialOffset(self) -> dict[str, Any]:
        return {"spool": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """End the run once the queue is empty or hands out messages sent after the run began."""
        self._run_started, self._exhausted = datetime.now(timezone.utc), False

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = int(start["spool"])
        if self._run_started is None and self.config.prefetch_files > 0:
            return self._prefetched(start, limit)
        if self._run_started is None:
            # Spark asks for the next offset only after the batch ending at ``start`` is in its
            # commit log, so its messages can go now rather than when the next batch is planned:
            # on an idle queue that would be never, and they would come back every visibility
            # timeout. An availableNow run ends right after this call, so it keeps to commit():
            # its last batch stays replayable from the spool until the next run.
            self._acknowledge_through(begin)
        leftover = [seq for seq in self.spool.sequences() if seq > begin]
        if leftover:  # drained earlier, never logged as an offset: replay before draining more
            return {"spool": leftover[-1]}
        if self._exhausted:
            return dict(start)
        messages = self._drain(self._cap(limit))
        if not messages:
            return dict(start)
        seq = max([begin, *self.spool.sequences()]) + 1
        self.spool.write(seq, messages, datetime.now(timezone.utc))
        return {"spool": seq}

    def _prefetched(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """A running query's next batch: the spool files the prefetcher drained meanwhile."""
        begin = int(start["spool"])
        if self._prefetcher is None:
            self._prefetcher = SpoolPrefetcher(
                self.config.name, self.queue, self.spool, after=begin, cap=self.config.max_messages_per_batch,
                wait_seconds=self.config.receive_wait_seconds, ahead=self.config.prefetch_files,
            )  # fmt: skip
        end = self._prefetcher.take(begin, self._cap(limit), timeout=self.config.receive_wait_seconds)
        return dict(start) if end is None else {"spool": end}

    def _cap(self, limit: ReadLimit) -> int:
        if isinstance(limit, ReadMaxRows):
            return max(1, limit.max_rows)
        if isinstance(limit, ReadAllAvailable):  # Trigger.Once: a queue fed all along has no "all"
            return self.config.max_messages_per_batch
        raise GcError(f"{self.config.name}: unsupported read limit {limit!r}")

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, last = int(start["spool"]), int(end["spool"])
        present = set(self.spool.sequences())
        wanted = [seq for seq in present if begin < seq <= last]
        if last > begin and last not in present:
            raise GcError(
                f"{self.config.name}: spool file {self.spool.path(last)} of batch ({begin}, {last}] is "
                "missing: its messages cannot be replayed (was the spool reset without the checkpoint?)"
            )
        return [SpoolPartition(seq, self.spool.path(seq)) for seq in sorted(wanted)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SpoolPartition)
        return encode_errors(read_spool(self.config, partition.seq))

    def commit(self, end: dict[str, Any]) -> None:
        """Delete the messages of every spool file up to ``end`` from the queue, then the file."""
        if self._prefetcher is not None:
            self._prefetcher.acknowledge_through(int(end["spool"]))
        else:
            self._acknowledge_through(int(end["spool"]))

    def stop(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.stop()
            self._prefetcher = None
        if self._queue is not None:
            self._queue.close()
            self._queue = None

    def queue(self) -> EventQueue:
        if self._queue is None:
            self._queue = open_queue(self.config.queue)
        return self._queue

    def _acknowledge_through(self, last: int) -> None:
        """Acknowledge and delete the spool files up to ``last``.

        A failed acknowledgement is logged, never raised: the message comes again and is
        deduplicated. If the queue cannot be reached, the spool files stay and the next call
        tries again.
        """
        for seq in self.spool.sequences():
            if seq > last:
                break
            receipts = [m["receipt"] for m in self.spool.read(seq)]
            try:
                failed = self.queue().acknowledge(receipts)
            except QueueError as e:
                log.warning("%s: spool %d not acknowledged, tried again later: %s", self.config.name, seq, e)
                return
            if failed:
                log.warning(
                    "%s: %d of %d messages of spool %d could not be acknowledged (receipts expired); "
                    "they will be delivered again and deduplicated",
                    *(self.config.name, len(failed), len(receipts), seq),
                )
            self.spool.delete(seq)

    def _drain(self, cap: int) -> list[QueueMessage]:
        """Receive until the queue is empty or ``cap`` messages; a receive error fails the stream
        (what was received is not acknowledged, so it comes again after its visibility timeout)."""
        drained: list[QueueMessage] = []
        while len(drained) < cap:
            want = cap - len(drained)
            try:
                got = self.queue().receive(want, self.config.receive_wait_seconds)
            except GcError as e:  # QueueError names the queue
                raise QueueError(f"event source {self.config.name}: {e}") from e
            drained.extend(got)
            if not got or self._sent_after_start(got):
                self._exhausted = self._run_started is not None
                break
        return drained

    def _sent_after_start(self, messages: Sequence[QueueMessage]) -> bool:
        if self._run_started is None:
            return False
        started = self._run_started
        return any(m.sent_time is not None and utc(m.sent_time) > started for m in messages)


# ---- executor side ----------------------------------------------------------------------------


def spool_of(config: EventSourceConfig) -> Spool:
    return Spool(StoreDirectory.of(config.spool, config.spool_storage))


def read_spool(config: EventSourceConfig, seq: int) -> Iterator[pa.RecordBatch]:
    """The status rows of one spool file's messages (see the module docstring)."""
    spooled = spool_of(config).read_file(seq)
    received = datetime.fromisoformat(spooled["received_time"])
    routes = config.event_routes()
    rows: list[dict[str, Any]] = []
    for message in spooled["messages"]:
        rows.extend(message_rows(message, routes, config.queue.format, seq, received))
    drop_undeletable(rows)
    for i in range(0, len(rows), ROWS_PER_BATCH):
        yield pa.RecordBatch.from_pylist(rows[i : i + ROWS_PER_BATCH], schema=SOURCE_SCHEMA)
