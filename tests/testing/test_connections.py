"""Closing a client, or stopping the test server, leaves no connection open.

Every descriptor a test process leaks pushes its next ones up; py4j's callback server watches its
sockets with ``select()``, which refuses a descriptor >= 1024, and from then on no
``foreachBatch`` call reaches Python and every streaming query of the session hangs. A whole
suite runs hundreds of servers and clients in one process, so each must give back what it took.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from lakefs_sdk.api.repositories_api import RepositoriesApi
from lakefs_sdk.api_client import ApiClient

from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.testing.server import LakeFSTestServer


def socket_inodes() -> set[str]:
    """This process's open sockets (``socket:[inode]``)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the descriptor of the listing itself, closed since
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:"):
                found.add(link)
    return found


def handler_thread_set() -> set[threading.Thread]:
    """The running threads that serve one connection each (the test server's handlers)."""
    return {t for t in threading.enumerate() if t.name.endswith("(process_request_thread)")}


def settles(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_closed_clients_and_a_stopped_server_leave_no_socket(tmp_path: Path) -> None:
    sockets, threads = socket_inodes(), handler_thread_set()
    with LakeFSTestServer(storage_root=tmp_path) as server:
        for _ in range(3):  # each client keeps its keep-alive connection until it is closed
            with server.sdk_client() as api:
                RepositoriesApi(api).list_repositories()
            with LakeFSClient(server.connection()) as client:
                client.grace_period()
        assert settles(lambda: not handler_thread_set() - threads), (
            "a closed client's connection is still served"
        )
    # the sockets opened since, not a count: one of an earlier test's, closed meanwhile, is not ours
    assert settles(lambda: not socket_inodes() - sockets), (
        f"{len(socket_inodes() - sockets)} sockets left open"
    )


def test_stopping_the_server_ends_the_connections_its_clients_kept(tmp_path: Path) -> None:
    sockets, threads = socket_inodes(), handler_thread_set()
    with LakeFSTestServer(storage_root=tmp_path) as server:
        kept = ApiClient(server.sdk_configuration())  # never closed: its pool keeps the connection
        RepositoriesApi(kept).list_repositories()
        assert len(handler_thread_set() - threads) == 1
        assert len(socket_inodes() - sockets) == 3  # the listener, the served end, the client's end
    # the server's end is closed (its handler saw EOF and ended); only the client's end remains
    assert settles(lambda: not handler_thread_set() - threads), "the stopped server still serves a connection"
    assert settles(lambda: len(socket_inodes() - sockets) == 1)
    kept.rest_client.pool_manager.clear()
