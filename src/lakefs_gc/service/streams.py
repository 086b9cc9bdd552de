"""The service's ingest queries: inventory deliveries and notification queues, with their metrics.

Thin wiring of :mod:`lakefs_gc.spark.ingest.inventory.stream` and
:mod:`lakefs_gc.spark.ingest.events.table` to the service's state directory and its
:class:`~lakefs_gc.service.metrics.Metrics`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING

from lakefs_gc.events.routing import EventRoute
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.service.metrics import Metrics
from lakefs_gc.service.state import ServiceState
from lakefs_gc.spark.ingest.events.source import EventSourceConfig
from lakefs_gc.spark.ingest.events.table import BatchCounts, EventTable, events_frame, run_event_stream
from lakefs_gc.spark.ingest.inventory.source import SourceConfig
from lakefs_gc.spark.ingest.inventory.stream import start_ingest
from lakefs_gc.spark.ingest.inventory.table import CandidateTable, IngestedDelivery
from lakefs_gc.storage.locations import StorageLocation, parse_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from lakefs_gc.service.settings import ServiceSettings

_log = logging.getLogger(__name__)


def _every(seconds: float) -> dict[str, str]:
    return {"processingTime": f"{max(1, int(seconds))} seconds"}


def inventory_stream(
    spark: SparkSession,
    settings: ServiceSettings,
    routes: tuple[NamespaceRoute, ...],
    where: ServiceState,
    metrics: Metrics,
) -> tuple[StreamingQuery, CandidateTable]:
    """Start the inventory ingest into ``<state>/inventory/table`` (checkpoint
    ``<checkpoints>/inventory/checkpoint``)."""
    svc = settings.service
    assert svc.inventory is not None
    table = CandidateTable(where.sub("inventory/table").location, settings.storage)
    source = SourceConfig(
        destination=parse_location(svc.inventory),
        storage=settings.storage,
        routes=routes,
        etags=settings.gc.trust_checksums,  # the candidate set's content evidence (service.candidates)
    )

    def count(deliveries: list[IngestedDelivery]) -> None:
        for delivery in deliveries:
            metrics.inventory_deliveries.labels(delivery.status).inc()

    query, _ = start_ingest(
        spark,
        source,
        table,
        where.checkpoint("inventory"),
        say=_log.info,
        trigger=_every(svc.inventory_trigger.total_seconds()),
        on_deliveries=count,
    )
    return query, table


@dataclass
class EventStreams:
    """One query per configured queue, all into one event table (``<state>/events/table``)."""

    settings: ServiceSettings
    namespaces: dict[str, StorageLocation]  # repository -> its storage namespace
    where: ServiceState
    metrics: Metrics
    table: EventTable = field(init=False)

    def __post_init__(self) -> None:
        self.table = EventTable(self.where.sub("events/table").location, self.settings.storage)

    def start(self, spark: SparkSession) -> list[StreamingQuery]:
        svc = self.settings.service
        queries = []
        for name, queue in svc.events.items():
            config = EventSourceConfig(
                name=f"lakefs-gc-events-{name}",
                queue=queue,
                routes=tuple(EventRoute.of(repo, ns) for repo, ns in self.namespaces.items()),
                spool=self.where.sub(f"events/{name}/spool").uri(),
                max_messages_per_batch=svc.max_messages_per_batch,
                spool_storage=self.settings.storage,
            )
            _log.info("event source %s: %s", name, queue.describe())
            query = run_event_stream(
                spark,
                config,
                self.table,
                self.where.checkpoint(f"events/{name}"),
                trigger=_every(svc.events_trigger.total_seconds()),
                on_batch=partial(self.count, name),
                dedupe_horizon=svc.dedupe_horizon,
            )
            queries.append(query)
        return queries

    def count(self, source: str, counts: BatchCounts) -> None:
        m = self.metrics
        m.events_received.labels(source).inc(counts.received)
        m.events_deduplicated.labels(source).inc(counts.deduplicated)
        m.dedupe_keys.labels(source).set(counts.dedupe_keys)
        m.events_dead_lettered.labels(source).inc(counts.dead_lettered)
        m.events_skipped.labels(source).inc(counts.skipped)
        m.events_unrouted.labels(source, "outside").inc(counts.unrouted)
        m.events_unrouted.labels(source, "not_deletable").inc(counts.not_deletable)
        for repository, n in counts.repositories.items():
            m.events_ingested.labels(source, repository).inc(n)
        if counts.oldest_event_time is not None:
            lag = datetime.now(timezone.utc) - counts.oldest_event_time
            m.ingest_lag.labels(source).set(max(0.0, lag.total_seconds()))
        _log.info(
            "events %s batch %d: %d messages, %d events, %d duplicates, %d skipped, %d dead-lettered, "
            "%d outside every namespace, %d for keys never deleted",
            source, counts.batch_id, counts.received, counts.events, counts.deduplicated,
            counts.skipped, counts.dead_lettered, counts.unrouted, counts.not_deletable,
        )  # fmt: skip

    def events_of(self, spark: SparkSession, parallelism: int, repository: str) -> DataFrame:
        return events_frame(spark, self.table, [repository], parallelism=parallelism)
