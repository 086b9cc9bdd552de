"""The inventory streaming source: complete deliveries under a destination, each exactly once.

A PySpark Python Data Source (reference/cloud-formats.md §5). The driver side discovers
deliveries and admits them to the :class:`~lakefs_gc.inventory.delivery_log.DeliveryLog`; an
offset ``{"deliveries": N, "last": <manifest>}`` names the first N log entries, so a batch
re-planned after a crash reads exactly the deliveries it read before. Each data file of each
delivery is one input partition, read on an executor through ``pyarrow.fs`` and routed to the
configured repositories' namespaces (:func:`~lakefs_gc.inventory.mapping.route_rows`).

Rows are candidates, plus one *status row* per data file (``address`` null): how many candidates
it gave, or why it was rejected. A bad file does not fail the query; the sink drops that whole
delivery and records the reason (issue: bad input never becomes a snapshot, others continue).

Gotchas honoured here (§0): ``read()`` runs on a pickled copy of the reader, so everything it
needs travels in the partition or in the picklable :class:`SourceConfig`; no client is kept on
the reader; ``prepareForTriggerAvailableNow`` fixes the target so an ``availableNow`` run ends;
``commit()`` has nothing to acknowledge (deliveries are files), which is why its deferral to the
next run does not matter. Configuration reaches the source as a class attribute of a subclass
made per query (:func:`source_class`), not as string options, so storage secrets never appear
in a query plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from lakefs_gc.inventory.delivery import Delivery, Flavour, InventoryError
from lakefs_gc.inventory.delivery_log import DeliveryLog, LogEntry
from lakefs_gc.inventory.discovery import discover, read_rows
from lakefs_gc.inventory.mapping import CANDIDATE_SCHEMA, NamespaceRoute, route_rows
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation

SOURCE_NAME = "lakefs_gc_inventory"

_TS = pa.timestamp("us", tz="UTC")
#: the source's rows: CANDIDATE_SCHEMA, then the log position and the per-file status columns
SOURCE_SCHEMA = pa.schema(
    [
        *CANDIDATE_SCHEMA,
        ("delivery_seq", pa.int64()),
        ("file", pa.string()),  # status rows: the data file
        ("file_rows", pa.int64()),  # status rows: candidates the file gave
        ("error", pa.string()),  # status rows: why the file (and so its delivery) is rejected
    ]
)
SOURCE_DDL = (
    "repository string, address string, size long, last_modified timestamp, etag string, "
    "delivery_id string, snapshot_time timestamp, delivery_seq long, file string, file_rows long, "
    "error string"
)


@dataclass(frozen=True)
class SourceConfig:
    """Where deliveries arrive, whose namespaces they feed, and where the source keeps its log."""

    destination: StorageLocation  # S3 Inventory destination prefix or Azure inventory container
    storage: StorageOptions
    routes: tuple[NamespaceRoute, ...]
    log: StorageLocation  # the delivery log; as durable as the checkpoint (normally inside it)
    flavour: Flavour | None = None  # None: find both layouts
    max_deliveries_per_batch: int = 1  # one delivery per micro-batch bounds a batch's memory and work


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


class InventoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets over the delivery log; partitions per data file; reads on the executors."""

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

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        log = self._log()
        parts: list[InputPartition] = []
        for seq in range(int(start["deliveries"]), int(end["deliveries"])):
            entry = log.entry(seq)
            files = entry.delivery.files if entry.delivery else ()
            parts.extend(FilePartition(entry, i) for i in range(len(files)))
            if not files:
                parts.append(FilePartition(entry, None))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilePartition)
        return read_partition(self.config, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: deliveries stay where they are, the log is already durable."""

    def _log(self) -> DeliveryLog:
        fs, path = filesystem_for(self.config.log, self.config.storage)
        return DeliveryLog(fs, path)

    def _admit_new(self) -> int:
        fs, path = filesystem_for(self.config.destination, self.config.storage)
        found = discover(fs, path, self.config.flavour)
        log = self._log()
        log.admit(found)
        return len(log.entries())


def read_partition(config: SourceConfig, partition: FilePartition) -> Iterator[pa.RecordBatch]:
    """The candidates of one data file, then its status row (executor side)."""
    entry = partition.entry
    if entry.delivery is None:
        yield _status(entry, None, file=None, rows=0, error=entry.error or "rejected")
        return
    delivery = entry.delivery
    if partition.file_index is None:
        yield _status(entry, delivery, file=None, rows=0, error=None)
        return
    data_file = delivery.files[partition.file_index]
    fs, _ = filesystem_for(config.destination, config.storage)
    rows = 0
    try:
        for batch in read_rows(fs, delivery, data_file):
            candidates = route_rows(
                batch, config.routes, delivery_id=delivery.id, snapshot_time=delivery.snapshot_time
            )
            if candidates.num_rows:
                rows += candidates.num_rows
                yield from _candidate_batches(candidates, entry.seq)
    except (InventoryError, pa.ArrowException, ValueError, UnicodeDecodeError) as e:
        reason = str(e) if isinstance(e, InventoryError) else f"{data_file.path}: {e}"
        yield _status(entry, delivery, file=data_file.path, rows=rows, error=reason)
        return
    yield _status(entry, delivery, file=data_file.path, rows=rows, error=None)


def _candidate_batches(candidates: pa.Table, seq: int) -> Iterator[pa.RecordBatch]:
    n = candidates.num_rows
    extra = {
        "delivery_seq": pa.repeat(pa.scalar(seq, pa.int64()), n),
        "file": pa.nulls(n, pa.string()),
        "file_rows": pa.nulls(n, pa.int64()),
        "error": pa.nulls(n, pa.string()),
    }
    table = candidates
    for name, column in extra.items():
        table = table.append_column(name, column)
    yield from table.cast(SOURCE_SCHEMA).to_batches()


def _status(
    entry: LogEntry, delivery: Delivery | None, *, file: str | None, rows: int, error: str | None
) -> pa.RecordBatch:
    values: dict[str, list[Any]] = {name: [None] for name in SOURCE_SCHEMA.names}
    values.update(
        delivery_id=[entry.id],
        snapshot_time=[delivery.snapshot_time if delivery else None],
        delivery_seq=[entry.seq],
        file=[file],
        file_rows=[rows],
        error=[error],
    )
    return pa.RecordBatch.from_pydict(values, schema=SOURCE_SCHEMA)


def _offset(deliveries: int, last: str) -> dict[str, Any]:
    """Offsets are compared as JSON text: always the same keys in the same order."""
    return {"deliveries": deliveries, "last": last}


def is_status(batch: pa.RecordBatch | pa.Table) -> pa.Array:
    """Which rows of a source batch are status rows (the rest are candidates)."""
    return pc.is_null(batch.column("address"))
