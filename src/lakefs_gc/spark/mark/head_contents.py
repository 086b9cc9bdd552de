"""One reading of the HEAD ranges, for the classification and the identity-twin guard together.

The guard (:mod:`.twins`) must know, for every marked object, whether some entry of a branch HEAD
may be its identity twin: an entry of its size whose bytes are not proven different
(:mod:`.twin_evidence`). Reading the HEAD trees for that alone decoded again ranges the
classification had just decoded: at the bottom line (1,000 HEADs, 23,217 HEAD ranges of the
29,516 the classification reads, 172.9M entries) ~10 of the mark's 38 minutes. When the mark has
content evidence, the classification reads every HEAD range with its entries' contents instead
(:func:`lakefs_gc.spark.mark.references.range_references`: size, address and recorded checksum,
no path), and that reading is kept (persisted) for the guard. Its first question, which marked
objects have a possible twin at all, and how many stats each size would cost, is answered from it
(:func:`head_keys`: each entry's contents carry the number of branch HEADs that hold it); the
trees are read again only for the sizes it then resolves by stats (their entries' paths), and
not at all when it resolves none. The service's marks, which keep the ranges in a cache rather
than read them, take the same contents from the cache's HEAD entries
(:meth:`lakefs_gc.spark.mark.range_cache.heads.CachedHeadTrees.contents`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from lakefs_gc.gc.retention import CommitGraph
from lakefs_gc.spark.mark.head_trees import head_metaranges
from lakefs_gc.spark.mark.twin_evidence import entry_keys, of_sizes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def heads_to_read(graph: CommitGraph, metaranges: Collection[str]) -> dict[str, int] | None:
    """The HEAD metaranges, each with the number of branches whose HEAD it is, for the
    classification to read their ranges with the entries' contents; None when a HEAD is not among
    the ``metaranges`` it reads (lakeFS left a HEAD out of its export, and the cross-check's
    reading adds it): the guard then reads the trees itself, as without evidence."""
    heads = head_metaranges(graph)
    if not heads or not set(heads) <= set(metaranges):
        return None
    return {metarange: len(branches) for metarange, branches in heads.items()}


def split_references(references: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(addresses, contents)`` of :func:`~lakefs_gc.spark.mark.references.range_references`'
    rows: every address the ranges reference (the classification's), and ``address, size,
    checksum, heads`` of the HEAD entries (the guard's)."""
    from pyspark.sql import functions as F

    addresses = references.where(F.col("address").isNotNull()).select("address")
    contents = references.where(F.col("size").isNotNull()).select("address", "size", "checksum", "heads")
    return addresses, contents


def head_keys(sizes: DataFrame, contents: DataFrame, objects: DataFrame | None) -> DataFrame:
    """``(size, key, heads)``: the content keys of the HEAD entries of ``sizes`` (the marked
    objects' distinct sizes, column ``size``: :func:`~lakefs_gc.spark.mark.twin_evidence.marked_sizes`)
    (:func:`~lakefs_gc.spark.mark.twin_evidence.entry_keys`: an entry's checksum when its own
    object's bytes are proven to have it as MD5, else null), from :func:`split_references`'
    ``contents``, each with the (branch, path) pairs that hold entries of that size and key.
    Which marked objects may have a twin, and what resolving each size costs, depend on nothing
    else (:func:`~lakefs_gc.spark.mark.twin_evidence.exposed`,
    :func:`~lakefs_gc.spark.mark.twins.plan_weighted`)."""
    from pyspark.sql import functions as F

    # broadcast: a filter on the HEAD entries (177.6M at the bottom line through the range
    # cache) rather than a shuffle of them all; the sizes are at most the marked objects'
    sizes = F.broadcast(sizes)
    sized = contents.join(sizes, "size", "left_semi")
    # an object is an entry of many HEAD ranges (97.7M entries of 11.6M objects at the bottom
    # line): summed per object before its lookup, whose key depends on nothing else
    sized = sized.groupBy("address", "size", "checksum").agg(F.sum("heads").alias("heads"))
    keyed = entry_keys(sized, of_sizes(objects, sizes), columns=("size", "heads"))
    return keyed.groupBy("size", "key").agg(F.sum("heads").alias("heads"))
