"""The event streaming source: object notifications from a queue, each batch replayable.

A PySpark Python Data Source (reference/cloud-formats.md §5). Queues are not replayable, so the
source uses the spool pattern (§5.4): ``latestOffset`` drains the queue on the driver into a
spool file ``<spool>/<seq:012d>.json`` (written whole, then renamed) and returns the offset
``{"spool": seq}``; a batch is the spool files in ``(start, end]``, read again identically if
Spark re-plans it after a crash. A spool file written but never logged as an offset (a crash in
between) is picked up by the next ``latestOffset``, never lost. The messages are deleted from the
queue only in ``commit(end)``, which Spark calls when it plans the *next* batch (for the last
batch of an ``availableNow`` run: in the next run that has data, §0.1); a running query also
acknowledges at the next trigger's ``latestOffset``, so an idle queue does not hand the last
batch out again every visibility timeout. A message seen again is spooled again and the event
table drops the duplicate.

``read()`` runs on executors, on a pickled copy of the reader (§0.2): it reads the spool file,
parses each message (:func:`~lakefs_gc.events.parse.parse_message`) and routes each event to a
repository's namespace (:func:`route_event`). Every message yields status rows (:data:`SOURCE_DDL`):
``event`` (a routed event), ``skipped`` (a test event, a tier change...), ``dead`` (malformed: its
body and the reason go to the dead-letter file) or ``unrouted`` (outside every namespace, or not
a deletable address). The spool directory must be readable by the executors: a local directory
in local mode, a shared mount on a cluster.

Configuration travels as a class attribute of a subclass made per query
(:func:`event_source_class`), never as string options, so queue secrets stay out of query plans;
each config gets its own source name, because one service runs several event sources.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
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
from lakefs_gc.events.model import (
    EVENT_DDL,
    EVENT_SCHEMA,
    EventFormatError,
    ObjectEvent,
    Store,
    sequencer_order,
)
from lakefs_gc.events.queues import EventQueue, QueueConfig, QueueError, QueueMessage, open_queue
from lakefs_gc.inventory.mapping import NamespaceRoute, deletable_keys
from lakefs_gc.storage.locations import StorageLocation

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
class EventRoute:
    """A repository's namespace as notifications name it.

    :class:`NamespaceRoute` matches ``(bucket or container, key)``; notifications also say which
    store and (Azure) which account, so two accounts' containers of the same name are not
    confused. ``store`` None and ``account`` "" match anything.
    """

    route: NamespaceRoute
    store: Store | None = None
    account: str = ""

    @classmethod
    def of(cls, repository: str, namespace: StorageLocation) -> EventRoute:
        if namespace.kind not in ("s3", "azure", "local"):
            raise ConfigError(f"{repository}: no notifications are read for {namespace.kind} namespaces")
        store: Store = namespace.kind
        return cls(NamespaceRoute.of(repository, namespace), store, namespace.account or "")

    def claims(self, event: ObjectEvent) -> bool:
        if self.store is not None and event.store != self.store:
            return False
        if self.account and event.account and event.account.lower() != self.account.lower():
            return False
        return event.bucket == self.route.container and event.key.startswith(self.route.prefix)


@dataclass(frozen=True)
class EventSourceConfig:
    """One queue, the namespaces its events are routed to, and where its spool lives."""

    name: str  # the query's name; also names the source and its files in the event table
    queue: QueueConfig
    routes: tuple[NamespaceRoute | EventRoute, ...]
    spool: str  # a directory; survives restarts with the checkpoint (messages not yet acked)
    max_messages_per_batch: int = 10_000  # bounds a batch's memory and the spool file's size
    receive_wait_seconds: float = 1.0  # long-poll per receive; a drain ends on an empty receive

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name):
            raise ConfigError(f"event source name {self.name!r}: use letters, digits, '_', '.', '-'")
        if not self.routes:
            raise ConfigError(f"event source {self.name}: no repository namespace to route events to")
        if self.max_messages_per_batch < 1:
            raise ConfigError(f"event source {self.name}: max_messages_per_batch must be positive")

    def event_routes(self) -> tuple[EventRoute, ...]:
        """Longest prefix first: nested namespaces route to the innermost."""
        routes = [r if isinstance(r, EventRoute) else EventRoute(r) for r in self.routes]
        return tuple(sorted(routes, key=lambda r: len(r.route.prefix), reverse=True))


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
        self.spool = Spool(Path(config.spool))
        self._queue: EventQueue | None = None  # opened on first use (driver reader only)
        self._run_started: datetime | None = None  # set for an availableNow run
        self._exhausted = False  # an availableNow run has drained what was there when it started

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_queue": None}  # clients hold locks: never pickled (§0.3)

    def initialOffset(self) -> dict[str, Any]:
        return {"spool": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """End the run once the queue is empty or hands out messages sent after the run began."""
        self._run_started, self._exhausted = datetime.now(timezone.utc), False

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = int(start["spool"])
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
        if isinstance(limit, ReadMaxRows):
            cap = max(1, limit.max_rows)
        elif isinstance(limit, ReadAllAvailable):  # Trigger.Once: a queue fed all along has no "all"
            cap = self.config.max_messages_per_batch
        else:
            raise GcError(f"{self.config.name}: unsupported read limit {limit!r}")
        messages = self._drain(cap)
        if not messages:
            return dict(start)
        seq = max([begin, *self.spool.sequences()]) + 1
        self.spool.write(seq, messages, datetime.now(timezone.utc))
        return {"spool": seq}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, last = int(start["spool"]), int(end["spool"])
        present = set(self.spool.sequences())
        wanted = [seq for seq in present if begin < seq <= last]
        if last > begin and last not in present:
            raise GcError(
                f"{self.config.name}: spool file {self.spool.path(last)} of batch ({begin}, {last}] is "
                "missing: its messages cannot be replayed (was the spool reset without the checkpoint?)"
            )
        return [SpoolPartition(seq, str(self.spool.path(seq))) for seq in sorted(wanted)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SpoolPartition)
        return read_spool(self.config, partition.seq, Path(partition.path))

    def commit(self, end: dict[str, Any]) -> None:
        """Delete the messages of every spool file up to ``end`` from the queue, then the file."""
        self._acknowledge_through(int(end["spool"]))

    def stop(self) -> None:
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
        return any(m.sent_time is not None and _utc(m.sent_time) > started for m in messages)


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
        body = {
            "seq": seq,
            "received_time": received.isoformat(),
            "messages": [
                {
                    "id": m.id,
                    "receipt": m.receipt,
                    "sent_time": _utc(m.sent_time).isoformat() if m.sent_time else None,
                    "body": m.body,
                }
                for m in messages
            ],
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.path(seq)
        temp = final.with_name(final.name + ".tmp")
        with open(temp, "w", encoding="utf-8") as out:
            json.dump(body, out, ensure_ascii=False)
            out.flush()
            os.fsync(out.fileno())  # the offset Spark logs next must never name a file lost in a crash
        os.replace(temp, final)

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


# ---- executor side ----------------------------------------------------------------------------


def read_spool(config: EventSourceConfig, seq: int, path: Path) -> Iterator[pa.RecordBatch]:
    """The status rows of one spool file's messages (see the module docstring)."""
    spooled = read_spool_file(path)
    received = datetime.fromisoformat(spooled["received_time"])
    routes = config.event_routes()
    rows: list[dict[str, Any]] = []
    for message in spooled["messages"]:
        rows.extend(message_rows(message, routes, config.queue.format, seq, received))
    _drop_undeletable(rows)
    for i in range(0, len(rows), ROWS_PER_BATCH):
        yield pa.RecordBatch.from_pylist(rows[i : i + ROWS_PER_BATCH], schema=SOURCE_SCHEMA)


