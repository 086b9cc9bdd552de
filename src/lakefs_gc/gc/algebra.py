"""The mark as set algebra: the executable specification every engine must equal.

``garbage = {listed, deletable, older than the cutoff} − committed − uncommitted``
(docs/formats/lakefs-gc-api.md, "What a GC computes"). This is the rule in plain Python, small
enough to read as the definition and to property-test (``tests/gc/test_safety.py``: nothing
referenced, nothing undeletable, nothing at or after the cutoff is ever in the result).

:mod:`lakefs_gc.spark.mark.algebra` computes the same thing with joins on DataFrames, and is
tested against this function on the same inputs (``tests/gc/test_differential.py`` runs whole
marks against a reference built on it). When the two disagree, this one is right.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass
from datetime import datetime

from lakefs_gc.gc.addresses import deletable_key
from lakefs_gc.gc.cutoff import Cutoff


@dataclass(frozen=True)
class ListedObject:
    """An object seen in storage (listing, inventory or event), by namespace-relative key."""

    address: str
    last_modified: datetime
    size: int = 0


def mark(
    listed: Iterable[ListedObject], *, committed: Set[str], uncommitted: Set[str], cutoff: Cutoff
) -> set[str]:
    """Addresses that are garbage: deletable, older than the cutoff, referenced by nothing."""
    return {
        o.address
        for o in listed
        if deletable_key(o.address)
        and cutoff.admits(o.last_modified)
        and o.address not in committed
        and o.address not in uncommitted
    }
