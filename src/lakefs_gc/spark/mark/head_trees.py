"""Where the identity-twin guard reads the branch HEAD trees (:mod:`.twins`): which range ids
each HEAD metarange has, and every entry of those ranges with its content evidence.

:class:`LakeFSHeadTrees` reads them from lakeFS, one ``getMetaRange``/``getRange`` call and one
file read each on the executors; the service reads them through its range cache instead
(:class:`lakefs_gc.spark.mark.range_cache.heads.CachedHeadTrees`). Every entry is read: handing
the readers the marked objects' sizes to skip the others was tried at the bottom line (1,000
HEADs, 23,217 ranges, 172.9M entries, half of them of a marked size): 6 % off the reading, for
a set of 650K sizes on the driver (+220 MiB) and every worker, so Spark filters on size instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from lakefs_gc.gc.retention import CommitGraph
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.spark.mark.references import RANGE_READER_SOURCE, MetadataReader
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.storage.filesystems import filesystem_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_TREE = pa.schema([("metarange", pa.string()), ("id", pa.string())])
_ENTRIES = pa.schema(
    [("id", pa.string()), ("path", pa.string()), ("size", pa.int64()),
     ("address", pa.string()), ("checksum", pa.string())]
)  # fmt: skip


#: the rows :meth:`HeadTrees.entries` gives
HEAD_ENTRIES = "id string, path string, size long, address string, checksum string"
#: the rows of the HEAD entries' contents, without their paths (the range cache's
#: :meth:`~lakefs_gc.spark.mark.range_cache.heads.CachedHeadTrees.contents` reads them so)
HEAD_CONTENTS = "id string, size long, address string, checksum string"


class HeadTrees(Protocol):
    """Where the guard reads the HEAD trees from: lakeFS (:class:`LakeFSHeadTrees`), or the
    service's range cache (:class:`lakefs_gc.spark.mark.range_cache.heads.CachedHeadTrees`)."""

    def tree(self, spark: SparkSession, metaranges: list[str], *, parallelism: int) -> DataFrame:
        """``(metarange, id)``: the range ids of each metarange."""
        ...

    def entries(self, range_ids: DataFrame, *, parallelism: int) -> DataFrame:
        """:data:`HEAD_ENTRIES`: every entry of each range of ``range_ids`` (column ``id``), with
        its ``address`` (namespace-relative, null outside it) and recorded ``checksum``, the
        content evidence."""
        ...


@dataclass(frozen=True)
class LakeFSHeadTrees:
    """The HEAD trees read from lakeFS: one ``getMetaRange``/``getRange`` call and one file read each."""

    reader: MetadataReader

    def tree(self, spark: SparkSession, metaranges: list[str], *, parallelism: int) -> DataFrame:
        heads = task_frame(spark, [(m,) for m in metaranges], "metarange string", parallelism)
        return heads.mapInArrow(on_executor(_HeadRanges(self.reader)), "metarange string, id string")

    def entries(self, range_ids: DataFrame, *, parallelism: int) -> DataFrame:
        return range_ids.repartition(parallelism).mapInArrow(
            on_executor(_RangeEntries(self.reader)),
            HEAD_ENTRIES,
        )


def head_metaranges(graph: CommitGraph) -> dict[str, list[str]]:
    """Metarange of every branch HEAD → the branches whose HEAD has that tree."""
    heads: dict[str, list[str]] = {}
    for branch, head in sorted(graph.branches.items()):
        metarange = graph.metaranges.get(head, "")
        if metarange:
            heads.setdefault(metarange, []).append(branch)
    return heads


class _HeadRanges:
    """Per partition: ``(metarange, range id)`` of each HEAD metarange."""

    def __init__(self, reader: MetadataReader) -> None:
        self.reader = reader

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = filesystem_for(self.reader.namespace, self.reader.options)
        with LakeFSClient(self.reader.connection, source=RANGE_READER_SOURCE) as client:
            for batch in batches:
                for metarange in batch.column("metarange").to_pylist():
                    ids = self.reader.read_metarange(client, fs, metarange)
                    # typed: a HEAD with no ranges (an empty branch) gives an empty batch, whose
                    # inferred null columns the task's writer refuses after a batch of strings
                    tree = {"metarange": [metarange] * len(ids), "id": ids}
                    yield pa.RecordBatch.from_pydict(tree, schema=_TREE)


class _RangeEntries:
    """Per partition: ``(range id, path, size, address, checksum)`` of every entry of each range."""

    def __init__(self, reader: MetadataReader) -> None:
        self.reader = reader

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        r = self.reader
        fs, _ = filesystem_for(r.namespace, r.options)
        with LakeFSClient(r.connection, source=RANGE_READER_SOURCE) as client:
            for batch in batches:
                for range_id in batch.column("id").to_pylist():
                    rows = list(r.read_head_entries(client, fs, range_id))
                    yield pa.RecordBatch.from_pydict(
                        {
                            "id": [range_id] * len(rows),
                            "path": [e[0] for e in rows],
                            "size": [e[1] for e in rows],
                            "address": [e[2] for e in rows],
                            "checksum": [e[3] for e in rows],
                        },
                        schema=_ENTRIES,
                    )
