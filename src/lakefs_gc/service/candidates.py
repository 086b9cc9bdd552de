"""Where a cycle's candidate set comes from: the service's tables and its own sweeps.

:class:`~lakefs_gc.spark.mark.sources.candidate_set.CandidateSetSource` needs three inputs per repository;
this module finds them in the service's state:

* the snapshot: the newest delivery the inventory stream recorded for the repository in the
  candidate table (a delivery that routed none of its rows to the repository is no snapshot of
  it: it may be another bucket's);
* the events: the event table's rows of the repository;
* our sweeps: the ``swept/`` reports of the marks the service swept after that snapshot, with the
  time each sweep ended (what they deleted is gone, whether or not the store sends an event).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from typing import TYPE_CHECKING

from lakefs_gc.service.records import CycleRecords
from lakefs_gc.spark.ingest.inventory.table import CandidateTable, candidates_frame, ingested_deliveries
from lakefs_gc.spark.mark.sources.candidate_set import CandidateSetSource, Snapshot, with_content_md5
from lakefs_gc.spark.mark.sources.listing import ListingSource
from lakefs_gc.spark.report.layout import ReportDir
from lakefs_gc.spark.runtime.frames import local_frame
from lakefs_gc.spark.sweep.resume import deleted_addresses
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: (spark, parallelism, repository) -> the repository's routed events (EVENT_DDL)
EventsOf = Callable[["SparkSession", int, str], "DataFrame"]


@dataclass(frozen=True)
class CandidateSets:
    """Builds each cycle's :class:`CandidateSetSource` from the service's state."""

    options: StorageOptions
    table: CandidateTable | None  # None: no inventory configured
    events: EventsOf | None  # None: no event source configured
    #: carry each snapshot row's proof of content (``gc.trust_checksums``: only the identity-twin
    #: guard uses it, and deriving it is one more pass of the snapshot's rows through Python)
    evidence: bool = False

    def source(
        self, repository: str, namespace: StorageLocation, records: CycleRecords
    ) -> CandidateSetSource:
        snapshot = self._snapshot(repository)
        since = snapshot.snapshot_time if snapshot else None
        return CandidateSetSource(
            repository,
            snapshot,
            ListingSource(namespace, self.options),
            events=lambda spark, p: self._events(spark, p, repository),
            swept=lambda spark, p: self._swept(spark, p, namespace, records, since),
        )

    def newest_snapshot(self, repository: str) -> Snapshot | None:
        """The repository's newest ingested snapshot (None: no inventory, or none yet)."""
        return self._snapshot(repository)

    def _snapshot(self, repository: str) -> Snapshot | None:
        if self.table is None:
            return None
        mine = [
            d
            for d in ingested_deliveries(self.table)
            if d.status == "ingested" and d.snapshot_time and d.repositories.get(repository)
        ]
        if not mine:
            return None
        newest = max(mine, key=lambda d: (d.snapshot_time or "", d.seq))
        table, evidence = self.table, self.evidence

        def objects(spark: SparkSession, parallelism: int) -> DataFrame:
            from pyspark.sql import functions as F

            frame = candidates_frame(spark, table, [newest], parallelism=parallelism)
            mine = frame.filter(F.col("repository") == repository)
            return with_content_md5(mine) if evidence else mine.select("address", "size", "last_modified")

        assert newest.snapshot_time is not None
        return Snapshot(newest.id, datetime.fromisoformat(newest.snapshot_time), objects)

    def _events(self, spark: SparkSession, parallelism: int, repository: str) -> DataFrame:
        if self.events is None:
            from lakefs_gc.events.model import EVENT_DDL

            return local_frame(spark, [], EVENT_DDL)
        return self.events(spark, parallelism, repository)

    def _swept(
        self,
        spark: SparkSession,
        parallelism: int,
        namespace: StorageLocation,
        records: CycleRecords,
        since: datetime | None,
    ) -> DataFrame | None:
        from pyspark.sql import functions as F

        frames = []
        for _, mark in records.marks():
            if mark.sweep != "done" or mark.swept is None or mark.mark_id is None:
                continue
            swept_time = datetime.fromisoformat(mark.swept)
            if since is not None and swept_time <= since:
                continue  # the snapshot was taken after that sweep: it does not list what it deleted
            report = ReportDir(namespace, mark.mark_id, self.options)
            deleted = deleted_addresses(spark, report, parallelism=parallelism)
            if deleted is not None:
                frames.append(deleted.withColumn("swept_time", F.lit(swept_time)))
        return reduce(lambda a, b: a.unionByName(b), frames) if frames else None
