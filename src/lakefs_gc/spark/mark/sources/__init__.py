"""Where a mark's candidates come from: a listing, an inventory snapshot, or the candidate set.

All three give the same DataFrame (``LISTED_SCHEMA``, one row per address) through the
:class:`~lakefs_gc.spark.mark.sources.base.CandidateProvider` protocol: :mod:`.listing` (the
default: the namespace listed on the executors), :mod:`.inventory` (``gc.inventory``: the newest
complete, verified inventory snapshot) and :mod:`.candidate_set` (the service: a snapshot plus the
events since, minus our sweeps).
"""

from __future__ import annotations

from datetime import datetime

from lakefs_gc.gc.params import MarkParams
from lakefs_gc.spark.mark.sources.base import LISTED_SCHEMA, CandidateProvider, Candidates, Progress
from lakefs_gc.spark.mark.sources.inventory import InventorySource, inventory_source
from lakefs_gc.spark.mark.sources.listing import ListingSource
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation

__all__ = [
    "LISTED_SCHEMA",
    "CandidateProvider",
    "Candidates",
    "InventorySource",
    "ListingSource",
    "candidate_source",
]


def candidate_source(
    params: MarkParams, namespace: StorageLocation, options: StorageOptions, *, now: datetime, say: Progress
) -> ListingSource | InventorySource:
    """The listing, or the newest usable snapshot under ``params.inventory`` (refused: InventoryError)."""
    if params.inventory is None:
        return ListingSource(namespace, options)
    return inventory_source(
        params.repository,
        namespace,
        options,
        inventory=params.inventory,
        max_inventory_age=params.max_inventory_age,
        now=now,
        say=say,
        proven=params.trust_checksums,  # content evidence only where the guard may use it
    )
