"""Contract tests for the storage ports: one abstract class per port, one subclass per backend.

Backends: local files, S3 on a moto server, Azure Blob on Azurite. Every check is made against an
*independent* client of the store (``pathlib``, boto3, azure-storage-blob): objects written natively must
read back through the port, and objects written through the port must be found natively under exactly
the key we meant. That is the GC's situation: lakeFS and other writers put objects, we read and list them.

Keys cover what real namespaces contain: spaces, ``+``, a literal ``%xx``, ``#`` and ``?`` (which are not
URL syntax inside a key), non-ASCII, and a name of exactly 1 KiB (the S3 and Azure limit).
"""

from __future__ import annotations

import posixpath
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation, parse_location, parse_storage_namespace
from lakefs_gc.testing.blockstore import NamespaceStore
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

    def long_key(self) -> str:
        """A relative key making the object's whole key exactly 1 KiB, in path segments short enough
        for local file systems (255 bytes per name)."""
        remaining = KEY_LIMIT - len(self.location.key.rstrip("/").encode()) - 1
        segments = []
        while remaining > 200:
            segments.append("d" * 199)
            remaining -= 200
        return "/".join([*segments, "f" * remaining])


def _payload(key: str) -> bytes:
    return f"contents of {key!r}".encode()


def _repo() -> str:
    return f"repos/repo-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def local_backend(tmp_path: Path) -> Backend:
    options = StorageOptions(local_root=str(tmp_path / "blockstore"))
    namespace = f"local://{_repo()}"
    return Backend(
        namespace, options, LocalNative(parse_storage_namespace(namespace, local_root=options.local_root))
    )


@pytest.fixture
def s3_backend(moto: MotoServer, s3_bucket: str) -> Backend:
    s3 = s3_options(moto)
    namespace = f"s3://{s3_bucket}/{_repo()}"
    native = S3Native(parse_storage_namespace(namespace), moto)
    return Backend(namespace, StorageOptions(s3=s3), native)


@pytest.fixture
def azure_backend(azurite: AzuriteServer, azure_container: str) -> Backend:
    azure = azure_options(azurite)
    namespace = f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}/{_repo()}"
    return Backend(
        namespace, StorageOptions(azure=azure), AzureNative(parse_storage_namespace(namespace), azurite)
    )


@pytest.fixture(params=list(KEYS))
def key(request: pytest.FixtureRequest, backend: Backend) -> str:
    if request.param != "long-1KiB":
        return KEYS[request.param]
    key = backend.long_key()
    assert len(backend.native.full_key(key).encode()) == KEY_LIMIT
    return key


class FilesystemContract:
    """``parse_storage_namespace``/``parse_location`` + ``filesystem_for``: the pyarrow filesystem the GC
    reads exports, ranges and listings through."""

    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError

    def _open(self, backend: Backend, key: str) -> tuple[pafs.FileSystem, str]:
        return filesystem_for(backend.location.join(key), backend.options)

    def test_reads_objects_written_natively(self, backend: Backend, key: str) -> None:
        backend.native.put(key, _payload(key))
        fs, path = self._open(backend, key)
        with fs.open_input_stream(path) as f:
            assert f.read() == _payload(key)

    def test_file_info_gives_size_and_mtime_of_the_store(self, backend: Backend, key: str) -> None:
        before = datetime.now(timezone.utc)
        backend.native.put(key, _payload(key))
        after = datetime.now(timezone.utc)
        fs, path = self._open(backend, key)
        info = fs.get_file_info(path)
        assert (info.type, info.size) == (pafs.FileType.File, len(_payload(key)))
        assert info.mtime is not None and info.mtime.utcoffset() == timedelta(0)
        assert abs(info.mtime - backend.native.mtime(key)) < timedelta(milliseconds=1)
        assert before - timedelta(seconds=1) <= info.mtime <= after + timedelta(seconds=1)

    def test_lists_recursively_with_keys_verbatim(self, backend: Backend) -> None:
        keys = {*KEYS.values(), backend.long_key()} - {""}
        for k in keys:
            backend.native.put(k, _payload(k))
        fs, base = filesystem_for(backend.location, backend.options)
        listed = fs.get_file_info(pafs.FileSelector(base, recursive=True))
        files = {i.path[len(base) + 1 :]: i.size for i in listed if i.type == pafs.FileType.File}
        assert files == {k: len(_payload(k)) for k in keys}

    def test_writes_land_under_the_exact_key(self, backend: Backend, key: str) -> None:
        fs, path = self._open(backend, key)
        if isinstance(fs, pafs.LocalFileSystem):  # object stores have no directories to create
            fs.create_dir(posixpath.dirname(path), recursive=True)
        with fs.open_output_stream(path) as out:
            out.write(_payload(key))
        assert backend.native.get(key) == _payload(key)
        assert backend.native.list_keys() == {key}

    def test_delete_removes_the_object(self, backend: Backend, key: str) -> None:
        backend.native.put(key, _payload(key))
        fs, path = self._open(backend, key)
        fs.delete_file(path)
        assert backend.native.get(key) is None
        assert fs.get_file_info(path).type == pafs.FileType.NotFound
        # pyarrow may leave "parent/" markers behind on object stores (cloud-formats.md §0.10)
        assert {k for k in backend.native.list_keys() if k and not k.endswith("/")} == set()

    def test_missing_object_is_not_found(self, backend: Backend) -> None:
        fs, path = self._open(backend, "no/such/object")
        assert fs.get_file_info(path).type == pafs.FileType.NotFound
        with pytest.raises(FileNotFoundError):
            fs.open_input_stream(path)
        with pytest.raises(FileNotFoundError):
            fs.delete_file(path)

    def test_location_uri_parses_back_to_the_same_object(
        self, backend: Backend, key: str, request: pytest.FixtureRequest
    ) -> None:
        joined = backend.location.join(key)
        parsed = parse_location(str(joined), local_root=backend.options.local_root)
        assert (parsed.kind, parsed.container, parsed.key) == (joined.kind, joined.container, joined.key)


