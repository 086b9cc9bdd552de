"""The service's settings: the batch settings plus a ``service`` section.

```yaml
lakefs: {endpoint: ..., access_key_id: ..., secret_access_key: ...}
storage: {...}            # as for the batch commands
gc: {min_age: 24h, ...}   # the safety settings every cycle's mark and sweep use
service:
  state: /var/lib/lakefs-gc          # or s3://gc-state/lakefs-gc, https://<account>.blob.core.windows.net/…
  checkpoints: /var/lib/lakefs-gc-checkpoints   # the driver's Spark checkpoints (default: under state)
  metrics_port: 9464
  interval: 6h            # default for each repository
  inventory: s3://inventory-bucket/prefix
  events:
    s3-notifications: {type: sqs, queue_url: https://sqs.us-east-1.amazonaws.com/1234/gc-events}
  repositories:
    - {name: my-repo, interval: 1h, sweep_delay: 2h}
```
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lakefs_gc.durations import duration_field
from lakefs_gc.events.queues.config import QueueConfig
from lakefs_gc.settings import GcSettings

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_DURATIONS = ("interval", "sweep_delay", "tick", "events_trigger", "inventory_trigger", "retry_delay",
              "shutdown_timeout", "lease_ttl", "dedupe_horizon", "compaction_interval",
              "compaction_margin", "keep_reports")  # fmt: skip


class _Durations(BaseModel):
    @field_validator(*_DURATIONS, mode="before", check_fields=False)
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return duration_field(value)


class RepositorySchedule(_Durations):
    """One repository the service collects, and when (unset fields: the service's defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    interval: timedelta | None = Field(default=None, description="Time between the starts of two marks.")
    sweep_delay: timedelta | None = Field(
        default=None,
        description="How long a mark waits before its sweep (time to look at the report).",
    )
    sweep: bool | None = Field(default=None, description="False: mark only, never delete.")


class ServiceOptions(_Durations):
    """How the service runs (the ``service`` section)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: str | None = Field(
        default=None,
        description="Where everything the service must find again after a restart, and its executors "
        "read and write, lives: the event spools, the event and candidate tables, the range cache, the "
        "cycle records, the dead letters and the lease. A local path, file://, s3://bucket/prefix or an "
        "Azure https://<account>.blob.core.windows.net/<container>/prefix, reached through pyarrow like "
        "the storage namespaces (the storage section's credentials). On a cluster it must be an object "
        "store (or a mount every node shares). Losing it loses no data, only work: events not yet in an "
        "inventory (their objects are collected after the next snapshot) and the range cache. Required.",
    )
    checkpoints: str | None = Field(
        default=None,
        description="The Spark checkpoints of the service's queries (offset and commit logs, the "
        "inventory delivery log): only the driver reads and writes them, so a local directory on the "
        "driver (a persistent volume) is enough. Or a Hadoop filesystem URI the cluster opens, given to "
        "Spark as it is: file://, s3a://bucket/prefix (hadoop-aws connector jars), "
        "abfss://<container>@<account>.dfs.core.windows.net/prefix (hadoop-azure); s3:// is refused "
        "(no Hadoop filesystem outside EMR). Default: inside state when state is a local path, "
        "else ~/.lakefs-gc/checkpoints/<digest of state> on the driver.",
    )
    lease_ttl: timedelta = Field(
        default=timedelta(minutes=2),
        description="How long the service's lease on state stays valid without renewal (it is renewed "
        "every third of that). A second service on the same state refuses to start while the lease is "
        "valid; after a crash on another machine the new one waits at most this long.",
    )
    metrics_host: str = Field(default="0.0.0.0", description="Where /metrics, /healthz and /readyz listen.")
    metrics_port: int = Field(default=9464, ge=0, le=65535, description="0: any free port (printed).")
    interval: timedelta = Field(
        default=timedelta(hours=6),
        description="Default time between the starts of a repository's marks. A mark reads only ranges "
        "it has not cached, so short intervals cost little lakeFS work; each still asks lakeFS for an "
        "uncommitted dump and the active commits.",
    )
    sweep_delay: timedelta = Field(
        default=timedelta(0),
        description="Default wait between a mark and its sweep, so people can look at a mark (and stop "
        "the service) before anything is deleted. The sweep revalidates against lakeFS either way.",
    )
    sweep: bool = Field(default=True, description="False: every repository is marked only (a dry run).")
    tick: timedelta = Field(
        default=timedelta(minutes=1),
        description="How often each repository's scheduler (a processing-time trigger) checks whether a "
        "mark or a sweep is due. Bounds how late they start; costs nothing when nothing is due.",
    )
    retry_delay: timedelta = Field(
        default=timedelta(minutes=10),
        description="After a failed mark, how long until the next attempt (instead of the interval).",
    )
    events: dict[str, QueueConfig] = Field(
        default_factory=dict,
        description="Notification queues by name (the name labels metrics and names the spool).",
    )
    events_trigger: timedelta = Field(
        default=timedelta(seconds=10), description="How often the event sources drain their queues."
    )
    max_messages_per_batch: int = Field(default=10_000, ge=1, description="Per event micro-batch.")
    dedupe_horizon: timedelta = Field(
        default=timedelta(hours=1),
        description="How long the keys of stored events are kept to drop redeliveries. A queue "
        "redelivers a message its consumer did not delete within the visibility timeout (SQS and "
        "Storage Queues: 30 s by default, 12 h at most): keep this above the queues' visibility "
        "timeout. Memory is about 500 bytes per event received within the horizon (bench/soak.py). "
        "A redelivery later than this is stored twice, which changes no candidate set and compaction "
        "removes.",
    )
    compaction_interval: timedelta = Field(
        default=timedelta(hours=1),
        description="How often a GC cycle compacts the event table (folds events older than each "
        "repository's newest snapshot, minus compaction_margin, into what the snapshot does not list).",
    )
    compaction_margin: timedelta = Field(
        default=timedelta(hours=6),
        description="Events newer than a repository's snapshot time minus this stay as they are: a "
        "notification delivered later than this after its event time (queue delays, a service outage "
        "longer than this) may make a compacted object a candidate once more (its sweep then reports "
        "it missing) or keep one a cycle longer; it never makes a referenced object deletable.",
    )
    keep_reports: timedelta = Field(
        default=timedelta(days=30),
        description="Mark reports (with their swept/ logs) and cycle records older than this are "
        "removed; the newest successful mark of each repository is always kept.",
    )
    range_cache_max_bytes: int = Field(
        default=4 * 2**30,
        ge=0,
        description="Bytes each repository's range cache may keep between marks (4 GiB). Before each "
        "mark, parts the previous mark did not need are dropped first, then the least recently used, "
        "until it fits; the next mark reads what was dropped from lakeFS again. A mark that needs more "
        "than this writes it all (it must), and the next maintenance trims it back, with a warning: "
        "lakefs_gc_range_cache_needed_bytes says what each repository's last mark needed.",
    )
    dead_letters_max_files: int = Field(
        default=1000, ge=1, description="Dead-letter files kept (the oldest are removed beyond this)."
    )
    inventory: str | None = Field(
        default=None,
        description="Inventory destination whose deliveries become the candidate sets' snapshots "
        "(as gc.inventory for the batch mark). None: each cycle lists the namespace instead.",
    )
    inventory_trigger: timedelta = Field(
        default=timedelta(minutes=5), description="How often new inventory deliveries are looked for."
    )
    shutdown_timeout: timedelta = Field(
        default=timedelta(minutes=5),
        description="On SIGTERM, how long running cycles may take to finish before the queries are "
        "stopped anyway (a stopped sweep resumes where it was after the restart).",
    )
    repositories: tuple[RepositorySchedule, ...] = Field(
        default=(), description="Repositories with their own schedule; the top-level list adds more."
    )

    @field_validator("state", "checkpoints", mode="before")
    @classmethod
    def _location(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("checkpoints")
    @classmethod
    def _hadoop(cls, value: str | None) -> str | None:
        from lakefs_gc.storage.checkpoints import checkpoint_problem

        problem = None if value is None else checkpoint_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("state")
    @classmethod
    def _parsable(cls, value: str | None) -> str | None:
        if value is not None:
            from lakefs_gc.errors import GcError
            from lakefs_gc.storage.directories import parse_state_location

            try:
                parse_state_location(value)
            except GcError as e:
                raise ValueError(str(e)) from e
        return value

    @field_validator("events")
    @classmethod
    def _names(cls, value: dict[str, QueueConfig]) -> dict[str, QueueConfig]:
        for name in value:
            if not _NAME.match(name):
                raise ValueError(f"event source name {name!r}: use letters, digits, '.', '_' and '-'")
        return value


class ServiceSettings(GcSettings):
    """Everything ``lakefs-gc serve`` needs, validated."""

    service: ServiceOptions = ServiceOptions()

    def schedules(self) -> tuple[RepositorySchedule, ...]:
        """Every repository with its effective schedule (service defaults filled in)."""
        named = {s.name: s for s in self.service.repositories}
        for name in self.repositories:
            named.setdefault(name, RepositorySchedule(name=name))
        svc = self.service
        return tuple(
            RepositorySchedule(
                name=s.name,
                interval=s.interval or svc.interval,
                sweep_delay=svc.sweep_delay if s.sweep_delay is None else s.sweep_delay,
                sweep=svc.sweep if s.sweep is None else s.sweep,
            )
            for s in named.values()
        )
