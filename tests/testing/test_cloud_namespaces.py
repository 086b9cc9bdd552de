"""The test server with repositories on S3 (moto) and Azure Blob (Azurite) namespaces."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.server import LakeFSTestServer
from tests.support.object_stores import azure_options, blob_service, s3_client, s3_options
from tests.support.servers import AzuriteServer, MotoServer
from tests.testing.gc_view import gc_view
from tests.testing.sdk import Lakefs


@pytest.fixture
def cloud(
    tmp_path: Path, moto: MotoServer, azurite: AzuriteServer
) -> Iterator[tuple[Lakefs, StorageOptions, Path]]:
    options = StorageOptions(s3=s3_options(moto), azure=azure_options(azurite))
    settings = replace(ServerSettings(storage=options), blockstores=("local", "s3", "azure"))
    with (
        LakeFSTestServer(storage_root=tmp_path, settings=settings) as server,
        server.sdk_client() as client,
    ):
        yield Lakefs(client), options, tmp_path


def history(lakefs: Lakefs, repo: str) -> tuple[str, str]:
    """One committed object, one overwritten (garbage), one staged; returns (kept, staged) addresses."""
    lakefs.set_rules(repo, 1)
    lakefs.upload(repo, "main", "t/a", b"a")
    lakefs.upload(repo, "main", "t/b", b"old")
    lakefs.commit(repo, "main", "c1")
    kept = lakefs.objects.stat_object(repo, "main", "t/a").physical_address
    lakefs.upload(repo, "main", "t/b", b"new")
    lakefs.commit(repo, "main", "c2")
    staged = lakefs.upload(repo, "main", "t/s", b"s").physical_address
    assert lakefs.objects.get_object(repo, "main", "t/b") == b"new"
    return kept, staged


def relative(namespace: str, address: str) -> str:
    assert address.startswith(namespace.rstrip("/") + "/")
    return address[len(namespace.rstrip("/")) + 1 :]


def test_s3_namespace(cloud: tuple[Lakefs, StorageOptions, Path], moto: MotoServer, s3_bucket: str) -> None:
    lakefs, options, root = cloud
    namespace = f"s3://{s3_bucket}/repos/one"
    lakefs.create_repo("on-s3", namespace)
    repo = lakefs.repositories.get_repository("on-s3")
    assert repo.storage_id == "s3"
    configs = lakefs.config.get_config().storage_config_list
    expected = {"local": "local", "s3": "s3", "azure": "azure"}
    assert {c.blockstore_id: c.blockstore_type for c in configs} == expected
    kept, staged = history(lakefs, "on-s3")
    keys = {o["Key"] for o in s3_client(moto).list_objects_v2(Bucket=s3_bucket)["Contents"]}
    assert "repos/one/_lakefs/dummy" in keys
    assert "repos/one/" + relative(namespace, kept) in keys
    view = gc_view(lakefs, "on-s3", str(root), options)
    assert relative(namespace, kept) in view.committed
    assert view.uncommitted == {relative(namespace, staged)}


def test_azure_namespace(
    cloud: tuple[Lakefs, StorageOptions, Path], azurite: AzuriteServer, azure_container: str
) -> None:
    lakefs, options, root = cloud
    namespace = f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}/repos/two"
    lakefs.create_repo("on-azure", namespace)
    assert lakefs.repositories.get_repository("on-azure").storage_id == "azure"
    kept, staged = history(lakefs, "on-azure")
    container = blob_service(azurite).get_container_client(azure_container)
    names = {b.name for b in container.list_blobs()}
    assert "repos/two/_lakefs/dummy" in names and "repos/two/" + relative(namespace, kept) in names
    view = gc_view(lakefs, "on-azure", str(root), options)
    assert relative(namespace, kept) in view.committed
    assert view.uncommitted == {relative(namespace, staged)}
