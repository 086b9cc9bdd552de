"""The candidate table: ingested inventory snapshots as parquet, and the ingest report beside them.

Layout under the table location (any store ``pyarrow.fs`` reaches; no Hadoop connector)::

    batches/<query>-<batch>/<delivery seq>/part-<partition>.parquet   CANDIDATE_SCHEMA rows
    _ingest/<query>-<batch>.json                                      the batch's ingest report

A micro-batch is visible only through its ``_ingest`` record, written last. The record is the
ingest report: every delivery of the batch, ingested (files, candidates per repository) or
rejected (the file and the reason). That makes the ``foreachBatch`` sink idempotent per batch id
(cloud-formats.md §5.4): a batch replayed after a crash finds its record and is skipped, or finds
none, discards whatever a killed attempt left and writes again. ``<query>`` is the checkpoint's
query id, so a new checkpoint never mistakes an old query's records for its own batches.

Rows of a rejected delivery are deleted before the record is written, so bad input never
becomes a snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.errors import StorageError
from lakefs_gc.inventory.mapping import CANDIDATE_SCHEMA
from lakefs_gc.spark.inventory_source import is_status
from lakefs_gc.spark.reports import open_report_output
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for, is_not_found
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BATCHES = "batches"
RECORDS = "_ingest"
CANDIDATE_DDL = (
    "repository string, address string, size long, last_modified timestamp, etag string, "
    "delivery_id string, snapshot_time timestamp"
)
#: what each writer task reports: per delivery, its files' outcomes and candidates per repository
_STATS_DDL = (
    "delivery_seq long, delivery_id string, snapshot_time timestamp, file string, rows long, "
    "error string, repositories string"
)
_STATS_SCHEMA = pa.schema(
    [
        ("delivery_seq", pa.int64()),
        ("delivery_id", pa.string()),
        ("snapshot_time", pa.timestamp("us", tz="UTC")),
        ("file", pa.string()),
        ("rows", pa.int64()),
        ("error", pa.string()),
        ("repositories", pa.string()),
    ]
)


@dataclass(frozen=True)
class CandidateTable:
    """Where the candidate table lives and how to reach it."""

    location: StorageLocation
    options: StorageOptions

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        fs, path = filesystem_for(self.location, self.options)
        return fs, path.rstrip("/")

    def __str__(self) -> str:
        return str(self.location)


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


class CandidateTableSink:
    """The ``foreachBatch`` body writing inventory-source batches into a :class:`CandidateTable`."""

    def __init__(self, table: CandidateTable, checkpoint: Path, say: Callable[[str], None]) -> None:
        self.table, self.checkpoint, self.say = table, checkpoint, say
        self.committed: list[IngestedDelivery] = []  # what this process's batches recorded

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        name = f"{self._query_id()}-{batch_id:08d}"
        fs, base = self.table.filesystem()
        record = f"{base}/{RECORDS}/{name}.json"
        if fs.get_file_info(record).type == pafs.FileType.File:
            self.say(f"batch {batch_id} was already recorded in {record}; skipping its replay")
            return
        batch_dir = f"{base}/{BATCHES}/{name}"
        _delete_dir(fs, batch_dir)
        stats = df.mapInArrow(_PartWriter(self.table, batch_dir), _STATS_DDL).collect()
        deliveries = _deliveries(stats, name)
        for delivery in deliveries:
            if delivery.status == "rejected":
                _delete_dir(fs, f"{batch_dir}/{delivery.seq:08d}")
        body = {
            "batch": name,
            "batch_id": batch_id,
            "recorded_at": datetime.now(timezone.utc).isoformat(),
            "deliveries": [asdict(d) for d in deliveries],
        }
        with open_report_output(fs, record) as out:
            out.write(json.dumps(body, indent=1).encode())
        for delivery in deliveries:
            self.say(describe(delivery))
        self.committed.extend(deliveries)

    def _query_id(self) -> str:
        """Spark writes ``<checkpoint>/metadata`` (``{"id": ...}``) before the first batch."""
        try:
            return str(json.loads((self.checkpoint / "metadata").read_text())["id"])
        except (OSError, ValueError, KeyError) as e:
            raise StorageError(f"{self.checkpoint}/metadata: cannot read the streaming query id: {e}") from e


def describe(delivery: IngestedDelivery) -> str:
    """One line of the ingest report."""
    if delivery.status == "rejected":
        return f"rejected {delivery.id}: {'; '.join(delivery.errors)}"
    per_repo = ", ".join(f"{r}={n}" for r, n in sorted(delivery.repositories.items())) or "none"
    return (
        f"ingested {delivery.id} (snapshot {delivery.snapshot_time}): {delivery.files} files, "
        f"{delivery.candidates} candidates ({per_repo})"
    )


class _PartWriter:
    """Per partition (one data file): write its candidates, return its status (on an executor).

    Spark hands ``mapInArrow`` batches of ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows
    (10K by default); they are gathered into row groups of about :data:`ROW_GROUP_ROWS` rows,
    since a parquet write per small batch costs twice the time and makes a file of tiny row groups.
    """

    ROW_GROUP_ROWS = 128 * 1024
    #: columns worth a dictionary (one or a few values per file); the others are unique per row
    DICTIONARY_COLUMNS = ("repository", "delivery_id", "snapshot_time")

    def __init__(self, table: CandidateTable, batch_dir: str) -> None:
        self.table, self.batch_dir = table, batch_dir

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        fs, _ = self.table.filesystem()
        writers: dict[int, tuple[pq.ParquetWriter, Any]] = {}
        counts: dict[tuple[int, str, str], int] = {}
        statuses: list[dict[str, Any]] = []
        pending: list[pa.RecordBatch] = []
        buffered = 0
        try:
            for batch in batches:
                status = is_status(batch)
                if pc.any(status).as_py():  # one status row per data file: rare
                    statuses.extend(batch.filter(status).to_pylist())
                    batch = batch.filter(pc.invert(status))
                pending.append(batch)
                buffered += batch.num_rows
                if buffered >= self.ROW_GROUP_ROWS:
                    self._write(fs, writers, partition, pa.Table.from_batches(pending), counts)
                    pending, buffered = [], 0
            if pending:
                self._write(fs, writers, partition, pa.Table.from_batches(pending), counts)
        finally:
            for writer, stream in writers.values():
                writer.close()
                stream.close()  # ParquetWriter leaves a stream it was given open (S3: not uploaded)
        yield _stats_batch(statuses, counts)

    def _write(
        self,
        fs: pafs.FileSystem,
        writers: dict[int, tuple[pq.ParquetWriter, Any]],
        partition: int,
        candidates: pa.Table,
        counts: dict[tuple[int, str, str], int],
    ) -> None:
        if candidates.num_rows == 0:
            return
        keys = ["delivery_seq", "delivery_id", "repository"]
        for row in candidates.group_by(keys).aggregate([([], "count_all")]).to_pylist():
            key = (row["delivery_seq"], row["delivery_id"], row["repository"])
            counts[key] = counts.get(key, 0) + int(row["count_all"])
        seqs = pc.unique(candidates.column("delivery_seq")).to_pylist()
        for seq in seqs:
            rows = candidates
            if len(seqs) > 1:
                rows = candidates.filter(pc.equal(candidates.column("delivery_seq"), seq))
            if seq not in writers:
                path = f"{self.batch_dir}/{seq:08d}/part-{partition:05d}.parquet"
                stream = open_report_output(fs, path)
                writer = pq.ParquetWriter(
                    stream, CANDIDATE_SCHEMA, use_dictionary=list(self.DICTIONARY_COLUMNS)
                )
                writers[seq] = (writer, stream)
            writers[seq][0].write_table(rows.select(CANDIDATE_SCHEMA.names).cast(CANDIDATE_SCHEMA))


def _stats_batch(statuses: list[dict[str, Any]], counts: dict[tuple[int, str, str], int]) -> pa.RecordBatch:
    """Status rows as they came, then one row per delivery with its candidates per repository."""
    rows = [{**{name: s.get(name) for name in _STATS_SCHEMA.names}, "rows": None} for s in statuses]
    per_delivery: dict[tuple[int, str], dict[str, int]] = {}
    for (seq, delivery_id, repository), n in counts.items():
        per_delivery.setdefault((seq, delivery_id), {})[repository] = n
    for (seq, delivery_id), repos in per_delivery.items():
        count = {"rows": sum(repos.values()), "repositories": json.dumps(repos)}
        rows.append({"delivery_seq": seq, "delivery_id": delivery_id, **count})
    return pa.RecordBatch.from_pylist(rows, schema=_STATS_SCHEMA)


def _deliveries(stats: list[Any], batch: str) -> list[IngestedDelivery]:
    """Fold the writers' per-file statuses and counts into one report entry per delivery."""
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
        if row["repositories"]:
            for repository, n in json.loads(row["repositories"]).items():
                d.repositories[repository] = d.repositories.get(repository, 0) + n
    for d in found.values():
        d.candidates = sum(d.repositories.values()) if d.status == "ingested" else 0
        if d.status == "rejected":
            d.repositories = {}
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
                with fs.open_input_stream(info.path) as f:
                    records.append(json.loads(f.read()))
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
    fs, base = table.filesystem()
    paths: list[str] = []
    for d in deliveries:
        if d.status != "ingested":
            continue
        selector = pafs.FileSelector(f"{base}/{BATCHES}/{d.batch}/{d.seq:08d}", allow_not_found=True)
        paths.extend(sorted(i.path for i in fs.get_file_info(selector) if i.base_name.endswith(".parquet")))
    tasks = spark.createDataFrame([(p,) for p in paths], "path string")
    tasks = tasks.repartition(max(1, min(parallelism, len(paths) or 1)))
    frame = tasks.mapInArrow(_PartReader(table), CANDIDATE_DDL)
    return frame.dropDuplicates(["repository", "delivery_id", "address"])


class _PartReader:
    def __init__(self, table: CandidateTable) -> None:
        self.table = table

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = self.table.filesystem()
        for batch in batches:
            for path in batch.column("path").to_pylist():
                with fs.open_input_file(path) as f:
                    yield from pq.ParquetFile(f).iter_batches(batch_size=65536)


def _delete_dir(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_dir(path)
    except OSError as e:
        if not is_not_found(e) and fs.get_file_info(path).type != pafs.FileType.NotFound:
            raise StorageError(f"cannot clear {path}: {e}") from e