class NamespaceStoreContract:
    """``lakefs_gc.testing.blockstore.NamespaceStore``: the test server's view of a storage namespace."""

    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError

    @pytest.fixture
    def store(self, backend: Backend) -> NamespaceStore:
        return NamespaceStore(backend.namespace, backend.options)

    def test_put_then_get_info_exists(self, backend: Backend, store: NamespaceStore, key: str) -> None:
        store.put(key, _payload(key))
        assert store.get(key) == _payload(key)
        assert backend.native.get(key) == _payload(key)
        info = store.info(key)
        assert info is not None and info[0] == len(_payload(key))
        assert store.exists(key)

    def test_put_overwrites(self, backend: Backend, store: NamespaceStore) -> None:
        store.put("a/b", b"first")
        store.put("a/b", b"second")
        assert store.get("a/b") == b"second"

    def test_reads_objects_written_natively(self, backend: Backend, store: NamespaceStore, key: str) -> None:
        backend.native.put(key, _payload(key))
        assert store.get(key) == _payload(key)
        assert store.exists(key)
        size, mtime = store.info(key) or (None, None)
        assert size == len(_payload(key))
        assert mtime is not None and abs(mtime - backend.native.mtime(key)) < timedelta(milliseconds=1)

    def test_delete(self, backend: Backend, store: NamespaceStore, key: str) -> None:
        backend.native.put(key, _payload(key))
        store.delete(key)
        assert backend.native.get(key) is None
        assert (store.get(key), store.info(key), store.exists(key)) == (None, None, False)

    def test_missing_object(self, store: NamespaceStore) -> None:
        assert (store.get("nope"), store.info("nope"), store.exists("nope")) == (None, None, False)
        store.delete("nope")  # deleting what is gone is not an error

    def test_qualified_is_what_lakefs_reports(
        self, backend: Backend, store: NamespaceStore, key: str
    ) -> None:
        if backend.location.kind == "local":
            expected = "local://" + backend.native.full_key(key)
        else:
            expected = backend.namespace + "/" + key
        assert store.qualified(key) == expected

    def test_qualified_round_trips_to_the_object(
        self, backend: Backend, store: NamespaceStore, key: str, request: pytest.FixtureRequest
    ) -> None:
        backend.native.put(key, _payload(key))
        location = parse_location(store.qualified(key), local_root=backend.options.local_root)
        fs, path = filesystem_for(location, backend.options)
        with fs.open_input_stream(path) as f:
            assert f.read() == _payload(key)

    @pytest.mark.parametrize("bad", ["../escape", "a/../../escape", "/absolute"])
    def test_refuses_keys_outside_the_namespace(self, store: NamespaceStore, bad: str) -> None:
        with pytest.raises(StorageError):
            store.path(bad)


class TestLocalFilesystem(FilesystemContract):
    @pytest.fixture
    def backend(self, local_backend: Backend) -> Backend:
        return local_backend


class TestS3Filesystem(FilesystemContract):
    @pytest.fixture
    def backend(self, s3_backend: Backend) -> Backend:
        return s3_backend


class TestAzureFilesystem(FilesystemContract):
    @pytest.fixture
    def backend(self, azure_backend: Backend) -> Backend:
        return azure_backend


class TestLocalNamespaceStore(NamespaceStoreContract):
    @pytest.fixture
    def backend(self, local_backend: Backend) -> Backend:
        return local_backend


class TestS3NamespaceStore(NamespaceStoreContract):
    @pytest.fixture
    def backend(self, s3_backend: Backend) -> Backend:
        return s3_backend


class TestAzureNamespaceStore(NamespaceStoreContract):
    @pytest.fixture
    def backend(self, azure_backend: Backend) -> Backend:
        return azure_backend


def test_pyarrow_can_write_to_moto(s3_backend: Backend) -> None:
    """Any pyarrow write to S3 ends in a multipart upload; moto 5.2.0-5.2.1 answered it with the wrong
    root element (getmoto/moto#10055), which is why pyproject requires moto>=5.2.2."""
    fs, path = filesystem_for(s3_backend.location.join("tiny"), s3_backend.options)
    with fs.open_output_stream(path) as out:
        out.write(b"x")
    assert s3_backend.native.get("tiny") == b"x"
