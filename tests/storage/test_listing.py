"""Contract tests for storage/listing.py on local files, S3 (moto) and Azure Blob (Azurite).

Objects are written with each store's native client and must come back from the listing exactly: the
namespace-relative address, the size, and the store's modification time. A listing that fails part-way
must raise, never end short (checked against a real HTTP server that fails on the second page).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.filesystems import filesystem_for
from lakefs_gc.storage.listing import (
    LISTING_SCHEMA,
    Child,
    iter_listing,
    iter_root_files,
    list_children,
)
from tests.contracts.backends import KEY_LIMIT, KEYS, Backend, azure_backend, local_backend, s3_backend
from tests.storage.test_clients import Request, stub_server

# the contracts' backends, as fixtures of this module too
__all__ = ["azure_backend", "local_backend", "s3_backend"]

SPECIAL = [k for k in KEYS.values() if k]  # spaces, +, %xx, #, ?, unicode


def payload(key: str) -> bytes:
    return f"<{key}>".encode() * (1 + len(key) % 3)


def long_key(backend: Backend, prefix: str) -> str:
    """``prefix`` + segments making the object's whole key exactly 1 KiB (names ≤ 255 bytes)."""
    remaining = KEY_LIMIT - len(backend.native.full_key(prefix).encode())
    segments = []
    while remaining > 200:
        segments.append("d" * 199)
        remaining -= 200
    key = prefix + "/".join([*segments, "f" * remaining])
    assert len(backend.native.full_key(key).encode()) == KEY_LIMIT
    return key


def make_empty_dir(backend: Backend, key: str) -> None:
    """An empty directory: a real one on local files, a zero-byte ``key/`` marker object elsewhere."""
    if backend.location.kind == "local":
        Path(backend.native.full_key(key)).mkdir(parents=True)
    else:
        backend.native.put(key.rstrip("/") + "/", b"")


def rows(batches: list[pa.RecordBatch]) -> dict[str, tuple[int, datetime]]:
    table = pa.Table.from_batches(batches, schema=LISTING_SCHEMA)
    addresses = table.column("address").to_pylist()
    assert len(addresses) == len(set(addresses)), "an object was listed twice"
    return dict(
        zip(
            addresses,
            zip(table.column("size").to_pylist(), table.column("last_modified").to_pylist(), strict=True),
            strict=True,
        )
    )


