"""Retry policy for lakeFS API calls: capped exponential backoff with full jitter.

Only failures that can heal by themselves are retried: connection errors, HTTP 5xx and 429.
Any other 4xx is an answer (bad request, no permission, not found) and retrying it would only
delay a clear error. Sleep and randomness are injectable so tests run in milliseconds.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import urllib3.exceptions
from lakefs_sdk.exceptions import ApiException

_log = logging.getLogger(__name__)

T = TypeVar("T")

TOO_MANY_REQUESTS = 429


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of an SDK error, or ``None`` when no HTTP answer was received."""
    if isinstance(exc, ApiException):
        status = exc.status
        return status if isinstance(status, int) and status > 0 else None
    return None


def is_connection_error(exc: BaseException) -> bool:
    """True for transport failures (refused, reset, timed out) where no answer arrived.

    The SDK is configured without urllib3 retries, so these surface as raw urllib3 errors.
    """
    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def is_retryable(exc: BaseException) -> bool:
    """Connection errors, HTTP 5xx and 429; never any other 4xx."""
    if is_connection_error(exc):
        return True
    status = http_status(exc)
    if status is None:
        return False
    return status == TOO_MANY_REQUESTS or 500 <= status <= 599


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry one API call.

    Defaults follow the Scala client's order of magnitude (5 attempts, 1 s growing to 20 s), but
    with full jitter so that many executors retrying together do not stampede the server.
    """

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 20.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    random: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("delays must not be negative")

    def backoff(self, attempt: int) -> float:
        """Delay after failed attempt number ``attempt`` (1-based): U(0, min(cap, base·2^(n-1)))."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return float(ceiling * self.random())

    def call(
        self,
        fn: Callable[[], T],
        *,
        describe: str,
        retry_if: Callable[[BaseException], bool] = is_retryable,
    ) -> T:
        """Run ``fn``, retrying failures accepted by ``retry_if``; re-raise the last failure."""
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as e:
                if attempt >= self.max_attempts or not retry_if(e):
                    raise
                delay = self.backoff(attempt)
                _log.warning(
                    "%s failed (attempt %d/%d: %s); retrying in %.2fs",
                    describe,
                    attempt,
                    self.max_attempts,
                    _short(e),
                    delay,
                )
                self.sleep(delay)
                attempt += 1


def _short(exc: BaseException) -> str:
    status = http_status(exc)
    if status is not None:
        return f"HTTP {status}"
    return f"{type(exc).__name__}: {exc}"
