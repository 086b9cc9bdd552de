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

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
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
    head_entries_of_range,
    metadata_location,
    open_sstable,
)
from lakefs_gc.lakefs.settings import LakeFSConnection
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.sstable.addresses import HeadEntry
from lakefs_gc.sstable.graveler import iter_metarange_range_keys
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation, parse_location

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame, SparkSession

ADDRESS_SCHEMA = "address string"
KEYED_RANGE_SCHEMA = "id string, max_key binary"
_KEYED = pa.schema([("id", pa.string()), ("max_key", pa.binary())])
#: ranges a task remembers the addresses of (:class:`RecentAddresses`), and at most this many of
#: their addresses (older ranges are forgotten first, the last one never): ~200 bytes each, so
#: ~40 MB per task whatever lakeFS's range sizes. An address the ranges read one after the other
#: keep giving is never forgotten, so the window only bridges ranges that lack it
DEDUPE_WINDOW = 16
DEDUPE_ADDRESSES = 200_000
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
) -> tuple[DataFrame, DataFrame]:
    """``(range_ids, addresses)``: distinct range ids of the metaranges, and their addresses.

    The range ids are read once, now: the addresses are read from them and the report records
    them (``ranges/``), and Spark would read every metarange again for each (at the bottom line,
    10,762 metaranges, that second reading was 89 s of the report)."""
    reader = MetadataReader(connection, repository, storage_namespace, namespace, options)
    keyed = range_ids_frame(spark, reader, metarange_ids, parallelism=parallelism).localCheckpoint()
    return keyed.select("id"), range_addresses(reader, keyed, parallelism=parallelism)


def range_ids_frame(
    spark: SparkSession, reader: MetadataReader, metarange_ids: Sequence[str], *, parallelism: int
) -> DataFrame:
    """The distinct range ids (column ``id``) of the metaranges, each with its last key
    (``max_key``, the metarange's key for it), each metarange read by one task."""
    metaranges = spark.createDataFrame([(m,) for m in metarange_ids], "id string")
    metaranges = metaranges.repartition(max(1, min(parallelism, len(metarange_ids))))
    return metaranges.mapInArrow(on_executor(reader.range_ids), KEYED_RANGE_SCHEMA).dropDuplicates(["id"])


def range_addresses(reader: MetadataReader, range_ids: DataFrame, *, parallelism: int) -> DataFrame:
    """The addresses (``ADDRESS_SCHEMA``) of the ranges ``range_ids`` (columns ``id, max_key``:
    :func:`range_ids_frame`'s rows) lists.

    Every task reads a span of keys in key order: the versions of one span of paths (each commit
    that touches a range writes it again) are read one after the other and share most of their
    addresses, so a task leaves out what the last few ranges gave already
    (:class:`RecentAddresses`) and Spark's ``distinct`` gets a fraction of the rows."""
    ordered = range_ids.repartitionByRange(parallelism, "max_key").sortWithinPartitions("max_key")
    return ordered.mapInArrow(on_executor(reader.addresses), ADDRESS_SCHEMA)


class RecentAddresses:
    """The addresses of the last ``window`` ranges a task read (fewer when they list more than
    ``addresses``): an address one of them gave is not given again. Only ever leaves out repeats,
    so the distinct addresses are those of every range; memory is bounded by ``addresses`` (or
    by the last range, if it alone lists more)."""

    def __init__(self, window: int = DEDUPE_WINDOW, addresses: int = DEDUPE_ADDRESSES) -> None:
        self.window = window
        self.addresses = addresses
        self._last: dict[str, int] = {}  # address -> the latest range (its ordinal) that gave it
        self._ranges: deque[tuple[int, list[str]]] = deque()
        self._listed = 0  # addresses in ``_ranges``
        self._ordinal = 0

    def fresh(self, addresses: Iterable[str]) -> list[str]:
        """Those of one range's ``addresses`` none of the last ranges gave (each once)."""
        ordinal, last = self._ordinal, self._last
        self._ordinal += 1
        seen: list[str] = []
        fresh: list[str] = []
        for address in addresses:
            if last.get(address) is None:
                fresh.append(address)
            last[address] = ordinal
            seen.append(address)
        self._ranges.append((ordinal, seen))
        self._listed += len(seen)
        while len(self._ranges) > self.window or (len(self._ranges) > 1 and self._listed > self.addresses):
            old, old_addresses = self._ranges.popleft()
            self._listed -= len(old_addresses)
            for address in old_addresses:
                if last.get(address) == old:
                    del last[address]
        return fresh

    def held(self) -> int:
        """How many distinct addresses it remembers (bounded as the class says)."""
        return len(self._last)


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
                for metarange_id in batch.column("id").to_pylist():
                    keyed = self.read_metarange_keys(client, fs, metarange_id)
                    if keyed:
                        yield pa.RecordBatch.from_pydict(
                            {"id": [i for _, i in keyed], "max_key": [k for k, _ in keyed]}, schema=_KEYED
                        )

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

    def resolve(self, object_id: str, api_location: str) -> StorageLocation:
        return metadata_location(
            self.namespace, object_id, api_location=api_location, local_root=self.options.local_root
        )


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
    tasks = spark.createDataFrame([(f,) for f in files], "path string")
    tasks = tasks.repartition(max(1, min(parallelism, len(files))))
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
