"""The spool prefetcher (lakefs_gc.events.prefetch) on a real queue (the directory queue): every
message spooled once, in bounded files, acknowledged only after Spark's batch, errors raised."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path

import pytest

from lakefs_gc.events.prefetch import SpoolPrefetcher
from lakefs_gc.events.queues import EventQueue, QueueConfig, QueueError, QueueMessage, open_queue
from lakefs_gc.events.spool import Spool


def put(directory: Path, first: int, n: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(first, first + n):
        (directory / f"{i:06d}.json").write_text(json.dumps({"n": i}))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, EventQueue, Spool]]:
    queue = open_queue(
        QueueConfig(type="directory", path=str(tmp_path / "queue"), visibility_timeout_seconds=600)
    )
    yield tmp_path / "queue", queue, Spool(tmp_path / "spool")
    queue.close()


def messages_of(spool: Spool, seq: int) -> list[int]:
    return [json.loads(m["body"])["n"] for m in spool.read(seq)]


def wait_until(condition: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_every_message_is_spooled_once_in_bounded_files_and_acknowledged_after_its_batch(
    world: tuple[Path, EventQueue, Spool],
) -> None:
    directory, queue, spool = world
    put(directory, 0, 250)
    prefetcher = SpoolPrefetcher("t", lambda: queue, spool, after=0, cap=100, wait_seconds=0.2, ahead=2)
    try:
        wait_until(lambda: len(spool.sequences()) == 2)  # two files ahead, then it waits
        time.sleep(0.3)
        assert spool.sequences() == [1, 2] and len(list(directory.iterdir())) == 250  # nothing acknowledged
        seen: list[int] = []
        offset = 0
        while len(seen) < 250:
            end = prefetcher.take(offset, max_messages=100, timeout=5)
            assert end is not None
            for seq in range(offset + 1, end + 1):
                batch = messages_of(spool, seq)
                assert 0 < len(batch) <= 100
                seen += batch
            prefetcher.acknowledge_through(end)  # Spark committed the batch
            offset = end
        assert seen == list(range(250))
        assert prefetcher.take(offset, max_messages=100, timeout=0.3) is None  # the queue is empty
        wait_until(lambda: spool.sequences() == [] and not list(directory.iterdir()))
    finally:
        prefetcher.stop()


def test_a_batch_takes_as_many_waiting_files_as_fit(world: tuple[Path, EventQueue, Spool]) -> None:
    directory, queue, spool = world
    put(directory, 0, 90)
    prefetcher = SpoolPrefetcher("t", lambda: queue, spool, after=0, cap=30, wait_seconds=0.05, ahead=3)
    try:
        wait_until(lambda: len(spool.sequences()) == 3)  # three full files of 30
        assert prefetcher.take(0, max_messages=60, timeout=1) == 2  # 30 + 30 fit, the third does not
        assert prefetcher.take(2, max_messages=60, timeout=1) == 3
    finally:
        prefetcher.stop()


def test_leftovers_come_first_and_new_files_follow_them(world: tuple[Path, EventQueue, Spool]) -> None:
    directory, queue, spool = world
    now = datetime.now(timezone.utc)
    spool.write(2, [QueueMessage("old", '{"n": -2}', "gone-2")], now)  # acknowledged-to-be: batch 2 ran
    spool.write(3, [QueueMessage("left", '{"n": -3}', "gone-3")], now)  # drained, never logged: a leftover
    put(directory, 0, 5)
    prefetcher = SpoolPrefetcher("t", lambda: queue, spool, after=2, cap=100, wait_seconds=0.05, ahead=2)
    try:
        wait_until(lambda: 4 in spool.sequences())  # the queue's messages are spooled behind it
        assert prefetcher.take(2, max_messages=100, timeout=5) == 3  # the leftover alone: its size is unknown
        assert messages_of(spool, 3) == [-3]
        end = prefetcher.take(3, max_messages=100, timeout=5)
        assert end == 4 and messages_of(spool, 4) == list(range(5))
        wait_until(lambda: 2 not in spool.sequences() and 3 not in spool.sequences())  # acknowledged
    finally:
        prefetcher.stop()


class BrokenQueue:
    description = "a queue that fails"

    def __init__(self, fail_receive: bool) -> None:
        self.fail_receive, self.acks = fail_receive, 0

    def receive(self, max_messages: int, wait_seconds: float) -> list[QueueMessage]:
        if self.fail_receive:
            raise QueueError(f"{self.description}: access denied")
        time.sleep(wait_seconds)
        return []

    def acknowledge(self, receipts: Sequence[str]) -> list[str]:
        self.acks += 1
        raise QueueError(f"{self.description}: unreachable")

    def close(self) -> None:
        pass


def test_a_receive_error_stops_the_query_naming_the_source(world: tuple[Path, EventQueue, Spool]) -> None:
    _, _, spool = world
    prefetcher = SpoolPrefetcher(
        "events-x", lambda: BrokenQueue(True), spool, after=0, cap=10, wait_seconds=0.05, ahead=1
    )
    try:
        with pytest.raises(QueueError, match="event source events-x: a queue that fails: access denied"):
            prefetcher.take(0, max_messages=10, timeout=5)
    finally:
        prefetcher.stop()


def test_a_failed_acknowledgement_keeps_the_file_for_later(world: tuple[Path, EventQueue, Spool]) -> None:
    _, _, spool = world
    spool.write(1, [QueueMessage("m", "{}", "r")], datetime.now(timezone.utc))
    broken = BrokenQueue(False)
    prefetcher = SpoolPrefetcher("t", lambda: broken, spool, after=1, cap=10, wait_seconds=0.05, ahead=1)
    try:
        prefetcher.acknowledge_through(1)
        wait_until(lambda: broken.acks >= 1)
        time.sleep(0.3)
        assert spool.sequences() == [1] and broken.acks == 1  # kept, and not hammered (retried after a pause)
        assert prefetcher.take(1, max_messages=10, timeout=0.2) is None  # the stream goes on
    finally:
        prefetcher.stop()
