"""The copier port's contract (:class:`CopierContract`: backup's and restore's port,
storage/copiers.py) on local files, S3 (moto) and Azure (Azurite), and across stores.

Two namespaces of one store (a server-side copy: S3 ``CopyObject``, Azure Copy Blob, a local hard
link) or of two (a streamed copy); every check is made with the stores' native clients: what was
copied is at exactly its key with its bytes, nothing is ever overwritten or deleted, and every
address gets one outcome (``copied``, ``already``, ``missing``, ``conflict``, ``failed``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lakefs_gc.storage.copiers import ObjectCopier, copier_for
from lakefs_gc.storage.filesystems import StorageOptions
from tests.contracts.backends import KEYS, Backend, payload

SPECIAL = [f"data/special/{k}" for k in KEYS.values() if k]


class CopierContract:
    """What every copier does; a subclass gives ``source`` and ``destination``."""

    @pytest.fixture
    def source(self) -> Backend:
        raise NotImplementedError

    @pytest.fixture
    def destination(self, source: Backend) -> Backend:
        return source.sibling()

    @pytest.fixture
    def copier(self, source: Backend, destination: Backend) -> Iterator[ObjectCopier]:
        options = StorageOptions(
            local_root=source.options.local_root or destination.options.local_root,
            s3=source.options.s3 if source.options.s3.endpoint_url else destination.options.s3,
            azure=source.options.azure if source.options.azure.blob_endpoint else destination.options.azure,
        )
        copier = copier_for(source.location, destination.location, options)
        yield copier
        copier.close()

    def test_copies_under_exactly_the_same_key(
        self, source: Backend, destination: Backend, copier: ObjectCopier
    ) -> None:
        for key in SPECIAL:
            source.native.put(key, payload(key))
        outcomes = [copier.copy(key) for key in SPECIAL]
        assert [(o.address, o.outcome, o.size) for o in outcomes] == [
            (key, "copied", len(payload(key))) for key in SPECIAL
        ]
        assert destination.native.list_keys() == set(SPECIAL)
        assert all(destination.native.get(key) == payload(key) for key in SPECIAL)
        assert source.native.list_keys() == set(SPECIAL)  # nothing moved, nothing deleted

    def test_a_second_run_finds_what_the_first_copied(
        self, source: Backend, destination: Backend, copier: ObjectCopier
    ) -> None:
        source.native.put("data/s/a", b"abc")
        assert copier.copy("data/s/a").outcome == "copied"
        again = copier.copy("data/s/a")
        assert (again.outcome, again.size, again.error) == ("already", 3, None)

    def test_a_different_object_is_a_conflict_and_left_alone(  # sizes differ: comparable everywhere
        self, source: Backend, destination: Backend, copier: ObjectCopier
    ) -> None:
        source.native.put("data/s/a", b"the source")
        destination.native.put("data/s/a", b"newer, longer data")
        outcome = copier.copy("data/s/a")
        assert outcome.outcome == "conflict" and "not overwritten" in (outcome.error or "")
        assert destination.native.get("data/s/a") == b"newer, longer data"

    def test_an_object_neither_side_has_is_missing(self, copier: ObjectCopier, destination: Backend) -> None:
        assert copier.copy("data/s/nowhere").outcome == "missing"
        assert destination.native.list_keys() == set()

    def test_what_the_source_lost_but_the_destination_has_is_already_there(
        self, destination: Backend, copier: ObjectCopier
    ) -> None:
        destination.native.put("data/s/a", b"kept")
        assert copier.copy("data/s/a").outcome == "already"

    @pytest.mark.parametrize("address", ["_lakefs/x", "data/x", "../x", "dummy", ""])
    def test_refuses_keys_a_gc_never_touches(
        self, source: Backend, destination: Backend, copier: ObjectCopier, address: str
    ) -> None:
        if address in ("_lakefs/x", "data/x", "dummy"):  # keys a store can hold
            source.native.put(address, b"1")
        outcome = copier.copy(address)
        assert outcome.outcome == "failed" and "not a deletable key" in (outcome.error or "")
        assert destination.native.list_keys() == set()


class TestLocalCopier(CopierContract):
    @pytest.fixture
    def source(self, local_backend: Backend) -> Backend:
        return local_backend


class TestS3Copier(CopierContract):
    @pytest.fixture
    def source(self, s3_backend: Backend) -> Backend:
        return s3_backend


class TestAzureCopier(CopierContract):
    @pytest.fixture
    def source(self, azure_backend: Backend) -> Backend:
        return azure_backend


class TestStreamedCopierLocalToS3(CopierContract):
    """Across stores the bytes are streamed through the task (and checked against the source's MD5)."""

    @pytest.fixture
    def source(self, local_backend: Backend) -> Backend:
        return local_backend

    @pytest.fixture
    def destination(self, s3_backend: Backend) -> Backend:
        return s3_backend


class TestStreamedCopierAzureToLocal(CopierContract):
    @pytest.fixture
    def source(self, azure_backend: Backend) -> Backend:
        return azure_backend

    @pytest.fixture
    def destination(self, local_backend: Backend) -> Backend:
        return local_backend
