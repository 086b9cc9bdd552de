"""The batch jobs wired from settings: the one place that turns settings into params and adapters.

The command line (:mod:`lakefs_gc.cli`), the service (:mod:`lakefs_gc.service`), the demo and the
benchmarks hold a :class:`~lakefs_gc.settings.GcSettings`; the jobs take frozen parameters and
ports (:mod:`lakefs_gc.gc.params`, :mod:`lakefs_gc.gc.ports`). Here one becomes the other:

* :class:`MarkParams` / :class:`SweepParams` from the settings and the flags;
* lakeFS (:class:`~lakefs_gc.spark.mark.references.LakeFSRefs`) from one client per command,
  which the caller opens (:func:`lakefs_client`) and passes to every job it runs;
* the deleters: the namespace's store, or the dry run's that delete nothing;
* the clock: the system's, unless the caller passes another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from lakefs_gc.gc.ports import Clock, utc_now
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.commit_graph import CommitCache, LakeFSCommitGraph
from lakefs_gc.settings import GcSettings
from lakefs_gc.spark.mark.references import LakeFSRefs
from lakefs_gc.spark.report.layout import ReportDir
from lakefs_gc.spark.runtime.heartbeat import SparkHeartbeat
from lakefs_gc.storage.deleting import DryRunDeleters, StoreDeleters

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from lakefs_gc.spark.mark.range_cache import RangeCache
    from lakefs_gc.spark.mark.result import MarkResult
    from lakefs_gc.spark.mark.sources import CandidateProvider
    from lakefs_gc.spark.sweep.backup import CopyResult
    from lakefs_gc.spark.sweep.job import SweepResult

Progress = Callable[[str], None]


def lakefs_client(settings: GcSettings, command: str) -> LakeFSClient:
    """The one lakeFS client of a command (``command`` names it in lakeFS's logs); close it after."""
    return LakeFSClient(settings.lakefs, source=command)


#: one commit-graph reader (and so one commit cache) per client: a command reads a history once
_GRAPHS: WeakKeyDictionary[LakeFSClient, LakeFSCommitGraph] = WeakKeyDictionary()


def lakefs_refs(client: LakeFSClient, settings: GcSettings, commits: CommitCache | None = None) -> LakeFSRefs:
    """lakeFS through ``client``. ``commits``: a commit cache that outlives the client (the
    service's, one for its life); without it, the client's own."""
    graph = LakeFSCommitGraph(client, cache=commits) if commits is not None else _GRAPHS.get(client)
    if graph is None:
        graph = _GRAPHS[client] = LakeFSCommitGraph(client)
    return LakeFSRefs(client, settings.lakefs, settings.storage, graph)


def mark_report(client: LakeFSClient, settings: GcSettings, repository: str, mark_id: str) -> ReportDir:
    """Where mark ``mark_id`` of ``repository`` keeps its reports (lakeFS names the namespace)."""
    storage_namespace = client.get_repository(repository).storage_namespace
    return ReportDir.of(storage_namespace, mark_id, settings.storage)


def mark(
    spark: SparkSession,
    settings: GcSettings,
    repository: str,
    *,
    client: LakeFSClient,
    progress: Progress | None = None,
    source: CandidateProvider | None = None,
    range_cache: RangeCache | None = None,
    commits: CommitCache | None = None,
    clock: Clock = utc_now,
) -> MarkResult:
    """:func:`~lakefs_gc.spark.mark.job.mark_run` of ``repository`` with ``settings``
    (``commits``: see :func:`lakefs_refs`)."""
    from lakefs_gc.spark.mark.job import mark_run

    refs = lakefs_refs(client, settings, commits)
    params = settings.mark_params(repository)
    with _heartbeat(spark, progress, repository) as say:
        return mark_run(spark, params, refs, source, clock, progress=say, range_cache=range_cache)


def sweep(
    spark: SparkSession,
    settings: GcSettings,
    repository: str,
    mark_id: str,
    *,
    client: LakeFSClient,
    force: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    commits: CommitCache | None = None,
    clock: Clock = utc_now,
) -> SweepResult:
    """:func:`~lakefs_gc.spark.sweep.job.sweep_run` of mark ``mark_id``: its store's deleters, or
    (``dry_run``) deleters that delete nothing (``commits``: see :func:`lakefs_refs`)."""
    from lakefs_gc.spark.sweep.job import sweep_run

    report = mark_report(client, settings, repository, mark_id)
    params = settings.sweep_params(repository, force=force, dry_run=dry_run)
    deleters = (
        DryRunDeleters(report.namespace) if dry_run else StoreDeleters(report.namespace, settings.storage)
    )
    refs = lakefs_refs(client, settings, commits)
    with _heartbeat(spark, progress, repository) as say:
        return sweep_run(spark, params, report, deleters, clock, refs=refs, progress=say)


def _heartbeat(
    spark: SparkSession, progress: Progress | None, label: str
) -> contextlib.AbstractContextManager[Progress | None]:
    """``progress`` watched by a :class:`SparkHeartbeat`, which says what Spark is doing when a
    job has been silent for a minute (a first cycle's range cache at 20M objects: 22 minutes; a
    backup of a million objects says nothing between its first and last lines)."""
    return SparkHeartbeat(spark, progress, label) if progress is not None else contextlib.nullcontext(None)


def copy(
    spark: SparkSession,
    settings: GcSettings,
    direction: str,
    repository: str,
    mark_id: str,
    location: str,
    *,
    client: LakeFSClient,
    concurrency: int = 8,
    progress: Progress | None = None,
) -> CopyResult:
    """:func:`~lakefs_gc.spark.sweep.backup.backup_run` (``direction`` ``backup``: to ``location``)
    or :func:`~lakefs_gc.spark.sweep.backup.restore_run` (from ``location``)."""
    from lakefs_gc.spark.sweep.backup import backup_run, restore_run

    report = mark_report(client, settings, repository, mark_id)
    parallelism = settings.spark.parallelism
    with _heartbeat(spark, progress, repository) as say:
        if direction == "backup":
            return backup_run(
                spark, report, repository, to=location, concurrency=concurrency, parallelism=parallelism,
                progress=say,
            )  # fmt: skip
        return restore_run(
            spark, report, repository, source=location, concurrency=concurrency, parallelism=parallelism,
            progress=say,
        )  # fmt: skip


def report_table(settings: GcSettings, storage_namespace: str, mark_id: str, name: str) -> pa.Table:
    """A mark's report sub-directory (``deleted``, ``swept``...) read whole on the driver (small
    reports: the demo, tests)."""
    from lakefs_gc.spark.report.read import read_report_table

    return read_report_table(ReportDir.of(storage_namespace, mark_id, settings.storage), name)