class ListingContract:
    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError

    @pytest.fixture
    def fs_base(self, backend: Backend) -> tuple[pafs.FileSystem, str]:
        return filesystem_for(backend.location, backend.options)

    def put_all(self, backend: Backend, keys: list[str]) -> None:
        for key in keys:
            backend.native.put(key, payload(key))

    def test_lists_data_slices_exactly_as_written(
        self, backend: Backend, fs_base: tuple[pafs.FileSystem, str]
    ) -> None:
        fs, base = fs_base
        data = [
            "data/a/b/c/x",  # sharded: data/<shard>/<sub-shard>/<partition>/<xid>
            "data/a/b/y",
            "data/gq1/ce8cob",
            *(f"data/special/{k}" for k in SPECIAL),
        ]
        data.append(long_key(backend, "data/long/"))
        others = ["root-object", "_lakefs/range-1", "_lakefs/retention/gc/x.csv", "data/loose-file"]
        self.put_all(backend, data + others)

        children = list_children(fs, f"{base}/data")
        assert children == sorted(
            [
                Child("a", True),
                Child("gq1", True),
                Child("long", True),
                Child("loose-file", False),
                Child("special", True),
            ],
            key=lambda c: c.name,
        )
        listed: dict[str, tuple[int, datetime]] = {}
        for child in children:
            if child.is_dir:
                batches = list(iter_listing(fs, base, f"data/{child.name}/"))
                assert all(b.schema == LISTING_SCHEMA for b in batches)
                listed.update(rows(batches))
        assert {a: size for a, (size, _) in listed.items()} == {k: len(payload(k)) for k in data}
        for address, (_, modified) in listed.items():
            assert modified.utcoffset() == timedelta(0)
            assert abs(modified - backend.native.mtime(address)) < timedelta(milliseconds=1), address

    def test_root_files_only(self, backend: Backend, fs_base: tuple[pafs.FileSystem, str]) -> None:
        fs, base = fs_base
        root = ["legacy-object", "dummy", *(k.replace("/", "_") for k in SPECIAL)]
        self.put_all(backend, [*root, "data/s/x", "_lakefs/y", "other-dir/z"])
        listed = rows(list(iter_root_files(fs, base)))
        assert {a: size for a, (size, _) in listed.items()} == {k: len(payload(k)) for k in root}
        for address, (_, modified) in listed.items():
            assert abs(modified - backend.native.mtime(address)) < timedelta(milliseconds=1)

    def test_empty_and_absent_directories(
        self, backend: Backend, fs_base: tuple[pafs.FileSystem, str]
    ) -> None:
        fs, base = fs_base
        make_empty_dir(backend, "data/empty")
        make_empty_dir(backend, "data/s/marker")
        backend.native.put("data/s/x", b"1")
        assert Child("empty", True) in list_children(fs, f"{base}/data")
        assert list(iter_listing(fs, base, "data/empty/")) == []
        assert set(rows(list(iter_listing(fs, base, "data/s/")))) == {"data/s/x"}
        assert list(iter_listing(fs, base, "data/absent/")) == []
        assert list_children(fs, f"{base}/data/absent") == []
        assert list_children(fs, f"{base}-no-such-namespace/data") == []
        assert list(iter_root_files(fs, f"{base}-no-such-namespace")) == []

    def test_batches_of_batch_rows(self, backend: Backend, fs_base: tuple[pafs.FileSystem, str]) -> None:
        fs, base = fs_base
        keys = [f"data/s/{i:02d}" for i in range(5)]
        self.put_all(backend, keys)
        batches = list(iter_listing(fs, base, "data/s", batch_rows=2))
        assert [b.num_rows for b in batches] == [2, 2, 1]
        assert set(rows(batches)) == set(keys)
        assert [b.num_rows for b in iter_listing(fs, base, "data/s/", batch_rows=5)] == [5]

    @pytest.mark.parametrize("prefix", ["../x/", "/data/s/", "data/../_lakefs/", "data//s/", "./data/"])
    def test_prefix_must_stay_in_the_namespace(
        self, fs_base: tuple[pafs.FileSystem, str], prefix: str
    ) -> None:
        fs, base = fs_base
        with pytest.raises(StorageError, match="namespace-relative"):
            iter_listing(fs, base, prefix)

    def test_batch_rows_must_be_positive(self, fs_base: tuple[pafs.FileSystem, str]) -> None:
        fs, base = fs_base
        with pytest.raises(StorageError, match="batch_rows"):
            iter_listing(fs, base, "data/s/", batch_rows=0)


class TestLocalListing(ListingContract):
    @pytest.fixture
    def backend(self, local_backend: Backend) -> Backend:
        return local_backend

    def test_listing_a_file_as_a_directory_fails(
        self, backend: Backend, fs_base: tuple[pafs.FileSystem, str]
    ) -> None:
        fs, base = fs_base
        backend.native.put("data/loose-file", b"1")
        with pytest.raises(StorageError, match="data/loose-file"):
            iter_listing(fs, base, "data/loose-file/")


class TestS3Listing(ListingContract):
    @pytest.fixture
    def backend(self, s3_backend: Backend) -> Backend:
        return s3_backend


class TestAzureListing(ListingContract):
    @pytest.fixture
    def backend(self, azure_backend: Backend) -> Backend:
        return azure_backend


# -- fail closed: a store failing part-way through a listing ----------------------------------------------

_PAGE_1 = b"""<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<Name>bucket</Name><Prefix>ns/data/s/</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>
<IsTruncated>true</IsTruncated><NextContinuationToken>page-2</NextContinuationToken>
<Contents><Key>ns/data/s/first</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>
<ETag>"0"</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>
</ListBucketResult>"""
_DENIED = b"""<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"""


def _fails_on_page_2(request: Request) -> tuple[int, dict[str, str], bytes]:
    if "continuation-token=page-2" in request.path:
        return 403, {"Content-Type": "application/xml"}, _DENIED
    return 200, {"Content-Type": "application/xml"}, _PAGE_1


def test_a_listing_failing_on_a_later_page_raises_instead_of_ending_short() -> None:
    with stub_server(_fails_on_page_2) as stub:
        fs = pafs.S3FileSystem(
            access_key="k", secret_key="s", region="us-east-1",
            endpoint_override=stub.url.removeprefix("http://"), scheme="http",
        )  # fmt: skip
        with pytest.raises(StorageError, match="bucket/ns/data/s/") as raised:
            list(iter_listing(fs, "bucket/ns", "data/s/"))
        assert "Access Denied" in str(raised.value)
        assert any("continuation-token=page-2" in r.path for r in stub.requests)
        with pytest.raises(StorageError, match="bucket/ns/"):
            list(iter_root_files(fs, "bucket/ns"))
