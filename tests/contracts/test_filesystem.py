"""Contract tests for the storage ports: one abstract class per port, one subclass per backend.

Backends: local files, S3 on a moto server, Azure Blob on Azurite. Every check is made against an
*independent* client of the store (``pathlib``, boto3, azure-storage-blob): objects written natively must
read back through the port, and objects written through the port must be found natively under exactly
the key we meant. That is the GC's situation: lakeFS and other writers put objects, we read and list them.

Keys cover what real namespaces contain: spaces, ``+``, a literal ``%xx``, ``#`` and ``?`` (which are not
URL syntax inside a key), non-ASCII, and a name of exactly 1 KiB (the S3 and Azure limit).
"""

from __future__ import annotations

import hashlib
import posixpath
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from lakefs_gc.errors import StorageError
from lakefs_gc.storage import reads
from lakefs_gc.storage.filesystems import file_exists, filesystem_for
from lakefs_gc.storage.locations import parse_location
from lakefs_gc.storage.reads import ObjectNotFound, fetched_file, read_once
from lakefs_gc.testing.blockstore import NamespaceStore
from tests.contracts.backends import KEY_LIMIT, KEYS, Backend, payload


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
        backend.native.put(key, payload(key))
        fs, path = self._open(backend, key)
        with fs.open_input_stream(path) as f:
            assert f.read() == payload(key)

    def test_file_info_gives_size_and_mtime_of_the_store(self, backend: Backend, key: str) -> None:
        before = datetime.now(timezone.utc)
        backend.native.put(key, payload(key))
        after = datetime.now(timezone.utc)
        fs, path = self._open(backend, key)
        info = fs.get_file_info(path)
        assert (info.type, info.size) == (pafs.FileType.File, len(payload(key)))
        assert info.mtime is not None and info.mtime.utcoffset() == timedelta(0)
        assert abs(info.mtime - backend.native.mtime(key)) < timedelta(milliseconds=1)
        assert before - timedelta(seconds=1) <= info.mtime <= after + timedelta(seconds=1)

    def test_lists_recursively_with_keys_verbatim(self, backend: Backend) -> None:
        keys = {*KEYS.values(), backend.long_key()} - {""}
        for k in keys:
            backend.native.put(k, payload(k))
        fs, base = filesystem_for(backend.location, backend.options)
        listed = fs.get_file_info(pafs.FileSelector(base, recursive=True))
        files = {i.path[len(base) + 1 :]: i.size for i in listed if i.type == pafs.FileType.File}
        assert files == {k: len(payload(k)) for k in keys}

    def test_writes_land_under_the_exact_key(self, backend: Backend, key: str) -> None:
        fs, path = self._open(backend, key)
        if isinstance(fs, pafs.LocalFileSystem):  # object stores have no directories to create
            fs.create_dir(posixpath.dirname(path), recursive=True)
        with fs.open_output_stream(path) as out:
            out.write(payload(key))
        assert backend.native.get(key) == payload(key)
        assert backend.native.list_keys() == {key}

    def test_delete_removes_the_object(self, backend: Backend, key: str) -> None:
        backend.native.put(key, payload(key))
        fs, path = self._open(backend, key)
        fs.delete_file(path)
        assert backend.native.get(key) is None
        assert fs.get_file_info(path).type == pafs.FileType.NotFound
        # pyarrow may leave "parent/" markers behind on object stores
        # (docs/formats/object-stores.md, "Directory markers")
        assert {k for k in backend.native.list_keys() if k and not k.endswith("/")} == set()

    def test_missing_object_is_not_found(self, backend: Backend) -> None:
        fs, path = self._open(backend, "no/such/object")
        assert fs.get_file_info(path).type == pafs.FileType.NotFound
        with pytest.raises(FileNotFoundError):
            fs.open_input_stream(path)
        with pytest.raises(FileNotFoundError):
            fs.delete_file(path)

    def test_file_exists_answers_as_get_file_info_does(self, backend: Backend, key: str) -> None:
        """``file_exists`` (one HEAD, where ``get_file_info`` of a missing file also lists): a
        file written natively exists; a missing one does not, nor does a directory above a file
        (``get_file_info``'s answer, which it takes over for anything but a file or nothing)."""
        backend.native.put(key, payload(key))
        assert file_exists(*self._open(backend, key))
        assert not file_exists(*self._open(backend, "no/such/_SUCCESS"))
        backend.native.put("dir/inside", payload("dir/inside"))
        assert not file_exists(*self._open(backend, "dir"))

    def test_read_once_gives_the_bytes_and_their_md5_and_leaves_no_copy(
        self, backend: Backend, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``read_once``: the object's bytes where the caller parses them, their MD5 over reads
        smaller than the object; a copy (object stores) lives in Spark's local directory only
        inside the context, also when the caller fails there."""
        scratch = tmp_path / "spark-local"
        scratch.mkdir()
        monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{scratch},{tmp_path / 'second'}")
        monkeypatch.setattr(reads, "READ_CHUNK", 7)
        data = payload(key) * 5
        backend.native.put(key, data)
        fs, path = self._open(backend, key)
        with read_once(fs, path) as read:
            with read.fs.open_input_file(read.path) as f:
                assert f.read() == data
            assert read.md5 == hashlib.md5(data).hexdigest()
            copies = 0 if isinstance(fs, pafs.LocalFileSystem) else 1  # a local file is read in place
            assert len(list(scratch.iterdir())) == copies
        assert list(scratch.iterdir()) == []
        with pytest.raises(ValueError, match="the caller's"), read_once(*self._open(backend, key)):
            raise ValueError("the caller's")
        assert list(scratch.iterdir()) == []

    def test_read_once_of_a_missing_object_names_it(self, backend: Backend) -> None:
        fs, path = self._open(backend, "no/such/object")
        with pytest.raises(ObjectNotFound, match="no/such/object: cannot read"), read_once(fs, path):
            pass
        with pytest.raises(ObjectNotFound, match="no/such/object: cannot read"), fetched_file(fs, path):
            pass

    def test_fetched_file_reads_at_any_offset(
        self, backend: Backend, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``fetched_file`` (how SSTables are opened): random access to the object's bytes."""
        scratch = tmp_path / "spark-local"
        scratch.mkdir()
        monkeypatch.setenv("SPARK_LOCAL_DIRS", str(scratch))
        data = payload(key) * 3
        backend.native.put(key, data)
        with fetched_file(*self._open(backend, key)) as f:
            read = (f.size(), f.read_at(5, 3), f.read_at(len(data) - 2, 2))
        assert read == (len(data), data[3:8], data[2:])
        assert list(scratch.iterdir()) == []

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
        store.put(key, payload(key))
        assert store.get(key) == payload(key)
        assert backend.native.get(key) == payload(key)
        info = store.info(key)
        assert info is not None and info[0] == len(payload(key))
        assert store.exists(key)

    def test_put_overwrites(self, backend: Backend, store: NamespaceStore) -> None:
        store.put("a/b", b"first")
        store.put("a/b", b"second")
        assert store.get("a/b") == b"second"

    def test_reads_objects_written_natively(self, backend: Backend, store: NamespaceStore, key: str) -> None:
        backend.native.put(key, payload(key))
        assert store.get(key) == payload(key)
        assert store.exists(key)
        size, mtime = store.info(key) or (None, None)
        assert size == len(payload(key))
        assert mtime is not None and abs(mtime - backend.native.mtime(key)) < timedelta(milliseconds=1)

    def test_delete(self, backend: Backend, store: NamespaceStore, key: str) -> None:
        backend.native.put(key, payload(key))
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
        backend.native.put(key, payload(key))
        location = parse_location(store.qualified(key), local_root=backend.options.local_root)
        fs, path = filesystem_for(location, backend.options)
        with fs.open_input_stream(path) as f:
            assert f.read() == payload(key)

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
