"""A repository's candidate set on Spark: a snapshot, plus the events since, minus our sweeps.

The rule per address is :func:`lakefs_gc.gc.candidate_set.candidate` (the specification; the
tests compare the two on random histories). Here it is two aggregations and a full outer join,
so no address ever reaches the driver.

:class:`CandidateSetSource` gives a mark its candidates from it (the service's cycles use it
instead of a listing), with the same ``LISTED_SCHEMA`` result as the listing and the inventory
sources (:mod:`lakefs_gc.spark.mark.sources`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakefs_gc.inventory.mapping import content_md5s
from lakefs_gc.spark.mark.sources.base import CONTENT_MD5, Candidates, Progress
from lakefs_gc.spark.mark.sources.listing import ListingSource
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import local_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def candidate_set_frame(
    snapshot: DataFrame | None,
    snapshot_time: datetime | None,
    events: DataFrame,
    swept: DataFrame | None = None,
) -> DataFrame:
    """The candidates (``address, size, last_modified``, and ``md5`` when the snapshot has it).

    ``snapshot``: ``address, size, last_modified`` as of ``snapshot_time`` (None: no snapshot,
    events only), optionally with :data:`CONTENT_MD5`, the bytes' MD5 its rows prove
    (:func:`with_content_md5`): a candidate keeps it only while the snapshot describes it, never
    past a newer write; ``events``: the repository's routed events (EVENT_DDL columns ``address, kind,
    event_time, sequencer, size``); ``swept``: ``address, swept_time`` our sweeps deleted.
    """
    from pyspark.sql import functions as F

    order = F.struct("sequencer", "event_time", "kind")  # as gc.candidate_set._order
    is_created = F.col("kind") == "created"
    if snapshot_time is not None and snapshot is not None:  # what the snapshot shows is in it (gc rule)
        listed_addresses = snapshot.select("address", F.lit(True).alias("_listed"))
        events = events.join(listed_addresses, "address", "left")
        is_created = is_created & (F.col("_listed").isNull() | (F.col("event_time") > F.lit(snapshot_time)))
    latest = events.groupBy("address").agg(
        F.max_by(F.struct("kind", "event_time"), order).alias("_latest"),
        F.max_by(F.when(is_created, F.col("size")), F.when(is_created, order)).alias("_write_size"),
        F.max(F.when(is_created, F.col("event_time"))).alias("_written"),
    )
    if snapshot is None:
        snapshot = local_frame(events.sparkSession, [], "address string, size long, last_modified timestamp")
    evidence = CONTENT_MD5 in snapshot.columns
    listed = snapshot.select(
        "address",
        F.col("size").alias("_size"),
        F.col("last_modified").alias("_modified"),
        F.lit(True).alias("_in"),
        *([F.col(CONTENT_MD5).alias("_md5")] if evidence else []),
    )
    joined = _with_swept(listed.join(latest, "address", "full_outer"), swept)
    kind, when = F.col("_latest.kind"), F.col("_latest.event_time")
    in_snapshot = F.coalesce(F.col("_in"), F.lit(False))
    confirmed = F.lit(False) if snapshot_time is None else in_snapshot & (when <= F.lit(snapshot_time))
    present = (
        F.when(F.col("_latest").isNull(), in_snapshot).when(confirmed, True).otherwise(kind == "created")
    )
    not_swept = F.col("_swept").isNull() | ((kind == "created") & (when > F.col("_swept")))
    newer_write = F.col("_written").isNotNull() & (
        F.col("_modified").isNull() | (F.col("_written") > F.col("_modified"))
    )
    return joined.filter(present & not_swept).select(
        "address",
        F.when(newer_write, F.coalesce(F.col("_write_size"), F.lit(0)))
        .otherwise(F.col("_size"))
        .alias("size"),
        F.when(newer_write, F.col("_written")).otherwise(F.col("_modified")).alias("last_modified"),
        *([F.when(~newer_write, F.col("_md5")).alias(CONTENT_MD5)] if evidence else []),
    )


def _with_swept(joined: DataFrame, swept: DataFrame | None) -> DataFrame:
    """``joined`` with ``_swept``: when our sweeps last deleted the address (null: never)."""
    from pyspark.sql import functions as F

    if swept is None:
        return joined.withColumn("_swept", F.lit(None).cast("timestamp"))
    gone = swept.groupBy("address").agg(F.max("swept_time").alias("_swept"))
    return joined.join(gone, "address", "left")


def with_content_md5(snapshot: DataFrame) -> DataFrame:
    """``address, size, last_modified, md5`` of a snapshot's candidates (CANDIDATE_DDL rows):
    ``md5`` is the bytes' MD5 where the row's ETag and EncryptionStatus prove it
    (:func:`lakefs_gc.inventory.mapping.content_md5s`), else null. The identity-twin guard's
    content evidence (spark/mark/twin_evidence.py) in the service's candidate set."""
    columns = snapshot.select("address", "size", "last_modified", "etag", "encryption")
    return columns.mapInArrow(
        on_executor(_ContentMd5()),
        f"address string, size long, last_modified timestamp, {CONTENT_MD5} string",
    )


class _ContentMd5:
    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            proven = content_md5s(batch.column("etag"), batch.column("encryption")).combine_chunks()
            yield pa.RecordBatch.from_arrays(
                [batch.column("address"), batch.column("size"), batch.column("last_modified"), proven],
                names=["address", "size", "last_modified", CONTENT_MD5],
            )


@dataclass(frozen=True)
class Snapshot:
    """The repository's newest ingested inventory snapshot: its rows and when it was taken."""

    delivery_id: str
    snapshot_time: datetime
    #: (spark, parallelism) -> ``address, size, last_modified`` (and ``md5``: :func:`with_content_md5`)
    objects: Callable[[SparkSession, int], DataFrame]


@dataclass(frozen=True)
class CandidateSetSource:
    """A mark's candidates from the candidate set instead of a listing of the namespace.

    Without an ingested snapshot (no inventory configured, or none delivered yet) the baseline is
    a listing of the namespace (``listing``), taken at the start of the mark: the events before it
    are then in it, and the listing stands alone. With a snapshot, the events and our sweeps since
    complete it.
    """

    repository: str
    snapshot: Snapshot | None
    listing: ListingSource
    events: Callable[[SparkSession, int], DataFrame]  # EVENT_DDL rows of this repository
    swept: Callable[[SparkSession, int], DataFrame | None]  # address, swept_time
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Any]:
        if self.snapshot is None:
            return {"source": "candidate-set", "baseline": "listing"}
        return {
            "source": "candidate-set",
            "baseline": "inventory",
            "delivery": self.snapshot.delivery_id,
            "snapshot_time": self.snapshot.snapshot_time.isoformat().replace("+00:00", "Z"),
        }

    def candidates(self, spark: SparkSession, *, parallelism: int, say: Progress) -> Candidates:
        if self.snapshot is None:
            say("no inventory snapshot yet: the candidate set is a listing of the namespace")
            return self.listing.candidates(spark, parallelism=parallelism, say=say)
        snap = self.snapshot
        say(f"candidate set: snapshot {snap.delivery_id} ({snap.snapshot_time:%Y-%m-%d %H:%M:%SZ}) + events")
        frame = candidate_set_frame(
            snap.objects(spark, parallelism),
            snap.snapshot_time,
            self.events(spark, parallelism),
            self.swept(spark, parallelism),
        )
        return Candidates(frame, None)
