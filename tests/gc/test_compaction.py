"""Compaction never changes a candidate set: random histories, marks with and without it.

A history is writes, deletes (ours by sweeps, and anyone's) and inventory snapshots of a few
addresses over an hour; each change is notified once or twice, up to MARGIN late. Compactions
and marks happen at random times; a mark compares, per address, the rule on every event received
so far against the rule on the compacted events plus those received since the last compaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_gc.gc.candidate_set import Listed, Observed, candidate
from lakefs_gc.gc.compaction import compact

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
MARGIN = 5  # minutes: every notification arrives within it
ADDRESSES = ("a", "b", "c", "d")


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


@dataclass
class World:
    """The objects and what was received when, as the simulation goes."""

    sequenced: bool
    objects: dict[str, Listed] = field(default_factory=dict)
    received: list[tuple[int, str, Observed]] = field(default_factory=list)  # (minute, address, event)
    swept: dict[str, list[int]] = field(default_factory=dict)
    snapshots: list[tuple[int, int, dict[str, Listed]]] = field(default_factory=list)  # (taken, available)
    counter: int = 0

    def change(self, minute: int, address: str, kind: str, delays: list[int], size: int) -> None:
        self.counter += 1
        sequencer = f"{self.counter:08x}".ljust(64, "0") if self.sequenced else ""
        event = Observed(kind, at(minute), sequencer, size if kind == "created" else None)
        if kind == "created":
            self.objects[address] = Listed(size, at(minute))
        else:
            self.objects.pop(address, None)
        self.received += [(minute + d, address, event) for d in delays]

    def snapshot(self, minute: int, available: int) -> None:
        self.snapshots.append((minute, available, dict(self.objects)))

    def newest_snapshot(self, minute: int) -> tuple[int, dict[str, Listed]] | None:
        ready = [(taken, rows) for taken, available, rows in self.snapshots if available <= minute]
        return max(ready, key=lambda s: s[0]) if ready else None


_step = st.tuples(
    st.sampled_from(["write", "delete", "sweep", "snapshot", "compact", "mark"]),
    st.sampled_from(ADDRESSES),
    st.lists(st.integers(0, MARGIN), min_size=1, max_size=2),  # delivery delays (2: redelivered)
    st.integers(0, 10),  # snapshot availability lag
    st.integers(1, 9),  # size
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_step, min_size=5, max_size=60), st.booleans(), st.booleans())
def test_marks_agree_with_and_without_compaction(steps: list, sequenced: bool, inventory: bool) -> None:
    world = World(sequenced)
    compacted: dict[str, list[Observed]] = {}
    compacted_at: int | None = None  # events received up to this minute are in `compacted`
    for minute, (step, address, delays, lag, size) in enumerate(steps):
        if step in ("write", "delete"):
            world.change(minute, address, "created" if step == "write" else "deleted", delays, size)
        elif step == "sweep" and address in world.objects:  # our sweep deletes it; the store notifies
            world.change(minute, address, "deleted", delays, size)
            world.swept.setdefault(address, []).append(minute)
        elif step == "snapshot" and inventory:
            world.snapshot(minute, minute + lag)
        elif step == "compact":
            folded = _compaction(world, compacted, compacted_at, minute, inventory)
            if folded is not None:
                compacted, compacted_at = folded, minute
        elif step == "mark":
            _check_mark(world, compacted, compacted_at, minute, inventory)
    _check_mark(world, compacted, compacted_at, len(steps) + MARGIN, inventory)


def _since(world: World, start: int | None, end: int) -> dict[str, list[Observed]]:
    events: dict[str, list[Observed]] = {a: [] for a in ADDRESSES}
    for minute, address, event in world.received:
        if (start is None or minute > start) and minute <= end:
            events[address].append(event)
    return events


def _compaction(
    world: World, compacted: dict[str, list[Observed]], compacted_at: int | None, minute: int, inventory: bool
) -> dict[str, list[Observed]] | None:
    if inventory:
        newest = world.newest_snapshot(minute)
        if newest is None:
            return None  # with inventories configured, nothing is folded before the first snapshot
        watermark, listed = at(newest[0] - MARGIN), newest[1]
    else:
        watermark, listed = at(minute - MARGIN), {}
    new = _since(world, compacted_at, minute)
    return {a: compact([*compacted.get(a, []), *new[a]], watermark, listed=a in listed) for a in ADDRESSES}


def _check_mark(
    world: World, compacted: dict[str, list[Observed]], compacted_at: int | None, minute: int, inventory: bool
) -> None:
    snapshot = world.newest_snapshot(minute) if inventory else None
    if inventory and snapshot is None:
        return  # the mark lists the namespace: events play no part
    taken = at(snapshot[0]) if snapshot else None
    everything = _since(world, None, minute)
    recent = _since(world, compacted_at, minute)
    for a in ADDRESSES:
        listed = snapshot[1].get(a) if snapshot else None
        sweeps = [s for s in world.swept.get(a, []) if s <= minute and (taken is None or at(s) > taken)]
        swept_at = at(max(sweeps)) if sweeps else None
        full = candidate(listed, taken, everything[a], swept_at)
        folded = candidate(listed, taken, [*compacted.get(a, []), *recent[a]], swept_at)
        assert folded == full, (a, minute)


def test_a_deleted_or_listed_address_leaves_nothing_behind() -> None:
    w = at(10)
    written, gone = Observed("created", at(1), "", 3), Observed("deleted", at(2))
    assert compact([written, gone], w, listed=False) == []
    assert compact([written, written], w, listed=True) == []
    assert compact([written, written], w, listed=False) == [written]
    later = Observed("created", at(11), "", 4)
    assert compact([written, gone, later, later], w, listed=False) == [later]
