"""What every part of the test server shares: state, storage access, clock and settings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from lakefs_gc.errors import GcError
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.testing.blockstore import NamespaceStore
from lakefs_gc.testing.store import Store
from lakefs_gc.testing.trees import RangeSplit, TreeStore

if TYPE_CHECKING:
    from lakefs_gc.testing.notifications import Notifier


class ApiError(GcError):
    """An error the server answers with ``status`` and lakeFS's ``{"message": ...}`` body."""

    status = 500

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class Gone(ApiError):
    status = 410


class Forbidden(ApiError):
    status = 403


class PreconditionFailed(ApiError):
    status = 412


class NotImplementedByServer(ApiError):
    """501, as lakeFS answers options it does not implement (``If-Match``, shallow copies)."""

    status = 501


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class ServerSettings:
    """Knobs of the test server; defaults behave like a stock lakeFS."""

    grace_period: timedelta = timedelta(hours=24)
    storage: StorageOptions = field(default_factory=StorageOptions)
    signing_key: bytes = b"lakefs-gc-test-server-signing-key"
    #: staged entries per prepare_uncommitted page (lakeFS: 20 MiB); tests lower it
    uncommitted_page_entries: int = 100_000
    #: branches per prepare_uncommitted page (lakeFS breaks between branches after 1 min)
    uncommitted_page_branches: int = 1_000_000
    range_split: RangeSplit = field(default_factory=RangeSplit)
    #: objects per data slice before rotating (lakeFS: 50,000 or hourly)
    slice_objects: int = 50_000
    slice_interval: timedelta = timedelta(hours=1)
    version: str = "1.88.0"
    #: enabled blockstores by id ("local", "s3", "azure"); several = lakeFS multi-storage, where
    #: repositories carry the id as storage_id
    blockstores: tuple[str, ...] = ("local",)
    #: told about every object written or deleted, as the cloud's notifications would be; see
    #: :mod:`lakefs_gc.testing.notifications` (S3 needs none: moto notifies SQS by itself)
    notifications: Notifier | None = None


class ServerContext:
    """Shared state; storage handles are cached per namespace."""

    def __init__(
        self, store: Store, settings: ServerSettings, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self._namespaces: dict[str, NamespaceStore] = {}
        self._trees: dict[str, TreeStore] = {}
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return self.clock()

    def namespace_store(self, namespace: str) -> NamespaceStore:
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is None:
                ns = self._namespaces[namespace] = NamespaceStore(
                    namespace, self.settings.storage, self.settings.notifications
                )
            return ns

    def trees(self, namespace: str) -> TreeStore:
        store = self.namespace_store(namespace)
        with self._lock:
            tree = self._trees.get(namespace)
            if tree is None:
                tree = self._trees[namespace] = TreeStore(store, self.settings.range_split)
            return tree
