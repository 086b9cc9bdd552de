"""The lakeFS REST API surface of the test server (``/api/v1``), one module per area."""

from __future__ import annotations

from dataclasses import dataclass

from lakefs_gc.testing.context import ServerContext
from lakefs_gc.testing.gc_exports import GcExports
from lakefs_gc.testing.http import Router
from lakefs_gc.testing.objects import Objects
from lakefs_gc.testing.refs import Refs


@dataclass(frozen=True)
class Services:
    ctx: ServerContext
    refs: Refs
    objects: Objects
    gc: GcExports


def build_router(services: Services) -> Router:
    from lakefs_gc.testing.api import config, diffs, gc, objects, repositories

    router = Router()
    for module in (config, repositories, objects, diffs, gc):
        module.register(router, services)
    return router
