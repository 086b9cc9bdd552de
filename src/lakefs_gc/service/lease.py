"""The lease on a service state: one ``lakefs-gc serve`` per state location.

Two services on one state would interleave their cycles: each cleans the range cache of parts the
other is reading, both sweep, and both drain into the same spools. The first service writes a
lease object ``<state>/_lease.json`` (owner host, pid, process start, a random token, expiry) and
renews it every third of ``service.lease_ttl``; a second one reads a valid lease of another owner
and refuses to start, naming it (:class:`~lakefs_gc.errors.StateInUseError`, exit 13). A lease
past its expiry is free (its owner died on another machine); so is one of a process of this host
that is no longer running (a restart after ``kill -9`` need not wait for the expiry).

Object stores offer no compare-and-swap through ``pyarrow.fs``, so taking a lease is write, wait
``settle`` and read back: of two services starting within the same moment, the one whose write
lands last keeps it and the other reads a foreign token and refuses. A service that finds its lease
taken over when renewing stops (:meth:`StateLease.renew` raises).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from lakefs_gc.errors import StateInUseError
from lakefs_gc.storage.directories import StoreDirectory

_log = logging.getLogger(__name__)

LEASE = "_lease.json"


@dataclass(frozen=True)
class LeaseOwner:
    host: str
    pid: int
    started: str  # the process's start (so a recycled pid is not taken for the owner)
    token: str
    acquired: str
    expires: str

    def describe(self) -> str:
        return f"host {self.host} pid {self.pid} (since {self.acquired}, lease valid until {self.expires})"


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), or "" where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _gone(owner: LeaseOwner, host: str) -> bool:
    """True when ``owner`` was a process of this host that is not running any more."""
    if owner.host != host or not owner.started:
        return False
    return _process_start(owner.pid) != owner.started


class StateLease:
    """This process's lease on ``directory`` (see the module docstring)."""

    def __init__(
        self,
        directory: StoreDirectory,
        ttl: timedelta,
        *,
        settle: float = 0.5,
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self.directory, self.ttl, self.settle, self.now = directory, ttl, settle, now
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.token = uuid.uuid4().hex
        self.renewed = 0.0  # time.monotonic() of the last write
        self.acquired: str | None = None
        self.held = False

    def acquire(self) -> None:
        """Take the lease, or raise :class:`StateInUseError` naming its owner."""
        current = self._read()
        if current is not None and current.token != self.token and self._valid(current):
            raise self._refusal(current)
        self._write()
        time.sleep(self.settle)
        current = self._read()
        if current is None or current.token != self.token:
            raise self._refusal(current)
        self.held = True
        _log.info("lease on %s taken until %s", self.directory, current.expires)

    def renew_if_due(self) -> None:
        if self.held and time.monotonic() - self.renewed >= self.ttl.total_seconds() / 3:
            self.renew()

    def renew(self) -> None:
        """Extend the lease; raises :class:`StateInUseError` when another service took it over."""
        current = self._read()
        if current is not None and current.token != self.token:
            self.held = False
            raise StateInUseError(
                f"the lease on service state {self.directory} was taken over by {current.describe()}: "
                "stopping, two services must never share a state"
            )
        self._write()

    def release(self) -> None:
        """Give the lease up (only if it is still ours)."""
        if not self.held:
            return
        self.held = False
        current = self._read()
        if current is not None and current.token == self.token:
            self.directory.delete(LEASE)

    def _valid(self, owner: LeaseOwner) -> bool:
        try:
            expires = datetime.fromisoformat(owner.expires)
        except ValueError:
            return False
        return expires > self.now() and not _gone(owner, self.host)

    def _refusal(self, owner: LeaseOwner | None) -> StateInUseError:
        who = owner.describe() if owner is not None else "another service (its lease changed as we took it)"
        return StateInUseError(
            f"service state {self.directory} is in use by lakefs-gc serve on {who}; stop that service "
            f"first (a crashed owner's lease expires after service.lease_ttl, {self.ttl})"
        )

    def _read(self) -> LeaseOwner | None:
        data = self.directory.read(LEASE)
        if data is None:
            return None
        try:
            body: dict[str, Any] = json.loads(data.decode("utf-8"))
            return LeaseOwner(**{k: body[k] for k in LeaseOwner.__dataclass_fields__})
        except (ValueError, KeyError, TypeError):
            _log.warning("lease %s is unreadable: taken as free", self.directory.uri(LEASE))
            return None

    def _write(self) -> None:
        now = self.now()
        self.acquired = self.acquired or now.isoformat()
        owner = LeaseOwner(
            self.host,
            self.pid,
            _process_start(self.pid),
            self.token,
            self.acquired,
            (now + self.ttl).isoformat(),
        )
        self.directory.write(LEASE, json.dumps(asdict(owner), indent=1).encode())
        self.renewed = time.monotonic()
