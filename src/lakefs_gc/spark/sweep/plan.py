"""What a sweep deletes: the marked addresses, after the guards and the revalidation said yes.

The guards are pure rules (:mod:`lakefs_gc.gc.guards`); here they run on the driver in their
order around the revalidation: the cheap refusals first (before lakeFS is asked anything), the
delete-fraction guard on what is left after the revalidation. A refusal raises
:class:`~lakefs_gc.gc.guards.SweepRefusedError` (exit code 10); a revalidation that fails raises
its own error (lakeFS, storage, ...); either way nothing is deleted (fail closed).

How :func:`~lakefs_gc.spark.sweep.job.sweep_run` uses it::

    plan = plan_sweep(spark, params, report, summary, marked, refs=refs, now=now, say=say)
    try:
        delete(plan.addresses)
        summary["revalidation"] = plan.revalidation
    finally:
        plan.release()
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakefs_gc.durations import format_duration
from lakefs_gc.errors import ConfigError
from lakefs_gc.gc.guards import check_delete_fraction, check_mark_age, listed_count
from lakefs_gc.gc.params import SweepParams
from lakefs_gc.gc.reports import StoredSummary
from lakefs_gc.spark.mark.references import LakeFSRefs
from lakefs_gc.spark.report.layout import ReportDir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Progress = Callable[[str], None]


@dataclass
class SweepPlan:
    """What the sweep deletes (``addresses``, column ``address``) and what the guards found.

    ``revalidation`` goes into ``summary.json`` under ``"revalidation"``. :meth:`release` frees
    what the revalidation persisted once the deletes are done.
    """

    addresses: DataFrame
    saved: int
    revalidated: bool
    revalidation: dict[str, Any]
    _release: Callable[[], None] = field(default=lambda: None)

    @property
    def whole_mark(self) -> bool:
        """``addresses`` is all of ``deleted/``: nothing was subtracted (the revalidation, when
        on, saved nothing), so the deleting tasks may read ``deleted/`` as it is."""
        return self.saved == 0

    def release(self) -> None:
        self._release()


def plan_sweep(
    spark: SparkSession,
    params: SweepParams,
    report: ReportDir,
    summary: StoredSummary,
    marked: DataFrame,
    *,
    refs: LakeFSRefs | None,
    now: datetime,
    say: Progress,
) -> SweepPlan:
    """Check the mark's age, revalidate it (when on), check the share it would delete.

    ``refs`` is lakeFS, for the revalidation (required when ``params.revalidate``).
    """
    from lakefs_gc.spark.sweep.revalidate import revalidate

    repository, force = params.repository, params.force
    where = f"mark {report.mark_id} of {repository}"
    age = check_mark_age(summary, params, now=now, where=where)
    if age is not None and age > params.max_mark_age and params.revalidate:
        say(f"{repository}: {where} is {format_duration(age)} old, older than --max-mark-age "
            f"{format_duration(params.max_mark_age)}: swept because it is revalidated")  # fmt: skip
    listed = listed_count(summary, force=force, where=where)
    marked_total = summary.num_deleted_objects
    if not params.revalidate:
        say(f"{repository}: not revalidating {where} (--no-revalidate): objects referenced again since "
            "the mark will be deleted")  # fmt: skip
        total = marked_total if marked_total is not None else marked.count()
        check_delete_fraction(total, listed, params, force=force, where=where)
        return SweepPlan(marked, 0, False, {"skipped": True})
    if refs is None:
        raise ConfigError(f"{where}: a revalidated sweep needs lakeFS (no refs given)")
    revalidation = revalidate(spark, params, refs, report, marked, progress=say)
    try:
        total = marked_total if marked_total is not None else marked.count()
        check_delete_fraction(total - revalidation.num_saved, listed, params, force=force, where=where)
    except BaseException:
        revalidation.unpersist()
        raise
    still, saved = revalidation.still_marked, revalidation.num_saved
    return SweepPlan(still, saved, True, revalidation.summary(), revalidation.unpersist)
