"""What is referenced, as DataFrames of namespace-relative ``address``: committed and staged.

* Committed: the active commits' metaranges are read on the executors (one lakeFS
  ``getMetaRange`` call and one file read each), their range ids de-duplicated by Spark, and each
  distinct range read once, also on the executors (``getRange`` resolves its location there, so
  the driver never makes one call per range). Addresses are normalised as lakeFS does
  (docs/formats/lakefs-ranges.md, "Committed addresses").
* Uncommitted: the parquet parts of lakeFS's dump, one task per part file.

Any failure (lakeFS error, missing or corrupt file) fails the task, hence the Spark job, hence the
mark: a reference that cannot be read is never read as "not referenced" (docs/invariants.md,
invariant 4).

:class:`LakeFSRefs` is the mark's (and the revalidation's) view of lakeFS: the API on the driver,
and what the executors need to open their own client.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import pyarrow as pa

from lakefs_gc.gc.ports import CommitGraphReader, RefsReader, StagedExport
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.exports import (
    ActiveCommits,
    read_commits_csv,
    read_uncommitted_file,
    uncommitted_files,
)
from lakefs_gc.lakefs.ranges import (
    committed_addresses_of_range,
    contents_of_range,
    head_entries_of_range,
    metadata_location,
    open_sstable,
)
from lakefs_gc.lakefs.settings import LakeFSConnection
from lakefs_gc.spark.mark.recent import RecentAddresses, RecentContents
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.sstable.addresses import ContentEntry, HeadEntry
from lakefs_gc.sstable.graveler import iter_metarange_range_keys
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation, parse_location

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame, SparkSession

    from lakefs_gc.spark.mark.algebra import AddressLookup

ADDRESS_SCHEMA = "address string"
#: :func:`range_references`' rows: an address, and for a HEAD entry's contents its size, recorded
#: checksum and ``heads``: how many branch HEADs hold entries of these contents (summed over them)
REFERENCES_SCHEMA = "address string, size long, checksum string, heads long"
KEYED_RANGE_SCHEMA = "id string, max_key binary, heads long"
_KEYED = pa.schema([("id", pa.string()), ("max_key", pa.binary()), ("heads", pa.int64())])
RANGE_READER_SOURCE = "range-reader"
_BATCH = 65_536


@dataclass(frozen=True)
class LakeFSRefs:
    """lakeFS as a mark reads it: ``api`` answers on the driver (one client per command, built at
    the edge); ``connection`` is what each executor task opens its own client with (clients are
    never pickled); ``storage`` reaches the namespace, where lakeFS writes its exports and ranges
    and the mark its report; ``graph`` reads the commit graph (cached by commit id, so keep one
    per client)."""

    api: RefsReader
    connection: LakeFSConnection
    storage: StorageOptions
    #: the commit graph for the retention cross-check (docs/invariants.md, invariant 6)
    graph: CommitGraphReader


def committed_frames(
    spark: SparkSession,
    *,
    connection: LakeFSConnection,
    repository: str,
    storage_namespace: str,
    namespace: StorageLocation,
    options: StorageOptions,
    metarange_ids: Sequence[str],
    parallelism: int,
    heads: Mapping[str, int] | None = None,
) -> Committed:
    """Distinct range ids of the metaranges, and their addresses; with ``heads`` (the branch
    HEADs' metaranges, among ``metarange_ids``, each with the number of branches whose HEAD it
    is), also how to read them with the HEAD entries' contents (:attr:`Committed.with_heads`).

    The range ids are read once, now: the addresses are read from them and the report records
    them (``ranges/``), and Spark would read every metarange again for each (at the bottom line,
    10,762 metaranges, that second reading was 89 s of the report)."""
    reader = MetadataReader(connection, repository, storage_namespace, namespace, options)
    keyed = range_ids_frame(spark, reader, metarange_ids, parallelism=parallelism, heads=heads)
    keyed = keyed.localCheckpoint()
    with_heads = range_references(reader, keyed, parallelism=parallelism) if heads else None
    return Committed(keyed.select("id"), range_addresses(reader, keyed, parallelism=parallelism), with_heads)


@dataclass(frozen=True)
class Committed:
    """What the active commits reference, as lazy frames: nothing is read until one is used."""

    range_ids: DataFrame  # ``id``: every distinct range id, read already
    addresses: DataFrame  # ``ADDRESS_SCHEMA``: the addresses of those ranges
    #: :data:`REFERENCES_SCHEMA`: the same addresses, read with the HEAD entries' contents
    #: (:mod:`lakefs_gc.spark.mark.head_contents`); None: not asked for
    with_heads: DataFrame | None = None
    #: ``ADDRESS_SCHEMA``: the addresses of the metaranges only the retention cross-check keeps
    #: (their range ids are in ``range_ids``; through the range cache, only those of their ranges
    #: the other metaranges lack: the classification counts what ``addresses`` holds first either
    #: way); None: there are none
    retained: DataFrame | None = None
    #: ``addresses`` holds each address once already (the range cache's committed-address level):
    #: the classification needs no ``distinct`` over it
    unique: bool = False
    #: the same addresses as a lookup the classification flags its rows with in place (the range
    #: cache's level); None: joined
    lookup: AddressLookup | None = None


def range_ids_frame(
    spark: SparkSession,
    reader: MetadataReader,
    metarange_ids: Sequence[str],
    *,
    parallelism: int,
    heads: Mapping[str, int] | None = None,
) -> DataFrame:
    """The distinct range ids (column ``id``) of the metaranges, each with its last key
    (``max_key``, the metarange's key for it) and how many branch HEADs hold it (``heads``: the
    sum of ``heads``' counts over the metaranges that list it, 0 without), each metarange read by
    one task."""
    from pyspark.sql import functions as F

    heads = heads or {}
    unique = list(dict.fromkeys(metarange_ids))  # a metarange listed twice would count its HEADs twice
    rows = [(m, heads.get(m, 0)) for m in unique]
    metaranges = task_frame(spark, rows, "id string, heads long", parallelism)
    ranges = metaranges.mapInArrow(on_executor(reader.range_ids), KEYED_RANGE_SCHEMA)
    if not heads:
        return ranges.dropDuplicates(["id"])
    return ranges.groupBy("id").agg(F.max("max_key").alias("max_key"), F.sum("heads").alias("heads"))


def range_addresses(reader: MetadataReader, range_ids: DataFrame, *, parallelism: int) -> DataFrame:
    """The addresses (``ADDRESS_SCHEMA``) of the ranges ``range_ids`` (columns ``id, max_key``:
    :func:`range_ids_frame`'s rows) lists.

    Every task reads a span of keys in key order: the versions of one span of paths (each commit
    that touches a range writes it again) are read one after the other and share most of their
    addresses, so a task leaves out what the last few ranges gave already
    (:class:`RecentAddresses`) and Spark's ``distinct`` gets a fraction of the rows."""
    return _in_key_order(range_ids, parallelism).mapInArrow(on_executor(reader.addresses), ADDRESS_SCHEMA)


def range_references(reader: MetadataReader, range_ids: DataFrame, *, parallelism: int) -> DataFrame:
    """:func:`range_addresses`, read with the contents of the HEAD ranges' entries
    (:data:`REFERENCES_SCHEMA`): a range some HEAD holds (``heads`` > 0) gives ``(address, size,
    checksum)`` of its entries, the address null where the classification drops it (outside the
    namespace), each with ``heads``: the HEADs holding it, summed over the task's entries of the
    same contents (:class:`RecentContents`); any other range gives addresses, with a null size.
    Each range is still read once: the mark's classification and its identity-twin guard's
    content evidence share this one reading (:mod:`lakefs_gc.spark.mark.head_contents`).
    Addresses the task's last ranges gave are left out, so the rows are a fraction of the
    entries, yet every HEAD entry's contents are given, and summing ``heads`` per contents counts
    the (branch, path) pairs that hold them exactly."""
    return _in_key_order(range_ids, parallelism).mapInArrow(on_executor(reader.references), REFERENCES_SCHEMA)


def _in_key_order(range_ids: DataFrame, parallelism: int) -> DataFrame:
    return range_ids.repartitionByRange(parallelism, "max_key").sortWithinPartitions("max_key")


class MetadataReader:
    """Per-partition bodies reading metaranges and ranges (pickled to the executors), for
    :func:`range_ids_frame` and :func:`range_addresses`."""

    def __init__(
        self,
        connection: LakeFSConnection,
        repository: str,
        storage_namespace: str,
        namespace: StorageLocation,
        options: StorageOptions,
    ) -> None:
        self.connection = connection
        self.repository = repository
        self.storage_namespace = storage_namespace
        self.namespace = namespace
        self.options = options

    def range_ids(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = filesystem_for(self.namespace, self.options)
        with LakeFSClient(self.connection, source=RANGE_READER_SOURCE) as client:
            for batch in batches:
                heads = batch.column("heads").to_pylist()
                for metarange_id, count in zip(batch.column("id").to_pylist(), heads, strict=True):
                    keyed = self.read_metarange_keys(client, fs, metarange_id)
                    if keyed:
                        yield pa.RecordBatch.from_pydict(
                            {"id": [i for _, i in keyed], "max_key": [k for k, _ in keyed],
                             "heads": [count] * len(keyed)},
                            schema=_KEYED,
                        )  # fmt: skip

    def addresses(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = filesystem_for(self.namespace, self.options)
        recent = RecentAddresses()
        pending: list[str] = []
        with LakeFSClient(self.connection, source=RANGE_READER_SOURCE) as client:
            for batch in batches:
                for range_id in batch.column("id").to_pylist():
                    pending.extend(recent.fresh(self.read_range(client, fs, range_id)))
                    if len(pending) >= _BATCH:
                        yield pa.RecordBatch.from_pydict({"address": pending})
                        pending = []
        if pending:
            yield pa.RecordBatch.from_pydict({"address": pending})

    def references(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = filesystem_for(self.namespace, self.options)
        recent = RecentAddresses()
        contents = RecentContents()
        rows = _References()
        with LakeFSClient(self.connection, source=RANGE_READER_SOURCE) as client:
            for batch in batches:
                heads = batch.column("heads").to_pylist()
                for range_id, weight in zip(batch.column("id").to_pylist(), heads, strict=True):
                    if weight:
                        entries = list(self.read_contents(client, fs, range_id))
                        recent.fresh([a for _, a, _ in entries if a is not None])  # given with their contents
                        rows.contents(contents.add(entries, weight))
                    else:
                        rows.addresses(recent.fresh(self.read_range(client, fs, range_id)))
                    if len(rows) >= _BATCH:
                        yield rows.batch()
        rows.contents(contents.rest())
        if len(rows):
            yield rows.batch()

    def read_metarange(self, client: RefsReader, fs: pafs.FileSystem, metarange_id: str) -> list[str]:
        """The range ids of one metarange (one lakeFS call, one file read)."""
        return [range_id for _, range_id in self.read_metarange_keys(client, fs, metarange_id)]

    def read_metarange_keys(
        self, client: RefsReader, fs: pafs.FileSystem, metarange_id: str
    ) -> list[tuple[bytes, str]]:
        """``(max_key, range id)`` of each range of one metarange (one lakeFS call, one file read)."""
        location = self.resolve(metarange_id, client.meta_range_location(self.repository, metarange_id))
        with open_sstable(fs, location, location.fs_path) as table:
            return list(iter_metarange_range_keys(table))

    def read_range(self, client: RefsReader, fs: pafs.FileSystem, range_id: str) -> Iterator[str]:
        """The normalised committed addresses of one range (one lakeFS call, one file read)."""
        location = self.resolve(range_id, client.range_location(self.repository, range_id))
        with open_sstable(fs, location, location.fs_path) as table:
            yield from committed_addresses_of_range(table, self.storage_namespace)

    def read_head_entries(
        self, client: RefsReader, fs: pafs.FileSystem, range_id: str
    ) -> Iterator[HeadEntry]:
        """``(path, size, address, checksum)`` of every entry of one range: the identity-twin guard's
        view of a HEAD tree with what its content evidence needs (the address normalised as the
        classification's, None outside the namespace; the checksum lakeFS recorded)."""
        location = self.resolve(range_id, client.range_location(self.repository, range_id))
        with open_sstable(fs, location, location.fs_path) as table:
            yield from head_entries_of_range(table, self.storage_namespace)

    def read_contents(self, client: RefsReader, fs: pafs.FileSystem, range_id: str) -> Iterator[ContentEntry]:
        """``(size, address, checksum)`` of every entry of one range: what content evidence needs
        of a HEAD entry, the address normalised as the classification's (None outside the
        namespace)."""
        location = self.resolve(range_id, client.range_location(self.repository, range_id))
        with open_sstable(fs, location, location.fs_path) as table:
            yield from contents_of_range(table, self.storage_namespace)

    def resolve(self, object_id: str, api_location: str) -> StorageLocation:
        return metadata_location(
            self.namespace, object_id, api_location=api_location, local_root=self.options.local_root
        )


class _References:
    """The pending rows of :meth:`MetadataReader.references`."""

    _SCHEMA = pa.schema(
        [("address", pa.string()), ("size", pa.int64()), ("checksum", pa.string()), ("heads", pa.int64())]
    )

    def __init__(self) -> None:
        self._addresses: list[str | None] = []
        self._sizes: list[int | None] = []
        self._checksums: list[str | None] = []
        self._heads: list[int | None] = []

    def __len__(self) -> int:
        return len(self._addresses)

    def addresses(self, addresses: list[str]) -> None:
        self._addresses.extend(addresses)
        nulls: list[None] = [None] * len(addresses)
        self._sizes.extend(nulls)
        self._checksums.extend(nulls)
        self._heads.extend(nulls)

    def contents(self, given: list[tuple[ContentEntry, int]]) -> None:
        self._addresses.extend([a for (_, a, _), _ in given])
        self._sizes.extend([s for (s, _, _), _ in given])
        self._checksums.extend([c for (_, _, c), _ in given])
        self._heads.extend([w for _, w in given])

    def batch(self) -> pa.RecordBatch:
        """The pending rows, handed over (none remain)."""
        columns = {
            "address": self._addresses, "size": self._sizes, "checksum": self._checksums, "heads": self._heads
        }  # fmt: skip
        self._addresses, self._sizes, self._checksums, self._heads = [], [], [], []
        return pa.RecordBatch.from_pydict(columns, schema=self._SCHEMA)


def read_active_commits(
    client: RefsReader, repository: str, *, options: StorageOptions, timeout: timedelta
) -> ActiveCommits:
    """Ask lakeFS for the active commits and read its CSV (after the uncommitted dump:
    docs/formats/lakefs-gc-api.md, "Order of the calls")."""
    return read_commits_export(client, repository, options=options, timeout=timeout)[1]


def read_commits_export(
    client: RefsReader, repository: str, *, options: StorageOptions, timeout: timedelta
) -> tuple[str, ActiveCommits]:
    """:func:`read_active_commits` with the export's run id (it dates lakeFS's clock)."""
    export = client.prepare_commits(repository, timeout=timeout.total_seconds())
    location = parse_location(export.location, local_root=options.local_root)
    fs, path = filesystem_for(location, options)
    return export.run_id, read_commits_csv(fs, path)


@dataclass(frozen=True)
class StagedReferences:
    """The staged addresses of an uncommitted dump, and how many part files they came from."""

    addresses: DataFrame
    files: int


def dump_frame(
    spark: SparkSession, dump: StagedExport, *, options: StorageOptions, parallelism: int
) -> StagedReferences:
    """The staged addresses of a completed dump; a dump that reported data but left none fails."""
    location = parse_location(dump.location, local_root=options.local_root)
    fs, path = filesystem_for(location, options)
    files = uncommitted_files(fs, path, required=dump.data_expected)
    frame = uncommitted_frame(spark, location=location, files=files, options=options, parallelism=parallelism)
    return StagedReferences(frame, len(files))


def uncommitted_frame(
    spark: SparkSession,
    *,
    location: StorageLocation,
    files: Sequence[str],
    options: StorageOptions,
    parallelism: int,
) -> DataFrame:
    """Staged addresses from the dump's part files (paths inside ``location``'s filesystem)."""
    tasks = task_frame(spark, [(f,) for f in files], "path string", parallelism)
    return tasks.mapInArrow(on_executor(_UncommittedReader(location, options)), ADDRESS_SCHEMA)


class _UncommittedReader:
    def __init__(self, location: StorageLocation, options: StorageOptions) -> None:
        self.location = location
        self.options = options

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = filesystem_for(self.location, self.options)
        for batch in batches:
            for path in batch.column("path").to_pylist():
                column = read_uncommitted_file(fs, path)
                for chunk in column.chunks:
                    yield pa.RecordBatch.from_arrays([chunk], names=["address"])
