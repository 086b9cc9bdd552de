"""The candidate table: ingested inventory snapshots as parquet, and the ingest report beside them.

Layout under the table location (any store ``pyarrow.fs`` reaches; no Hadoop connector)::

    parts/<ingest>/<delivery seq>/part-<file>-<attempt>.parquet   CANDIDATE_SCHEMA rows
    _ingest/<ingest>-<batch>.json                                 the batch's ingest report

The source writes one part per data file (:mod:`~lakefs_gc.spark.ingest.inventory.parts`) and the
``foreachBatch`` sink receives only their status rows. A micro-batch is visible only through its
``_ingest`` record, written last: the ingest report, listing every delivery of the batch as
ingested (its parts, files, candidates per repository) or rejected (the file and the reason).
That makes the sink idempotent per batch id (docs/formats/spark-data-sources.md, "Idempotent
sinks"): a batch replayed after a crash finds its record and is skipped, or finds none and runs
again; readers read only the parts a record lists, so parts of killed or retried attempts are
never read (the sink deletes them).
``<ingest>`` is an id kept in the checkpoint, so a new checkpoint never mistakes an old one's
records for its own batches.

A rejected delivery's parts are deleted before the record is written, so bad input never becomes
a snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.errors import StorageError
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.spark.runtime.tables import TableLocation
from lakefs_gc.storage.filesystems import file_exists
from lakefs_gc.storage.locations import StorageLocation
from lakefs_gc.storage.reads import read_whole
from lakefs_gc.storage.writes import write_whole

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PARTS = "parts"
RECORDS = "_ingest"
CANDIDATE_DDL = (
    "repository string, address string, size long, last_modified timestamp, etag string, "
    "delivery_id string, snapshot_time timestamp, encryption string"
)


@dataclass(frozen=True)
class CandidateTable(TableLocation):
    """The candidate table: ingested inventory snapshots (see the module docstring)."""


@dataclass
class IngestedDelivery:
    """One delivery in the ingest report."""

    seq: int
    id: str
    status: str  # "ingested" | "rejected"
    snapshot_time: str | None = None
    files: int = 0
    candidates: int = 0
    repositories: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    batch: str = ""
    parts: list[str] = field(default_factory=list)  # relative to the table


class CandidateTableSink:
    """The ``foreachBatch`` body recording inventory-source batches in a :class:`CandidateTable`."""

    def __init__(
        self,
        table: CandidateTable,
        ingest_id: str,
        say: Callable[[str], None],
        on_deliveries: Callable[[list[IngestedDelivery]], None] | None = None,
    ) -> None:
        self.table, self.ingest_id, self.say = table, ingest_id, say
        self.on_deliveries = on_deliveries  # after each recorded batch (the service's metrics)
        self.committed: list[IngestedDelivery] = []  # what this process's batches recorded

    def parts_location(self) -> StorageLocation:
        return self.table.location.join(f"{PARTS}/{self.ingest_id}")

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        name = f"{self.ingest_id}-{batch_id:08d}"
        fs, base = self.table.filesystem()
        record = f"{base}/{RECORDS}/{name}.json"
        if file_exists(fs, record):
            self.say(f"batch {batch_id} was already recorded in {record}; skipping its replay")
            return
        deliveries = _deliveries(df.collect(), name, base)  # one status row per data file
        parts_dir = f"{base}/{PARTS}/{self.ingest_id}"
        for delivery in deliveries:
            keep = {f"{base}/{p}" for p in delivery.parts}
            _delete_parts_except(fs, f"{parts_dir}/{delivery.seq:08d}", keep)
        body = {
            "batch": name,
            "batch_id": batch_id,
            "recorded_at": datetime.now(timezone.utc).isoformat(),
            "deliveries": [asdict(d) for d in deliveries],
        }
        # whole or not at all: a process killed mid-write must not leave an empty record, which a
        # restart would take as the batch recorded (and then fail to read)
        write_whole(fs, record, json.dumps(body, indent=1).encode())
        for delivery in deliveries:
            self.say(describe(delivery))
        self.committed.extend(deliveries)
        if self.on_deliveries is not None:
            self.on_deliveries(deliveries)


def describe(delivery: IngestedDelivery) -> str:
    """One line of the ingest report."""
    if delivery.status == "rejected":
        return f"rejected {delivery.id}: {'; '.join(delivery.errors)}"
    per_repo = ", ".join(f"{r}={n}" for r, n in sorted(delivery.repositories.items())) or "none"
    return (
        f"ingested {delivery.id} (snapshot {delivery.snapshot_time}): {delivery.files} files, "
        f"{delivery.candidates} candidates ({per_repo})"
    )


def _deliveries(stats: list[Any], batch: str, base: str) -> list[IngestedDelivery]:
    """Fold the per-file status rows into one report entry per delivery."""
    found: dict[int, IngestedDelivery] = {}
    for row in sorted(stats, key=lambda r: (r["delivery_seq"], r["file"] or "")):
        seq = row["delivery_seq"]
        d = found.setdefault(seq, IngestedDelivery(seq, row["delivery_id"], "ingested", batch=batch))
        if row["snapshot_time"] is not None:
            d.snapshot_time = row["snapshot_time"].astimezone(timezone.utc).isoformat()
        if row["file"] is not None:
            d.files += 1
        if row["error"] is not None:
            d.status = "rejected"
            d.errors.append(row["error"])
        if row["part"]:
            d.parts.append(row["part"][len(base) + 1 :])
        for repository, n in json.loads(row["repositories"] or "{}").items():
            d.repositories[repository] = d.repositories.get(repository, 0) + n
    for d in found.values():
        if d.status == "rejected":
            d.repositories, d.parts = {}, []
        d.candidates = sum(d.repositories.values())
    return [found[seq] for seq in sorted(found)]


# ---- reading --------------------------------------------------------------------------------


def ingest_records(table: CandidateTable) -> list[dict[str, Any]]:
    """Every batch record of the table, oldest first."""
    fs, base = table.filesystem()
    infos = fs.get_file_info(pafs.FileSelector(f"{base}/{RECORDS}", allow_not_found=True))
    records = []
    for info in infos:
        if info.type == pafs.FileType.File and info.base_name.endswith(".json"):
            try:
                records.append(json.loads(read_whole(fs, info.path)))
            except (OSError, ValueError) as e:
                raise StorageError(f"{info.path}: unreadable ingest record: {e}") from e
    return sorted(records, key=lambda r: (r["recorded_at"], r["batch"]))


def ingested_deliveries(table: CandidateTable) -> list[IngestedDelivery]:
    """Each delivery once (its first record), in the order they were recorded."""
    seen: dict[str, IngestedDelivery] = {}
    for record in ingest_records(table):
        for body in record["deliveries"]:
            seen.setdefault(body["id"], IngestedDelivery(**body))
    return list(seen.values())


def candidates_frame(
    spark: SparkSession, table: CandidateTable, deliveries: list[IngestedDelivery], *, parallelism: int
) -> DataFrame:
    """The candidates of ``deliveries`` (ingested ones) as a DataFrame of CANDIDATE_SCHEMA rows.

    A delivery's rows are deduplicated by (repository, address): Azure inventories may repeat a
    blob across the data files of one run.
    """
    _, base = table.filesystem()
    paths = [f"{base}/{part}" for d in deliveries if d.status == "ingested" for part in d.parts]
    tasks = task_frame(spark, [(p,) for p in paths], "path string", parallelism)
    frame = tasks.mapInArrow(on_executor(_PartReader(table)), CANDIDATE_DDL)
    return frame.dropDuplicates(["repository", "delivery_id", "address"])


class _PartReader:
    def __init__(self, table: CandidateTable) -> None:
        self.table = table

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = self.table.filesystem()
        for batch in batches:
            for path in batch.column("path").to_pylist():
                with fs.open_input_file(path) as f:
                    for rows in pq.ParquetFile(f).iter_batches(batch_size=65536):
                        if "encryption" not in rows.schema.names:  # a part ingested before the column
                            rows = rows.append_column("encryption", pa.nulls(rows.num_rows, pa.string()))
                        yield rows


def _delete_parts_except(fs: pafs.FileSystem, path: str, keep: set[str]) -> None:
    """Remove the parts under ``path`` no record will list (killed attempts, a rejected delivery)."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        for info in infos:
            if info.type == pafs.FileType.File and info.path not in keep:
                fs.delete_file(info.path)
    except OSError as e:
        raise StorageError(f"cannot clear stale parts under {path}: {e}") from e
