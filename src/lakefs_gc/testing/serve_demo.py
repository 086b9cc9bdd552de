"""The embedded default of ``lakefs-gc serve``: the demo repository, served and kept busy.

With no configuration, ``lakefs-gc serve`` runs against this, so a newcomer can watch the service
work with nothing else installed: the lakeFS-compatible test server in-process, the ``demo``
repository of ``lakefs-gc demo`` (every kind of garbage beside what must survive, with the real
24 h cutoff and grace period), an S3-flavoured inventory delivery of its namespace, and object
notifications written by the test server to a local directory, which the service reads as its
queue. A writer thread keeps uploading and deleting objects on a branch, so events keep flowing;
those objects are younger than the cutoff, so they are candidates that the cycles keep.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakefs_gc.testing.demo import REPOSITORY, Scenario, build_scenario

_log = logging.getLogger(__name__)

#: how often the writer thread uploads (and deletes every other) object
WRITE_EVERY_S = 5.0


@dataclass(frozen=True)
class DemoSetting:
    scenario: Scenario
    connection: dict[str, str]
    storage_root: Path
    events_dir: Path
    inventory_dir: Path
    state_dir: Path

    def settings(self, *, metrics_port: int, interval: str, tick: str) -> dict[str, Any]:
        """The service settings (a config file's contents) for this setting."""
        return {
            "lakefs": self.connection,
            "storage": {"local_root": str(self.storage_root)},
            "repositories": [REPOSITORY],
            "service": {
                "state": str(self.state_dir),
                "metrics_port": metrics_port,
                "interval": interval,
                "tick": tick,
                "inventory": str(self.inventory_dir),
                "inventory_trigger": "10s",
                "events": {"local": {"type": "directory", "path": str(self.events_dir)}},
                "events_trigger": "2s",
                "shutdown_timeout": "60s",
            },
        }


@contextmanager
def demo_setting(workdir: Path) -> Iterator[DemoSetting]:
    """Start the test server with notifications, build the repository, write an inventory."""
    from lakefs_gc.inventory.generate import generate_delivery
    from lakefs_gc.storage.filesystems import StorageOptions
    from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
    from lakefs_gc.testing.context import ServerSettings
    from lakefs_gc.testing.notifications import DirectoryNotifier
    from lakefs_gc.testing.server import LakeFSTestServer

    storage_root = (workdir / "storage").resolve()
    events_dir, inventory_dir = workdir / "events", workdir / "inventory"
    for d in (storage_root, events_dir, inventory_dir):
        d.mkdir(parents=True, exist_ok=True)
    settings = ServerSettings(notifications=DirectoryNotifier(events_dir))
    with LakeFSTestServer(storage_root=storage_root, settings=settings) as server:
        now = datetime.now(timezone.utc)
        scenario = build_scenario(server.sdk_configuration(), storage_root, now=now, scratch=workdir)
        options = StorageOptions(local_root=str(storage_root))
        namespace = parse_storage_namespace(scenario.namespace, local_root=str(storage_root))
        destination = parse_location(str(inventory_dir.resolve()))
        generate_delivery(namespace, options, destination)
        setting = DemoSetting(
            scenario, server.connection_info(), storage_root, events_dir, inventory_dir, workdir / "state"
        )
        with _Writer(server.sdk_configuration(), workdir):
            yield setting


class _Writer:
    """Uploads an object to branch ``live`` every few seconds and deletes the one before."""

    def __init__(self, configuration: Any, workdir: Path) -> None:
        self.configuration, self.workdir = configuration, workdir
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="demo-writer", daemon=True)

    def __enter__(self) -> _Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        from lakefs_sdk.api.branches_api import BranchesApi
        from lakefs_sdk.api.objects_api import ObjectsApi
        from lakefs_sdk.models.branch_creation import BranchCreation

        from lakefs_gc.lakefs.sdk import sdk_client

        content = self.workdir / "live-content"
        with sdk_client(self.configuration) as client:
            objects = ObjectsApi(client)
            try:
                BranchesApi(client).create_branch(
                    REPOSITORY, BranchCreation.from_dict({"name": "live", "source": "main"})
                )
                n = 0
                while not self.stop.wait(WRITE_EVERY_S):
                    n += 1
                    content.write_bytes(f"live object {n}\n".encode())
                    objects.upload_object(REPOSITORY, "live", f"live/{n}.txt", content=str(content))
                    if n % 2 == 0:
                        objects.delete_object(REPOSITORY, "live", f"live/{n - 1}.txt")
            except Exception as e:  # the demo goes on without new events
                if not self.stop.is_set():
                    _log.warning("demo writer stopped: %s", e)


def fates(scenario: Scenario) -> tuple[int, list[str]]:
    """How many garbage objects of the story are gone, and every survivor that is not (problems).

    Only the story's objects are judged: the writer thread's objects are younger than the cutoff.
    """
    present = {p.relative_to(scenario.namespace_dir).as_posix() for p in scenario.namespace_dir.rglob("*")}
    deleted, problems = 0, []
    for obj in scenario.objects:
        gone = obj.physical_address not in present
        if obj.expect_deleted and gone:
            deleted += 1
        if not obj.expect_deleted and gone:
            problems.append(f"{obj.name}: DELETED, but it must survive ({obj.why})")
    return deleted, problems
