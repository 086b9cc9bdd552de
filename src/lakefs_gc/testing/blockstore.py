"""The test server's object storage: one storage namespace, addressed by relative keys.

Backed by ``pyarrow.fs`` through :mod:`lakefs_gc.storage`, so the same code writes local
directories, S3 (moto in tests) and Azure Blob (Azurite in tests). Locations handed out through
the API are formatted as lakeFS formats them: the namespace URI joined with the key, or for
``local://`` namespaces ``local://`` + the absolute path under the blockstore root.
"""

from __future__ import annotations

import posixpath
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.clients import azure_container_client, s3_client
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for, is_not_found
from lakefs_gc.storage.locations import StorageLocation, parse_storage_namespace, uri_scheme

if TYPE_CHECKING:
    from lakefs_gc.testing.notifications import Notifier


class NamespaceStore:
    """Read/write access to the objects of one repository's storage namespace."""

    def __init__(self, namespace: str, options: StorageOptions, notifier: Notifier | None = None) -> None:
        self.namespace = namespace
        self.location: StorageLocation = parse_storage_namespace(namespace, local_root=options.local_root)
        self.options = options
        self.fs, base = filesystem_for(self.location, options)
        self.base = base.rstrip("/")
        self.is_local = self.location.kind == "local"
        #: told about every write and delete, as the cloud's notifications would be (None: silent)
        self.notifier = notifier if notifier is not None and notifier.handles(self.location.kind) else None

    @property
    def kind(self) -> str:
        return self.location.kind

    def path(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise StorageError(f"refusing a key outside the namespace: {key!r}")
        return f"{self.base}/{key}"

    def qualified(self, key: str) -> str:
        """The full location lakeFS would report for ``key``."""
        if uri_scheme(self.namespace).lower() == "local":
            return "local://" + posixpath.join(self.base, key)
        return self.namespace.rstrip("/") + "/" + key

    def put(self, key: str, data: bytes) -> None:
        path = self.path(key)
        try:
            if self.is_local:
                self.fs.create_dir(posixpath.dirname(path), recursive=True)
            with self.fs.open_output_stream(path) as out:
                out.write(data)
        except OSError as e:
            raise StorageError(f"cannot write {self.qualified(key)}: {e}") from e
        if self.notifier is not None:
            self._notify_created(key)

    def get(self, key: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(self.path(key)) as f:
                return bytes(f.read())
        except OSError as e:
            if is_not_found(e):
                return None
            raise StorageError(f"cannot read {self.qualified(key)}: {e}") from e

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        """``length`` bytes from ``start`` (fewer at the end), or None when the object does not exist."""
        try:
            with self.fs.open_input_file(self.path(key)) as f:
                return bytes(f.read_at(max(length, 0), start)) if length > 0 else b""
        except OSError as e:
            if is_not_found(e):
                return None
            raise StorageError(f"cannot read {self.qualified(key)}: {e}") from e

    def info(self, key: str) -> tuple[int, datetime] | None:
        """``(size, last_modified)`` of an object, or None when it does not exist."""
        info = self.fs.get_file_info(self.path(key))
        if info.type != pafs.FileType.File:
            return None
        assert info.mtime is not None and info.size is not None
        return info.size, info.mtime

    def exists(self, key: str) -> bool:
        return self.info(key) is not None

    def delete(self, key: str) -> None:
        """Delete one object with the store's own API.

        pyarrow's ``delete_file`` on S3/Azure writes ``parent/`` directory markers (objects lakeFS
        never creates) and, on Azure, takes a lease that can stall for seconds against Azurite.
        """
        self.path(key)  # validates the key
        object_key = self.location.join(key).key
        deleted = True
        if self.kind == "s3":
            self._s3().delete_object(Bucket=self.location.container, Key=object_key)
        elif self.kind == "azure":
            from azure.core.exceptions import ResourceNotFoundError

            try:
                self._azure().delete_blob(object_key, delete_snapshots="include")
            except ResourceNotFoundError:
                deleted = False
        else:
            try:
                self.fs.delete_file(self.path(key))
            except FileNotFoundError:
                deleted = False
        if self.notifier is not None and deleted:  # Azure and files notify nothing for a 404
            self.notifier.object_deleted(self.location.join(key), time=datetime.now(timezone.utc))

    def _notify_created(self, key: str) -> None:
        """Notify with the store's own size, last-modified time and (Azure) ETag of the new object."""
        assert self.notifier is not None
        location = self.location.join(key)
        if self.kind == "azure":
            props = self._azure().get_blob_client(location.key).get_blob_properties()
            size, modified, etag = int(props.size), props.last_modified, props.etag
        else:
            info = self.info(key)
            if info is None:
                raise StorageError(f"{self.qualified(key)} vanished right after it was written")
            (size, modified), etag = info, None
        self.notifier.object_created(location, size=size, time=modified, etag=etag)

    def _s3(self) -> Any:
        return s3_client(self.options.s3)

    def _azure(self) -> Any:
        return azure_container_client(self.location, self.options.azure)
