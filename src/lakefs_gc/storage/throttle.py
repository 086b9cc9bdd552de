"""How the sweep backs off when a store throttles: retry delays, adaptive concurrency, a rate ceiling.

Object stores throttle bulk deletes per prefix and per account (S3 ``503 SlowDown``, Azure
``503 ServerBusy``). A sweep that keeps its full request rate while being throttled spends its
retries, stalls, and slows every other client of the bucket (lakeFS issue #5729). So each sweep
task (one per Spark partition) shares one :class:`Throttle` between its request threads:

* :class:`Backoff`: exponential delays with full jitter (AWS's "Exponential Backoff And Jitter"),
  so retrying threads and tasks spread out instead of hitting the store again in step;
* :class:`AdaptiveLimit`: additive increase, multiplicative decrease of the requests in flight
  (AIMD, as TCP): halved on throttling, at most once per round of requests, and raised by one
  after a run of unthrottled answers, up to the configured concurrency;
* :class:`RateLimit`: an optional ceiling on deleted keys per second, a token bucket.

No I/O here: the clock, ``sleep`` and the random source are injected, so the policies are tested
with a fake clock.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: First retry waits up to this long (full jitter: uniformly 0..delay).
BACKOFF_BASE_S = 0.2
#: No retry waits longer than this.
BACKOFF_CAP_S = 20.0
#: Unthrottled answers after which the concurrency limit grows by one.
INCREASE_AFTER = 8
#: How many seconds' worth of deletes a rate limit lets through at once after an idle spell.
RATE_BURST_S = 1.0
DEFAULT_MAX_RETRIES = 10
#: Requests in flight a default :class:`Throttle` allows (the sweep passes its --sweep-concurrency).
DEFAULT_MAX_CONCURRENCY = 64


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: retry ``n`` (0-based) waits ``U(0, min(cap, base·2ⁿ))``."""

    base_s: float = BACKOFF_BASE_S
    cap_s: float = BACKOFF_CAP_S
    rng: Callable[[], float] = field(default=random.random, compare=False)

    def delay(self, retry: int) -> float:
        ceiling = min(self.cap_s, self.base_s * 2 ** min(retry, 62))
        return float(self.rng() * ceiling)


class AdaptiveLimit:
    """An AIMD limit on requests in flight, shared by the threads of one task (thread-safe).

    :meth:`acquire` blocks while ``limit`` requests are in flight and returns a ticket (the
    round it started in); :meth:`release` reports whether the store throttled that request.
    Throttling halves the limit (down to 1) once per round: the requests already in flight when
    the limit dropped were sent at the old rate, so their throttled answers are not a new signal
    (without this, 8 requests throttled together would cut 8 → 1 at once). ``increase_after``
    unthrottled answers in a row raise it by one, up to ``maximum``.
    """

    def __init__(self, maximum: int, *, initial: int | None = None, increase_after: int = INCREASE_AFTER):
        if maximum < 1 or increase_after < 1:
            raise ValueError("maximum and increase_after must be at least 1")
        self.maximum = maximum
        self.increase_after = increase_after
        self._limit = max(1, min(maximum, initial or maximum))
        self._in_flight = 0
        self._round = 0
        self._successes = 0
        self._lowest = self._limit
        self._decreases = 0
        self._cond = threading.Condition()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def lowest(self) -> int:
        """The lowest the limit has been."""
        return self._lowest

    @property
    def decreases(self) -> int:
        return self._decreases

    def acquire(self) -> int:
        with self._cond:
            while self._in_flight >= self._limit:
                self._cond.wait()
            self._in_flight += 1
            return self._round

    def release(self, ticket: int, *, throttled: bool) -> None:
        with self._cond:
            self._in_flight -= 1
            if throttled:
                self._successes = 0
                if ticket == self._round:
                    halved = max(1, self._limit // 2)
                    self._decreases += int(halved < self._limit)
                    self._limit = halved
                    self._lowest = min(self._lowest, halved)
                    self._round += 1
            else:
                self._successes += 1
                if self._successes >= self.increase_after and self._limit < self.maximum:
                    self._limit += 1
                    self._successes = 0
            self._cond.notify_all()


class RateLimit:
    """At most ``per_second`` keys per second on average, for the threads of one task (thread-safe).

    A token bucket kept as the time its debt is paid off (GCRA): :meth:`acquire` of ``n`` keys
    waits while the keys already booked take more than ``burst_s`` seconds to pay off, then books
    ``n / per_second`` seconds more. So a request larger than the bucket still goes (a batch of
    1000 keys under a ceiling of 100/s), the requests after it wait its cost off, and the average
    holds; after an idle spell up to ``burst_s`` seconds' worth go at once.
    """

    def __init__(
        self,
        per_second: float,
        *,
        burst_s: float = RATE_BURST_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if per_second <= 0:
            raise ValueError("per_second must be positive")
        self.per_second = per_second
        self.burst_s = burst_s
        self._clock = clock
        self._sleep = sleep
        self._next = clock()
        self._lock = threading.Lock()

    def acquire(self, n: int) -> float:
        """Wait until ``n`` keys may be deleted; returns the seconds waited."""
        with self._lock:
            now = self._clock()
            wait = max(0.0, self._next - self.burst_s - now)
            self._next = max(self._next, now) + n / self.per_second
        if wait > 0:
            self._sleep(wait)
        return wait


class Throttle:
    """What one task's request threads share: the retry budget, backoff, AIMD limit, rate ceiling
    and the counters the sweep reports (``requests``, ``throttled`` answers, ``retries``)."""

    def __init__(
        self,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        max_retries: int = DEFAULT_MAX_RETRIES,
        rate: RateLimit | None = None,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must not be negative")
        self.max_retries = max_retries
        self.limit = AdaptiveLimit(max_concurrency)
        self.rate = rate
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self._lock = threading.Lock()
        self.requests = 0
        self.throttled = 0
        self.retries = 0

    def before_request(self, keys: int, attempt: int) -> int:
        """Wait for the retry delay (attempt > 0), the rate ceiling and a slot; returns the slot's ticket."""
        if attempt > 0:
            with self._lock:
                self.retries += 1
            self.sleep(self.backoff.delay(attempt - 1))
        if self.rate is not None:
            self.rate.acquire(keys)
        return self.limit.acquire()

    def after_request(self, ticket: int, *, throttled: bool) -> None:
        with self._lock:
            self.requests += 1
            self.throttled += int(throttled)
        self.limit.release(ticket, throttled=throttled)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self.requests,
                "throttled": self.throttled,
                "retries": self.retries,
                "concurrency_decreases": self.limit.decreases,
                "lowest_concurrency": self.limit.lowest,
            }
