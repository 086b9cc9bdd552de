"""The sweep's throttling policies (storage/throttle.py) with a fake clock, and the deleters' retries with
fake store clients: only throttled or transiently failed keys are retried, within the budget, and a key
still throttled after it is ``failed`` with the store's reason, never dropped."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from lakefs_gc.storage.deleters import AzureBlobBulkDeleter, DeleteOutcome
from lakefs_gc.storage.s3_deleter import S3BulkDeleter
from lakefs_gc.storage.throttle import AdaptiveLimit, Backoff, RateLimit, Throttle


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


# -- Backoff ------------------------------------------------------------------------------------------------


def test_backoff_is_exponential_capped_and_fully_jittered() -> None:
    top = Backoff(base_s=0.5, cap_s=10.0, rng=lambda: 0.999999)
    assert [round(top.delay(n), 3) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert Backoff(base_s=0.5, rng=lambda: 0.0).delay(5) == 0.0  # full jitter: anywhere from 0
    half = Backoff(base_s=0.5, cap_s=10.0, rng=lambda: 0.5)
    assert half.delay(2) == 1.0
    assert Backoff(cap_s=20.0, rng=lambda: 1.0).delay(10_000) == 20.0  # no overflow


# -- AdaptiveLimit ------------------------------------------------------------------------------------------


def test_aimd_halves_on_throttle_and_adds_one_after_successes() -> None:
    limit = AdaptiveLimit(8, increase_after=3)
    assert limit.limit == 8
    limit.release(limit.acquire(), throttled=True)
    assert limit.limit == 4
    limit.release(limit.acquire(), throttled=True)
    limit.release(limit.acquire(), throttled=True)
    limit.release(limit.acquire(), throttled=True)
    assert limit.limit == 1 and limit.lowest == 1 and limit.decreases == 3  # never below 1
    for _ in range(3):
        limit.release(limit.acquire(), throttled=False)
    assert limit.limit == 2
    for _ in range(100):
        limit.release(limit.acquire(), throttled=False)
    assert limit.limit == 8  # never above the maximum


def test_requests_in_flight_together_halve_the_limit_once() -> None:
    limit = AdaptiveLimit(8)
    tickets = [limit.acquire() for _ in range(8)]
    for ticket in tickets:
        limit.release(ticket, throttled=True)
    assert limit.limit == 4 and limit.decreases == 1
    limit.release(limit.acquire(), throttled=True)  # a request sent at the new rate: a new signal
    assert limit.limit == 2


def test_a_throttle_resets_the_run_of_successes() -> None:
    limit = AdaptiveLimit(4, initial=1, increase_after=2)
    limit.release(limit.acquire(), throttled=False)
    limit.release(limit.acquire(), throttled=True)
    limit.release(limit.acquire(), throttled=False)
    assert limit.limit == 1


def test_acquire_blocks_at_the_limit() -> None:
    limit = AdaptiveLimit(2)
    first, _second = limit.acquire(), limit.acquire()
    got = threading.Event()

    def third() -> None:
        limit.acquire()
        got.set()

    thread = threading.Thread(target=third, daemon=True)
    thread.start()
    assert not got.wait(0.1)
    limit.release(first, throttled=False)
    assert got.wait(5)
    thread.join()


def test_adaptive_limit_is_thread_safe() -> None:
    limit = AdaptiveLimit(4, increase_after=1)
    peak = 0
    in_flight = 0
    lock = threading.Lock()

    def work(i: int) -> None:
        nonlocal peak, in_flight
        for j in range(200):
            ticket = limit.acquire()
            with lock:
                in_flight += 1
                peak = max(peak, in_flight)
                assert in_flight <= 4
                in_flight -= 1
            limit.release(ticket, throttled=(i + j) % 7 == 0)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= limit.limit <= 4 and peak <= 4


# -- RateLimit ----------------------------------------------------------------------------------------------


def test_rate_limit_holds_the_average() -> None:
    clock = FakeClock()
    rate = RateLimit(100.0, burst_s=1.0, clock=clock, sleep=clock.sleep)
    start = clock.now
    for _ in range(50):
        rate.acquire(10)  # 500 keys at 100/s: 5 s, less the 1 s burst
    assert clock.now - start == pytest.approx(4.0 - 0.1)


def test_rate_limit_lets_a_large_request_go_and_the_next_pay_for_it() -> None:
    clock = FakeClock()
    rate = RateLimit(100.0, burst_s=1.0, clock=clock, sleep=clock.sleep)
    assert rate.acquire(1000) == 0.0  # 10 s worth, goes at once
    assert rate.acquire(1) == pytest.approx(9.0)  # waits until only 1 s of debt is left


def test_rate_limit_burst_after_idle_is_bounded() -> None:
    clock = FakeClock()
    rate = RateLimit(10.0, burst_s=1.0, clock=clock, sleep=clock.sleep)
    clock.now += 3600  # idle for an hour: no hour's worth of credit
    waits = [rate.acquire(1) for _ in range(12)]
    assert waits[:11] == pytest.approx([0.0] * 11, abs=1e-9) and waits[11] == pytest.approx(0.1)


def test_policies_refuse_nonsense() -> None:
    with pytest.raises(ValueError):
        RateLimit(0)
    with pytest.raises(ValueError):
        AdaptiveLimit(0)
    with pytest.raises(ValueError):
        Throttle(max_retries=-1)


# -- deleters retrying with a Throttle ----------------------------------------------------------------------


def fake_throttle(max_retries: int = 3, concurrency: int = 4) -> tuple[Throttle, FakeClock]:
    clock = FakeClock()
    backoff = Backoff(base_s=1.0, cap_s=8.0, rng=lambda: 1.0)
    throttle = Throttle(
        max_concurrency=concurrency, max_retries=max_retries, backoff=backoff, sleep=clock.sleep
    )
    return throttle, clock


def s3_error(status: int, code: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "Please reduce your request rate."},
         "ResponseMetadata": {"HTTPStatusCode": status}},
        "DeleteObjects",
    )  # fmt: skip


class FakeS3:
    """``delete_objects`` answering from a script: per call, an exception or the keys to throttle."""

    def __init__(self, script: list[Exception | set[str]]) -> None:
        self.script: Iterator[Exception | set[str]] = iter(script)
        self.calls: list[list[str]] = []

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:
        keys = [o["Key"] for o in Delete["Objects"]]
        self.calls.append(keys)
        step = next(self.script, set())
        if isinstance(step, Exception):
            raise step
        return {
            "Deleted": [{"Key": k} for k in keys if k not in step],
            "Errors": [
                {"Key": k, "Code": "SlowDown", "Message": "Reduce your rate"} for k in keys if k in step
            ],
        }

    def close(self) -> None:
        pass


def test_s3_retries_only_the_throttled_keys() -> None:
    client = FakeS3([{"data/s/a", "data/s/c"}, {"data/s/c"}, set()])
    throttle, clock = fake_throttle()
    deleter = S3BulkDeleter(client, "bucket", "", throttle=throttle)
    outcomes = deleter.delete(["data/s/a", "data/s/b", "data/s/c"])
    assert outcomes == [DeleteOutcome(f"data/s/{k}", "deleted") for k in "abc"]
    assert client.calls == [["data/s/a", "data/s/b", "data/s/c"], ["data/s/a", "data/s/c"], ["data/s/c"]]
    assert clock.slept == [1.0, 2.0]  # backoff before each retry
    assert throttle.stats() == {
        "requests": 3, "throttled": 2, "retries": 2, "concurrency_decreases": 2, "lowest_concurrency": 1
    }  # fmt: skip


def test_s3_slowdown_503_and_transient_failures_are_retried() -> None:
    connection = EndpointConnectionError(endpoint_url="http://s3")
    client = FakeS3([s3_error(503, "SlowDown"), s3_error(500, "InternalError"), connection, set()])
    throttle, _ = fake_throttle()
    deleter = S3BulkDeleter(client, "bucket", "ns/", throttle=throttle)
    assert deleter.delete(["data/s/a"]) == [DeleteOutcome("data/s/a", "deleted")]
    stats = throttle.stats()
    assert (stats["requests"], stats["throttled"], stats["retries"]) == (4, 1, 3)  # only SlowDown throttles
    assert throttle.limit.limit == 2


def test_s3_key_still_throttled_after_the_budget_fails_with_the_reason() -> None:
    client = FakeS3([{"data/s/a"}] * 3)
    throttle, _ = fake_throttle(max_retries=2)
    deleter = S3BulkDeleter(client, "bucket", "", throttle=throttle)
    outcomes = deleter.delete(["data/s/a", "data/s/b"])
    assert outcomes == [
        DeleteOutcome("data/s/a", "failed", "SlowDown: Reduce your rate (after 2 retries)"),
        DeleteOutcome("data/s/b", "deleted"),
    ]
    assert len(client.calls) == 3


def test_s3_other_failures_are_not_retried() -> None:
    client = FakeS3([s3_error(403, "AccessDenied")])
    throttle, clock = fake_throttle()
    outcomes = S3BulkDeleter(client, "bucket", "", throttle=throttle).delete(["data/s/a"])
    assert outcomes[0].outcome == "failed" and "AccessDenied" in (outcomes[0].error or "")
    assert len(client.calls) == 1 and clock.slept == []


class FakeResponse:
    def __init__(self, status: int, code: str | None = None) -> None:
        self.status_code = status
        self.reason = {202: "Accepted", 503: "Server Busy", 404: "Not Found"}.get(status, "?")
        self.headers = {"x-ms-error-code": code} if code else {}


class FakeContainer:
    def __init__(self, script: list[Exception | dict[str, int]]) -> None:
        self.script = iter(script)
        self.calls: list[list[str]] = []

    def delete_blobs(self, *blobs: str, **kwargs: Any) -> Iterator[FakeResponse]:
        self.calls.append(list(blobs))
        step = next(self.script, {})
        if isinstance(step, Exception):
            raise step
        return iter(
            FakeResponse(step.get(b, 202), "ServerBusy" if step.get(b) == 503 else None) for b in blobs
        )

    def close(self) -> None:
        pass


def test_azure_retries_busy_subrequests_and_busy_batches() -> None:
    from azure.core.exceptions import HttpResponseError

    busy = HttpResponseError(message="Server Busy\nRequestId:x")
    busy.status_code = 503
    container = FakeContainer([busy, {"data/s/b": 503}, {}])
    throttle, _ = fake_throttle()
    deleter = AzureBlobBulkDeleter(container, "", throttle=throttle)
    assert deleter.delete(["data/s/a", "data/s/b"]) == [
        DeleteOutcome("data/s/a", "deleted"),
        DeleteOutcome("data/s/b", "deleted"),
    ]
    assert container.calls == [["data/s/a", "data/s/b"], ["data/s/a", "data/s/b"], ["data/s/b"]]
    assert throttle.stats()["throttled"] == 2


def test_azure_blob_still_busy_after_the_budget_fails_with_the_reason() -> None:
    container = FakeContainer([{"data/s/a": 503}] * 2)
    throttle, _ = fake_throttle(max_retries=1)
    outcomes = AzureBlobBulkDeleter(container, "", throttle=throttle).delete(["data/s/a"])
    assert outcomes == [DeleteOutcome("data/s/a", "failed", "503 Server Busy (ServerBusy) (after 1 retries)")]


def test_deleter_clients_do_not_retry_themselves() -> None:
    from lakefs_gc.storage.clients import S3_DELETE_RETRIES, azure_container_client, s3_client
    from lakefs_gc.storage.filesystems import AzureOptions, S3Options
    from lakefs_gc.storage.locations import parse_location

    s3 = s3_client(S3Options(region="us-east-1"), retries=S3_DELETE_RETRIES)
    assert s3.meta.config.retries["total_max_attempts"] == 1
    location = parse_location("https://acct.blob.core.windows.net/c/repo")
    container = azure_container_client(location, AzureOptions(), retry_total=0)
    assert container._config.retry_policy.total_retries == 0
