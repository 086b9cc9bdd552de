"""The event table: routed object events as parquet, dead letters and per-batch records beside them.

Layout under the table location (any store ``pyarrow.fs`` reaches; no Hadoop connector)::

    parts/<source>/<stream>-<batch:012d>.parquet        EVENT_SCHEMA rows, deduplicated
    dead-letter/<source>/<stream>-<batch:012d>.jsonl    {"message_id", "received_time", "reason", "body"}
    _batches/<source>-<stream>-<batch:012d>.json        the batch's record, written last

``<source>`` is the event source's name (several run in one service) and ``<stream>`` an id kept
in the query's checkpoint, so a new checkpoint never takes an old one's records for its own
batches. The record is the commit point (docs/formats/spark-data-sources.md, "Idempotent
sinks"): a batch id replayed after a crash finds its record and is skipped, or finds none and is
written again under the same names; readers read only the parts records list.

Queues deliver at least once, so an event is stored once per
:meth:`~lakefs_gc.events.model.ObjectEvent.dedupe_key` within the dedupe horizon
(:mod:`lakefs_gc.events.dedupe`): the sink drops events stored within the horizon (the keys it
stored, and on start the keys of the table's events received within the horizon) or repeated in
the batch, and counts them. Compaction (:mod:`.compaction`) folds recorded parts into generations
(:mod:`.generations`); readers read the newest complete generation and the parts it did not fold.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.errors import StorageError
from lakefs_gc.events.dedupe import DedupeKey, RecentKeys
from lakefs_gc.events.model import EVENT_DDL, EVENT_SCHEMA
from lakefs_gc.spark.ingest.events.generations import newest_generation
from lakefs_gc.spark.ingest.events.source import EventSourceConfig, event_source_class, source_name
from lakefs_gc.spark.runtime.checkpoint import clear_interrupted_writes, stream_id
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.spark.runtime.tables import TableLocation
from lakefs_gc.storage.checkpoints import CheckpointRoot
from lakefs_gc.storage.filesystems import file_exists
from lakefs_gc.storage.reads import read_whole
from lakefs_gc.storage.writes import open_output, write_whole

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

PARTS = "parts"
DEAD_LETTER = "dead-letter"
RECORDS = "_batches"
#: the columns an event's dedupe key is made of
KEY_COLUMNS = ["repository", "address", "kind", "sequencer", "event_time", "version_id"]
#: redeliveries come within the queue's visibility timeout (SQS and Storage Queues: 30 s by
#: default, 12 h at most) after the first delivery; ``service.dedupe_horizon`` sets it
DEFAULT_DEDUPE_HORIZON = timedelta(hours=1)


@dataclass(frozen=True)
class EventTable(TableLocation):
    """The event table: routed object events (see the module docstring)."""


@dataclass(frozen=True)
class BatchCounts:
    """What one micro-batch of one event source did (the service's counters)."""

    source: str
    batch_id: int
    received: int  # messages (distinct ids per spool file)
    events: int  # routed events stored
    deduplicated: int  # routed events dropped: already stored, or twice in the batch
    skipped: int  # messages without object events (test events, tier changes...)
    dead_lettered: int  # malformed messages
    unrouted: int  # events outside every configured namespace
    repositories: Mapping[str, int] = field(default_factory=dict)  # events stored per repository
    #: events inside a namespace for a key the GC may never delete (``_lakefs/``, ``data/<file>``)
    not_deletable: int = 0
    oldest_event_time: datetime | None = None  # of the stored events
    newest_event_time: datetime | None = None
    spools: tuple[int, ...] = ()
    dedupe_keys: int = 0  # keys held for redelivery dedupe after the batch (bounded by the horizon)


class EventTableSink:
    """The ``foreachBatch`` body writing an event source's batches to an :class:`EventTable`."""

    def __init__(
        self,
        table: EventTable,
        source: str,
        stream_id: str,
        on_batch: Callable[[BatchCounts], None] | None = None,
        *,
        dedupe_horizon: timedelta = DEFAULT_DEDUPE_HORIZON,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.table, self.source, self.stream_id = table, source, stream_id
        self.on_batch = on_batch or (lambda counts: None)
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.seen = RecentKeys(dedupe_horizon)
        self.seen.add_stored(recent_keys(table, self.clock() - dedupe_horizon))
        self.committed: list[BatchCounts] = []  # what this process's batches recorded

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if not self._recorded(batch_id):  # a replay is skipped before Spark computes its rows
            self.store(df.toArrow(), batch_id)

    def _record_path(self, batch_id: int) -> tuple[pafs.FileSystem, str, str]:
        fs, base = self.table.filesystem()
        name = f"{self.stream_id}-{batch_id:012d}"
        return fs, name, f"{base}/{RECORDS}/{self.source}-{name}.json"

    def _recorded(self, batch_id: int) -> bool:
        fs, _, record = self._record_path(batch_id)
        if file_exists(fs, record):
            log.info(
                "%s: batch %d was already recorded in %s; skipping its replay", self.source, batch_id, record
            )
            return True
        return False

    def store(self, rows: pa.Table, batch_id: int) -> BatchCounts | None:
        """Store one batch's status rows (:data:`~.source.SOURCE_SCHEMA`) once: its events not
        stored yet, its dead letters, then its record (None: recorded before, a replay)."""
        if self._recorded(batch_id):
            return None
        fs, name, record = self._record_path(batch_id)
        _, base = self.table.filesystem()
        now = self.clock()
        self.seen.expire(now)
        events, deduplicated = self._new_events(rows)
        part = self._write_part(fs, base, name, events)
        dead = self._write_dead_letters(fs, base, name, rows)
        held = len(self.seen) + events.num_rows  # the batch's keys are new ones, each once
        counts = _counts(self.source, batch_id, rows, events, deduplicated, held)
        body = {
            "source": self.source,
            "stream": self.stream_id,
            "batch": name,
            "recorded_at": now.isoformat(),
            "part": part,
            "dead_letter": dead,
            **_counts_json(counts),
        }
        write_whole(fs, record, json.dumps(body, indent=1).encode())
        self.seen.add(_keys(events), now)
        self.committed.append(counts)
        self.on_batch(counts)
        return counts

    def _new_events(self, rows: pa.Table) -> tuple[pa.Table, int]:
        """The batch's routed events not stored yet, each once; and how many were dropped."""
        routed = rows.filter(pc.equal(rows.column("status"), "event"))
        routed = routed.select(EVENT_SCHEMA.names).cast(EVENT_SCHEMA)
        keep, batch_keys = [], set()
        for i, key in enumerate(_keys(routed)):
            if key not in self.seen and key not in batch_keys:
                keep.append(i)
                batch_keys.add(key)
        return routed.take(pa.array(keep, pa.int64())), routed.num_rows - len(keep)

    def _write_part(self, fs: pafs.FileSystem, base: str, name: str, events: pa.Table) -> str | None:
        if events.num_rows == 0:
            return None
        relative = f"{PARTS}/{self.source}/{name}.parquet"
        try:
            with open_output(fs, f"{base}/{relative}") as out:
                pq.write_table(events, out)
        except OSError as e:
            raise StorageError(f"{self.table}: cannot write {relative}: {e}") from e
        return relative

    def _write_dead_letters(self, fs: pafs.FileSystem, base: str, name: str, rows: pa.Table) -> str | None:
        dead = rows.filter(pc.equal(rows.column("status"), "dead"))
        if dead.num_rows == 0:
            return None
        relative = f"{DEAD_LETTER}/{self.source}/{name}.jsonl"
        lines = [
            json.dumps(
                {
                    "message_id": r["message_id"],
                    "received_time": _iso(r["received_time"]),
                    "reason": r["reason"],
                    "body": r["body"],
                },
                ensure_ascii=False,
            )
            for r in dead.select(["message_id", "received_time", "reason", "body"]).to_pylist()
        ]
        try:
            with open_output(fs, f"{base}/{relative}") as out:
                out.write(("\n".join(lines) + "\n").encode())
        except OSError as e:
            raise StorageError(f"{self.table}: cannot write {relative}: {e}") from e
        return relative


def _counts(
    source: str, batch_id: int, rows: pa.Table, events: pa.Table, deduplicated: int, held: int
) -> BatchCounts:
    status = rows.column("status").to_pylist()
    messages = set(zip(rows.column("spool").to_pylist(), rows.column("message_id").to_pylist(), strict=True))
    repositories: dict[str, int] = {}
    for repository in events.column("repository").to_pylist():
        repositories[repository] = repositories.get(repository, 0) + 1
    times = events.column("event_time")
    return BatchCounts(
        source=source,
        batch_id=batch_id,
        received=len(messages),
        events=events.num_rows,
        deduplicated=deduplicated,
        skipped=status.count("skipped"),
        dead_lettered=status.count("dead"),
        unrouted=status.count("unrouted"),
        not_deletable=status.count("not_deletable"),
        repositories=dict(sorted(repositories.items())),
        oldest_event_time=pc.min(times).as_py() if events.num_rows else None,
        newest_event_time=pc.max(times).as_py() if events.num_rows else None,
        spools=tuple(sorted({s for s, _ in messages})),
        dedupe_keys=held,
    )


def _counts_json(counts: BatchCounts) -> dict[str, Any]:
    body = asdict(counts)
    body["repositories"] = dict(counts.repositories)
    body["spools"] = list(counts.spools)
    for name in ("oldest_event_time", "newest_event_time"):
        body[name] = _iso(body[name])
    return body


def _keys(events: pa.Table) -> list[DedupeKey]:
    """:meth:`ObjectEvent.dedupe_key` per row, from the stored columns (the sequencer when there is
    one, else the event time, stands for the notification)."""
    columns = [events.column(c).to_pylist() for c in KEY_COLUMNS]
    return [
        (repository, address, kind, sequencer or _iso(when) or "", version or "")
        for repository, address, kind, sequencer, when, version in zip(*columns, strict=True)
    ]


# ---- reading --------------------------------------------------------------------------------


def event_records(table: EventTable, source: str | None = None) -> list[dict[str, Any]]:
    """Every batch record of the table (of ``source`` only, if given), oldest first."""
    fs, base = table.filesystem()
    infos = fs.get_file_info(pafs.FileSelector(f"{base}/{RECORDS}", allow_not_found=True))
    records = []
    for info in infos:
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        try:
            record = json.loads(read_whole(fs, info.path))
        except (OSError, ValueError) as e:
            raise StorageError(f"{info.path}: unreadable event batch record: {e}") from e
        if source is None or record.get("source") == source:
            record["record"] = f"{RECORDS}/{info.base_name}"
            records.append(record)
    return sorted(records, key=lambda r: (r["recorded_at"], r["batch"]))


def recorded_parts(table: EventTable) -> list[str]:
    """The files a reader reads (relative): the newest complete generation's, then the parts of
    the batch records it did not fold."""
    generation = newest_generation(table)
    folded = generation.folded if generation is not None else frozenset()
    parts = list(generation.files) if generation is not None else []
    parts += [r["part"] for r in event_records(table) if r.get("part") and r["record"] not in folded]
    return parts


def recent_keys(table: EventTable, since: datetime) -> Iterator[tuple[DedupeKey, datetime]]:
    """The dedupe keys of the stored events received at or after ``since`` (all sources: a
    notification delivered by two queues is one event), with their received time."""
    fs, base = table.filesystem()
    wanted = [*KEY_COLUMNS, "received_time"]
    for relative in recorded_parts(table):
        with fs.open_input_file(f"{base}/{relative}") as f:
            rows = pq.read_table(f, columns=wanted)
        rows = rows.filter(
            pc.greater_equal(
                rows.column("received_time"), pa.scalar(since, rows.schema.field("received_time").type)
            )
        )
        yield from zip(_keys(rows), rows.column("received_time").to_pylist(), strict=True)


def events_frame(
    spark: SparkSession, table: EventTable, repositories: list[str] | None = None, *, parallelism: int = 8
) -> DataFrame:
    """The recorded events (of ``repositories``, if given) as a DataFrame of :data:`EVENT_DDL` rows,
    read by the executors with ``pyarrow`` (no Hadoop connector)."""
    return files_frame(spark, table, recorded_parts(table), repositories, parallelism=parallelism)


def files_frame(
    spark: SparkSession,
    table: EventTable,
    files: list[str],
    repositories: list[str] | None = None,
    *,
    parallelism: int = 8,
) -> DataFrame:
    """The events of some of the table's ``files`` (relative paths), as :func:`events_frame`."""
    _, base = table.filesystem()
    paths = [f"{base}/{part}" for part in files]
    tasks = task_frame(spark, [(p,) for p in paths], "path string", parallelism)
    return tasks.mapInArrow(on_executor(_PartReader(table, repositories)), EVENT_DDL)


class _PartReader:
    def __init__(self, table: EventTable, repositories: list[str] | None) -> None:
        self.table, self.repositories = table, repositories

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = self.table.filesystem()
        wanted = pa.array(self.repositories, pa.string()) if self.repositories is not None else None
        for batch in batches:
            for path in batch.column("path").to_pylist():
                with fs.open_input_file(path) as f:
                    for part in pq.ParquetFile(f).iter_batches(batch_size=65536):
                        if wanted is not None:
                            part = part.filter(pc.is_in(part.column("repository"), value_set=wanted))
                        yield part


# ---- running --------------------------------------------------------------------------------


def run_event_stream(
    spark: SparkSession,
    config: EventSourceConfig,
    table: EventTable,
    checkpoint: CheckpointRoot | Path,
    *,
    trigger: dict[str, Any],
    on_batch: Callable[[BatchCounts], None] | None = None,
    dedupe_horizon: timedelta = DEFAULT_DEDUPE_HORIZON,
) -> StreamingQuery:
    """Start ``config``'s event source into ``table`` (query name: ``config.name``).

    ``trigger`` as ``DataStreamWriter.trigger`` takes it: ``{"availableNow": True}`` drains the
    queue and stops, ``{"processingTime": "30 seconds"}`` runs until stopped. The checkpoint is
    Spark's own, on a filesystem Spark writes without connectors; it keeps the stream id too.
    """
    checkpoint = clear_interrupted_writes(checkpoint)
    sink = EventTableSink(table, config.name, stream_id(checkpoint), on_batch, dedupe_horizon=dedupe_horizon)
    spark.dataSource.register(event_source_class(config))
    return (
        spark.readStream.format(source_name(config))
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint.spark)
        .trigger(**trigger)
        .queryName(config.name)
        .start()
    )


def _iso(when: datetime | None) -> str | None:
    return when.astimezone(timezone.utc).isoformat() if when is not None else None
