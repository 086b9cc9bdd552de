"""The candidates, read while lakeFS prepares the uncommitted dump.

lakeFS takes minutes to write the dump of a large staging area (1.7 min at the bottom-line
repository, bench/README.md), and the mark waits for it with the cluster idle. Reading the
candidates needs nothing from the dump, so :class:`CandidatePrefetch` reads them in that wait, on
a thread of its own: hash-partitioned by address (``spark.sql.shuffle.partitions`` rounded up to a
power of two: :func:`kept_partitions`), sorted within each partition, and kept (persisted). The
classification's joins then bring only the references to them, and the range cache's level flags
them in place (:class:`~lakefs_gc.spark.mark.range_cache.committed_lookup.CommittedLookup`); the
candidates are neither read nor shuffled nor sorted again.

Reading the candidates earlier takes nothing out of the mark's guarantees. The candidates are the
objects that exist and when they were written; what is live is decided by the references read
after the dump, as before (docs/invariants.md, invariants 1 and 2). An object written after the
reading is not a candidate, so it is kept; one deleted after it is a candidate a sweep finds gone.

Fail closed (invariant 4): an error of the reading is raised by :meth:`CandidatePrefetch.result`
in the mark, which then fails as it did when it read them in line. A mark that ends before it asks
for them (its dump refused, an error after it) cancels the reading and drops what was kept.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from lakefs_gc.spark.mark.sources.base import CandidateProvider, Candidates, Progress
from lakefs_gc.spark.runtime.background import BackgroundJobs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class CandidatePrefetch:
    """The candidates of ``source``, read on a thread from the moment it is created."""

    def __init__(
        self, spark: SparkSession, source: CandidateProvider, *, parallelism: int, say: Progress
    ) -> None:
        self._spark, self._source, self._parallelism, self._say = spark, source, parallelism, say
        self._found: Candidates | None = None
        self._kept: DataFrame | None = None
        self._error: BaseException | None = None
        self._jobs = BackgroundJobs(spark, self._read, name="candidates")
        self._jobs.start()  # last: ``_read`` uses everything above

    def result(self) -> Candidates:
        """The candidates, once read (their ``objects`` kept until :meth:`close`); the reading's error."""
        self._jobs.join()
        if self._error is not None:
            raise self._error
        assert self._found is not None
        return self._found

    def close(self) -> None:
        """Cancel a reading still running, wait for its thread, and drop the kept candidates."""
        self._jobs.close()
        with self._jobs.lock:
            kept, self._kept = self._kept, None
        if kept is not None:
            kept.unpersist()

    def _read(self) -> None:
        from pyspark import StorageLevel

        try:
            found = self._source.candidates(self._spark, parallelism=self._parallelism, say=self._say)
            partitions = kept_partitions(int(self._spark.conf.get("spark.sql.shuffle.partitions") or 1))
            # the joins' own partitioning and order: Spark shuffles only the references to it
            objects = found.objects.repartition(partitions, "address").sortWithinPartitions("address")
            kept = objects.persist(StorageLevel.MEMORY_AND_DISK)
            with self._jobs.lock:
                closed = self._jobs.closed
                if not closed:
                    self._kept = kept
            if closed:  # the mark ended before the reading began
                kept.unpersist()
                return
            count = kept.count()
            self._say(f"candidates read and kept for the classification: {count:,}")
            self._found = replace(found, objects=kept, partitions=partitions)
        except BaseException as e:  # raised by result(), in the mark
            self._error = e


def kept_partitions(shuffle_partitions: int) -> int:
    """The kept candidates' partition count: ``spark.sql.shuffle.partitions`` rounded up to a power
    of two, so that it divides the range cache's bucket count or is a multiple of it (256 by
    default: :class:`~lakefs_gc.spark.mark.range_cache.committed_lookup.CommittedLookup` then flags the
    candidates in place). The joins with the references use that count too."""
    return 1 << max(0, shuffle_partitions - 1).bit_length()
