"""A cache of metarange and range contents by id, so that periodic marks read only what is new.

lakeFS names metaranges and ranges by the hash of their contents (docs/formats/lakefs-ranges.md,
"Ranges and metaranges"): what a metarange or a range holds never changes
(:mod:`lakefs_gc.spark.sweep.revalidate` relies on the same).
A service marking a repository every few minutes therefore keeps, between cycles, the range ids of
each metarange and the normalised addresses of each range; a cycle then asks lakeFS only for the
metaranges and ranges its new commits brought. The rest is read from local parquet on the
executors: no lakeFS call, no SSTable parsing.

Layout, in a directory the service owns (``<state>/range-cache/<repository>/``) on any store
``pyarrow.fs`` reaches, which every executor must see (on a cluster: an object store)::

    metaranges/part-<gen>-<uuid>.parquet           metarange_id, range_id  (null range: empty metarange)
    ranges/part-<gen>-b<bucket>-<uuid>.parquet     range_id, address       (null address: empty range)
    entries/part-<gen>-b<bucket>-<uuid>.parquet    range_id, path, size, address, checksum
                                                   (HEAD ranges only, :mod:`.heads`: written
                                                   with the addresses or by the guard)
    committed/part-<gen>-b<bucket>-<uuid>.parquet  address, count  (every address the active ranges
                                                   hold, once: :mod:`.committed`; its buckets by address)
    committed/ranges-<gen>-<uuid>.parquet          range_id        (the ranges it counts)
    _gen/<gen:08d>.json                            the generation record: every part in use

A cycle writes first, then reads: one job reads the new metaranges into new parts, one reads the
new ranges into new parts (each new range is read from lakeFS once), then the driver writes the
next generation's record; the frames it returns read only parts that record lists. Ranges are
spread over buckets (crc32 of the id, computed by Spark), so that a task finds the cached ranges
of its own buckets without a join over every cached address, and addresses never pass through
the driver. A part's new ranges are written in id order, so that a lookup of a few ranges (the
retained ones, the guard's) reads only the row groups whose id statistics may hold them.
Executor tasks write their own parts (fresh names per attempt) and return a status row; the
record (written whole, under a new name) is written only after the job succeeded, and only the
newest record is used. Parts it does not list (a killed cycle, an attempt that lost, a rewrite's
leftovers) are deleted when the next cycle opens the cache.

Use::

    cache = RangeCache.for_repository(state_dir, repository)
    result = mark_run(spark, params, refs, range_cache=cache)
    result.summary["range_cache"]  # metaranges_cached/_read, ranges_cached/_read/_evicted, generation

Fail closed (docs/invariants.md, invariant 4): a record that cannot be read, a listed part that is missing,
unreadable or holds another number of rows than recorded, and an id that the cache should hold
but does not, all raise :class:`RangeCacheError` naming the file; never "nothing referenced".
Deleting the directory between cycles is always safe: the next cycle rebuilds it.

One cycle at a time per directory: a concurrent cycle's clean-up may delete parts another is
reading; that one then fails (closed), it never marks wrongly.

Bounded growth: a bucket is rewritten to the ranges the cycle needs when more than half of the
ranges it holds are not needed any more, or when it has grown to ``MAX_BUCKET_PARTS`` parts;
a bucket no needed range falls in is dropped. The metarange level likewise (parts holding no
needed metarange are dropped; the rest is rewritten past half unneeded or ``MAX_METARANGE_PARTS``).
Each part's record says the newest generation whose mark needed it (``used``), so that the byte cap
(:mod:`.retention`, run before each mark) drops what the last mark did not need first, then the
least recently used.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lakefs_gc.errors import ConfigError, GcError
from lakefs_gc.lakefs.settings import LakeFSConnection
from lakefs_gc.spark.mark.range_cache.committed import committed_addresses, update_committed
from lakefs_gc.spark.mark.range_cache.committed_lookup import CommittedLookup
from lakefs_gc.spark.mark.range_cache.generation import FORMAT, Generation
from lakefs_gc.spark.mark.range_cache.levels import _bucketed, _update_ranges, range_addresses
from lakefs_gc.spark.mark.range_cache.lookups import _RangeFlags
from lakefs_gc.spark.mark.range_cache.tasks import (
    COMMITTED_DIR,
    ENTRY_DIR,
    EVICT_FRACTION,
    GEN_DIR,
    META_DIR,
    META_STATUS,
    RANGE_DIR,
    Part,
    RangeCacheError,
    _MetarangeLookup,
    _MetarangeWriter,
    _Store,
)
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_log = logging.getLogger(__name__)


DEFAULT_BUCKETS = 256
MAX_METARANGE_PARTS = 64


class RangeCache:
    """The cache directory of one repository (see the module docstring)."""

    def __init__(self, root: Path | str | StoreDirectory, *, buckets: int = DEFAULT_BUCKETS) -> None:
        if buckets < 1:
            raise ConfigError(f"a range cache needs at least one bucket, not {buckets}")
        self.directory = root if isinstance(root, StoreDirectory) else StoreDirectory.of(root)
        #: where the cache is: a local directory, or the URI of one on an object store
        self.root: Path | str = self.directory.local_path if self.directory.is_local else self.directory.uri()
        self.buckets = buckets  # for a new cache; an existing one keeps its own

    @classmethod
    def for_repository(
        cls, state_dir: Path | str | StoreDirectory, repository: str, *, buckets: int = DEFAULT_BUCKETS
    ) -> RangeCache:
        state = state_dir if isinstance(state_dir, StoreDirectory) else StoreDirectory.of(state_dir)
        return cls(state.sub(f"range-cache/{repository}"), buckets=buckets)

    def hint(self) -> str:
        return f"delete the range cache directory {self.root} to rebuild it"

    def store(self) -> _Store:
        return _Store(self.directory, self.hint())

    def drop(self) -> None:
        """Delete the whole cache (the next mark rebuilds it)."""
        self.directory.delete_all()

    def open(self, repository: str, storage_namespace: str) -> Generation:
        """The newest generation, after deleting every file it does not list; a part it lists
        that is missing raises. A record of another repository, namespace or format is dropped."""
        if self.directory.is_local:
            for sub in (META_DIR, RANGE_DIR, ENTRY_DIR, COMMITTED_DIR, GEN_DIR):
                (self.directory.local_path / sub).mkdir(parents=True, exist_ok=True)
        number, current = self._latest()
        owner = (repository, storage_namespace)
        if current is not None and (current.repository, current.storage_namespace) != owner:
            _log.warning("range cache %s is of %s: starting afresh", self.root, current.storage_namespace)
            current = None
        keep = current.files() | {self._record(number)} if current is not None else set()
        self._clean(keep)
        current = current or Generation(number, repository, storage_namespace, self.buckets)
        for name in sorted(current.files()):
            if not self.directory.exists(name):
                raise RangeCacheError(
                    f"range cache part {self.directory.uri(name)} is missing (listed by "
                    f"{self.directory.uri(self._record(number))}); {self.hint()}"
                )
        return current

    def commit(self, generation: Generation) -> None:
        """Write the record of ``generation`` atomically, after all of its parts were written."""
        self.directory.write(self._record(generation.number), generation.to_json().encode("utf-8"))

    def _latest(self) -> tuple[int, Generation | None]:
        """The newest record's number, and its generation (None: none, or of another format)."""
        stems = [n[: -len(".json")] for n in self.directory.names(GEN_DIR) if n.endswith(".json")]
        records = sorted(s for s in stems if s.isdigit())
        if not records:
            return 0, None
        number = int(records[-1])
        path = self.directory.uri(self._record(number))
        try:
            data = self.directory.read(self._record(number))
            body = json.loads((data or b"").decode("utf-8"))
            generation = Generation.from_json(body) if body.get("format") == FORMAT else None
        except (GcError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise RangeCacheError(f"range cache record {path} cannot be read: {e}; {self.hint()}") from e
        if generation is not None and generation.number != number:
            raise RangeCacheError(
                f"range cache record {path} says generation {generation.number}; {self.hint()}"
            )
        return number, generation

    def latest(self) -> Generation | None:
        """The newest generation as its record says (None: an empty cache, or another format)."""
        return self._latest()[1]

    def replace(self, generation: Generation) -> None:
        """Make ``generation`` (a subset of the newest one's parts) the newest, and delete every
        file it does not list (retention: no mark may be reading the cache meanwhile)."""
        self.commit(generation)
        self._clean(generation.files() | {self._record(generation.number)})

    def part_sizes(self, generation: Generation) -> dict[str, int]:
        """Bytes of each file ``generation`` lists (one metadata request per file)."""
        fs, base = self.directory.filesystem()
        files = sorted(generation.files())
        infos = fs.get_file_info([f"{base}/{f}" for f in files]) if files else []
        return {f: int(i.size or 0) for f, i in zip(files, infos, strict=True)}

    def _clean(self, keep: set[str]) -> None:
        for sub in (META_DIR, RANGE_DIR, ENTRY_DIR, COMMITTED_DIR, GEN_DIR):
            for name in self.directory.names(sub):
                if f"{sub}/{name}" not in keep:
                    self.directory.delete(f"{sub}/{name}")

    @staticmethod
    def _record(number: int) -> str:
        return f"{GEN_DIR}/{number:08d}.json"


def committed_frames_cached(
    spark: SparkSession,
    cache: RangeCache,
    *,
    connection: LakeFSConnection,
    repository: str,
    storage_namespace: str,
    namespace: StorageLocation,
    options: StorageOptions,
    metarange_ids: Sequence[str],
    parallelism: int,
    retained_ids: Sequence[str] = (),
    heads: Collection[str] = (),
) -> CachedCommitted:
    """:func:`lakefs_gc.spark.mark.references.committed_frames` through ``cache``, plus its stats;
    ``retained_ids``: metaranges whose addresses are returned apart (``retained``: those of
    their ranges that ``metarange_ids`` lack), the ones only the retention cross-check keeps.
    ``heads``: the branch HEADs' metaranges, whose new ranges are read with their entries, into
    the HEAD entries level too (:mod:`.heads`), so that the guard does not read them again.

    Two jobs run here: one reads the new metaranges into the cache, one reads the new ranges
    into it; the new generation's record is then written. The returned frames read only the
    cache (lazily: its parts stay until the next cycle opens the cache), so both lists go
    through this one update: a second would clean parts the first one's frames still read.
    """
    reader = MetadataReader(connection, repository, storage_namespace, namespace, options)
    current = cache.open(repository, storage_namespace)
    main = list(dict.fromkeys(metarange_ids))
    needed = list(dict.fromkeys([*main, *retained_ids]))
    metaranges, stats = _update_metaranges(spark, cache, reader, current, needed, parallelism)
    # read once: the update below and every frame returned take their range ids from it
    only = set(needed) - set(main)
    ids = _range_ids(spark, cache, metaranges, needed, parallelism, only=only, heads=set(heads))
    ids = ids.localCheckpoint()
    range_ids = ids.select("id")
    bucketed = _bucketed(ids.select("id", "head"), current.buckets, parallelism)
    ranges, range_stats, entries = _update_ranges(cache.store(), reader, current, bucketed)
    stats.update(range_stats)
    generation = replace(
        current, number=current.number + 1, metaranges=metaranges, ranges=ranges, entries=entries
    )
    main_ids = ids.where("main").select("id") if only else range_ids
    level, level_stats = update_committed(spark, cache.store(), current, generation, main_ids, parallelism)
    stats.update(level_stats)
    generation = _recorded(cache, current, replace(generation, committed=level))
    assert generation.committed is not None
    stats["generation"] = generation.number
    stats["committed_addresses"] = sum(p.rows for p in generation.committed.buckets.values())
    _log.info("%s: range cache %s: %s", repository, cache.root, stats)
    addresses = committed_addresses(spark, cache.store(), generation.committed, parallelism)
    lookup = CommittedLookup(cache.store(), generation.committed, generation.buckets, addresses)
    if len(needed) == len(main):
        return CachedCommitted(range_ids, lookup, None, stats)
    only_ids = ids.where("not main").select("id")
    only_retained = range_addresses(cache.store(), generation, only_ids, parallelism)
    return CachedCommitted(range_ids, lookup, only_retained, stats)


@dataclass(frozen=True)
class CachedCommitted:
    """What :func:`committed_frames_cached` returns: lazy frames over the cache, and its stats."""

    range_ids: DataFrame  # ``id``: the ranges of every metarange asked for
    #: those of ``metarange_ids``' ranges, each once (``addresses``: ``ADDRESS_SCHEMA``), also as
    #: the classification's lookup
    lookup: CommittedLookup
    retained: DataFrame | None  # those of the ranges only ``retained_ids`` hold; None: none asked for
    stats: dict[str, int]


def _recorded(cache: RangeCache, current: Generation, generation: Generation) -> Generation:
    """``generation`` recorded as the newest, or ``current`` when it differs only in numbering."""
    changed = _buckets(generation) != _buckets(current) or generation.entries != current.entries
    if generation.shape() == current.shape() and not changed and generation.committed == current.committed:
        return current
    assert generation.committed is not None
    generation = replace(generation, committed=generation.committed.used_by(generation.number))
    cache.commit(generation)
    return generation


def _buckets(generation: Generation) -> dict[int, tuple[str, ...]]:
    return {b: tuple(p.file for p in ps) for b, ps in generation.ranges.items()}


def plan_metaranges(
    listed: Sequence[Part], needed: Sequence[str], *, evict: bool = True
) -> tuple[list[tuple[str, str | None]], tuple[Part, ...]]:
    """The work of a cycle on the metarange level: ``(metarange id, part to copy it from or None
    to read it from lakeFS)`` items, and the listed parts kept as they are (``evict`` false: all
    of them, and only what is missing is read: a read-ahead's, :mod:`.ahead`)."""
    wanted = set(needed)
    where = {m: p.file for p in reversed(listed) for m in p.ids}
    if not evict:
        return [(m, None) for m in needed if m not in where], tuple(listed)
    kept = tuple(p for p in listed if wanted.intersection(p.ids))
    held = sum(len(p.ids) for p in kept)
    hits = [m for m in needed if m in where]
    items: list[tuple[str, str | None]] = [(m, None) for m in needed if m not in where]
    if held - len(hits) > EVICT_FRACTION * held or len(kept) > MAX_METARANGE_PARTS:
        return items + [(m, where[m]) for m in hits], ()
    return items, kept


def _update_metaranges(
    spark: SparkSession,
    cache: RangeCache,
    reader: MetadataReader,
    current: Generation,
    needed: list[str],
    parallelism: int,
    *,
    evict: bool = True,
) -> tuple[tuple[Part, ...], dict[str, int]]:
    items, kept = plan_metaranges(current.metaranges, needed, evict=evict)
    read = sum(1 for _, source in items if source is None)
    parts: list[Part] = []
    if items:
        tasks = task_frame(spark, items, "id string, source string", parallelism)
        listed = {p.file: p for p in current.metaranges}
        writer = _MetarangeWriter(cache.store(), reader, current.number + 1, listed)
        for row in tasks.mapInArrow(on_executor(writer), META_STATUS).collect():
            parts.append(Part(row["file"], int(row["rows"]), ids=tuple(row["ids"])))
    stats = {"metaranges_cached": len(needed) - read, "metaranges_read": read}
    used = current.used_by_update(evict=evict)
    if evict:  # each part kept holds a needed metarange; a read-ahead keeps the parts as they were
        kept = tuple(replace(p, used=used) for p in kept)
    return (*kept, *(replace(p, used=used) for p in parts)), stats


def _range_ids(
    spark: SparkSession,
    cache: RangeCache,
    parts: tuple[Part, ...],
    needed: list[str],
    parallelism: int,
    *,
    only: set[str],
    heads: set[str],
) -> DataFrame:
    """The distinct range ids (``id``) of ``needed``, read from the cache parts, each with
    ``main``: whether a metarange outside ``only`` lists it (``only``: the retained metaranges,
    whose other ranges are told apart), and ``head``: whether one of ``heads`` does."""
    from pyspark.sql import functions as F

    where = {m: p.file for p in reversed(parts) for m in p.ids}
    missing = [m for m in needed if m not in where]
    if missing:  # the metarange job wrote them all, or failed
        raise RangeCacheError(f"range cache {cache.root} lacks metarange {missing[0]} it has just read")
    by_file: dict[str, list[str]] = defaultdict(list)
    for m in needed:
        by_file[where[m]].append(m)
    tasks = task_frame(spark, sorted(by_file.items()), "file string, ids array<string>", parallelism)
    lookup = _MetarangeLookup(cache.store(), {p.file: p for p in parts}, True)
    flags = _RangeFlags(lookup, tuple(sorted(only)), tuple(sorted(heads)))
    flagged = tasks.mapInArrow(on_executor(flags), "id string, main boolean, head boolean")
    return flagged.groupBy("id").agg(F.max("main").alias("main"), F.max("head").alias("head"))
