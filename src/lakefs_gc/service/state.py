"""Where the service keeps things: its state on any store, its Spark checkpoints on the driver.

``service.state`` is a location (a path, ``file://``, ``s3://``, Azure ``https://``) that the
driver and every executor reach through ``pyarrow.fs``: the event spools, the event and candidate
tables with the dead letters, the range cache, the cycle records and the lease. On a cluster the
executors are other machines, so nothing they read may be on the driver's disk.

``service.checkpoints`` holds what only the driver touches: Spark's offset and commit logs (every
query is stateless with idempotent sinks, so no executor writes a checkpoint) and the inventory
delivery log. Spark writes checkpoints through Hadoop, so they are a local directory on the driver
(a persistent volume on Kubernetes) or a Hadoop URI the cluster opens (``s3a://``, ``abfss://``,
:mod:`lakefs_gc.storage.checkpoints`). Layout, both relative to their root::

    state:        events/table/  events/<source>/spool/  inventory/table/  range-cache/<repo>/
                  cycles/<repo>/batches/  _lease.json  _layout.json (:mod:`.layout`)
    checkpoints:  events/<source>/checkpoint/  inventory/checkpoint/  cycles/<repo>/checkpoint/

With a local state and no ``service.checkpoints``, both roots are the state directory: the layout
of a service that has always kept everything in one local directory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from lakefs_gc.errors import ConfigError
from lakefs_gc.service.settings import ServiceSettings
from lakefs_gc.storage.checkpoints import CheckpointRoot
from lakefs_gc.storage.directories import StoreDirectory


@dataclass(frozen=True)
class ServiceState:
    """The state location and the checkpoint directory of one service."""

    directory: StoreDirectory
    checkpoints: CheckpointRoot

    @classmethod
    def of(cls, settings: ServiceSettings) -> ServiceState:
        svc = settings.service
        if svc.state is None:
            raise ConfigError(
                "service.state is required: a directory or location (s3://, Azure https://) for the "
                "service's state"
            )
        directory = StoreDirectory.of(svc.state, settings.storage)
        if svc.checkpoints is not None:
            checkpoints = CheckpointRoot.of(svc.checkpoints, settings.storage)
        elif directory.is_local:
            checkpoints = CheckpointRoot.of(directory.local_path)
        else:
            digest = hashlib.sha256(directory.uri().encode()).hexdigest()[:12]
            checkpoints = CheckpointRoot.of(Path.home() / ".lakefs-gc" / "checkpoints" / digest)
        return cls(directory, checkpoints)

    @property
    def display(self) -> Path | str:
        """The state as people know it: a local directory, or a URI."""
        return self.directory.local_path if self.directory.is_local else self.directory.uri()

    def sub(self, relative: str) -> StoreDirectory:
        return self.directory.sub(relative)

    def checkpoint(self, relative: str) -> CheckpointRoot:
        return self.checkpoints.sub(f"{relative}/checkpoint")
