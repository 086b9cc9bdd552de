"""End-to-end GC fixtures (a pytest plugin of the suite): the test server on local, S3 (moto) and Azure
(Azurite) namespaces, and the CLI run in-process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakefs_gc.cli.main import main
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.testing.blockstore import NamespaceStore
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.server import LakeFSTestServer
from tests.support.object_stores import azure_options, s3_options
from tests.support.servers import AzuriteServer, MotoServer
from tests.testing.sdk import Lakefs


@dataclass
class GcEnv:
    """A test server, its SDK, and how the GC CLI reaches it and its storage."""

    server: LakeFSTestServer
    lakefs: Lakefs
    storage_root: Path
    options: StorageOptions
    extra_args: list[str] = field(default_factory=list)

    def args(self) -> list[str]:
        info = self.server.connection_info()
        return [
            "--lakefs-endpoint", info["endpoint"],
            f"--lakefs-access-key-id={info['access_key_id']}",  # generated keys may start with "-"
            f"--lakefs-secret-access-key={info['secret_access_key']}",
            "--local-root", str(self.storage_root),
            *self.extra_args,
        ]  # fmt: skip

    def store(self, namespace: str) -> NamespaceStore:
        return NamespaceStore(
            namespace, self.options.model_copy(update={"local_root": str(self.storage_root)})
        )


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    """Run ``lakefs-gc`` in-process; return (exit code, JSON result lines, stderr)."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return code, lines, err


def gc_env(
    tmp_path: Path,
    options: StorageOptions,
    blockstores: tuple[str, ...],
    extra: list[str],
    server_settings: ServerSettings | None = None,
) -> Iterator[GcEnv]:
    root = tmp_path / "storage"
    root.mkdir()
    settings = replace(server_settings or ServerSettings(), storage=options, blockstores=blockstores)
    with (
        LakeFSTestServer(storage_root=root, settings=settings) as server,
        server.sdk_client() as client,
    ):
        yield GcEnv(server, Lakefs(client), root, options, extra)


@pytest.fixture
def local_env(tmp_path: Path) -> Iterator[GcEnv]:
    yield from gc_env(tmp_path, StorageOptions(), ("local",), [])


@pytest.fixture
def cloud_env(tmp_path: Path, moto: MotoServer, azurite: AzuriteServer) -> Iterator[GcEnv]:
    # S3 keys come from a config file: flags deliberately do not take them (boto3's chain does),
    # and executors do not see environment variables set after Spark started.
    config = tmp_path / "gc.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {
                    "s3": {"access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}
                }
            }
        )
    )
    options = StorageOptions(s3=s3_options(moto), azure=azure_options(azurite))
    extra = [
        "--config", str(config), "--s3-endpoint", moto.endpoint_url, "--s3-region", moto.region,
        "--azure-blob-endpoint", azurite.blob_endpoint, "--azure-account-key", azurite.account_key,
    ]  # fmt: skip
    yield from gc_env(tmp_path, options, ("local", "s3", "azure"), extra)
