"""A fresh lakeFS-compatible test server per test, reached through lakefs-sdk over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.sdk import Lakefs


@pytest.fixture
def storage_root(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    root.mkdir()
    return root


@pytest.fixture
def server(storage_root: Path) -> Iterator[LakeFSTestServer]:
    with LakeFSTestServer(storage_root=storage_root) as running:
        yield running


@pytest.fixture
def lakefs(server: LakeFSTestServer) -> Iterator[Lakefs]:
    with server.sdk_client() as client:
        yield Lakefs(client)
