"""The deleter port's contract (:class:`DeleterContract`, the sweep's port: storage/deleters.py) on
local files, S3 (moto) and Azure (Azurite).

Checks are made with each store's native client: what was asked is gone under exactly that key, every
neighbour (decoys named like a key cut at ``#`` or ``?``, or with ``%xx`` decoded) is untouched, and the
outcomes come back one per address, in order. Error codes S3 stores answer but moto never does are
served by a real HTTP server with a canned DeleteObjects response.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from lakefs_gc.errors import ConfigError, StorageError
from lakefs_gc.storage.clients import s3_client
from lakefs_gc.storage.deleters import (
    AZURE_MAX_BATCH,
    S3_MAX_BATCH,
    AzureBlobBulkDeleter,
    BulkDeleter,
    DeleteOutcome,
    LocalBulkDeleter,
)
from lakefs_gc.storage.deleting import deleter_for
from lakefs_gc.storage.filesystems import S3Options, StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from lakefs_gc.storage.s3_deleter import S3BulkDeleter
from tests.contracts.backends import KEYS, Backend
from tests.storage.test_clients import Request, stub_server
from tests.storage.test_listing import long_key
from tests.support.object_stores import blob_service, s3_options
from tests.support.servers import AzuriteServer, MotoServer

SPECIAL = [f"data/special/{k}" for k in KEYS.values() if k]
#: what a store holds if a key were cut at '#'/'?' or had its %xx decoded: must survive
DECOYS = [
    "data/special/hash",
    "data/special/question",
    "data/special/percent literal/not-decoded.txt",
    "data/special/percent%20literal",
]
REFUSED = ["_lakefs/x", "../x", "data/x", "s3://b/k", "/abs/x", "data/a/../../x", "dummy", "", "data/a//b"]


class DeleterContract:
    #: what the store reports for a key that does not exist (S3 cannot tell)
    absent: str = "missing"

    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError

    @pytest.fixture
    def deleter(self, backend: Backend) -> Any:
        deleter = deleter_for(backend.location, backend.options)
        yield deleter
        deleter.close()

    def spy(self, deleter: Any) -> list[int] | None:
        """Records the size of every request the deleter makes (None: the backend makes none)."""
        return None

    def test_outcomes_in_input_order(self, backend: Backend, deleter: BulkDeleter) -> None:
        for key in ("data/s/1", "data/s/2", "legacy-root-object", "_lakefs/x", "data/x"):
            backend.native.put(key, b"1")
        asked = ["data/s/2", "_lakefs/x", "data/s/absent", "legacy-root-object", "data/x", "data/s/1"]
        outcomes = deleter.delete(asked)
        assert [o.address for o in outcomes] == asked
        assert [o.outcome for o in outcomes] == [
            "deleted",
            "failed",
            self.absent,
            "deleted",
            "failed",
            "deleted",
        ]
        assert [o.error is None for o in outcomes] == [True, False, True, True, False, True]
        assert backend.native.list_keys() == {"_lakefs/x", "data/x"}

    def test_special_keys_are_deleted_under_exactly_their_key(
        self, backend: Backend, deleter: BulkDeleter
    ) -> None:
        keys = [*SPECIAL, long_key(backend, "data/long/")]
        for key in keys + DECOYS:
            backend.native.put(key, b"1")
        outcomes = deleter.delete(keys)
        assert [(o.address, o.outcome, o.error) for o in outcomes] == [(k, "deleted", None) for k in keys]
        assert backend.native.list_keys() == set(DECOYS)
        again = deleter.delete(keys)
        assert {o.outcome for o in again} == {self.absent}

    def test_refuses_keys_that_are_not_deletable(self, backend: Backend, deleter: BulkDeleter) -> None:
        for key in ("_lakefs/x", "data/x", "dummy", "data/a/b"):
            backend.native.put(key, b"1")
        outcomes = deleter.delete(REFUSED)
        assert [o.address for o in outcomes] == REFUSED
        for outcome in outcomes:
            assert outcome.outcome == "failed"
            assert outcome.error is not None
            assert outcome.error.startswith("refused: ") and "not a deletable key" in outcome.error
        assert backend.native.list_keys() == {"_lakefs/x", "data/x", "dummy", "data/a/b"}

    def test_more_than_one_request_in_one_call(self, backend: Backend, deleter: BulkDeleter) -> None:
        n = deleter.max_batch + 5
        keys = [f"data/s{i % 7}/{i:05d}" for i in range(n)]
        for key in keys:
            backend.native.put(key, b"")
        requests = self.spy(deleter)
        outcomes = deleter.delete(keys)
        assert [o.address for o in outcomes] == keys
        assert {o.outcome for o in outcomes} == {"deleted"}
        assert backend.native.list_keys() == set()
        if requests is not None:
            assert requests == [deleter.max_batch, 5]

    def test_duplicates_and_empty_input(self, backend: Backend, deleter: BulkDeleter) -> None:
        backend.native.put("data/s/x", b"1")
        outcomes = deleter.delete(["data/s/x", "_lakefs/y", "data/s/x"])
        assert outcomes == [
            DeleteOutcome("data/s/x", "deleted"),
            DeleteOutcome("_lakefs/y", "failed", "refused: '_lakefs/y' is not a deletable key"),
            DeleteOutcome("data/s/x", "deleted"),
        ]
        assert deleter.delete([]) == []


class TestLocalDeleter(DeleterContract):
    @pytest.fixture
    def backend(self, local_backend: Backend) -> Backend:
        return local_backend

    def test_a_directory_is_a_failure(self, backend: Backend, deleter: BulkDeleter) -> None:
        backend.native.put("data/s/dir/x", b"1")
        (outcome,) = deleter.delete(["data/s/dir"])
        assert outcome.outcome == "failed" and "IsADirectoryError" in (outcome.error or "")

    def test_refuses_to_follow_a_symlink_out_of_the_namespace(
        self, backend: Backend, deleter: BulkDeleter, tmp_path: Path
    ) -> None:
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "victim").write_bytes(b"1")
        backend.native.put("data/s/x", b"1")
        os.symlink(outside, backend.native.full_key("data/link"))
        (outcome,) = deleter.delete(["data/link/victim"])
        assert outcome.outcome == "failed" and "outside the namespace" in (outcome.error or "")
        assert (outside / "victim").exists()

    def test_refuses_files_modified_after_the_cutoff(self, backend: Backend) -> None:
        backend.native.put("data/s/old", b"1")
        backend.native.put("data/s/new", b"1")
        cutoff = datetime.now(timezone.utc) - timedelta(hours=1)
        old = (cutoff - timedelta(hours=1)).timestamp()
        os.utime(backend.native.full_key("data/s/old"), (old, old))
        with deleter_for(backend.location, backend.options, not_modified_since=cutoff) as deleter:
            old_outcome, new_outcome = deleter.delete(["data/s/old", "data/s/new"])
        assert old_outcome == DeleteOutcome("data/s/old", "deleted")
        assert new_outcome.outcome == "failed"
        assert "refused: modified" in (new_outcome.error or "") and "after the mark's cutoff" in (
            new_outcome.error or ""
        )
        assert backend.native.list_keys() == {"data/s/new"}

    def test_absent_namespace_means_missing(self, tmp_path: Path) -> None:
        deleter = LocalBulkDeleter(str(tmp_path / "no-such-namespace"))
        assert deleter.delete(["data/s/x"]) == [DeleteOutcome("data/s/x", "missing")]


class TestS3Deleter(DeleterContract):
    absent = "deleted"  # DeleteObjects reports absent keys as Deleted

    @pytest.fixture
    def backend(self, s3_backend: Backend) -> Backend:
        return s3_backend

    def spy(self, deleter: Any) -> list[int] | None:
        sizes: list[int] = []

        def record(params: dict[str, Any], **kwargs: Any) -> None:
            sizes.append(len(params["Delete"]["Objects"]))
            assert params["Delete"]["Quiet"] is False

        deleter.client.meta.events.register("provide-client-params.s3.DeleteObjects", record)
        return sizes

    def test_a_failed_request_fails_its_batch(self, backend: Backend) -> None:
        namespace = parse_storage_namespace(f"s3://no-such-bucket-{os.getpid()}/repo")
        with deleter_for(namespace, backend.options) as deleter:
            outcomes = deleter.delete(["data/s/1", "data/s/2"])
        assert [o.outcome for o in outcomes] == ["failed", "failed"]
        assert all("NoSuchBucket" in (o.error or "") for o in outcomes)


class TestAzureDeleter(DeleterContract):
    @pytest.fixture
    def backend(self, azure_backend: Backend) -> Backend:
        return azure_backend

    def spy(self, deleter: Any) -> list[int] | None:
        sizes: list[int] = []
        deleter.container_client = _CountingContainer(deleter.container_client, sizes)
        return sizes

    def test_a_leased_blob_fails_with_the_stores_reason(
        self, backend: Backend, deleter: BulkDeleter, azurite: AzuriteServer
    ) -> None:
        backend.native.put("data/s/leased", b"1")
        backend.native.put("data/s/free", b"1")
        container = blob_service(azurite).get_container_client(backend.location.container)
        container.get_blob_client(backend.native.full_key("data/s/leased")).acquire_lease()
        leased, free = deleter.delete(["data/s/leased", "data/s/free"])
        assert free == DeleteOutcome("data/s/free", "deleted")
        assert leased.outcome == "failed" and (leased.error or "").startswith("412 ")
        assert "LeaseIdMissing" in (leased.error or "")
        assert backend.native.list_keys() == {"data/s/leased"}

    def test_refuses_blobs_modified_after_the_cutoff(self, backend: Backend) -> None:
        """If-Unmodified-Since rides on every sub-request: the store compares, not a racy HEAD."""
        backend.native.put("data/s/x", b"1")
        before = datetime.now(timezone.utc) - timedelta(hours=1)
        with deleter_for(backend.location, backend.options, not_modified_since=before) as deleter:
            (refused,) = deleter.delete(["data/s/x"])
        assert refused.outcome == "failed" and "refused: modified after the mark's cutoff" in (
            refused.error or ""
        )
        assert backend.native.list_keys() == {"data/s/x"}
        after = datetime.now(timezone.utc) + timedelta(hours=1)
        with deleter_for(backend.location, backend.options, not_modified_since=after) as deleter:
            assert deleter.delete(["data/s/x"]) == [DeleteOutcome("data/s/x", "deleted")]
        assert backend.native.list_keys() == set()

    def test_snapshots_are_deleted_with_the_blob(
        self, backend: Backend, deleter: BulkDeleter, azurite: AzuriteServer
    ) -> None:
        backend.native.put("data/s/x", b"1")
        container = blob_service(azurite).get_container_client(backend.location.container)
        container.get_blob_client(backend.native.full_key("data/s/x")).create_snapshot()
        assert deleter.delete(["data/s/x"]) == [DeleteOutcome("data/s/x", "deleted")]
        assert list(container.list_blobs(include=["snapshots"])) == []

    def test_a_missing_container_is_a_failure_not_missing_objects(self, backend: Backend) -> None:
        """The store answers 404 per blob here too, but ContainerNotFound: never read as "already gone"."""
        location = backend.location
        other = parse_location(f"https://{location.account}.blob.core.windows.net/no-such-container/repo")
        with deleter_for(other, backend.options) as deleter:
            outcomes = deleter.delete(["data/s/1", "data/s/2"])
        assert [o.outcome for o in outcomes] == ["failed", "failed"]
        assert all("ContainerNotFound" in (o.error or "") for o in outcomes)


class _CountingContainer:
    """The real ContainerClient, recording the size of each blob batch on the way through."""

    def __init__(self, inner: Any, sizes: list[int]) -> None:
        self._inner = inner
        self._sizes = sizes

    def delete_blobs(self, *blobs: str, **kwargs: Any) -> Any:
        self._sizes.append(len(blobs))
        return self._inner.delete_blobs(*blobs, **kwargs)

    def close(self) -> None:
        self._inner.close()


# -- what S3 stores answer that moto does not ---------------------------------------------------------------

_DELETE_RESULT = """<?xml version="1.0" encoding="UTF-8"?>
<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<Deleted><Key>ns/data/s/gone</Key></Deleted>
<Error><Key>ns/data/s/absent</Key><Code>NoSuchKey</Code><Message>Gone</Message></Error>
<Error><Key>ns/data/s/locked #1</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error>
<Deleted><Key>ns/data/s/not-asked</Key></Deleted>
</DeleteResult>"""


def test_s3_error_codes_map_to_outcomes() -> None:
    def respond(request: Request) -> tuple[int, dict[str, str], bytes]:
        assert request.method == "POST" and request.path.startswith("/bucket?delete")
        return 200, {"Content-Type": "application/xml"}, _DELETE_RESULT.encode()

    with stub_server(respond) as stub:
        options = S3Options(
            endpoint_url=stub.url, region="us-east-1", access_key_id="k", secret_access_key=SecretStr("s")
        )
        deleter = S3BulkDeleter(s3_client(options), "bucket", "ns/")
        outcomes = deleter.delete(["data/s/gone", "data/s/absent", "data/s/locked #1", "data/s/unmentioned"])
        deleter.close()
    assert outcomes == [
        DeleteOutcome("data/s/gone", "deleted"),
        DeleteOutcome("data/s/absent", "missing"),
        DeleteOutcome("data/s/locked #1", "failed", "AccessDenied: Access Denied"),
        DeleteOutcome("data/s/unmentioned", "failed", "the store's answer did not mention this key"),
    ]
    body = stub.requests[0].body.decode()
    assert "<Key>ns/data/s/locked #1</Key>" in body and "<Quiet>false</Quiet>" in body


def test_s3_keys_join_the_namespace_prefix_exactly(moto: MotoServer, s3_bucket: str) -> None:
    options = s3_options(moto)
    client = s3_client(options)
    client.put_object(Bucket=s3_bucket, Key="data/s/x", Body=b"1")  # namespace at the bucket root
    client.put_object(Bucket=s3_bucket, Key="a/b/data/s/x", Body=b"1")
    for namespace_key, expected_left in (("a/b/", {"data/s/x"}), ("", set())):
        S3BulkDeleter(client, s3_bucket, namespace_key).delete(["data/s/x"])
        left = {o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket).get("Contents", [])}
        assert left == expected_left


# -- construction -------------------------------------------------------------------------------------------


def test_deleter_for_each_kind(tmp_path: Path) -> None:
    options = StorageOptions(local_root=str(tmp_path), s3=S3Options(region="us-east-1"))
    assert isinstance(
        deleter_for(parse_storage_namespace("local://repo", local_root=str(tmp_path)), options),
        LocalBulkDeleter,
    )
    s3 = deleter_for(parse_location("s3://bucket/a/b"), options)
    assert isinstance(s3, S3BulkDeleter) and (s3.bucket, s3.prefix, s3.max_batch) == (
        "bucket",
        "a/b/",
        S3_MAX_BATCH,
    )
    azure = deleter_for(parse_location("https://acct.blob.core.windows.net/c/repo/"), options)
    assert isinstance(azure, AzureBlobBulkDeleter) and (azure.prefix, azure.max_batch) == (
        "repo/",
        AZURE_MAX_BATCH,
    )
    with pytest.raises(StorageError, match="'gs' are not supported"):
        deleter_for(parse_location("gs://bucket/repo"), options)


@pytest.mark.parametrize("max_batch", [0, S3_MAX_BATCH + 1])
def test_s3_batch_size_is_bounded(max_batch: int) -> None:
    with pytest.raises(ConfigError, match="max_batch"):
        S3BulkDeleter(None, "b", "", max_batch=max_batch)


def test_azure_batch_size_is_bounded() -> None:
    with pytest.raises(ConfigError, match=r"1\.\.256"):
        AzureBlobBulkDeleter(None, "", max_batch=AZURE_MAX_BATCH + 1)
