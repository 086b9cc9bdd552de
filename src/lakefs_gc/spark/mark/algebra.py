"""The mark's set algebra on DataFrames: listed − committed − uncommitted, older than the cutoff.

Same result as :func:`lakefs_gc.gc.algebra.mark` (the reference the tests compare with), but as
joins that never bring addresses to the driver. Every listed object keeps a ``reason`` so the
report can say why the survivors survived.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakefs_gc.gc import reasons
from lakefs_gc.gc.cutoff import Cutoff

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def classify(listed: DataFrame, *, committed: DataFrame, uncommitted: DataFrame, cutoff: Cutoff) -> DataFrame:
    """``listed`` plus a ``reason`` column (one of :data:`lakefs_gc.gc.reasons.REASONS`)."""
    from pyspark.sql import functions as F

    in_commit = committed.select("address").distinct().withColumn("_committed", F.lit(True))
    staged = uncommitted.select("address").distinct().withColumn("_staged", F.lit(True))
    joined = listed.join(in_commit, "address", "left").join(staged, "address", "left")
    modified = F.col("last_modified")
    # an unknown modification time is treated as new: never collect what cannot be dated
    too_young = modified.isNull() | (modified >= F.lit(cutoff.time))
    reason = (
        F.when(F.col("_committed").isNotNull(), F.lit(reasons.COMMITTED))
        .when(F.col("_staged").isNotNull(), F.lit(reasons.UNCOMMITTED))
        .when(too_young, F.lit(reasons.TOO_YOUNG))
        .otherwise(F.lit(reasons.GARBAGE))
    )
    return joined.withColumn("reason", reason).drop("_committed", "_staged")


def garbage(classified: DataFrame) -> DataFrame:
    """The marked objects: ``address, size, last_modified``."""
    from pyspark.sql import functions as F

    return classified.filter(F.col("reason") == reasons.GARBAGE).select("address", "size", "last_modified")
