"""lakeFS's own high-level clients (``lakefs``, ``lakefs-spec``) against the test server.

These suites use nothing else to talk to lakeFS: what they show is what a lakeFS user's code sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lakefs.client import Client
from lakefs_spec import LakeFSFileSystem

import lakefs
from lakefs_gc.testing.server import LakeFSTestServer


@dataclass
class Clients:
    """A running test server and the two clients a lakeFS user would point at it."""

    server: LakeFSTestServer
    client: Client
    fs: LakeFSFileSystem
    storage_root: Path

    @property
    def storage_options(self) -> dict[str, Any]:
        """What pandas passes to fsspec for ``lakefs://`` paths."""
        return connection(self.server)

    def repository(self, name: str) -> lakefs.Repository:
        return lakefs.Repository(name, client=self.client).create(storage_namespace=f"local://{name}")


def connection(server: LakeFSTestServer) -> dict[str, Any]:
    """lakeFS's client settings for the server: host (without ``/api/v1``) and key pair."""
    info = server.connection_info()
    return {
        "host": info["endpoint"].removesuffix("/api/v1"),
        "username": info["access_key_id"],
        "password": info["secret_access_key"],
    }


def start_clients(storage_root: Path) -> Iterator[Clients]:
    with LakeFSTestServer(storage_root=storage_root) as server:
        options = connection(server)
        clients = Clients(server, Client(**options), LakeFSFileSystem(**options), storage_root)
        yield clients
        assert server.unrouted_requests == [], "a client called a route the test server lacks"


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[Clients]:
    yield from start_clients(tmp_path / "storage")
