"""Event compaction: which of an address's events the candidate set still needs.

The event table would otherwise keep every notification for ever. Once a repository has an
inventory snapshot taken at ``Ts``, the candidate set (:mod:`lakefs_gc.gc.candidate_set`) reads
its events against that snapshot or a newer one, so events at or before a **watermark**
``Ts - margin`` can be folded, per address:

* an address the snapshot lists: its old events say nothing the snapshot does not (an event at
  or before the snapshot time never overrules what it lists, and a write it shows is in its
  ``last_modified``): they are dropped;
* an address it does not list: if its newest old event (by sequencer, then time) is a delete,
  the object is gone and they are dropped; else the newest event and the latest write are kept,
  which is all the rule reads of them ("created but not confirmed yet");
* events after the watermark are kept, each once (a redelivery stored twice goes here).

Without inventories (events only) the same fold runs with ``listed`` false and the watermark
``now - margin``: what remains is the set of known objects, created and not deleted since.

Why a mark's result does not change (``tests/gc/test_compaction.py`` checks it on random
histories of writes, deletes, sweeps, snapshots, late and repeated deliveries, compactions and
marks): later marks use the same snapshot or a newer one, so ``Ts' >= Ts > watermark`` and an
old event can matter only through the newest event and the latest write of an address the
snapshot does not list, which are kept. Two assumptions, documented with
``service.compaction_margin``: a notification arrives within ``margin`` of its event time (a
later one is stored as it comes, and may make an object a candidate again or keep one a cycle
longer: both safe, the mark still drops whatever is referenced or young); and one object's
sequencers grow with its event times (S3 and Azure: per key).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from lakefs_gc.gc.candidate_set import Observed, event_order


def compact(events: Sequence[Observed], watermark: datetime, *, listed: bool) -> list[Observed]:
    """The events of one address the candidate set still needs after folding at ``watermark``.

    ``listed``: the snapshot the watermark comes from lists the address (False without one).
    """
    old = [e for e in events if e.event_time <= watermark]
    kept: list[Observed] = []
    if old and not listed:
        latest = max(old, key=event_order)
        if latest.kind == "created":
            writes = [e for e in old if e.kind == "created"]
            kept = _once([latest, max(writes, key=lambda e: (e.event_time, e.sequencer))])
    return kept + _once([e for e in events if e.event_time > watermark])


def _once(events: Sequence[Observed]) -> list[Observed]:
    """Each event once, in order of first appearance (a redelivery is an equal event)."""
    return list(dict.fromkeys(events))
