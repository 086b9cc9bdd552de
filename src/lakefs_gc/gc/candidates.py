"""The mark as set algebra: the reference every engine (Spark batch, streaming) must equal.

``candidates = {listed, deletable, older than the cutoff} − committed − uncommitted``
(internals §0). The Spark jobs compute the same thing with anti-joins; differential tests run
both on the same inputs.
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
