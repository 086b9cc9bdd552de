"""The identity-twin guard's content evidence as Spark columns (the rule: ``gc.twins.ruled_out``).

Pairing a marked object with every HEAD entry of its size costs a stat per (branch, path); a pair
whose two objects' bytes are *proven* different needs none (docs/formats/lakefs-export-hazards.md,
"Ruling twins out by content"). The proofs arrive as columns: the marked objects' ``md5`` (from an
S3 inventory's ETags under ``NOT-SSE``/``SSE-S3``, null otherwise) and, per HEAD entry, its recorded
``checksum`` and ``address``, whose own object's ``md5`` is looked up among the candidates. Entries
are then reduced to the *needed* ones, and the guard's plan and pairs (:mod:`.twins`) are built
from those: without any proof every entry is needed, and the guard is what it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakefs_gc.spark.mark.sources.base import CONTENT_MD5

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def marked_with_evidence(
    garbage: DataFrame, candidates: DataFrame, *, trusted: bool
) -> tuple[DataFrame, DataFrame | None]:
    """The objects the mark would delete (``garbage``, the classification's garbage rows:
    ``address, size``, with ``md5`` when the candidates' source proves it and the checksums are
    ``trusted``: ``gc.trust_checksums``) and ``address, size, md5`` of every one of ``candidates``
    (None: no evidence)."""
    if not trusted or CONTENT_MD5 not in garbage.columns:
        return garbage.select("address", "size"), None
    return garbage.select("address", "size", CONTENT_MD5), candidates.select("address", "size", CONTENT_MD5)


def with_md5(marked: DataFrame) -> DataFrame:
    """``address, size, md5`` of the marked objects (``md5`` null where the source proved none)."""
    from pyspark.sql import functions as F

    md5 = F.col(CONTENT_MD5) if CONTENT_MD5 in marked.columns else F.lit(None).cast("string")
    return marked.select("address", "size", md5.alias("md5"))


def entry_keys(
    entries: DataFrame, objects: DataFrame | None, *, columns: tuple[str, ...] = ("id", "path", "size")
) -> DataFrame:
    """``(*columns, key)`` (by default ``(id, path, size, key)``): each HEAD entry with its proven
    content MD5 (:func:`lakefs_gc.gc.twins.entry_key`: its checksum, when that is the MD5 its own
    object's bytes are proven to have), else a null key (any marked object of its size may be
    its twin)."""
    from pyspark.sql import functions as F

    if objects is None or CONTENT_MD5 not in objects.columns:
        return entries.select(*columns, F.lit(None).cast("string").alias("key"))
    proven = objects.where(F.col(CONTENT_MD5).isNotNull()).select(
        "address", F.col(CONTENT_MD5).alias("_object_md5")
    )
    key = F.when(F.lower(F.col("checksum")) == F.col("_object_md5"), F.col("_object_md5"))
    return entries.join(proven, "address", "left").select(*columns, key.alias("key"))


def marked_sizes(marked: DataFrame) -> DataFrame:
    """The distinct sizes (column ``size``) of ``marked``, computed once: the guard filters the HEAD
    entries by them (:func:`~lakefs_gc.spark.mark.head_contents.head_keys`), and a range cache's
    lookup of those entries filters by them as it reads
    (:meth:`~lakefs_gc.spark.mark.range_cache.heads.CachedHeadTrees.contents`)."""
    return marked.select("size").distinct().localCheckpoint()


def of_sizes(objects: DataFrame | None, sizes: DataFrame) -> DataFrame | None:
    """The candidates whose MD5 a HEAD entry of one of ``sizes`` may be proven by: those of the
    same sizes (an entry's own object has the entry's size; one that had not would only leave
    the entry unproven, which never releases anything). Halves the lookup's join at scale."""
    if objects is None or "size" not in objects.columns:
        return objects
    return objects.join(sizes, "size", "left_semi")


