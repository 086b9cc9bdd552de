"""The bulk deleter of a namespace's store (:func:`deleter_for`), and the sweep's deleter
factories (:class:`~lakefs_gc.gc.ports.DeleterFactory`): the real one, and the dry run's, which
deletes nothing.

A factory is built once at the edge and pickled to the executors, where each sweep task opens one
deleter with it; so it holds a location and settings, never a client. ``sweep --dry-run`` is a
swap of factories, nothing else: the sweep runs as it would (guards, revalidation, resumption
read-only), its tasks hand their addresses to a :class:`DryRunDeleter`, and what it answers is
recorded as what would have been deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lakefs_gc.errors import StorageError
from lakefs_gc.gc.addresses import deletable_key
from lakefs_gc.storage.clients import S3_DELETE_RETRIES, azure_container_client, s3_client
from lakefs_gc.storage.deleters import (
    LOCAL_MAX_BATCH,
    AzureBlobBulkDeleter,
    BulkDeleter,
    DeleteOutcome,
    LocalBulkDeleter,
)
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation
from lakefs_gc.storage.s3_deleter import S3BulkDeleter
from lakefs_gc.storage.throttle import Throttle


@dataclass(frozen=True)
class StoreDeleters:
    """Bulk deleters of a storage namespace's store (S3 ``DeleteObjects``, Azure blob batch, local)."""

    namespace: StorageLocation
    options: StorageOptions
    dry_run: bool = False

    def __call__(self, *, throttle: Any, not_modified_since: datetime | None) -> BulkDeleter:
        return deleter_for(
            self.namespace, self.options, throttle=throttle, not_modified_since=not_modified_since
        )


@dataclass(frozen=True)
class DryRunDeleters:
    """Deleters that delete nothing and answer ``deleted`` for what a real one would try to delete."""

    namespace: StorageLocation
    dry_run: bool = True

    def __call__(self, *, throttle: Any, not_modified_since: datetime | None) -> DryRunDeleter:
        return DryRunDeleter()


class DryRunDeleter:
    """Deletes nothing. An address a real deleter would refuse (not a deletable key: docs/invariants.md,
    invariant 3) is ``failed`` with the same reason; every other address is ``deleted``, meaning "would be
    deleted", each address once, in input order, like a real deleter."""

    max_batch = LOCAL_MAX_BATCH

    def delete(self, addresses: Sequence[str]) -> list[DeleteOutcome]:
        outcomes: dict[str, DeleteOutcome] = {}
        for address in addresses:
            if address not in outcomes:
                outcomes[address] = (
                    DeleteOutcome(address, "deleted")
                    if deletable_key(address)
                    else DeleteOutcome(address, "failed", f"refused: {address!r} is not a deletable key")
                )
        return [outcomes[a] for a in addresses]

    def close(self) -> None:
        """Nothing to release."""


def deleter_for(
    namespace: StorageLocation,
    options: StorageOptions,
    *,
    throttle: Throttle | None = None,
    not_modified_since: datetime | None = None,
) -> BulkDeleter:
    """The bulk deleter for a repository's storage namespace (one per executor task), its SDK
    client without SDK retries: ``throttle`` (default: a :class:`Throttle` of its own) retries.
    ``not_modified_since`` (the mark's cutoff) refuses objects written since, where the store
    can tell in the delete path (Azure, local; see the module docstring)."""
    if namespace.kind == "s3":
        client = s3_client(options.s3, retries=S3_DELETE_RETRIES)
        return S3BulkDeleter(client, namespace.container, namespace.key, throttle=throttle)
    if namespace.kind == "azure":
        container = azure_container_client(namespace, options.azure, retry_total=0)
        return AzureBlobBulkDeleter(
            container, namespace.key, throttle=throttle, not_modified_since=not_modified_since
        )
    if namespace.kind == "local":
        return LocalBulkDeleter(namespace.key, throttle=throttle, not_modified_since=not_modified_since)
    raise StorageError(
        f"cannot delete from {namespace}: bulk deletes for storage kind {namespace.kind!r} are not supported"
    )
