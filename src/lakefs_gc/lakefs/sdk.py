"""lakeFS SDK clients that release their connections when closed.

``ApiClient.close()`` stops only the SDK's thread pool: its urllib3 pool keeps every keep-alive
connection open until the client is garbage-collected. A service that opens a client per cycle
for months, or a test process that opens hundreds, then runs out of descriptors below 1024, the
only ones py4j's callback server can watch (it uses ``select()``): ``foreachBatch`` calls stop
arriving and the streaming queries hang.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lakefs_sdk.api_client import ApiClient
from lakefs_sdk.configuration import Configuration


def close_sdk_client(api: ApiClient) -> None:
    """Close an SDK client's pooled connections as well as its thread pool."""
    api.close()  # type: ignore[no-untyped-call]
    manager = api.rest_client.pool_manager
    for key in manager.pools.keys():  # noqa: SIM118 (the container refuses iteration)
        # closed here: clear() only drops the pools, and a response kept by the client (its
        # last_response) keeps its pool, and so every connection in it, alive
        manager.pools[key].close()
    manager.clear()


@contextmanager
def sdk_client(configuration: Configuration) -> Iterator[ApiClient]:
    """An SDK client whose connections are closed on leaving (see :func:`close_sdk_client`)."""
    api = ApiClient(configuration)
    try:
        yield api
    finally:
        close_sdk_client(api)
