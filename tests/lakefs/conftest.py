"""Fixtures for the lakeFS access layer: a live fake server and a real client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from pydantic import SecretStr

from lakefs_gc.lakefs.client import LakeFSClient, PollingPolicy
from lakefs_gc.lakefs.retry import RetryPolicy
from lakefs_gc.lakefs.settings import LakeFSConnection
from tests.lakefs.fake_lakefs import FakeLakeFS, RunningFakeLakeFS


@dataclass
class FakeClock:
    """A monotonic clock that only moves when someone sleeps."""

    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake() -> Iterator[FakeLakeFS]:
    with RunningFakeLakeFS() as server:
        yield server


@pytest.fixture
def retry_sleeps() -> list[float]:
    return []


@pytest.fixture
def poll_clock() -> FakeClock:
    return FakeClock()


def make_client(
    endpoint: str,
    *,
    access_key_id: str = "AKIAFAKE",
    secret: str = "fake-secret",
    retry_sleeps: list[float] | None = None,
    poll_clock: FakeClock | None = None,
    timeout: float = 1200.0,
) -> LakeFSClient:
    sleeps = retry_sleeps if retry_sleeps is not None else []
    clock = poll_clock or FakeClock()
    connection = LakeFSConnection(
        endpoint=endpoint,
        access_key_id=access_key_id,
        secret_access_key=SecretStr(secret),
        connect_timeout=2,
        read_timeout=5,
    )
    return LakeFSClient(
        connection,
        retry=RetryPolicy(max_attempts=4, base_delay=0.5, max_delay=4, sleep=sleeps.append),
        polling=PollingPolicy(timeout=timeout, sleep=clock.sleep, clock=clock),
        source="tests",
    )


@pytest.fixture
def client(fake: FakeLakeFS, retry_sleeps: list[float], poll_clock: FakeClock) -> Iterator[LakeFSClient]:
    with make_client(fake.endpoint, retry_sleeps=retry_sleeps, poll_clock=poll_clock) as c:
        yield c
