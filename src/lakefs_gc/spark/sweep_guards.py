"""What a sweep checks on the driver before it deletes anything: the mark's age, revalidation,
and the share of the namespace it would delete.

Each guard runs before the first delete and refuses with :class:`SweepRefusedError`, which says
what was found and how to override it. A refusal is a :class:`~lakefs_gc.errors.ConfigError`
(exit code 3, "nothing was attempted"): the mark is fine, the settings do not allow sweeping it
as it is, and the remedy is a setting (revalidation, ``--max-mark-age``, ``--max-delete-fraction``,
``--force``). A revalidation that fails raises its own error (lakeFS, storage, ...); the sweep
then deletes nothing either (fail closed).

How :func:`~lakefs_gc.spark.sweep.sweep_run` uses it::

    plan = plan_sweep(spark, settings, repository, mark_id, summary, marked, force=force, now=now)
    try:
        delete(plan.addresses)
        summary["revalidation"] = plan.revalidation
    finally:
        plan.release()
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from lakefs_gc.durations import format_duration
from lakefs_gc.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakefs_gc.settings import GcOptions, GcSettings

_log = logging.getLogger(__name__)

Progress = Callable[[str], None]
#: ``2025-11-10T10:34:37.245361091Z``: Java's ``Instant.toString`` (up to 9 fraction digits)
_INSTANT = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")


class SweepRefusedError(ConfigError):
    """A sweep safety rail refused the mark before anything was deleted; the message says how to override."""

    exit_code = ExitCode.REFUSED


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

    def release(self) -> None:
        self._release()


def plan_sweep(
    spark: SparkSession,
    settings: GcSettings,
    repository: str,
    mark_id: str,
    summary: Mapping[str, Any],
    marked: DataFrame,
    *,
    force: bool = False,
    now: datetime,
    say: Progress,
) -> SweepPlan:
    """Check the mark's age, revalidate it (when on), check the share it would delete.

    Cheap refusals come first (before lakeFS is asked anything); the share is checked on what
    is left after the revalidation. Raises :class:`SweepRefusedError` or the revalidation's error.
    """
    from lakefs_gc.spark.revalidate import revalidate

    options = settings.gc
    where = f"mark {mark_id} of {repository}"
    age = check_mark_age(summary, options, now=now, where=where)
    if age is not None and age > options.max_mark_age and options.revalidate:
        say(f"{repository}: {where} is {format_duration(age)} old, older than --max-mark-age "
            f"{format_duration(options.max_mark_age)}: swept because it is revalidated")  # fmt: skip
    listed = listed_objects(summary, force=force, where=where)
    marked_total = _int_or_none(summary.get("num_deleted_objects"))
    if not options.revalidate:
        say(f"{repository}: not revalidating {where} (--no-revalidate): objects referenced again since "
            "the mark will be deleted")  # fmt: skip
        total = marked_total if marked_total is not None else marked.count()
        check_delete_fraction(total, listed, options, force=force, where=where)
        return SweepPlan(marked, 0, False, {"skipped": True})
    revalidation = revalidate(spark, settings, repository, mark_id, marked, progress=say)
    try:
        total = marked_total if marked_total is not None else marked.count()
        check_delete_fraction(total - revalidation.num_saved, listed, options, force=force, where=where)
    except BaseException:
        revalidation.unpersist()
        raise
    still, saved = revalidation.still_marked, revalidation.num_saved
    return SweepPlan(still, saved, True, revalidation.summary(), revalidation.unpersist)


def check_mark_age(
    summary: Mapping[str, Any], options: GcOptions, *, now: datetime, where: str
) -> timedelta | None:
    """The mark's age (``None``: unknown); refuses a mark older than ``max_mark_age`` unless revalidated.

    The age is taken from ``start_time`` (when the mark asked lakeFS what is referenced), else
    from ``cutoff_time`` (earlier still: the mark counts as older). A mark without either, or
    with times that cannot be read, has an unknown age and counts as stale.
    """
    started = parse_instant(summary.get("start_time")) or parse_instant(summary.get("cutoff_time"))
    age = max(timedelta(0), now - started) if started is not None else None
    stale = age is None or age > options.max_mark_age
    if stale and not options.revalidate:
        found = (
            f"is {format_duration(age)} old (start_time {summary.get('start_time')})"
            if age is not None
            else "has no readable start_time or cutoff_time, so its age is unknown"
        )
        raise SweepRefusedError(
            f"refusing to sweep {where} without revalidation: it {found}, and marks older than "
            f"--max-mark-age {format_duration(options.max_mark_age)} are swept only when revalidated "
            "(lakeFS may reference some of its objects again). Drop --no-revalidate, raise "
            "--max-mark-age, or mark again."
        )
    return age


def listed_objects(summary: Mapping[str, Any], *, force: bool, where: str) -> int | None:
    """The namespace's objects the mark listed (``num_listed_objects``); refused if unknown, unless forced."""
    listed = _int_or_none(summary.get("num_listed_objects"))
    if listed is None and not force:
        raise SweepRefusedError(
            f"refusing to sweep {where}: its summary.json has no num_listed_objects (a mark of lakeFS's "
            "Scala job?), so the --max-delete-fraction guard cannot be evaluated. Check the mark's "
            "deleted/ and pass --force to sweep it anyway."
        )
    return listed


def check_delete_fraction(
    to_delete: int, listed: int | None, options: GcOptions, *, force: bool, where: str
) -> None:
    """Refuses to delete more than ``max_delete_fraction`` of the ``listed`` objects, unless forced."""
    limit = options.max_delete_fraction
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


def parse_instant(value: Any) -> datetime | None:
    """``2025-11-10T10:34:37.245361091Z`` (Java's ``Instant``, ns) as a UTC datetime; ``None`` if not one."""
    if not isinstance(value, str):
        return None
    match = _INSTANT.fullmatch(value.strip())
    if match is None:
        return None
    base, fraction, zone = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    try:
        parsed = datetime.fromisoformat(f"{base}.{micros}{'+00:00' if zone == 'Z' else zone}")
    except ValueError:
        return None
    return parsed.astimezone(timezone.utc)


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
