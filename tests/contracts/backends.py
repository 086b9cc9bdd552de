"""The backends every contract runs against: local files, S3 on a moto server, Azure Blob on
Azurite. Each is a storage namespace, the options to reach it, and an *independent* native client
(``pathlib``, boto3, azure-storage-blob): the oracle the ports are checked against."""

from __future__ import annotations

import copy
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation, parse_storage_namespace
from tests.support.object_stores import azure_options, blob_service, s3_client, s3_options
from tests.support.servers import AzuriteServer, MotoServer

KEYS = {
    "plain": "data/plain-object.bin",
    "space": "with space/and more spaces.txt",
    "plus": "plus+sign/a+b.txt",
    "percent": "percent%20literal%2Fnot-decoded.txt",
    "hash": "hash#not-a-fragment.txt",
    "query": "question?not=a-query.txt",
    "unicode": "ünïcødé/日本語 файл.txt",
    "long-1KiB": "",  # built per backend: the whole key in the store is 1024 bytes
}
KEY_LIMIT = 1024


class NativeStore(ABC):
    """Direct access to a backend, bypassing pyarrow: the oracle the ports are checked against."""

    def __init__(self, namespace: StorageLocation) -> None:
        self.namespace = namespace

    def full_key(self, key: str) -> str:
        """The object's key in its bucket/container, or its absolute path for local files."""
        return self.namespace.join(key).key

    @abstractmethod
    def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    def mtime(self, key: str) -> datetime: ...

    @abstractmethod
    def list_keys(self) -> set[str]:
        """Every object under the namespace, relative to it (directory markers end with '/'; a marker
        for the namespace itself is '')."""


class LocalNative(NativeStore):
    def put(self, key: str, data: bytes) -> None:
        path = Path(self.full_key(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def get(self, key: str) -> bytes | None:
        path = Path(self.full_key(key))
        return path.read_bytes() if path.is_file() else None

    def mtime(self, key: str) -> datetime:
        return datetime.fromtimestamp(Path(self.full_key(key)).stat().st_mtime, tz=timezone.utc)

    def list_keys(self) -> set[str]:
        root = Path(self.namespace.key)
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


class S3Native(NativeStore):
    def __init__(self, namespace: StorageLocation, server: MotoServer) -> None:
        super().__init__(namespace)
        self.client = s3_client(server)
        self.bucket = namespace.container

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.full_key(key), Body=data)

    def get(self, key: str) -> bytes | None:
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=self.full_key(key))["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        return body

    def mtime(self, key: str) -> datetime:
        modified: datetime = self.client.head_object(Bucket=self.bucket, Key=self.full_key(key))[
            "LastModified"
        ]
        return modified

    def list_keys(self) -> set[str]:
        prefix = self.namespace.key.rstrip("/") + "/"
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return {obj["Key"][len(prefix) :] for page in pages for obj in page.get("Contents", [])}


class AzureNative(NativeStore):
    def __init__(self, namespace: StorageLocation, server: AzuriteServer) -> None:
        super().__init__(namespace)
        self.container = blob_service(server).get_container_client(namespace.container)

    def put(self, key: str, data: bytes) -> None:
        self.container.upload_blob(self.full_key(key), data, overwrite=True)

    def get(self, key: str) -> bytes | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self.container.download_blob(self.full_key(key)).readall()
        except ResourceNotFoundError:
            return None

    def mtime(self, key: str) -> datetime:
        modified: datetime = (
            self.container.get_blob_client(self.full_key(key)).get_blob_properties().last_modified
        )
        return modified

    def list_keys(self) -> set[str]:
        prefix = self.namespace.key.rstrip("/") + "/"
        return {b.name[len(prefix) :] for b in self.container.list_blobs(name_starts_with=prefix)}


@dataclass(frozen=True)
class Backend:
    """A storage namespace on one backend, the options to reach it, and a native client for checks."""

    namespace: str
    options: StorageOptions
    native: NativeStore

    @property
    def location(self) -> StorageLocation:
        return parse_storage_namespace(self.namespace, local_root=self.options.local_root)

    def sibling(self) -> Backend:
        """Another namespace beside this one, on the same store (same bucket, container or root)."""
        namespace = self.namespace[: self.namespace.index("repos/repo-")] + new_repo()
        native = copy.copy(self.native)
        native.namespace = parse_storage_namespace(namespace, local_root=self.options.local_root)
        return Backend(namespace, self.options, native)

    def long_key(self) -> str:
        """A relative key making the object's whole key exactly 1 KiB, in path segments short enough
        for local file systems (255 bytes per name)."""
        remaining = KEY_LIMIT - len(self.location.key.rstrip("/").encode()) - 1
        segments = []
        while remaining > 200:
            segments.append("d" * 199)
            remaining -= 200
        return "/".join([*segments, "f" * remaining])


def payload(key: str) -> bytes:
    return f"contents of {key!r}".encode()


def new_repo() -> str:
    return f"repos/repo-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def local_backend(tmp_path: Path) -> Backend:
    options = StorageOptions(local_root=str(tmp_path / "blockstore"))
    namespace = f"local://{new_repo()}"
    return Backend(
        namespace, options, LocalNative(parse_storage_namespace(namespace, local_root=options.local_root))
    )


@pytest.fixture
def s3_backend(moto: MotoServer, s3_bucket: str) -> Backend:
    s3 = s3_options(moto)
    namespace = f"s3://{s3_bucket}/{new_repo()}"
    native = S3Native(parse_storage_namespace(namespace), moto)
    return Backend(namespace, StorageOptions(s3=s3), native)


@pytest.fixture
def azure_backend(azurite: AzuriteServer, azure_container: str) -> Backend:
    azure = azure_options(azurite)
    namespace = f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}/{new_repo()}"
    return Backend(
        namespace, StorageOptions(azure=azure), AzureNative(parse_storage_namespace(namespace), azurite)
    )
