"""The mark's tally: objects and bytes per reason, counted while the classification runs.

The classification's verdicts serve twice: the garbage goes on to the identity-twin guard and the
report, and every reason's count goes into ``summary.json``. Keeping every classified candidate
for the count (26M rows at the bottom line) cost half the JVM's time of the classification's
stage: Spark's cache compresses each column it keeps, and its dictionary encoding hashed every
address. Instead the one pass that keeps the garbage also counts every reason, as an observation
of that pass (Spark's ``observe``), and only the garbage is kept (:func:`observed_garbage`).

The guard then turns some garbage into kept identity twins (:func:`tally`): the garbage's count
is taken again from what it left, and must add up with the observed one, or the mark fails
(docs/invariants.md, invariant 4: a count that does not add up is never written as a report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakefs_gc.errors import GcError
from lakefs_gc.gc import reasons

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation


@dataclass(frozen=True)
class Tally:
    """Objects and bytes per reason (every one of :data:`~lakefs_gc.gc.reasons.REASONS`), and the
    smallest ``data/<slice>`` among the candidates (lakeFS's first_slice; "" when none)."""

    counts: dict[str, dict[str, int]]
    first_slice: str


def observed_garbage(classified: DataFrame) -> tuple[DataFrame, Observation]:
    """The garbage rows of ``classified`` (all its columns), counting as every row of it passes
    the objects and bytes of each reason and the smallest data slice: the observation is complete
    once an action has read every row of the garbage."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("lakefs-gc reasons")
    data_slice = F.when(F.col("address").startswith("data/"), F.split("address", "/").getItem(1))
    metrics: list[Column] = [F.count(F.lit(1)).alias("rows"), F.min(data_slice).alias("first_slice")]
    for i, reason in enumerate(reasons.REASONS):
        of_reason = F.col("reason") == reason
        metrics.append(F.count(F.when(of_reason, 1)).alias(f"objects_{i}"))
        metrics.append(F.sum(F.when(of_reason, F.col("size"))).alias(f"bytes_{i}"))
    counted = classified.observe(observation, *metrics)
    return counted.filter(F.col("reason") == reasons.GARBAGE), observation


def tally(observation: Observation, guarded: DataFrame, where: str) -> Tally:
    """The counts of ``observation`` (:func:`observed_garbage`, complete), with the garbage and identity
    twins counted again in ``guarded``: the observed garbage after the guard (reasons garbage and
    identity twin only). Raises when ``guarded`` does not hold as many objects as were observed
    as garbage (``where``: the mark, for the message)."""
    from pyspark.sql import functions as F

    metrics: dict[str, Any] = observation.get
    counts = {
        reason: {"objects": int(metrics[f"objects_{i}"] or 0), "bytes": int(metrics[f"bytes_{i}"] or 0)}
        for i, reason in enumerate(reasons.REASONS)
    }
    garbage_observed = counts[reasons.GARBAGE]["objects"]
    after = {reason: {"objects": 0, "bytes": 0} for reason in (reasons.GARBAGE, reasons.IDENTITY_TWIN)}
    for row in guarded.groupBy("reason").agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect():
        if row["reason"] not in after:
            raise GcError(f"{where}: the identity-twin guard left reason {row['reason']!r} among the garbage")
        after[row["reason"]] = {"objects": int(row["n"]), "bytes": int(row["b"] or 0)}
    kept = sum(c["objects"] for c in after.values())
    if kept != garbage_observed:
        raise GcError(
            f"{where}: counted {garbage_observed} garbage objects while classifying, "
            f"but {kept} after the identity-twin guard"
        )
    if int(metrics["rows"]) != sum(c["objects"] for c in counts.values()):
        raise GcError(f"{where}: classified {metrics['rows']} objects, but not each with one reason")
    counts.update(after)  # the classification itself keeps no identity twin
    return Tally(counts, metrics["first_slice"] or "")
