"""From active metaranges to committed addresses: metarange → range ids, range → addresses.

Ranges are shared by many commits, so callers collect the *distinct* range ids of all active
metaranges first and read each range once (docs/formats/lakefs-ranges.md, "Ranges and
metaranges"). Files are read straight from the object store; the lakeFS API is only the contract for where
they are (``_lakefs/<id>``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

from lakefs_gc.errors import ExportError, StorageError
from lakefs_gc.gc.addresses import METADATA_PREFIX
from lakefs_gc.lakefs.addresses import normalize_committed_address
from lakefs_gc.sstable import SSTableReader
from lakefs_gc.sstable.addresses import (
    ContentEntry,
    HeadEntry,
    KeepAddress,
    range_address_blocks,
    range_content_blocks,
    range_head_entry_blocks,
)
from lakefs_gc.sstable.graveler import iter_metarange_range_ids
from lakefs_gc.storage.locations import StorageLocation, parse_location, uri_scheme
from lakefs_gc.storage.reads import ObjectNotFound, ScratchSpaceError, fetched_file

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def range_ids_of_metarange(reader: SSTableReader) -> Iterator[str]:
    """The range ids (entry identities) a metarange lists, in key order."""
    yield from iter_metarange_range_ids(reader)


def committed_addresses_of_range(reader: SSTableReader, namespace: str) -> Iterator[str]:
    """Namespace-relative keys referenced by a range, normalised (lakefs-ranges.md, "Committed
    addresses"; not de-duplicated).

    Decoded by the addresses-only fast path (``sstable.addresses``, 2-3x the general decoder's
    speed): RELATIVE addresses are keys already; only the others go through the normalisation.
    """

    for block in range_address_blocks(reader, _normalizer(namespace)):
        yield from block


def head_entries_of_range(reader: SSTableReader, namespace: str) -> Iterator[HeadEntry]:
    """``(path, size, address, checksum)`` of every entry of a range, the address normalised as
    :func:`committed_addresses_of_range` normalises it (None outside the namespace)."""
    for block in range_head_entry_blocks(reader, _normalizer(namespace)):
        yield from block


def contents_of_range(reader: SSTableReader, namespace: str) -> Iterator[ContentEntry]:
    """``(size, address, checksum)`` of every entry of a range, the address normalised as
    :func:`committed_addresses_of_range` normalises it (None outside the namespace)."""
    for block in range_content_blocks(reader, _normalizer(namespace)):
        yield from block


def _normalizer(namespace: str) -> KeepAddress:
    """The fast path's ``keep`` for a non-RELATIVE address: its namespace-relative key, or None."""

    def keep(address: str, address_type: int) -> str | None:
        return normalize_committed_address(address, address_type, namespace)

    return keep


def metadata_location(
    namespace: StorageLocation,
    object_id: str,
    *,
    api_location: str | None = None,
    local_root: str | None = None,
) -> StorageLocation:
    """Where a range/metarange file lives.

    Without ``api_location`` it is ``<ns>/_lakefs/<id>`` (how lakeFS lays them out). An API answer
    (``getRange``/``getMetaRange``) is resolved against the namespace like the Scala client does:
    relative values are joined, full URIs are taken as they are.
    """
    if api_location is None:
        return namespace.join(METADATA_PREFIX + object_id)
    if uri_scheme(api_location):
        return parse_location(api_location, local_root=local_root)
    return namespace.join(api_location)


@contextmanager
def open_sstable(fs: pafs.FileSystem, location: StorageLocation, path: str) -> Iterator[SSTableReader]:
    """Open the SSTable at ``path`` of ``fs`` (``location`` names it in errors).

    A table on an object store is downloaded whole first (:func:`~lakefs_gc.storage.reads.read_once`,
    to a local scratch file) and decoded from there: the decoder reads one data block at a time,
    and lakeFS's blocks are a few KiB, so reading it in place cost one GET per block (1,341 for a
    1.7 MiB range of lakeFS's; a range of the default 20 MiB, about 15,000), where the whole file
    is one download."""
    with ExitStack() as stack:
        try:
            source = stack.enter_context(fetched_file(fs, path))
        except ScratchSpaceError:
            raise
        except ObjectNotFound as e:
            raise ExportError(f"lakeFS metadata file {location} does not exist") from e
        except StorageError as e:
            raise ExportError(f"cannot open lakeFS metadata file {location}: {e.__cause__ or e}") from e
        yield stack.enter_context(SSTableReader(source, name=str(location)))


def range_ids_of_metaranges(
    fs: pafs.FileSystem, namespace: StorageLocation, metarange_ids: Iterable[str]
) -> set[str]:
    """The distinct range ids of all given metaranges, read from ``<ns>/_lakefs/<id>``."""
    range_ids: set[str] = set()
    for metarange_id in metarange_ids:
        location = metadata_location(namespace, metarange_id)
        with open_sstable(fs, location, location.fs_path) as reader:
            range_ids.update(range_ids_of_metarange(reader))
    return range_ids


def committed_addresses(
    fs: pafs.FileSystem, namespace: StorageLocation, raw_namespace: str, range_ids: Iterable[str]
) -> set[str]:
    """Distinct normalised addresses of the given ranges (``raw_namespace`` as lakeFS spells it)."""
    addresses: set[str] = set()
    for range_id in range_ids:
        location = metadata_location(namespace, range_id)
        with open_sstable(fs, location, location.fs_path) as reader:
            addresses.update(committed_addresses_of_range(reader, raw_namespace))
    return addresses
