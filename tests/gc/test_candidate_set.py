"""The candidate set rule (gc.candidate_set) and its DataFrame implementation (spark.candidate_set)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_gc.events.model import sequencer_order
from lakefs_gc.gc.candidate_set import Listed, Observed, candidate

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


SNAP = at(10)
OLD = Listed(5, at(1))


def created(hours: float, seq: str = "", size: int = 7) -> Observed:
    return Observed("created", at(hours), sequencer_order(seq) if seq else "", size)


def deleted(hours: float, seq: str = "") -> Observed:
    return Observed("deleted", at(hours), sequencer_order(seq) if seq else "")


def test_snapshot_alone_is_the_candidate_set() -> None:
    assert candidate(OLD, SNAP, []) == OLD
    assert candidate(None, SNAP, []) is None


def test_created_after_the_snapshot_is_a_candidate_with_the_event_time() -> None:
    assert candidate(None, SNAP, [created(12)]) == Listed(7, at(12))


def test_deleted_after_the_snapshot_is_not_a_candidate() -> None:
    assert candidate(OLD, SNAP, [deleted(11)]) is None


def test_an_event_before_the_snapshot_does_not_overrule_what_it_lists() -> None:
    assert candidate(OLD, SNAP, [deleted(9)]) == OLD


def test_created_but_not_yet_in_any_snapshot_is_a_candidate() -> None:
    assert candidate(None, SNAP, [created(9)]) == Listed(7, at(9))
    assert candidate(None, None, [created(9)]) == Listed(7, at(9))


def test_out_of_order_delivery_is_ordered_by_sequencer() -> None:
    # delete (sequencer 2) arrived with an earlier clock than the create (sequencer 1): the delete wins
    assert candidate(None, SNAP, [deleted(11, "02"), created(12, "01")]) is None
    assert candidate(None, SNAP, [created(11, "02"), deleted(12, "01")]) == Listed(7, at(11))


def test_a_sweep_removes_the_object_unless_written_again_after_it() -> None:
    assert candidate(OLD, SNAP, [], swept_at=at(20)) is None
    assert candidate(OLD, SNAP, [created(21)], swept_at=at(20)) == Listed(7, at(21))
    assert candidate(None, SNAP, [created(12)], swept_at=at(20)) is None


def test_a_rewrite_makes_the_object_as_young_as_its_newest_write() -> None:
    assert candidate(OLD, SNAP, [created(12, size=9)]) == Listed(9, at(12))
    assert candidate(OLD, SNAP, [created(0.5)]) == OLD  # an older report does not make it older


def test_the_snapshot_proof_of_content_does_not_survive_a_newer_write() -> None:
    proven = Listed(5, at(1), "0" * 32)
    assert candidate(proven, SNAP, []) == proven
    assert candidate(proven, SNAP, [created(0.5)]) == proven  # a write the snapshot shows
    assert candidate(proven, SNAP, [created(12, size=5)]) == Listed(5, at(12))  # other bytes, maybe


# ---- the DataFrame implementation equals the rule ---------------------------------------------

_times = st.integers(min_value=0, max_value=30)
_event = st.tuples(st.sampled_from(["created", "deleted"]), _times, st.sampled_from(["", "01", "02", "0a"]))
_history = st.tuples(
    st.one_of(st.none(), st.tuples(st.integers(0, 100), _times)),  # snapshot row
    st.lists(_event, max_size=4),
    st.one_of(st.none(), _times),  # swept at
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_history, min_size=1, max_size=40), st.one_of(st.none(), _times))
def test_spark_candidate_set_equals_the_rule(spark: object, histories: list, snap_hour: int | None) -> None:
    from lakefs_gc.spark.mark.sources.candidate_set import candidate_set_frame

    snapshot_time = None if snap_hour is None else at(snap_hour)
    snap_rows, event_rows, swept_rows, expected = [], [], [], {}
    for i, (row, events, swept) in enumerate(histories):
        address = f"data/s/{i}"
        md5 = f"{i:032x}" if i % 3 else None  # proven for some rows
        listed = None if row is None or snapshot_time is None else Listed(row[0], at(row[1]), md5)
        if listed is not None:
            snap_rows.append((address, listed.size, listed.last_modified, listed.md5))
        observed = [Observed(k, at(h), sequencer_order(s) if s else "", 3) for k, h, s in events]
        event_rows += [(address, o.kind, o.event_time, o.sequencer, o.size) for o in observed]
        swept_at = None if swept is None else at(swept)
        if swept_at is not None:
            swept_rows.append((address, swept_at))
        want = candidate(listed, snapshot_time, observed, swept_at)
        if want is not None:
            expected[address] = (want.size, want.last_modified, want.md5)
    session = spark  # type: ignore[assignment]
    snapshot = None
    if snapshot_time is not None:
        snapshot = session.createDataFrame(
            snap_rows, "address string, size long, last_modified timestamp, md5 string"
        )
    events = session.createDataFrame(
        event_rows, "address string, kind string, event_time timestamp, sequencer string, size long"
    )
    swept = session.createDataFrame(swept_rows, "address string, swept_time timestamp")
    got = {
        r["address"]: (r["size"], r["last_modified"].astimezone(timezone.utc), r.asDict().get("md5"))
        for r in candidate_set_frame(snapshot, snapshot_time, events, swept).collect()
    }
    assert got == expected
