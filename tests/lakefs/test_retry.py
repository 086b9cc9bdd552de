"""The retry policy: what is retried, and how long it waits."""

from __future__ import annotations

import pytest
import urllib3.exceptions
from hypothesis import given
from hypothesis import strategies as st
from lakefs_sdk.exceptions import ApiException, NotFoundException, ServiceException

from lakefs_gc.lakefs.retry import RetryPolicy, is_retryable


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ServiceException(status=500, reason="x"), True),
        (ApiException(status=503, reason="x"), True),
        (ApiException(status=429, reason="x"), True),
        (NotFoundException(status=404, reason="x"), False),
        (ApiException(status=400, reason="x"), False),
        (ApiException(status=401, reason="x"), False),
        (ApiException(status=0, reason="SSLError"), False),
        (urllib3.exceptions.NewConnectionError(None, "refused"), True),  # type: ignore[arg-type]
        (urllib3.exceptions.ProtocolError("reset"), True),
        (ConnectionResetError(), True),
        (ValueError("bad json"), False),
    ],
)
def test_is_retryable(exc: BaseException, expected: bool) -> None:
    assert is_retryable(exc) is expected


@given(attempt=st.integers(min_value=1, max_value=40), r=st.floats(min_value=0, max_value=1))
def test_backoff_is_full_jitter_capped(attempt: int, r: float) -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=20.0, random=lambda: r)
    delay = policy.backoff(attempt)
    assert 0 <= delay <= min(20.0, 2 ** (attempt - 1))


def test_call_gives_up_after_max_attempts_and_reraises_the_last_error() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=3, sleep=sleeps.append, random=lambda: 1.0)
    calls = []

    def failing() -> None:
        calls.append(1)
        raise ApiException(status=502, reason=f"attempt {len(calls)}")

    with pytest.raises(ApiException, match="attempt 3"):
        policy.call(failing, describe="test")
    assert sleeps == [1.0, 2.0]


def test_call_does_not_retry_non_retryable() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(sleep=sleeps.append)
    with pytest.raises(ApiException):
        policy.call(lambda: (_ for _ in ()).throw(ApiException(status=403)), describe="test")
    assert sleeps == []


def test_invalid_policy() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
