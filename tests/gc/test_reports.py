"""summary.json as lakeFS writes and reads it."""

from __future__ import annotations

import json

import pytest

from lakefs_gc.gc.reports import MarkReportError, MarkSummary, format_java_instant, parse_summary, report_dir

LAKEFS_EXAMPLE = (  # lakeFS PR #9657; docs/formats/lakefs-gc-api.md, "Mark reports"
    '{"run_id":"g4uk6erfnfus73frbnqg","success":true,"first_slice":"g5adr8f5pvec73cpia80",'
    '"start_time":"2025-11-10T10:34:37.245361091Z","cutoff_time":"2025-11-10T04:34:37.243Z",'
    '"num_deleted_objects":147942}'
)


def test_summary_reproduces_lakefs_layout_byte_for_byte() -> None:
    summary = MarkSummary(
        run_id="g4uk6erfnfus73frbnqg",
        success=True,
        first_slice="g5adr8f5pvec73cpia80",
        start_time_ns=1762770877_245361091,
        cutoff_time_ns=1762749277_243999999,  # ms precision, truncated like java.util.Date
        num_deleted_objects=147942,
    )
    assert summary.to_json() == LAKEFS_EXAMPLE


def test_our_keys_follow_lakefs_keys() -> None:
    summary = MarkSummary("r", False, "", 0, 0, 0, extra={"bytes": 10, "tool": "lakefs-gc"})
    keys = list(json.loads(summary.to_json()))
    assert keys == [
        "run_id",
        "success",
        "first_slice",
        "start_time",
        "cutoff_time",
        "num_deleted_objects",
        "bytes",
        "tool",
    ]
    with pytest.raises(ValueError, match="shadow"):
        MarkSummary("r", True, "", 0, 0, 0, extra={"success": False}).to_json()


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "1970-01-01T00:00:00Z"),
        (1_500_000_000_100_000_000, "2017-07-14T02:40:00.100Z"),
        (1_500_000_000_000_100_000, "2017-07-14T02:40:00.000100Z"),
        (1_500_000_000_000_000_001, "2017-07-14T02:40:00.000000001Z"),
    ],
)
def test_java_instant_format(ns: int, text: str) -> None:
    assert format_java_instant(ns) == text


def test_parse_summary_accepts_lakefs_and_refuses_failed_runs() -> None:
    assert parse_summary(LAKEFS_EXAMPLE, "x").num_deleted_objects == 147942
    with pytest.raises(MarkReportError, match=r"Provided mark \(r\) is of a failed run"):
        parse_summary('{"run_id":"r","success":false}', "x")
    with pytest.raises(MarkReportError, match="not JSON"):
        parse_summary("{", "x")


def test_report_dir() -> None:
    assert report_dir("g4uk6erfnfus73frbnqg") == "_lakefs/retention/gc/unified/g4uk6erfnfus73frbnqg/"
    for bad in ("", "..", "a/b"):
        with pytest.raises(MarkReportError):
            report_dir(bad)
