"""The candidate set rule: is an object there, according to a snapshot and the events since?

A repository's candidate set is what the service believes its storage namespace holds: the
newest complete inventory snapshot (or a listing), plus objects created since (from object
notifications), minus objects deleted since (from notifications and from our own sweeps). This
module is that rule for one address, as plain Python: the executable specification
:mod:`lakefs_gc.spark.mark.sources.candidate_set` implements on DataFrames and is tested against
(``tests/gc/test_candidate_set.py`` compares the two on random histories).

Why the rule is safe either way it errs: a candidate is only ever *proposed* for deletion. The
mark still drops everything referenced and everything newer than the cutoff, so an extra
candidate (an object that is already gone) costs a ``missing`` in the sweep report, and a missing
candidate costs only an object collected a cycle later. What the rule must get right is the
age: ``last_modified`` is the newest write anyone reported (the snapshot's, or an event's after
the snapshot time; S3 Inventory's snapshot time is when its scan began, so a write notified before
it is in the listed modification time), so a rewritten object is never older than it is.

Ordering (docs/formats/notifications.md, "Ordering and duplicates"): notifications arrive late,
repeated and out of order.
The events of one object are ordered by sequencer (padded, :func:`~lakefs_gc.events.model.sequencer_order`)
and then by event time; S3 and Azure define sequencers per key, which is all this needs. A
snapshot is not a point in time either (an inventory lists for hours), so an event at or before
the snapshot time does not overrule what the snapshot says about an object it lists; an object
the snapshot does not list but an event says was created is a candidate ("not confirmed yet").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Listed:
    """An object as a snapshot (or the rule's answer) has it."""

    size: int
    last_modified: datetime
    #: the bytes' MD5 the snapshot's row proves (S3 Inventory: ETag and EncryptionStatus), the
    #: identity-twin guard's content evidence; a candidate keeps it only while the snapshot
    #: describes it: a newer write has no proof (notifications carry no encryption status)
    md5: str | None = None


@dataclass(frozen=True)
class Observed:
    """One notification about the object: ``kind`` is ``"created"`` or ``"deleted"``."""

    kind: str
    event_time: datetime
    sequencer: str = ""  # sequencer_order() of the event's sequencer; "" when it had none
    size: int | None = None


def candidate(
    listed: Listed | None,
    snapshot_time: datetime | None,
    events: Sequence[Observed],
    swept_at: datetime | None = None,
) -> Listed | None:
    """The object as a candidate, or None when it is not one (deleted, or never seen).

    ``listed``: the snapshot's row for the address (None: not in it, or no snapshot);
    ``swept_at``: when one of our own sweeps deleted it (None: never).
    """
    latest = max(events, key=_order) if events else None
    # writes the snapshot already shows are in its last_modified (it was taken after them)
    created = [e for e in events if e.kind == "created" and _after(e, listed, snapshot_time)]
    newest_write = max(created, key=_order) if created else None
    if latest is None:
        present = listed is not None
    elif snapshot_time is not None and listed is not None and latest.event_time <= snapshot_time:
        present = True
    else:
        present = latest.kind == "created"
    if present and swept_at is not None:
        present = latest is not None and latest.kind == "created" and latest.event_time > swept_at
    if not present:
        return None
    return _newest(listed, newest_write, max((e.event_time for e in created), default=None))


def _after(event: Observed, listed: Listed | None, snapshot_time: datetime | None) -> bool:
    return listed is None or snapshot_time is None or event.event_time > snapshot_time


def event_order(event: Observed) -> tuple[str, datetime, str]:
    """Sequencer, then time; an exact tie goes to the delete ("deleted" > "created"): when in
    doubt, one candidate fewer."""
    return (event.sequencer, event.event_time, event.kind)


_order = event_order


def _newest(listed: Listed | None, write: Observed | None, written: datetime | None) -> Listed:
    """The newest write anyone reported: its size, and the latest write time of all (so an
    object is never taken for older than any report says it is)."""
    if write is None or written is None:
        assert listed is not None
        return listed
    if listed is None or written > listed.last_modified:
        return Listed(write.size or 0, written)
    return listed
