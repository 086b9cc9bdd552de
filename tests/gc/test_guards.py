"""The sweep's guards alone (pure rules): the mark's age, the share it would delete, and
``parse_instant`` (the inverse of ``format_java_instant``). Through ``lakefs-gc sweep`` against
the test server and real Spark: ``tests/spark/sweep/test_sweep_revalidation.py``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from lakefs_gc.gc.guards import SweepRefusedError, check_delete_fraction, check_mark_age, listed_count
from lakefs_gc.gc.params import SweepParams
from lakefs_gc.gc.reports import StoredSummary, parse_instant
from lakefs_gc.settings import GcOptions

REFUSED = 10  # a safety guard refused: nothing deleted


def params(options: GcOptions) -> SweepParams:
    return options.sweep_params("r")


def listed_objects(summary: dict[str, Any], *, force: bool, where: str) -> int | None:
    return listed_count(StoredSummary(summary), force=force, where=where)


NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)


def test_parse_instant() -> None:
    assert parse_instant("2025-11-10T10:34:37.245361091Z") == datetime(
        2025, 11, 10, 10, 34, 37, 245361, tzinfo=timezone.utc
    )
    assert parse_instant("2025-11-10T04:34:37Z") == datetime(2025, 11, 10, 4, 34, 37, tzinfo=timezone.utc)
    assert parse_instant("2025-11-10T06:34:37.5+02:00") == datetime(
        2025, 11, 10, 4, 34, 37, 500000, tzinfo=timezone.utc
    )
    assert parse_instant("yesterday") is None and parse_instant(None) is None and parse_instant(5) is None


@pytest.mark.parametrize(
    ("summary", "age"),
    [
        ({"start_time": "2026-11-20T12:00:00Z", "cutoff_time": "2026-11-10T12:00:00Z"}, timedelta(days=1)),
        ({"cutoff_time": "2026-11-19T12:00:00Z"}, timedelta(days=2)),  # no start_time: the cutoff's age
        ({"start_time": "2026-11-22T12:00:00Z"}, timedelta(0)),  # from the future: not stale
    ],
)
def test_mark_age(summary: dict[str, Any], age: timedelta) -> None:
    options = GcOptions(revalidate=False)
    assert check_mark_age(StoredSummary(summary), params(options), now=NOW, where="mark m") == age


@pytest.mark.parametrize(
    "summary",
    [{"start_time": "2026-11-01T12:00:00Z"}, {}, {"start_time": "garbage", "cutoff_time": 7}],
    ids=["old", "no-times", "unreadable"],
)
def test_stale_or_unknown_age(summary: dict[str, Any]) -> None:
    with pytest.raises(SweepRefusedError, match="without revalidation") as refused:
        check_mark_age(StoredSummary(summary), params(GcOptions(revalidate=False)), now=NOW, where="mark m")
    assert refused.value.exit_code == REFUSED
    revalidated = check_mark_age(
        StoredSummary(summary), params(GcOptions()), now=NOW, where="mark m"
    )  # allowed: no raise
    assert revalidated is None or revalidated > GcOptions().max_mark_age


def test_fraction_guard() -> None:
    half = params(GcOptions())
    check_delete_fraction(5, 10, half, force=False, where="m")  # not more than half
    check_delete_fraction(0, 0, half, force=False, where="m")
    with pytest.raises(SweepRefusedError, match="6 of the 10"):
        check_delete_fraction(6, 10, half, force=False, where="m")
    with pytest.raises(SweepRefusedError, match="1 of the 0"):
        check_delete_fraction(1, 0, half, force=False, where="m")
    check_delete_fraction(6, 10, half, force=True, where="m")
    check_delete_fraction(10, 10, params(GcOptions(max_delete_fraction=1.0)), force=False, where="m")
    assert listed_objects({"num_listed_objects": 10}, force=False, where="m") == 10
    assert listed_objects({}, force=True, where="m") is None
    with pytest.raises(SweepRefusedError, match="cannot be evaluated"):
        listed_objects({}, force=False, where="m")
