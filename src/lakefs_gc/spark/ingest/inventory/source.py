"""The inventory streaming source: complete deliveries under a destination, each exactly once.

A PySpark Python Data Source (docs/formats/spark-data-sources.md). The driver side discovers
deliveries and admits them to the :class:`~lakefs_gc.inventory.delivery_log.DeliveryLog`; an
offset ``{"deliveries": N, "last": <manifest>}`` names the first N log entries, so a batch
re-planned after a crash reads exactly the deliveries it read before. Each data file of each
delivery is read on an executor through ``pyarrow.fs``, routed to the configured repositories'
namespaces (:func:`~lakefs_gc.inventory.mapping.route_rows`) and written as one parquet part of
the candidate table (:mod:`~lakefs_gc.spark.ingest.inventory.parts`). A task reads a group of
data files one after the other (:func:`group_files`): as many groups as the session's task slots
(:func:`~lakefs_gc.spark.runtime.session.task_slots`), balanced by size, or more where a group
would hold more than :data:`TASK_BYTES`. A task per data file cost each file a Python task's start
(about 60 ms of a slot and 80 JVM CPU ms: a seventh of a 1M-row file's work), and the micro-batch
of a 10M-row delivery on 2 cores 3.18-3.76 s instead of 3.08-3.35 s (bench/README.md,
"`inventory.py`: a task per group of data files (2026-12-07)").

The source's rows are *status rows*, one per data file: its part and candidates per repository,
or why it was rejected. Candidates never pass through Spark's rows (that conversion was most of
the ingest's cost). A bad file does not fail the query; the sink drops that whole delivery and
records the reason (bad input never becomes a snapshot, the others continue).

Gotchas honoured here (spark-data-sources.md, "Gotchas"): ``read()`` runs on a pickled copy of
the reader, so everything it
needs travels in the partition or in the picklable :class:`SourceConfig`; no client is kept on
the reader; ``prepareForTriggerAvailableNow`` fixes the target so an ``availableNow`` run ends;
``commit()`` has nothing to acknowledge (deliveries are files), which is why its deferral to the
next run does not matter. Configuration reaches the source as a class attribute of a subclass
made per query (:func:`source_class`), not as string options, so storage secrets never appear
in a query plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from lakefs_gc.errors import ConfigError
from lakefs_gc.inventory.delivery import Flavour, InventoryError
from lakefs_gc.inventory.delivery_log import DeliveryLog, LogEntry
from lakefs_gc.inventory.discovery import discover, read_rows
from lakefs_gc.inventory.mapping import NamespaceRoute, route_rows
from lakefs_gc.spark.ingest.inventory.parts import CandidatePartWriter, part_path
from lakefs_gc.spark.runtime.failures import encode_errors
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation

SOURCE_NAME = "lakefs_gc_inventory"

#: one row per data file (or per delivery rejected before its files were read)
SOURCE_SCHEMA = pa.schema(
    [
        ("delivery_seq", pa.int64()),  # position in the delivery log
        ("delivery_id", pa.string()),  # the manifest
        ("snapshot_time", pa.timestamp("us", tz="UTC")),
        ("file", pa.string()),  # the data file (null: the delivery has none, or was rejected early)
        ("part", pa.string()),  # the candidate part written for it (null: no candidates)
        ("repositories", pa.string()),  # JSON {repository: candidates}
        ("error", pa.string()),  # why the file, and so its delivery, is rejected
    ]
)
SOURCE_DDL = (
    "delivery_seq long, delivery_id string, snapshot_time timestamp, file string, part string, "
    "repositories string, error string"
)


@dataclass(frozen=True)
class SourceConfig:
    """Where deliveries arrive, whose namespaces they feed, and where the source keeps its log."""

    destination: StorageLocation  # S3 Inventory destination prefix or Azure inventory container
    storage: StorageOptions
    routes: tuple[NamespaceRoute, ...]
    flavour: Flavour | None = None  # None: find both layouts
    max_deliveries_per_batch: int = 1  # one delivery per micro-batch bounds a batch's memory and work
    #: keep each candidate's ETag and EncryptionStatus (``gc.trust_checksums``): the identity-twin
    #: guard's content evidence, and nothing else's. Without it they are neither parsed nor stored:
    #: a third of a Parquet data file's decoding, and more than half of each part's bytes.
    etags: bool = False
    #: how many tasks a micro-batch's data files are spread over at the least; more where they
    #: hold more than :data:`TASK_BYTES` a task. None: the session's task slots, as
    #: :func:`~lakefs_gc.spark.ingest.inventory.stream.start_ingest` sets it (:func:`group_files`
    #: given None makes a group per data file).
    tasks: int | None = None
    # set by lakefs_gc.spark.ingest.inventory.stream from the checkpoint and the table:
    log: StorageLocation | None = None  # the delivery log; as durable as the checkpoint (inside it)
    parts: StorageLocation | None = None  # where the candidate parts are written (in the table)

    def located(self, what: str) -> StorageLocation:
        location: StorageLocation | None = getattr(self, what)
        if location is None:
            raise ConfigError(f"{SOURCE_NAME}: no {what} location (start the stream with ingest_available)")
        return location


def source_class(config: SourceConfig) -> type[DataSource]:
    """A data source class carrying ``config`` (pickled by value to the Python workers)."""
    return type("InventorySource", (InventorySource,), {"config": config})


class InventorySource(DataSource):
    """``spark.readStream.format("lakefs_gc_inventory")`` once :func:`source_class` is registered."""

    config: SourceConfig

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SOURCE_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return InventoryStreamReader(self.config)


class FilePartition(InputPartition):
    """One data file of one admitted delivery (or a delivery's status alone: rejected or empty)."""

    def __init__(self, entry: LogEntry, file_index: int | None) -> None:
        super().__init__(entry.seq)
        self.entry, self.file_index = entry, file_index


class FileGroup(InputPartition):
    """The data files one task reads, one after the other: a status row each."""

    def __init__(self, files: tuple[FilePartition, ...]) -> None:
        super().__init__(files[0].entry.seq)
        self.files = files


class InventoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets over the delivery log; partitions per group of data files; reads on the executors."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self.target: int | None = None  # set by prepareForTriggerAvailableNow (driver reader only)

    def initialOffset(self) -> dict[str, Any]:
        return _offset(0, "")

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self.config.max_deliveries_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._admit_new()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        available = self.target if self.target is not None else self._admit_new()
        begin = int(start["deliveries"])
        end = available
        if isinstance(limit, ReadMaxFiles):
            end = min(available, begin + max(1, limit.max_files))
        elif not isinstance(limit, ReadAllAvailable):
            raise InventoryError(f"{SOURCE_NAME}: unsupported read limit {limit!r}")
        if end <= begin:
            return dict(start)
        return _offset(end, self._log().entry(end - 1).id)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[FileGroup]:
        log = self._log()
        seqs = range(int(start["deliveries"]), int(end["deliveries"]))
        parts = [part for seq in seqs for part in entry_partitions(log.entry(seq))]
        return group_files(parts, self.config.tasks)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileGroup)
        return encode_errors(b for f in partition.files for b in read_partition(self.config, f))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: deliveries stay where they are, the log is already durable."""

    def _log(self) -> DeliveryLog:
        fs, path = filesystem_for(self.config.located("log"), self.config.storage)
        return DeliveryLog(fs, path)

    def _admit_new(self) -> int:
        fs, path = filesystem_for(self.config.destination, self.config.storage)
        found = discover(fs, path, self.config.flavour)
        log = self._log()
        log.admit(found)
        return len(log.entries())


def entry_partitions(entry: LogEntry) -> list[FilePartition]:
    """What one admitted delivery gives to read: each of its data files, or, rejected or without
    files, its status alone."""
    files = entry.delivery.files if entry.delivery else ()
    return [FilePartition(entry, i) for i in range(len(files))] or [FilePartition(entry, None)]


#: a task reads about this many bytes of data files at most, once a delivery holds more than
#: ``SourceConfig.tasks`` times as much: a retried or straggling task then holds no more than this
TASK_BYTES = 256 * 1024 * 1024


def group_files(files: list[FilePartition], tasks: int | None) -> list[FileGroup]:
    """``files`` as ``tasks`` groups, or as many as :data:`TASK_BYTES` per group needs if that
    is more, and never more than one group per file; balanced by size (the largest file first,
    each to the group with the fewest bytes so far: every slot busy until the batch's end). A
    data file whose size the manifest does not give counts as an eighth of TASK_BYTES; a
    delivery's status alone (rejected, or without files) as nothing. ``tasks`` None: a group
    per file, as they come."""
    if tasks is None or len(files) <= 1:
        return [FileGroup((f,)) for f in files]
    sizes = [_size(f) for f in files]
    count = min(len(files), max(tasks, -(-sum(sizes) // TASK_BYTES)))
    groups: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for i in sorted(range(len(files)), key=lambda i: -sizes[i]):
        least = loads.index(min(loads))
        groups[least].append(i)
        loads[least] += sizes[i]
    return [FileGroup(tuple(files[i] for i in sorted(g))) for g in groups if g]


def _size(partition: FilePartition) -> int:
    delivery = partition.entry.delivery
    if delivery is None or partition.file_index is None:
        return 0
    return delivery.files[partition.file_index].size or TASK_BYTES // 8


def read_partition(config: SourceConfig, partition: FilePartition) -> Iterator[pa.RecordBatch]:
    """Write one data file's candidates as a part; yield its status row (executor side)."""
    entry = partition.entry
    if entry.delivery is None:  # rejected at discovery: never without a reason
        yield _status(entry, file=None, error=entry.error or "rejected")
        return
    if partition.file_index is None:  # a delivery without data files: an empty snapshot
        yield _status(entry, file=None)
        return
    delivery = entry.delivery
    data_file = delivery.files[partition.file_index]
    fs, _ = filesystem_for(config.destination, config.storage)
    parts_fs, parts_dir = filesystem_for(config.located("parts"), config.storage)
    part = CandidatePartWriter(parts_fs, part_path(parts_dir, entry.seq, partition.file_index))
    try:
        for batch in read_rows(fs, delivery, data_file, etags=config.etags):
            routed = route_rows(
                batch, config.routes, delivery_id=delivery.id, snapshot_time=delivery.snapshot_time
            )
            part.write(routed)
        written = part.close()
    except (InventoryError, pa.ArrowException, ValueError, UnicodeDecodeError) as e:
        part.abort()
        reason = str(e) if isinstance(e, InventoryError) else f"{data_file.path}: {e}"
        yield _status(entry, file=data_file.path, error=reason)
        return
    except BaseException:
        part.abort()
        raise
    yield _status(entry, file=data_file.path, part=written, counts=part.counts)


def _status(
    entry: LogEntry,
    *,
    file: str | None,
    part: str | None = None,
    counts: dict[str, int] | None = None,
    error: str | None = None,
) -> pa.RecordBatch:
    row = {
        "delivery_seq": entry.seq,
        "delivery_id": entry.id,
        "snapshot_time": entry.delivery.snapshot_time if entry.delivery else None,
        "file": file,
        "part": part,
        "repositories": json.dumps(counts or {}),
        "error": error,
    }
    return pa.RecordBatch.from_pylist([row], schema=SOURCE_SCHEMA)


def _offset(deliveries: int, last: str) -> dict[str, Any]:
    """Offsets are compared as JSON text: always the same keys in the same order."""
    return {"deliveries": deliveries, "last": last}
