"""The sweep: delete what a successful, persisted mark listed, on the executors, and say what happened.

Only a mark whose ``summary.json`` exists and says ``success=true`` is swept (docs/invariants.md,
invariant 5) — ours or lakeFS's Scala job's, the layout is the same. The body reads like the
algorithm::

    summary = read_summary(mark)                        # refuses a missing or failed mark
    plan = plan_sweep(...)                              # guards, then revalidation against lakeFS
    pending = resume.pending(plan.addresses)            # minus what earlier runs confirmed
    counts = pending.mapInArrow(SweepPartition(...))    # delete on the executors, record outcomes
    rewrite_summary(mark, summary + counts)

When nothing is subtracted (no address saved, none confirmed before), the tasks read their slices
of ``deleted/`` themselves instead of being handed the addresses by a shuffle (:mod:`.slices`).

Each task deletes its share of ``deleted/`` with one deleter from ``deleters`` (S3
``DeleteObjects`` ≤ 1000 keys, Azure blob batch ≤ 256, local unlink; every key re-checked) and
writes the outcome of every key to ``swept/``: ``deleted``, ``missing`` or ``failed`` (with the
error). Per-key failures are data, not exceptions. Throttling is handled per task; what it cost is
added to the summary (``sweep.throttled``, ``sweep.retries``, ...). While it runs, a driver thread
prints progress (:mod:`.progress`); tasks are kept to :data:`OBJECTS_PER_TASK` objects so that it
moves.

A dry run (``params.dry_run`` with a dry-run :class:`~lakefs_gc.gc.ports.DeleterFactory`) runs the
same way and deletes nothing: its tasks record what would be deleted in ``dry-run/``, ``swept/``
and ``summary.json`` stay as they were.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakefs_gc.errors import ConfigError, StorageError
from lakefs_gc.gc.params import SweepParams
from lakefs_gc.gc.ports import Clock, DeleterFactory, utc_now
from lakefs_gc.spark.mark.references import LakeFSRefs
from lakefs_gc.spark.report.layout import DRY_RUN, MARKED, SWEPT, ReportDir, part_files, part_sizes
from lakefs_gc.spark.report.read import marked_frame, read_summary
from lakefs_gc.spark.report.write import rewrite_summary
from lakefs_gc.spark.runtime.failures import is_spark_failure, job_failure, on_executor
from lakefs_gc.spark.sweep import resume
from lakefs_gc.spark.sweep.partition import OUTCOMES, PACE, SweepPartition
from lakefs_gc.spark.sweep.plan import SweepPlan, plan_sweep
from lakefs_gc.spark.sweep.progress import ProgressMeter
from lakefs_gc.spark.sweep.slices import ReadThenSweep, sliced_tasks, split_parts

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Row, SparkSession

_log = logging.getLogger(__name__)

Progress = Callable[[str], None]
#: At most this many objects per sweep task: progress moves when tasks finish. Not fewer: each
#: task pays a set-up before its first delete (its client, a listing of ``swept/``), and at
#: 100,000 a sweep of 1M objects on 2 slots ran 10 tasks in 5 waves (5.41-6.17x a sequential
#: loop at 100 ms per request) where 4 tasks in 2 waves did 6.28-7.27x. bench/README.md:
#: "Sweep at 100 ms, task by task, and fewer tasks (2026-11-30)".
OBJECTS_PER_TASK = 250_000


@dataclass(frozen=True)
class SweepResult:
    repository: str
    mark_id: str
    deleted: int
    missing: int
    failed: int
    report_location: str
    throttled: int = 0
    retries: int = 0
    #: marked objects the revalidation found referenced again, not deleted
    saved: int = 0
    revalidated: bool = False
    #: nothing was deleted: ``deleted`` counts what would have been
    dry_run: bool = False

    @property
    def attempted(self) -> int:
        return self.deleted + self.missing + self.failed


def sweep_run(
    spark: SparkSession,
    params: SweepParams,
    mark: ReportDir,
    deleters: DeleterFactory,
    clock: Clock = utc_now,
    *,
    refs: LakeFSRefs | None = None,
    progress: Progress | None = None,
) -> SweepResult:
    """Sweep ``mark`` (the report directory of a mark of ``params.repository``).

    Refuses a missing or failed mark, and what the guards of :mod:`.plan` refuse (``params.force``
    overrides the delete-fraction guard). ``refs`` is lakeFS, for the revalidation.
    """
    say = progress or _log.info
    repository, mark_id, dry_run = params.repository, mark.mark_id, params.dry_run
    if dry_run != deleters.dry_run:
        raise ConfigError(f"sweep of mark {mark_id}: a dry run needs a dry-run deleter, and only a dry run")
    summary = read_summary(mark)
    parallelism = params.parallelism or spark.sparkContext.defaultParallelism
    total = summary.num_deleted_objects
    partitions = max(parallelism, math.ceil((total or 0) / OBJECTS_PER_TASK))
    doing = "dry run of the sweep of" if dry_run else "sweeping"
    say(f"{repository}: {doing} mark {mark_id} ({total} objects marked)")
    parts = part_sizes(mark, MARKED)  # listed once: for the revalidation and the deleting tasks
    marked = marked_frame(spark, mark, parallelism=parallelism, files=[path for path, _ in parts])
    plan = plan_sweep(spark, params, mark, summary, marked, refs=refs, now=clock(), say=say)
    resumed = resume.confirmed(spark, mark, parallelism=parallelism, say=say, read_only=dry_run)
    done = spark.sparkContext.accumulator(0)
    running_at_once = max(1, min(partitions, spark.sparkContext.defaultParallelism))
    sweep = SweepPartition(mark, resumed.tag, params, deleters, running_at_once, done)
    sweep.cutoff = summary.cutoff_time  # re-checked at delete time where stores can
    tasks, body = _deleting_tasks(spark, mark, parts, plan, resumed, sweep, partitions)
    if dry_run:
        _clear(mark)
    schema = ", ".join(f"{c} long" for c in (*OUTCOMES, *PACE))
    meter = ProgressMeter(say, repository, total, summary.num_deleted_bytes, done)
    try:
        with meter:
            rows = tasks.mapInArrow(on_executor(body), schema).collect()
    except Exception as e:
        if not is_spark_failure(e):
            raise
        raise job_failure(e, f"sweep of mark {mark_id} of {repository}") from e
    finally:
        plan.release()
    counts, pace = _totals(rows, resumed if not dry_run else None)
    if not dry_run:
        resumed.finish()
        rewrite_summary(mark, summary.with_entries({"revalidation": plan.revalidation, "sweep": {
            **counts, "finish_time": clock().isoformat().replace("+00:00", "Z"),
            "duration_seconds": round(meter.elapsed(), 3), **pace,
        }}))  # fmt: skip
    say(_outcome_line(repository, mark, counts, pace, plan.saved, meter.elapsed(), dry_run=dry_run))
    return SweepResult(
        repository, mark_id, counts["deleted"], counts["missing"], counts["failed"], str(mark),
        throttled=pace["throttled"], retries=pace["retries"], saved=plan.saved, revalidated=plan.revalidated,
        dry_run=dry_run,
    )  # fmt: skip


def _deleting_tasks(
    spark: SparkSession,
    mark: ReportDir,
    parts: list[tuple[str, int]],
    plan: SweepPlan,
    resumed: resume.Resume,
    sweep: SweepPartition,
    partitions: int,
) -> tuple[DataFrame, Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]]:
    """The deleting tasks and their body. When the whole mark is deleted (nothing saved, nothing
    confirmed before), each task reads its slices of ``deleted/`` itself (:mod:`.slices`: no
    stage that reads and shuffles every address first). Otherwise the addresses left are split by
    their hash: on distinct addresses as even as round-robin, and the same split on a stage re-run
    without the sort round-robin needs for that (1M addresses handed over in 0.9 s instead of
    1.2 s, bench/README.md: "Sweep at 100 ms, task by task, and fewer tasks (2026-11-30)")."""
    if plan.whole_mark and resumed.addresses is None:
        groups = split_parts(parts, partitions)
        return sliced_tasks(spark, groups), ReadThenSweep(mark, groups, sweep)
    return resumed.pending(plan.addresses).repartition(partitions, "address"), sweep


def _totals(rows: list[Row], resumed: resume.Resume | None) -> tuple[dict[str, int], dict[str, int]]:
    """The outcome counts (with what earlier runs confirmed, unless a dry run) and the pace."""
    counts = {o: sum(int(r[o]) for r in rows) for o in OUTCOMES}
    if resumed is not None:
        counts = resumed.totals(counts)
    pace = {p: sum(int(r[p]) for r in rows) for p in PACE if p != "lowest_concurrency"}
    pace["lowest_concurrency"] = min((int(r["lowest_concurrency"]) for r in rows), default=0)
    return counts, pace


def _clear(mark: ReportDir) -> None:
    """A dry run's ``dry-run/`` holds the latest dry run only: the previous one's parts go."""
    fs, _ = mark.filesystem()
    for path in part_files(mark, DRY_RUN):
        try:
            fs.delete_file(path)
        except OSError as e:
            raise StorageError(f"cannot delete the earlier dry run's {path}: {e}") from e


def _outcome_line(
    repository: str,
    mark: ReportDir,
    counts: dict[str, int],
    pace: dict[str, int],
    saved: int,
    elapsed: float,
    *,
    dry_run: bool,
) -> str:
    if dry_run:
        return (
            f"{repository}: dry run of the sweep of mark {mark.mark_id}: {counts['deleted']} objects "
            f"would be deleted, {counts['failed']} refused; {saved} kept, referenced again since the "
            f"mark; nothing was deleted; the list is in {mark.child(DRY_RUN)}"
        )
    return (
        f"{repository}: swept mark {mark.mark_id}: {counts['deleted']} deleted, {counts['missing']} missing, "
        f"{counts['failed']} failed in {elapsed:.1f}s ({pace['throttled']} throttled answers, "
        f"{pace['retries']} retries); {saved} kept, referenced again since the mark; "
        f"outcomes in {mark.child(SWEPT)}"
    )
