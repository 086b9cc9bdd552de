"""Start the lakeFS-compatible test server in-process (tests, demo, benchmarks) or as a command.

with LakeFSTestServer(storage_root=tmp_path) as server:
    with server.sdk_client() as client:
        ...
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from lakefs_gc.lakefs.sdk import sdk_client
from lakefs_gc.lakefs.settings import LakeFSConnection
from lakefs_gc.testing.api import Services, build_router
from lakefs_gc.testing.context import ServerContext, ServerSettings, utc_now
from lakefs_gc.testing.faults import FaultPlan
from lakefs_gc.testing.gc_exports import GcExports
from lakefs_gc.testing.http import ApiServer, Credentials
from lakefs_gc.testing.objects import Objects
from lakefs_gc.testing.refs import Refs
from lakefs_gc.testing.store import Store

if TYPE_CHECKING:
    from lakefs_sdk.api_client import ApiClient
    from lakefs_sdk.configuration import Configuration


class LakeFSTestServer:
    """A running server; stop it with :meth:`stop` or by leaving the ``with`` block."""

    def __init__(
        self,
        *,
        storage_root: Path,
        settings: ServerSettings | None = None,
        state_dir: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        credentials: Credentials | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        settings = settings or ServerSettings()
        storage = settings.storage.model_copy(update={"local_root": str(storage_root)})
        self.settings = replace(settings, storage=storage)
        self.store = Store(state_dir)
        self.ctx = ServerContext(self.store, self.settings, clock)
        refs = Refs(self.ctx)
        self.services = Services(self.ctx, refs, Objects(refs), GcExports(refs))
        self.credentials = credentials or Credentials.generate()
        #: misbehaviour to inject per endpoint (500s, timeouts, truncated answers); empty = none
        self.faults = FaultPlan()
        self._http = ApiServer((host, port), build_router(self.services), self.credentials, self.faults)
        self._http.serve_in_thread()

    @property
    def endpoint(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}/api/v1"

    @property
    def unrouted_requests(self) -> list[str]:
        """``"METHOD /path"`` of the recent requests no route of the server serves (404/405)."""
        return list(self._http.router.unrouted)

    def connection_info(self) -> dict[str, str]:
        return {
            "endpoint": self.endpoint,
            "access_key_id": self.credentials.access_key_id,
            "secret_access_key": self.credentials.secret_access_key,
        }

    def connection(self) -> LakeFSConnection:
        """How our own client (``lakefs_gc.lakefs``) reaches this server."""
        return LakeFSConnection.model_validate(self.connection_info())

    def sdk_configuration(self) -> Configuration:
        from lakefs_sdk.configuration import Configuration

        return Configuration(
            host=self.endpoint,
            username=self.credentials.access_key_id,
            password=self.credentials.secret_access_key,
        )

    def sdk_client(self) -> AbstractContextManager[ApiClient]:
        """An SDK client of this server; leaving the ``with`` block closes its connections."""
        return sdk_client(self.sdk_configuration())

    def stop(self) -> None:
        self.faults.close()
        self._http.shutdown()
        self._http.server_close()
        self.store.close()

    def __enter__(self) -> LakeFSTestServer:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LakeFSTestServer({self.endpoint})"


def run_forever(server: LakeFSTestServer, print_line: Callable[[str], Any]) -> None:
    """Print the connection line and serve until SIGINT or SIGTERM, then stop cleanly."""
    import json
    import signal
    import threading

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print_line(json.dumps(server.connection_info()))
    try:
        stop.wait()
    finally:
        server.stop()
