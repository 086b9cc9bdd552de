"""What a sweep checks before it deletes anything: the mark's age and the share it would delete.

Pure rules over a mark's :class:`~lakefs_gc.gc.reports.StoredSummary` and the sweep's
:class:`~lakefs_gc.gc.params.SweepParams`; the Spark sweep (:mod:`lakefs_gc.spark.sweep.plan`)
runs them on the driver before the first delete, around its revalidation. Each refuses with
:class:`SweepRefusedError`, which says what was found and how to override it: the mark is fine,
the settings do not allow sweeping it as it is, and the remedy is a setting (revalidation,
``--max-mark-age``, ``--max-delete-fraction``, ``--force``). Exit code 10, nothing deleted.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from lakefs_gc.durations import format_duration
from lakefs_gc.errors import ConfigError, ExitCode
from lakefs_gc.gc.params import SweepParams
from lakefs_gc.gc.reports import StoredSummary

_log = logging.getLogger(__name__)


class SweepRefusedError(ConfigError):
    """A sweep safety rail refused the mark before anything was deleted; the message says how to override."""

    exit_code = ExitCode.REFUSED


def check_mark_age(
    summary: StoredSummary, params: SweepParams, *, now: datetime, where: str
) -> timedelta | None:
    """The mark's age (``None``: unknown); refuses a mark older than ``max_mark_age`` unless revalidated.

    The age is taken from ``start_time`` (when the mark asked lakeFS what is referenced), else
    from ``cutoff_time`` (earlier still: the mark counts as older). A mark without either, or
    with times that cannot be read, has an unknown age and counts as stale.
    """
    started = summary.start_time or summary.cutoff_time
    age = max(timedelta(0), now - started) if started is not None else None
    stale = age is None or age > params.max_mark_age
    if stale and not params.revalidate:
        found = (
            f"is {format_duration(age)} old (start_time {summary.text('start_time')})"
            if age is not None
            else "has no readable start_time or cutoff_time, so its age is unknown"
        )
        raise SweepRefusedError(
            f"refusing to sweep {where} without revalidation: it {found}, and marks older than "
            f"--max-mark-age {format_duration(params.max_mark_age)} are swept only when revalidated "
            "(lakeFS may reference some of its objects again). Drop --no-revalidate, raise "
            "--max-mark-age, or mark again."
        )
    return age


def listed_count(summary: StoredSummary, *, force: bool, where: str) -> int | None:
    """The namespace's objects the mark listed (``num_listed_objects``); refused if unknown, unless forced."""
    listed = summary.num_listed_objects
    if listed is None and not force:
        raise SweepRefusedError(
            f"refusing to sweep {where}: its summary.json has no num_listed_objects (a mark of lakeFS's "
            "Scala job?), so the --max-delete-fraction guard cannot be evaluated. Check the mark's "
            "deleted/ and pass --force to sweep it anyway."
        )
    return listed


def check_delete_fraction(
    to_delete: int, listed: int | None, params: SweepParams, *, force: bool, where: str
) -> None:
    """Refuses to delete more than ``max_delete_fraction`` of the ``listed`` objects, unless forced."""
    limit = params.max_delete_fraction
    if force or to_delete <= 0 or listed is None:
        if force and (listed is None or to_delete > limit * listed):
            _log.warning("%s: --force: the --max-delete-fraction guard is overridden", where)
        return
    if to_delete > limit * listed:
        share = f"{to_delete / listed:.1%}" if listed > 0 else "more than all"
        raise SweepRefusedError(
            f"refusing to sweep {where}: it would delete {to_delete} of the {listed} objects the mark "
            f"listed in the namespace ({share}), more than --max-delete-fraction {limit:g} "
            f"({limit:.0%}). Nothing was deleted. If that is really garbage (check the mark's deleted/ "
            "and the repository's retention rules and branches), pass --force or a higher "
            "--max-delete-fraction."
        )
