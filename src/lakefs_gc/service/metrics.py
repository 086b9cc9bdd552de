"""Every metric of the service, declared once (``lakefs_gc_`` prefix, base units, bounded labels).

Labels are repository names, event source names and outcome words: never an address, a key or a
mark id, which would make a time series per object. The service owns one :class:`Metrics` (its own
registry, so tests can run several services in one process) and serves it with
:class:`~lakefs_gc.service.http.StatusServer`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lakefs_gc.lakefs.client import OPERATIONS

_DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, float("inf"))
_API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf"))


class Metrics:
    """The service's metrics (see the README's metrics table for what each one means)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        src = ["source"]
        self.events_received = Counter(
            "lakefs_gc_events_received", "Queue messages drained into the spool", src, registry=r
        )
        self.events_ingested = Counter(
            "lakefs_gc_events_ingested",
            "Object events recorded in the event table, per repository",
            ["source", "repository"],
            registry=r,
        )
        self.events_deduplicated = Counter(
            "lakefs_gc_events_deduplicated", "Redelivered events dropped as duplicates", src, registry=r
        )
        self.events_dead_lettered = Counter(
            "lakefs_gc_events_dead_lettered", "Malformed or unknown messages written to the dead-letter file",
            src, registry=r,
        )  # fmt: skip
        self.events_skipped = Counter(
            "lakefs_gc_events_skipped", "Well-formed messages without an object event (test events, tags)",
            src, registry=r,
        )  # fmt: skip
        self.events_unrouted = Counter(
            "lakefs_gc_events_unrouted",
            "Events not stored, by reason: outside (every configured namespace) or not_deletable "
            "(a key the GC never deletes, e.g. under _lakefs/)",
            ["source", "reason"], registry=r,
        )  # fmt: skip
        self.dedupe_keys = Gauge(
            "lakefs_gc_dedupe_keys", "Event keys held in memory to drop redeliveries (dedupe_horizon)",
            src, registry=r,
        )  # fmt: skip
        self.ingest_lag = Gauge(
            "lakefs_gc_ingest_lag_seconds",
            "Age of the oldest event of the newest ingested batch when it was recorded",
            src,
            registry=r,
        )
        self.inventory_deliveries = Counter(
            "lakefs_gc_inventory_deliveries",
            "Inventory deliveries recorded in the candidate table, by outcome (ingested/rejected)",
            ["outcome"],
            registry=r,
        )
        repo = ["repository"]
        self.candidate_set_objects = Gauge(
            "lakefs_gc_candidate_set_objects", "Objects in the repository's candidate set at its last mark",
            repo, registry=r,
        )  # fmt: skip
        self.objects_kept = Gauge(
            "lakefs_gc_objects_kept",
            "Candidates the repository's last mark kept, by reason (committed, uncommitted, too_young, "
            "retention_cross_check, identity_twin: live twins and those the guard could not resolve)",
            [*repo, "reason"], registry=r,
        )  # fmt: skip
        self.marked_monthly_saving = Gauge(
            "lakefs_gc_marked_monthly_saving",
            "Estimated monthly storage saving of the repository's last mark (currency of the price table)",
            repo, registry=r,
        )  # fmt: skip
        self.mark_duration = Histogram(
            "lakefs_gc_mark_duration_seconds",
            "Wall time of marks",
            repo,
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.sweep_duration = Histogram(
            "lakefs_gc_sweep_duration_seconds", "Wall time of sweeps", repo, buckets=_DURATION_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.objects_marked = Counter(
            "lakefs_gc_objects_marked", "Objects marked as garbage", repo, registry=r
        )
        self.bytes_marked = Counter("lakefs_gc_bytes_marked", "Bytes marked as garbage", repo, registry=r)
        self.objects_deleted = Counter(
            "lakefs_gc_objects_deleted", "Objects deleted by sweeps", repo, registry=r
        )
        self.bytes_deleted = Counter(
            "lakefs_gc_bytes_deleted",
            "Bytes deleted by sweeps (marked sizes of the deleted objects)",
            repo,
            registry=r,
        )
        self.objects_delete_failed = Counter(
            "lakefs_gc_objects_delete_failed", "Objects a sweep failed to delete (reported in swept/)", repo,
            registry=r,
        )  # fmt: skip
        self.objects_saved = Counter(
            "lakefs_gc_objects_saved", "Marked objects the sweep's revalidation found referenced again",
            repo, registry=r,
        )  # fmt: skip
        self.delete_throttled = Counter(
            "lakefs_gc_delete_throttled", "Throttling answers (SlowDown, ServerBusy, 503) during sweeps",
            repo, registry=r,
        )  # fmt: skip
        self.delete_retries = Counter(
            "lakefs_gc_delete_retries", "Bulk-delete requests retried during sweeps", repo, registry=r
        )
        self.cycle_failures = Counter(
            "lakefs_gc_cycle_failures",
            "GC cycles that failed, by phase (mark/sweep)",
            ["repository", "phase"],
            registry=r,
        )
        self.cycles = Counter("lakefs_gc_cycles", "GC cycles completed", repo, registry=r)
        self.last_success = Gauge(
            "lakefs_gc_last_successful_cycle_timestamp_seconds",
            "Unix time the repository's last GC cycle succeeded",
            repo,
            registry=r,
        )
        self.lakefs_api_latency = Histogram(
            "lakefs_gc_lakefs_api_request_duration_seconds",
            "lakeFS API calls made by the service's driver (retries included), by operation",
            ["operation"],
            buckets=_API_BUCKETS,
            registry=r,
        )
        self.lakefs_api_errors = Counter(
            "lakefs_gc_lakefs_api_errors", "lakeFS API calls that failed after retries, by operation",
            ["operation"], registry=r,
        )  # fmt: skip
        self._state_metrics(r)
        self.stream_failures = Counter(
            "lakefs_gc_stream_failures", "Streaming queries that stopped with an error", ["query"], registry=r
        )

    def _state_metrics(self, r: CollectorRegistry) -> None:
        """How the service's state and memory change over months (bounded by its retentions)."""
        self.state_bytes = Gauge(
            "lakefs_gc_state_bytes", "Bytes in the service's state directory, by table (events, candidates, "
            "range_cache, cycles, checkpoints, spools, other)", ["table"], registry=r,
        )  # fmt: skip
        self.state_files_retired = Counter(
            "lakefs_gc_state_files_retired", "Files removed by retention, by what they were (reports, "
            "lakefs_exports, cycles, dead_letters, candidates, range_cache)", ["table"], registry=r,
        )  # fmt: skip
        for table in ("reports", "lakefs_exports", "cycles", "dead_letters", "candidates", "range_cache"):
            self.state_files_retired.labels(table)  # every series from the start
        self.range_cache_needed = Gauge(
            "lakefs_gc_range_cache_needed_bytes", "Bytes of its range cache the repository's last mark "
            "needed (as the maintenance before the next mark found them); above "
            "lakefs_gc_range_cache_max_bytes, every mark reads the excess from lakeFS again",
            ["repository"], registry=r,
        )  # fmt: skip
        self.range_cache_max = Gauge(
            "lakefs_gc_range_cache_max_bytes",
            "service.range_cache_max_bytes: the bytes each repository's range cache may keep between marks",
            registry=r,
        )
        self.event_table_rows = Gauge(
            "lakefs_gc_event_table_rows", "Rows the event table holds after its last compaction", registry=r
        )
        self.compaction_duration = Histogram(
            "lakefs_gc_compaction_duration_seconds", "Wall time of event table compactions",
            buckets=_DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self.compaction_rows_folded = Counter(
            "lakefs_gc_compaction_rows_folded", "Event rows a compaction folded away", registry=r
        )
        self.compaction_rows_retired = Counter(
            "lakefs_gc_compaction_rows_retired", "Event rows in files retired after a compaction", registry=r
        )
        self.maintenance_failures = Counter(
            "lakefs_gc_maintenance_failures",
            "Compactions and retentions that failed (retried later)",
            registry=r,
        )
        self.driver_rss = Gauge(
            "lakefs_gc_driver_rss_bytes", "Resident memory of the driver's Python process", registry=r
        )
        self.driver_descriptors = Gauge(
            "lakefs_gc_driver_open_descriptors",
            "File descriptors the driver's Python process holds (py4j's callback server fails from 1024)",
            registry=r,
        )
        self.jvm_heap_used = Gauge(
            "lakefs_gc_jvm_heap_used_bytes", "Heap in use in the driver's JVM", registry=r
        )
        self.jvm_heap_after_gc = Gauge(
            "lakefs_gc_jvm_heap_after_gc_bytes",
            "Heap the driver JVM's last collections left (per heap pool, summed): what a leak moves",
            registry=r,
        )

    def observe_lakefs_call(self, operation: str, seconds: float, failed: bool) -> None:
        """The :class:`~lakefs_gc.lakefs.client.LakeFSClient` observer hook.

        The label is one of the client's closed set of operations (an unknown name is ``other``),
        so the number of series cannot grow with the service's uptime.
        """
        operation = operation if operation in OPERATIONS else "other"
        self.lakefs_api_latency.labels(operation).observe(seconds)
        if failed:
            self.lakefs_api_errors.labels(operation).inc()
