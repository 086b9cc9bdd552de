"""The service process: every streaming query of ``lakefs-gc serve`` in one Spark application.

Queries (each with its checkpoint under ``service.checkpoints``, its data under ``service.state``:
:mod:`lakefs_gc.service.state`; one service per state, by a lease: :mod:`lakefs_gc.service.lease`):

* ``lakefs-gc-inventory-ingest``: new inventory deliveries into the candidate table
  (:mod:`lakefs_gc.spark.ingest.inventory.stream`), when ``service.inventory`` is set;
* ``lakefs-gc-events-<name>``: one per notification queue, drained into the event table
  (:mod:`lakefs_gc.spark.ingest.events.source`, :mod:`lakefs_gc.spark.ingest.events.table`);
* ``lakefs-gc-gc-<repository>``: one per repository, its periodic mark and sweep
  (:mod:`lakefs_gc.service.cycle`).

A query that dies makes ``/healthz`` fail and the service exit non-zero (an orchestrator restarts
it; the checkpoints make the restart continue). SIGTERM is graceful: ``/readyz`` turns 503, no new
cycle starts, running cycles get ``service.shutdown_timeout`` to finish, then the queries stop.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakefs_gc import jobs
from lakefs_gc.errors import ConfigError, ExitCode, StateInUseError
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.commit_graph import CommitCache
from lakefs_gc.service.candidates import CandidateSets
from lakefs_gc.service.cycle import CyclePorts, GcCycle
from lakefs_gc.service.http import StatusServer
from lakefs_gc.service.layout import take_layout
from lakefs_gc.service.lease import StateLease
from lakefs_gc.service.maintenance import (
    Maintenance,
    jvm_heap_after_gc,
    jvm_heap_used,
    open_descriptors,
    process_memory,
)
from lakefs_gc.service.metrics import Metrics
from lakefs_gc.service.records import CycleRecords
from lakefs_gc.service.state import ServiceState
from lakefs_gc.service.streams import EventStreams, inventory_stream
from lakefs_gc.spark.ingest.inventory.table import CandidateTable
from lakefs_gc.spark.mark.range_cache import RangeCache, RangeCacheError
from lakefs_gc.spark.mark.result import MarkResult
from lakefs_gc.spark.runtime.checkpoint import clear_interrupted_writes
from lakefs_gc.spark.runtime.memory import release_free_memory
from lakefs_gc.spark.sweep.job import SweepResult
from lakefs_gc.storage.locations import StorageLocation, parse_storage_namespace

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from lakefs_gc.service.settings import RepositorySchedule, ServiceSettings

_log = logging.getLogger(__name__)


@dataclass
class _Repository:
    schedule: RepositorySchedule
    namespace: StorageLocation
    cycle: GcCycle | None = None


@dataclass
class _State:
    started: bool = False
    stopping: bool = False
    failed: dict[str, str] = field(default_factory=dict)  # query name -> error


class GcService:
    """Start with :meth:`start`, then :meth:`wait`; :meth:`request_stop` (e.g. from SIGTERM) ends it."""

    def __init__(
        self,
        settings: ServiceSettings,
        spark: SparkSession,
        *,
        metrics: Metrics | None = None,
        lease: StateLease | None = None,
    ) -> None:
        self.settings, self.spark = settings, spark
        self.where = ServiceState.of(settings)
        self.state_dir: Path | str = self.where.display  # a local directory, or a URI
        self.lease = lease or StateLease(self.where.directory, settings.service.lease_ttl)
        self.metrics = metrics or Metrics()
        self.queries: list[StreamingQuery] = []
        self.repositories: dict[str, _Repository] = {}
        self.state = _State()
        self.stop_requested = threading.Event()
        self.stopping = threading.Event()  # cycles check it before starting work
        #: commits read from lakeFS, kept across cycles (each cycle has its own client): a mark
        #: reads only the commits made since the previous one, not every history again
        self.commits = CommitCache()
        svc = settings.service
        self.status = StatusServer(
            self.metrics, host=svc.metrics_host, port=svc.metrics_port, health=self._health, ready=self._ready
        )

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.lease.held:  # before anything is written to the state
            self.lease.acquire()
        take_layout(self.where.directory)  # refuses a state of a newer release, before any write
        self.status.start()
        _log.info("metrics, health and readiness on %s/metrics, /healthz, /readyz", self.status.url)
        LakeFSClient.observer = self.metrics.observe_lakefs_call
        self._resolve_repositories()
        table = self._start_inventory()
        events = self._start_events()
        events_of, trusted = events.events_of if events else None, self.settings.gc.trust_checksums
        candidate_sets = CandidateSets(self.settings.storage, table, events_of, trusted)
        event_table = events.table if events else None
        self.maintenance = Maintenance(
            self.spark, self.settings.service, self.where.directory, candidate_sets, event_table,
            tuple(self.repositories), self.metrics, clock=lambda: datetime.now(timezone.utc),
        )  # fmt: skip
        self.metrics.driver_rss.set_function(process_memory)
        self.metrics.driver_descriptors.set_function(open_descriptors)
        self.metrics.jvm_heap_used.set_function(jvm_heap_used(self.spark))
        self.metrics.jvm_heap_after_gc.set_function(jvm_heap_after_gc(self.spark))
        for repo in self.repositories.values():
            self._start_cycle(repo, candidate_sets)
        self.state.started = True
        _log.info("serving %d repositories with %d queries", len(self.repositories), len(self.queries))

    def wait(self, poll: float = 1.0, *, cycles: int | None = None) -> int:
        """Until a stop is requested, or every repository attempted ``cycles`` marks (0), or a query
        dies (1)."""
        for repo in self.repositories.values():
            if repo.cycle is not None:  # else a next mark may start before the poll sees the count
                repo.cycle.max_attempts = cycles
        while not self.stop_requested.wait(poll):
            try:
                self.lease.renew_if_due()
            except StateInUseError:
                self.stop()
                raise
            if cycles is not None and all(
                r.cycle is not None and r.cycle.attempts >= cycles for r in self.repositories.values()
            ):
                _log.info("every repository ran %d GC cycle(s): stopping", cycles)
                break
            for query in self.queries:
                error = query.exception()
                if error is not None or not query.isActive:
                    self._query_died(query, error)
                    self.stop()
                    return ExitCode.SPARK
        self.stop()
        return 0

    def request_stop(self) -> None:
        self.stop_requested.set()

    def stop(self) -> None:
        if self.state.stopping:
            return
        self.state.stopping = True
        self.stopping.set()
        deadline = time.monotonic() + self.settings.service.shutdown_timeout.total_seconds()
        for repo in self.repositories.values():
            if repo.cycle is not None and repo.cycle.busy.locked():
                _log.info("%s: waiting for the running GC cycle to finish", repo.schedule.name)
                if repo.cycle.busy.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    repo.cycle.busy.release()
        for query in self.queries:
            try:
                query.stop()
            except Exception as e:  # stopping the others matters more
                _log.warning("stopping query %s: %s", query.name, e)
        self.status.stop()
        LakeFSClient.observer = None
        self.lease.release()
        _log.info("stopped")

    # ---- queries --------------------------------------------------------------------------------

    def _resolve_repositories(self) -> None:
        schedules = self.settings.schedules()
        if not schedules:
            raise ConfigError("no repository to serve: list them under repositories or service.repositories")
        with LakeFSClient(self.settings.lakefs, source="serve") as client:
            for schedule in schedules:
                repo = client.get_repository(schedule.name)
                local_root = self.settings.storage.local_root
                namespace = parse_storage_namespace(repo.storage_namespace, local_root=local_root)
                self.repositories[schedule.name] = _Repository(schedule, namespace)

    def _routes(self) -> tuple[NamespaceRoute, ...]:
        return tuple(NamespaceRoute.of(name, r.namespace) for name, r in self.repositories.items())

    def _start_inventory(self) -> CandidateTable | None:
        if self.settings.service.inventory is None:
            return None
        query, table = inventory_stream(self.spark, self.settings, self._routes(), self.where, self.metrics)
        self.queries.append(query)
        return table

    def _start_events(self) -> EventStreams | None:
        if not self.settings.service.events:
            return None
        namespaces = {name: r.namespace for name, r in self.repositories.items()}
        streams = EventStreams(self.settings, namespaces, self.where, self.metrics)
        self.queries.extend(streams.start(self.spark))
        return streams

    def _start_cycle(self, repo: _Repository, candidate_sets: CandidateSets) -> None:
        name = repo.schedule.name
        records = CycleRecords(self.where.sub(f"cycles/{name}/batches"))
        cache = RangeCache.for_repository(self.where.directory, name)
        spark, settings, commits = self.spark, self.settings, self.commits
        checkpoint = clear_interrupted_writes(self.where.checkpoint(f"cycles/{name}"))

        def mark(repository: str) -> MarkResult:
            self._renew_lease()
            source = candidate_sets.source(repository, repo.namespace, records)
            try:  # a client per cycle: cycles of several repositories run at once, in their own threads
                with jobs.lakefs_client(settings, "mark") as client:
                    return jobs.mark(
                        spark, settings, repository, client=client, source=source, range_cache=cache,
                        commits=commits, progress=_log.info,
                    )  # fmt: skip
            except RangeCacheError:  # fail closed now; the next attempt rebuilds the cache from lakeFS
                _log.warning(
                    "%s: dropping the range cache %s; the next mark rebuilds it", repository, cache.root
                )
                cache.drop()
                raise

        def sweep(repository: str, mark_id: str) -> SweepResult:
            self._renew_lease()  # never delete on a state another service took over
            with jobs.lakefs_client(settings, "sweep") as client:
                return jobs.sweep(
                    spark, settings, repository, mark_id, client=client, commits=commits, progress=_log.info
                )

        maintenance = self.maintenance

        def maintain() -> None:
            maintenance.run(name, repo.namespace, records)
            release_free_memory()  # what the last mark freed, back to the system (spark/runtime/memory.py)

        ports = CyclePorts(mark, sweep, maintain=maintain)
        svc = settings.service
        repo.cycle = GcCycle(
            repo.schedule, records, ports, self.metrics, retry_delay=svc.retry_delay, stopping=self.stopping
        )
        query = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", 1)
            .load()
            .writeStream.foreachBatch(repo.cycle)
            .option("checkpointLocation", checkpoint.spark)
            .trigger(processingTime=f"{max(1, int(svc.tick.total_seconds()))} seconds")
            .queryName(f"lakefs-gc-gc-{name}")
            .start()
        )
        self.queries.append(query)

    def _renew_lease(self) -> None:
        """Renewed by every cycle too; a lease lost fails the cycle (and the wait loop stops us)."""
        if self.lease.held:
            self.lease.renew()

    def _query_died(self, query: StreamingQuery, error: Any) -> None:
        message = str(error) if error is not None else "stopped"
        self.state.failed[str(query.name)] = message
        self.metrics.stream_failures.labels(str(query.name)).inc()
        _log.error("query %s died: %s", query.name, message)

    # ---- probes ---------------------------------------------------------------------------------

    def _health(self) -> tuple[bool, dict[str, Any]]:
        return (not self.state.failed, {"failed_queries": self.state.failed})

    def _ready(self) -> tuple[bool, dict[str, Any]]:
        ok = self.state.started and not self.state.stopping and not self.state.failed
        cycles = [r.cycle.status() for r in self.repositories.values() if r.cycle is not None]
        return (ok, {"started": self.state.started, "stopping": self.state.stopping, "repositories": cycles})
