"""One inventory delivery, whatever the cloud: where its data files are and what they hold.

A delivery becomes a snapshot only when it is complete and verified (checksums, schema); until
then it is "not yet", and a delivery that cannot be trusted is rejected with an
:class:`InventoryError` naming the file and the reason (docs/invariants.md, invariant 4: an incomplete
inventory never reads as "these objects do not exist").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import pyarrow as pa
import pyarrow.fs as pafs

from lakefs_gc.errors import ExitCode, GcError, StorageError
from lakefs_gc.storage.reads import FetchedFile, ScratchSpaceError, read_once

Flavour = Literal["s3", "azure"]
FileFormat = Literal["csv", "parquet", "orc"]

#: the rows every reader yields: one current object version per row
INVENTORY_SCHEMA = pa.schema(
    [
        ("bucket", pa.string()),  # S3 bucket or Azure container
        ("key", pa.string()),  # object key / blob name inside it (decoded)
        ("size", pa.int64()),
        ("last_modified", pa.timestamp("us", tz="UTC")),
        ("etag", pa.string()),
        # S3's EncryptionStatus (NOT-SSE, SSE-S3, SSE-KMS, DSSE-KMS, SSE-C) when the inventory has
        # the field, else null: whether the ETag can be the MD5 of the bytes (lakefs_gc.gc.twins)
        ("encryption", pa.string()),
    ]
)

#: the columns that only prove an object's content (an S3 MD5 ETag under its EncryptionStatus):
#: the identity-twin guard's content evidence, used only with ``gc.trust_checksums``; readers
#: asked not to (``etags=False``) leave them null instead of parsing them
CONTENT_COLUMNS = ("etag", "encryption")


class InventoryError(GcError):
    """A delivery cannot be used: incomplete, corrupt, or not understood. Names file and reason."""

    exit_code = ExitCode.INVENTORY

    #: the manifest of the delivery this error rejects, when known (discovery sets it), so that
    #: an ingest report can name the delivery as well as the file and the reason
    manifest_path: str | None = None

    def rejecting(self, manifest_path: str) -> InventoryError:
        """This error, recorded as the reason ``manifest_path``'s delivery is rejected."""
        self.manifest_path = manifest_path
        return self


@dataclass(frozen=True)
class DataFile:
    """One data file of a delivery, as the manifest lists it."""

    path: str  # path inside the delivery's filesystem (pyarrow.fs)
    format: FileFormat
    size: int | None = None
    md5: str | None = None  # hex MD5 the manifest promises, verified before reading


@dataclass(frozen=True)
class Delivery:
    """A complete delivery (its manifest was found, its completion marker present and verified)."""

    id: str  # stable id used as a streaming offset: the manifest's path
    flavour: Flavour
    manifest_path: str
    snapshot_time: datetime  # S3 creationTimestamp / Azure inventoryCompletionTime, UTC
    source: str  # source bucket (S3) or storage account (Azure)
    columns: tuple[str, ...]  # data columns in file order, from the manifest
    files: tuple[DataFile, ...]
    versioned: bool = False


@dataclass(frozen=True)
class DiscoveryResult:
    """What a scan of a destination found: usable, not-yet-complete, and untrustworthy deliveries."""

    complete: list[Delivery] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # manifest paths without a completion marker
    rejected: list[InventoryError] = field(default_factory=list)


def check_data_files(fs: pafs.FileSystem, delivery: Delivery) -> None:
    """Every data file the manifest lists exists, with the size it promises (when it gives one)."""
    infos = fs.get_file_info([f.path for f in delivery.files])
    for data_file, info in zip(delivery.files, infos, strict=True):
        if info.type != pafs.FileType.File:
            raise InventoryError(f"{data_file.path}: data file listed in {delivery.manifest_path} is missing")
        if data_file.size is not None and info.size != data_file.size:
            raise InventoryError(
                f"{data_file.path}: size {info.size} differs from {data_file.size} "
                f"in {delivery.manifest_path}"
            )


@contextlib.contextmanager
def fetched(fs: pafs.FileSystem, data_file: DataFile) -> Iterator[FetchedFile]:
    """``data_file`` read from the store once (:func:`~lakefs_gc.storage.reads.read_once`), its
    MD5 checked against the manifest's when it has one; what to parse is the result's ``fs`` and
    ``path``. The store's errors and a wrong MD5 are the delivery's (:class:`InventoryError`);
    a worker's disk that cannot hold the copy is not (:class:`ScratchSpaceError`: the task fails
    and Spark retries it, and a good delivery is not rejected for it)."""
    with contextlib.ExitStack() as stack:
        try:  # the reading only: what the caller's parse raises is not translated
            read = stack.enter_context(read_once(fs, data_file.path, md5=data_file.md5 is not None))
        except ScratchSpaceError:
            raise
        except StorageError as e:
            raise InventoryError(str(e)) from e
        if data_file.md5 is not None and read.md5 != data_file.md5:
            raise InventoryError(f"{data_file.path}: MD5 {read.md5} does not match manifest {data_file.md5}")
        yield read
