"""What a mark reads while lakeFS prepares the uncommitted dump, each on a thread of its own.

The candidates (:mod:`.sources.prefetch`) and, with a range cache, the metaranges and ranges of
the newest commits (:mod:`.range_cache.ahead`). Neither decides what is live: their docstrings say
why the mark's guarantees are unchanged. The mark asks for each when it needs it, and closes both
however it ends (a reading still running is cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakefs_gc.gc.ports import CommitGraphReader
from lakefs_gc.spark.mark.range_cache.ahead import RangeCacheReadAhead
from lakefs_gc.spark.mark.range_cache.cache import RangeCache
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.spark.mark.sources.base import CandidateProvider, Candidates, Progress
from lakefs_gc.spark.mark.sources.prefetch import CandidatePrefetch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class DumpWait:
    """The readings a mark starts before it asks lakeFS for the dump."""

    candidates: CandidatePrefetch
    ranges: RangeCacheReadAhead | None

    @classmethod
    def start(
        cls,
        spark: SparkSession,
        source: CandidateProvider,
        *,
        parallelism: int,
        say: Progress,
        range_cache: RangeCache | None,
        reader: MetadataReader,
        graph: CommitGraphReader,
        now: datetime,
        heads: bool,
    ) -> DumpWait:
        """Start both readings (the ranges only with a ``range_cache``; ``heads``: HEAD ranges
        with their entries, as the mark's update would read them with content evidence)."""
        candidates = CandidatePrefetch(spark, source, parallelism=parallelism, say=say)
        if range_cache is None:
            return cls(candidates, None)
        ranges = RangeCacheReadAhead(
            spark, range_cache, reader, graph, now=now, heads=heads, parallelism=parallelism, say=say
        )
        return cls(candidates, ranges)

    def candidates_read(self) -> Candidates:
        """The candidates, once read; the reading's error."""
        return self.candidates.result()

    def ranges_read(self) -> dict[str, Any]:
        """Wait for the range read-ahead to end; what it read (empty: none, or it failed)."""
        return self.ranges.wait() if self.ranges is not None else {}

    def close(self) -> None:
        self.candidates.close()
        if self.ranges is not None:
            self.ranges.close()
