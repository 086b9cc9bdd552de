"""The verdict of ``explain`` from facts: the mark's reasons, in the mark's precedence."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from lakefs_gc.gc import reasons
from lakefs_gc.gc.cutoff import compute_cutoff
from lakefs_gc.gc.explain import OUT_OF_SCOPE, CommitRef, MarkRecord, ObjectFacts, TwinFinding, explain

NOW = datetime(2026, 11, 1, tzinfo=timezone.utc)
CUTOFF = compute_cutoff(NOW, grace_period=timedelta(hours=24))
OLD, YOUNG = NOW - timedelta(days=3), NOW - timedelta(hours=1)
KEY = "data/gabc/xyz"


def ref(kept_by: str) -> CommitRef:
    return CommitRef("c1", OLD, "a/b", kept_by, "HEAD of branch 'main'")


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (ObjectFacts(KEY, True, YOUNG, 1, committed=(ref("lakefs"),), staged=True), reasons.COMMITTED),
        (ObjectFacts(KEY, True, YOUNG, 1, committed=(ref("cross_check"),), staged=True), reasons.UNCOMMITTED),
        (ObjectFacts(KEY, True, YOUNG, 1, committed=(ref("cross_check"),)), reasons.RETENTION_CROSS_CHECK),
        (ObjectFacts(KEY, True, YOUNG, 1, twin=TwinFinding("live", "staged")), reasons.TOO_YOUNG),
        (ObjectFacts(KEY, True, OLD, 1, twin=TwinFinding("kept", "unknown")), reasons.IDENTITY_TWIN),
        (ObjectFacts(KEY, True, OLD, 1, twin=TwinFinding("garbage", "none serves it")), reasons.GARBAGE),
        (ObjectFacts(KEY, False), reasons.GARBAGE),
        (ObjectFacts("_lakefs/abc", True, OLD, 1), OUT_OF_SCOPE),
    ],
)
def test_verdict_follows_the_mark(facts: ObjectFacts, expected: str) -> None:
    assert explain(facts, CUTOFF).verdict == expected


def test_why_names_the_commit_the_age_and_the_sweep() -> None:
    record = MarkRecord("m1", OLD, OLD, listed=True, swept=None, sweep_finished=True)
    result = explain(ObjectFacts(KEY, True, OLD, 1, committed=(ref("lakefs"),), last_mark=record), CUTOFF)
    text = "\n".join(result.why)
    assert "commit c1" in text and "HEAD of branch 'main'" in text
    assert "before the cutoff" in text
    assert "revalidation" in text
    assert result.to_json()["committed"][0]["date"].endswith("Z")
