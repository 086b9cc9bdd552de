"""The mark's set algebra on DataFrames: listed − committed − uncommitted, older than the cutoff.

Same result as :func:`lakefs_gc.gc.algebra.mark` (the reference the tests compare with), but as
joins that never bring addresses to the driver. Every listed object keeps a ``reason`` so the
report can say why the survivors survived.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from lakefs_gc.gc import reasons
from lakefs_gc.gc.cutoff import Cutoff

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class AddressLookup(Protocol):
    """Committed addresses that can flag a frame's rows in the frame's own tasks, without a join
    (the range cache's committed-address level: ``range_cache.committed_lookup.CommittedLookup``)."""

    @property
    def addresses(self) -> DataFrame:
        """Every address, each once: what the classification joins with when :meth:`flag` declines."""
        ...

    def fits(self, partitions: int | None) -> bool:
        """Whether :meth:`flag` flags a frame hash-partitioned by address into ``partitions``."""
        ...

    def flag(self, frame: DataFrame, column: str, partitions: int | None) -> DataFrame | None:
        """``frame`` plus ``column`` (true: held, null: not); None: not for this partitioning."""
        ...


def classify(
    listed: DataFrame,
    *,
    committed: DataFrame | AddressLookup,
    uncommitted: DataFrame,
    cutoff: Cutoff,
    retained: DataFrame | None = None,
    committed_unique: bool = False,
    partitions: int | None = None,
) -> DataFrame:
    """``listed`` plus a ``reason`` column (one of :data:`lakefs_gc.gc.reasons.REASONS`).

    ``retained``: addresses of the commits only the retention cross-check keeps (docs/invariants.md,
    invariant 6): it only ever keeps more. ``committed_unique``: ``committed`` holds each address
    once already, so no ``distinct`` runs over it. ``partitions``: ``listed`` is hash-partitioned
    by address into that many partitions (sources/prefetch.py), which the joins keep: the staged and
    retained addresses are joined first, and ``committed`` as a lookup (:class:`AddressLookup`)
    then flags the rows in those same tasks where it can.
    """
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    def flagged(addresses: DataFrame, flag: str, unique: bool = False) -> DataFrame:
        addresses = addresses.select("address")
        if not unique:
            return addresses.distinct().withColumn(flag, F.lit(True))
        # planned as a sort-merge join, Spark's adaptive execution turned it into a broadcast of
        # the level at run time: at the bottom line 22M rows, and the driver ran out of heap
        return addresses.withColumn(flag, F.lit(True)).hint("merge")

    joined = listed.join(flagged(uncommitted, "_staged"), "address", "left")
    if retained is None:
        joined = joined.withColumn("_retained", F.lit(None).cast("boolean"))
    else:
        joined = joined.join(flagged(retained, "_retained"), "address", "left")
    if isinstance(committed, DataFrame):
        joined = joined.join(flagged(committed, "_committed", committed_unique), "address", "left")
    else:
        by_lookup = committed.flag(joined, "_committed", partitions)
        if by_lookup is None:
            by_lookup = joined.join(flagged(committed.addresses, "_committed", True), "address", "left")
        joined = by_lookup
    modified = F.col("last_modified")
    # an unknown modification time is treated as new: never collect what cannot be dated
    too_young = modified.isNull() | (modified >= F.lit(cutoff.time))
    reason = (
        F.when(F.col("_committed").isNotNull(), F.lit(reasons.COMMITTED))
        .when(F.col("_staged").isNotNull(), F.lit(reasons.UNCOMMITTED))
        .when(F.col("_retained").isNotNull(), F.lit(reasons.RETENTION_CROSS_CHECK))
        .when(too_young, F.lit(reasons.TOO_YOUNG))
        .otherwise(F.lit(reasons.GARBAGE))
    )
    return joined.withColumn("reason", reason).drop("_committed", "_staged", "_retained")


def keep_as(classified: DataFrame, addresses: DataFrame, reason: str) -> DataFrame:
    """``classified`` with the garbage among ``addresses`` kept for ``reason`` (a guard's verdict)."""
    from pyspark.sql import functions as F

    flagged = addresses.select("address").distinct().withColumn("_keep", F.lit(True))
    joined = classified.join(flagged, "address", "left")
    keep = (F.col("reason") == reasons.GARBAGE) & F.col("_keep").isNotNull()
    return joined.withColumn("reason", F.when(keep, F.lit(reason)).otherwise(F.col("reason"))).drop("_keep")


def garbage(classified: DataFrame) -> DataFrame:
    """The marked objects: ``address, size, last_modified``."""
    from pyspark.sql import functions as F

    return classified.filter(F.col("reason") == reasons.GARBAGE).select("address", "size", "last_modified")
