"""Run the inventory stream into the candidate table: once (``availableNow``) or continuously.

``lakefs-gc inventory ingest`` is the same streaming query the service runs, with an
``availableNow`` trigger: it ingests every complete delivery not yet ingested, one per
micro-batch, and stops. Killing it at any point and starting it again with the same checkpoint
ingests each delivery exactly once (see :mod:`lakefs_gc.spark.ingest.inventory.table`).

The checkpoint is Spark's own (offsets and commits logs), so it must be on a filesystem Spark
writes without connectors: a local or mounted directory (or HDFS). The delivery log and the
ingest id (which names this checkpoint's records and parts in the table) live inside it, because
they must be kept, or reset, together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakefs_gc.errors import ConfigError
from lakefs_gc.spark.ingest.inventory.source import SOURCE_NAME, SourceConfig, source_class
from lakefs_gc.spark.ingest.inventory.table import CandidateTable, CandidateTableSink, IngestedDelivery
from lakefs_gc.spark.runtime.checkpoint import clear_interrupted_writes, stream_id
from lakefs_gc.spark.runtime.session import task_slots
from lakefs_gc.storage.checkpoints import CheckpointRoot
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

#: the delivery log's directory inside the checkpoint
DELIVERY_LOG = "lakefs-gc-deliveries"


@dataclass(frozen=True)
class IngestResult:
    """What one ``availableNow`` run recorded (empty when there was nothing new)."""

    deliveries: list[IngestedDelivery]

    @property
    def ingested(self) -> list[IngestedDelivery]:
        return [d for d in self.deliveries if d.status == "ingested"]

    @property
    def rejected(self) -> list[IngestedDelivery]:
        return [d for d in self.deliveries if d.status == "rejected"]


def delivery_log_location(checkpoint: CheckpointRoot | Path) -> StorageLocation:
    return CheckpointRoot.of(checkpoint).files.location.join(DELIVERY_LOG)


def ingest_available(
    spark: SparkSession,
    source: SourceConfig,
    table: CandidateTable,
    checkpoint: CheckpointRoot | Path,
    *,
    say: Callable[[str], None],
) -> IngestResult:
    """Ingest every delivery available now; return the report of this run's batches."""
    query, sink = start_ingest(spark, source, table, checkpoint, say=say, trigger={"availableNow": True})
    query.awaitTermination()
    return IngestResult(sink.committed)


def start_ingest(
    spark: SparkSession,
    source: SourceConfig,
    table: CandidateTable,
    checkpoint: CheckpointRoot | Path,
    *,
    say: Callable[[str], None],
    trigger: dict[str, Any],
    on_deliveries: Callable[[list[IngestedDelivery]], None] | None = None,
) -> tuple[StreamingQuery, CandidateTableSink]:
    """Start the inventory stream with ``trigger`` (``DataStreamWriter.trigger``'s keywords)."""
    if not source.routes:
        raise ConfigError("no repository namespace to ingest for: give at least one repository")
    checkpoint = clear_interrupted_writes(checkpoint)
    sink = CandidateTableSink(table, stream_id(checkpoint), say, on_deliveries)
    source = replace(
        source,
        log=delivery_log_location(checkpoint),
        parts=sink.parts_location(),
        tasks=source.tasks or task_slots(spark),
    )
    spark.dataSource.register(source_class(source))
    query = (
        spark.readStream.format(SOURCE_NAME)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint.spark)
        .trigger(**trigger)
        .queryName("lakefs-gc-inventory-ingest")
        .start()
    )
    return query, sink
