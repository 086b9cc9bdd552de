"""Inject lakeFS misbehaviour into the test server, per endpoint, at run time.

The GC's mark must fail closed when lakeFS answers 500 or 404, times out, or sends a truncated
or incomplete answer. Those failures are hard to provoke in a stock server, so every
:class:`~lakefs_gc.testing.server.LakeFSTestServer` carries a :class:`FaultPlan` that its request
handler consults before answering::

    fault = server.faults.inject(Fault(method="POST", path=r"/gc/prepare_uncommited$", status=500))
    with pytest.raises(LakeFSError):
        client.prepare_uncommitted("repo")
    assert server.faults.hits(fault) == retry.max_attempts

An empty plan costs one ``len()`` per request.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from lakefs_gc.testing.http import Request, Response, json_response

_log = logging.getLogger(__name__)

Rewrite = Callable[[dict[str, Any]], dict[str, Any]]
Answer = Callable[[Request], Response]


@dataclass(frozen=True, kw_only=True)
class Fault:
    """What to do to which requests; exactly one of ``status``, ``delay``, ``truncate``, ``rewrite``.

    ``path`` is a regular expression searched (``re.search``) in the request path *after*
    ``/api/v1``, without the query string, e.g. ``r"/gc/prepare_uncommited$"``.
    ``method`` is an HTTP method, or ``None`` for any.

    Actions:

    * ``status``: do not handle the request; answer that status with a lakeFS error body
      ``{"message": message}``.
    * ``delay``: sleep that many seconds, then handle the request normally (to provoke client
      read timeouts). :meth:`FaultPlan.clear` cuts pending delays short.
    * ``truncate``: handle normally, then send the headers with the full ``Content-Length`` but
      only the first half of the body, and close the connection.
    * ``rewrite``: handle normally, then replace the JSON object body with ``rewrite(body)``
      (e.g. drop ``continuation_token``). A body that is not a JSON object, or a rewrite that
      raises, turns into a 500 naming the fault, so a broken test cannot pass silently.

    Counting: every request whose method and path match is *seen* by the fault. The first
    ``after`` seen requests pass untouched; then the fault acts on the next ``times`` seen
    requests (``None``: all of them). Faults are identified by identity, not equality: keep the
    object :meth:`FaultPlan.inject` returns to ask for :meth:`FaultPlan.hits`.
    """

    path: str
    method: str | None = None
    status: int | None = None
    message: str | None = None
    delay: float | None = None
    truncate: bool = False
    rewrite: Rewrite | None = None
    times: int | None = None
    after: int = 0
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        actions = [self.status is not None, self.delay is not None, self.truncate, self.rewrite is not None]
        if sum(actions) != 1:
            raise ValueError("a Fault needs exactly one of status, delay, truncate, rewrite")
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"fault status must be an HTTP error (400-599), got {self.status}")
        if self.message is not None and self.status is None:
            raise ValueError("message only applies to a status fault")
        if self.delay is not None and self.delay < 0:
            raise ValueError("delay must not be negative")
        if self.times is not None and self.times < 1:
            raise ValueError("times must be at least 1 (or None for every request)")
        if self.after < 0:
            raise ValueError("after must not be negative")
        if self.method is not None:
            object.__setattr__(self, "method", self.method.upper())
        try:
            object.__setattr__(self, "_pattern", re.compile(self.path))
        except re.error as e:
            raise ValueError(f"fault path is not a regular expression: {self.path!r}: {e}") from e

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and self._pattern.search(path) is not None

    def describe(self) -> str:
        if self.status is not None:
            action = f"status {self.status}"
        elif self.delay is not None:
            action = f"delay {self.delay:g}s"
        else:
            action = "truncate" if self.truncate else "rewrite"
        after = f" after {self.after}" if self.after else ""
        times = f" times {self.times}" if self.times is not None else ""
        return f"{self.method or '*'} {self.path}: {action}{after}{times}"


@dataclass(eq=False)
class _Entry:
    fault: Fault
    seen: int = 0
    hits: int = 0

    def observe(self) -> bool:
        """Count one matching request as seen; True if the fault is due to act on it."""
        self.seen += 1
        if self.seen <= self.fault.after:
            return False
        return self.fault.times is None or self.hits < self.fault.times


class FaultPlan:
    """The faults a server applies; thread-safe, and free when empty.

    At most one fault acts on a request: the first injected one that is due. Every matching
    fault still counts the request as seen (for ``after``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: replaced, never mutated, so the lock-free ``len()`` fast path is safe
        self._active: tuple[_Entry, ...] = ()
        self._history: list[_Entry] = []
        self._wake = threading.Event()
        self._closed = False

    def inject(self, fault: Fault) -> Fault:
        """Start applying ``fault`` (after the faults already injected); returns it for :meth:`hits`."""
        entry = _Entry(fault)
        with self._lock:
            self._active = (*self._active, entry)
            self._history.append(entry)
        _log.info("fault injected: %s", fault.describe())
        return fault

    def clear(self) -> None:
        """Stop applying every fault and end pending delays; :meth:`hits` still answers."""
        with self._lock:
            self._active = ()
            wake, self._wake = self._wake, threading.Event()
        wake.set()

    def close(self) -> None:
        """Server stopping: clear, and answer delayed requests 503 instead of handling them."""
        self._closed = True
        self.clear()

    def hits(self, fault: Fault) -> int:
        """How many requests ``fault`` acted on (also after :meth:`clear`)."""
        with self._lock:
            entries = [e for e in self._history if e.fault is fault]
            if not entries:
                raise KeyError(f"fault was never injected: {fault.describe()}")
            return sum(e.hits for e in entries)

    def __len__(self) -> int:
        """Number of faults currently applied."""
        return len(self._active)

    # ---- per request (called by the HTTP handler) ------------------------------------------

    def serve(self, request: Request, answer: Answer) -> Response:
        """Answer ``request`` through ``answer`` (the normal handler), as the due fault dictates."""
        fault, wake = self._take(request.method, request.path)
        if fault is None:
            return answer(request)
        _log.info("fault acting on %s %s: %s", request.method, request.path, fault.describe())
        if fault.status is not None:
            message = fault.message or f"injected fault: HTTP {fault.status}"
            return json_response({"message": message}, fault.status)
        if fault.delay is not None:
            wake.wait(fault.delay)
            if self._closed:
                return json_response({"message": "test server stopping"}, 503)
            return answer(request)
        response = answer(request)
        if fault.truncate:
            return replace(response, truncate=True)
        assert fault.rewrite is not None
        return _rewrite(fault, response)

    def _take(self, method: str, path: str) -> tuple[Fault | None, threading.Event]:
        """The fault acting on this request, and the event that :meth:`clear` sets."""
        acting: _Entry | None = None
        with self._lock:
            for entry in self._active:
                if entry.fault.matches(method, path) and entry.observe() and acting is None:
                    acting = entry
            if acting is None:
                return None, self._wake
            acting.hits += 1
            return acting.fault, self._wake

    def __repr__(self) -> str:
        return f"FaultPlan({[e.fault.describe() for e in self._active]})"


def _rewrite(fault: Fault, response: Response) -> Response:
    assert fault.rewrite is not None
    try:
        body = json.loads(response.body)
        if not isinstance(body, dict):
            raise TypeError(f"body is a JSON {type(body).__name__}, not an object")
        rewritten = fault.rewrite(body)
    except Exception as e:
        _log.exception("fault rewrite failed: %s", fault.describe())
        return json_response({"message": f"injected fault {fault.describe()} failed: {e}"}, 500)
    return replace(response, body=json.dumps(rewritten).encode(), content_type="application/json")
