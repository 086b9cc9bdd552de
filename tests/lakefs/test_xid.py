"""xids and descending xids decode as docs/formats/lakefs-storage.md, "xids and slices" says."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from lakefs_gc.lakefs.xid import descending_xid_time, new_descending_xid, new_xid, xid_time


def test_documented_slice_and_object_times() -> None:
    assert descending_xid_time("gqv3epl4fd2o8m3men70") == datetime(
        2022, 12, 7, 17, 21, 30, tzinfo=timezone.utc
    )
    assert xid_time("ce8co454fd2o8m3menag") == datetime(2022, 12, 7, 17, 23, 28, tzinfo=timezone.utc)


def test_round_trip_unique_and_descending_order() -> None:
    t = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
    ids = {new_xid(t) for _ in range(1000)}
    assert len(ids) == 1000 and all(len(i) == 20 and xid_time(i) == t for i in ids)
    earlier, later = new_descending_xid(t), new_descending_xid(t + timedelta(hours=1))
    assert descending_xid_time(earlier) == t
    assert later < earlier  # newer slices sort first