def needed_entries(marked: DataFrame, keyed: DataFrame) -> DataFrame:
    """The HEAD entries (rows of ``keyed``, with its columns: ``size``, ``key`` and any others) some
    marked object of their size may be a twin of (the rest are ruled out):
    an entry without a key, one of a size with a marked object without an MD5, or one whose key is
    some marked object's MD5 (:func:`lakefs_gc.gc.twins.ruled_out`)."""
    from pyspark.sql import functions as F

    unknown = marked.groupBy("size").agg(F.max(F.col("md5").isNull().cast("int")).alias("_unknown"))
    md5s = marked.where(F.col("md5").isNotNull()).select("size", F.col("md5").alias("key")).distinct()
    matching = md5s.withColumn("_match", F.lit(True))
    joined = keyed.join(unknown, "size").join(matching, ["size", "key"], "left")
    need = F.col("key").isNull() | (F.col("_unknown") == 1) | F.col("_match").isNotNull()
    return joined.where(need).select(*keyed.columns)


def pair_condition() -> Column:
    """The pair predicate of :func:`lakefs_gc.gc.twins.ruled_out`, negated: not both MD5s proven
    and different (columns ``md5`` of the object, ``key`` of the entry)."""
    from pyspark.sql import functions as F

    return F.col("md5").isNull() | F.col("key").isNull() | (F.col("md5") == F.col("key"))


def pairing(marked: DataFrame, needed: DataFrame, head_sizes: DataFrame | None = None) -> DataFrame:
    """``address, size, paired, head_sized`` of every marked object, in one pass and without
    building any pair: ``paired`` when it has at least one twin pair with the ``needed`` HEAD
    entries (one without an MD5 has one with any needed entry of its size, one with an MD5 with a
    needed entry of its size that has no key or has its MD5); ``head_sized`` when a HEAD entry has
    its size (``head_sizes``' ``size``; default: the needed entries'). An object that is
    ``head_sized`` but not ``paired`` is one content evidence ruled out (:func:`pair_counts`).
    Each join adds at most one row to an object (one per size, one per size and MD5)."""
    from pyspark.sql import functions as F

    per_size = needed.groupBy("size").agg(F.max(F.col("key").isNull()).alias("_open"))
    same = (
        needed.where(F.col("key").isNotNull())
        .select("size", F.col("key").alias("md5"))
        .distinct()
        .withColumn("_same", F.lit(True))
    )
    flagged = marked.select("address", "size", "md5").join(per_size, "size", "left")
    flagged = flagged.join(same, ["size", "md5"], "left")
    has_entry = F.col("_open").isNotNull()
    paired = has_entry & (F.col("md5").isNull() | F.col("_open") | F.col("_same").isNotNull())
    if head_sizes is None:
        head_sized = has_entry
    else:
        flagged = flagged.join(head_sizes.select("size", F.lit(True).alias("_head")), "size", "left")
        head_sized = F.col("_head").isNotNull()
    return flagged.select("address", "size", paired.alias("paired"), head_sized.alias("head_sized"))


def pair_counts(flagged: DataFrame) -> tuple[int, tuple[int, int]]:
    """Of :func:`pairing`'s rows, in one Spark job: how many objects are paired, and the objects
    and bytes content evidence ruled out (of a HEAD entry's size, without a pair)."""
    from pyspark.sql import functions as F

    ruled_out = F.col("head_sized") & ~F.col("paired")
    row = flagged.agg(
        F.sum(F.col("paired").cast("long")),
        F.sum(ruled_out.cast("long")),
        F.sum(F.when(ruled_out, F.col("size"))),
    ).collect()[0]
    return int(row[0] or 0), (int(row[1] or 0), int(row[2] or 0))


def exposed(marked: DataFrame, needed: DataFrame) -> DataFrame:
    """``address`` of the marked objects that have at least one twin pair (:func:`pairing`)."""
    return pairing(marked, needed).where("paired").select("address")
