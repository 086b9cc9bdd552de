"""Backup and restore's port: copy objects between two locations, one outcome per address.

An :class:`ObjectCopier` runs inside an executor task (one per partition, one client per store)
and copies namespace-relative addresses from a source root to the same relative key under a
destination root. It never raises for what a store answers: per-object problems are outcomes.

* ``copied``   the object was copied and the copy verified: same size, and the same MD5 where
  both sides report one (S3's ETag of a single-part object without SSE-KMS/SSE-C, Azure's
  ``Content-MD5``); a streamed copy also checks the bytes it read against the source's MD5;
* ``already``  the destination already holds an object of the same size (and MD5 where
  comparable): what a resumed run finds for the objects an earlier run copied;
* ``missing``  neither side has the object;
* ``conflict`` the destination holds a *different* object; it is left as it is (see
  :meth:`ObjectCopier.copy`);
* ``failed``   anything else, with the error.

Nothing is ever deleted or overwritten: S3 and Azure writes complete atomically (a single PUT,
a completed multipart upload, a committed block list), Azure's are conditional on the blob not
existing, and local files are written beside their target and hard-linked into place, which
fails if the target exists. Within one store the copy is server-side (S3 ``CopyObject``, Azure
``Copy Blob`` within an account); across stores it is streamed through the task.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from lakefs_gc.errors import StorageError
from lakefs_gc.gc.addresses import deletable_key
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation
from lakefs_gc.storage.object_stores import CopyVerificationError, ObjectInfo, ObjectStore, store_for

CopyOutcomeKind = Literal["copied", "already", "missing", "conflict", "failed"]


@dataclass(frozen=True)
class CopyOutcome:
    address: str
    outcome: CopyOutcomeKind
    size: int | None = None
    error: str | None = None


class _HashingReader:
    """Counts and hashes the bytes a streamed copy reads from its source."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.bytes = 0

    def read(self, n: int = -1) -> bytes:
        data = bytes(self.raw.read(n))
        self.md5.update(data)
        self.bytes += len(data)
        return data


class ObjectCopier:
    """Copies addresses from ``source`` to the same relative key under ``destination``."""

    def __init__(self, source: ObjectStore, destination: ObjectStore) -> None:
        self.source = source
        self.destination = destination

    def copy(self, address: str) -> CopyOutcome:
        """Copy one address; never overwrites.

        An object already at the destination is compared with the source: the same size (and MD5
        where both report one) is ``already``; anything else is a ``conflict`` and is left alone,
        because the copier cannot know which side is right. On restore the destination is the
        live namespace: a different object at a marked address means someone wrote there after
        the mark, and overwriting it would destroy data that is newer than the backup.
        """
        if not deletable_key(address):
            return CopyOutcome(address, "failed", error=f"refused: {address!r} is not a deletable key")
        try:
            return self._copy(address)
        except _store_errors() as e:
            return CopyOutcome(address, "failed", error=f"{type(e).__name__}: {e}")

    def _copy(self, address: str) -> CopyOutcome:
        existing = self.destination.stat(address)
        source = self.source.stat(address)
        if existing is not None:
            return self._compare(address, source, existing)
        if source is None:
            return CopyOutcome(address, "missing")
        written = True
        if not self.destination.copy_from(self.source, address, source):
            written = self._stream(address, source)
        after = self.destination.stat(address)
        if not written:  # someone else wrote it in between
            return self._compare(address, source, after) if after else CopyOutcome(address, "missing")
        if after is None:
            raise CopyVerificationError(f"{self.destination.describe(address)} is not there after the copy")
        reason = source.differs(after)
        if reason:
            raise CopyVerificationError(f"the copy {self.destination.describe(address)} has {reason}")
        return CopyOutcome(address, "copied", source.size)

    def _stream(self, address: str, source: ObjectInfo) -> bool:
        stream = self.source.open(address)
        try:
            reader = _HashingReader(stream)
            written = self.destination.write_new(address, reader, source.size)  # type: ignore[arg-type]
        finally:
            stream.close()
        if written and reader.bytes != source.size:
            raise CopyVerificationError(
                f"read {reader.bytes} bytes of {self.source.describe(address)}, expected {source.size}"
            )
        if written and source.md5 and reader.md5.hexdigest() != source.md5:
            raise CopyVerificationError(
                f"the bytes read from {self.source.describe(address)} do not match its MD5 {source.md5}"
            )
        return written

    def _compare(self, address: str, source: ObjectInfo | None, existing: ObjectInfo) -> CopyOutcome:
        if existing.copy_status not in (None, "success"):
            return CopyOutcome(
                address,
                "failed",
                existing.size,
                f"{self.destination.describe(address)}: "
                f"a server-side copy to it is {existing.copy_status}; not overwritten",
            )
        if source is None:  # nothing to compare with: the destination holds what is left
            return CopyOutcome(address, "already", existing.size)
        reason = source.differs(existing)
        if reason:
            error = f"{self.destination.describe(address)} exists with {reason}; not overwritten"
            return CopyOutcome(address, "conflict", existing.size, error)
        return CopyOutcome(address, "already", existing.size)

    def close(self) -> None:
        self.source.close()
        self.destination.close()


def copier_for(
    source: StorageLocation, destination: StorageLocation, options: StorageOptions
) -> ObjectCopier:
    """The copier from ``source`` to ``destination`` (one per executor task)."""
    return ObjectCopier(store_for(source, options), store_for(destination, options))


def _store_errors() -> tuple[type[BaseException], ...]:
    from azure.core.exceptions import AzureError
    from botocore.exceptions import BotoCoreError, ClientError

    return (OSError, StorageError, BotoCoreError, ClientError, AzureError)
