"""``Requests``: how the SQS and Storage Queue adapters spread a receive over concurrent requests.

The adapters' behaviour against the real emulators (each message once, no delete lost) is in
tests/contracts/test_event_queue.py; this is the plan itself, with a recording receive."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lakefs_gc.events.queues.base import QueueError, QueueMessage, Requests


def recording(calls: list[tuple[int, float]]) -> Callable[[int, float], list[QueueMessage]]:
    lock = threading.Lock()

    def receive_once(count: int, wait: float) -> list[QueueMessage]:
        with lock:
            calls.append((count, wait))
        return [QueueMessage(f"{count}-{i}", "{}", f"r{count}-{i}") for i in range(count)]

    return receive_once


def test_a_receive_is_split_into_requests_of_at_most_the_service_limit() -> None:
    calls: list[tuple[int, float]] = []
    requests = Requests(4, "test")
    got = requests.receive(recording(calls), 25, per_request=10, wait_seconds=2.0)
    requests.close()
    assert len(got) == 25
    # only the first request long-polls: a quiet queue costs one wait, not four
    assert sorted(calls) == [(5, 0.0), (10, 0.0), (10, 2.0)]


def test_no_more_requests_than_the_concurrency() -> None:
    calls: list[tuple[int, float]] = []
    requests = Requests(2, "test")
    got = requests.receive(recording(calls), 10_000, per_request=10, wait_seconds=1.0)
    requests.close()
    assert len(got) == 20 and sorted(calls) == [(10, 0.0), (10, 1.0)]


def test_one_request_at_a_time_runs_on_the_callers_thread() -> None:
    threads: set[str] = set()
    requests = Requests(1, "test")
    requests.map(lambda _: threads.add(threading.current_thread().name), [1, 2, 3])
    assert threads == {threading.current_thread().name}


def test_requests_run_at_once_and_an_error_waits_for_the_others() -> None:
    """The calls overlap (4 sleeps of 0.3 s take well under 1.2 s), and a failing one is raised
    only after every other call ended, so no request is left running behind the error."""
    ended: list[int] = []

    def call(i: int) -> int:
        time.sleep(0.3)
        if i == 0:
            raise QueueError("queue q: cannot receive: boom")
        ended.append(i)
        return i

    def slow(i: int) -> int:
        time.sleep(0.3)
        return i

    requests = Requests(4, "test")
    start = time.monotonic()
    assert requests.map(slow, [0, 1, 2, 3]) == [0, 1, 2, 3]
    assert time.monotonic() - start < 1.0
    with pytest.raises(QueueError, match="boom"):
        requests.map(call, [0, 1, 2, 3])
    assert sorted(ended) == [1, 2, 3]
    requests.close()