def message_rows(
    message: dict[str, Any], routes: Sequence[EventRoute], format: Any, seq: int, received: datetime
) -> list[dict[str, Any]]:
    """One message's rows: its routed and unrouted events, or why it has none."""
    from lakefs_gc.events.parse import parse_message

    base = {"message_id": message["id"], "received_time": received, "spool": seq}
    try:
        parsed = parse_message(message["body"], format=format)
    except EventFormatError as e:
        return [{**base, "status": "dead", "reason": str(e), "body": message["body"]}]
    if not parsed.events:
        return [{**base, "status": "skipped", "reason": parsed.skipped or "no object events"}]
    rows = []
    for event in parsed.events:
        routed = route_event(event, routes)
        row = {**base, **_event_columns(event)}
        if routed is None:
            where = "/".join(p for p in (event.account, event.bucket, event.key) if p)
            rows.append({**row, "address": where, "status": "unrouted", "reason": "outside every namespace"})
        else:
            rows.append({**row, "repository": routed[0], "address": routed[1], "status": "event"})
    return rows


def route_event(event: ObjectEvent, routes: Sequence[EventRoute]) -> tuple[str, str] | None:
    """``(repository, namespace-relative address)`` of the first route claiming ``event``
    (``routes`` longest prefix first), or None."""
    for route in routes:
        if route.claims(event):
            return route.route.repository, event.key[len(route.route.prefix) :]
    return None


def _event_columns(event: ObjectEvent) -> dict[str, Any]:
    return {
        "kind": event.kind,
        "event_time": event.event_time,
        "sequencer": sequencer_order(event.sequencer),
        "size": event.size,
        "etag": event.etag,
        "version_id": event.version_id,
    }


def _drop_undeletable(rows: list[dict[str, Any]]) -> None:
    """Routed events whose address lakeFS never garbage-collects (``_lakefs/``, ``data/<file>``...)
    become ``not_deletable`` (invariant 3, the same rule as inventories: :func:`deletable_keys`)."""
    routed = [r for r in rows if r["status"] == "event"]
    if not routed:
        return
    keep = deletable_keys(pa.array([r["address"] for r in routed], pa.string())).to_pylist()
    for row, ok in zip(routed, keep, strict=True):
        if not ok:
            row.update(status="not_deletable", reason=f"not a deletable address in {row['repository']}")
            row["repository"] = None


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
