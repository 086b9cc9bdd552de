"""Object stores that throttle: moto's S3 behind a hook answering ``SlowDown`` for a share of requests.

Real S3 throttles a bulk delete in two ways: the whole ``DeleteObjects`` request (HTTP 503,
``<Code>SlowDown</Code>``), or single keys inside a 200 answer (``<Error><Code>SlowDown</Code>``
beside the ``<Deleted>`` keys). :class:`S3SlowDown` does both, in front of moto, on a server of
its own that shares moto's in-process backend (the session's moto server and this one see the
same buckets): point only the client under test at it. Faithfully, a throttled key is *not*
deleted: it is taken out of the request before moto sees it, so a client that drops a throttled
key leaves the object behind, where a test finds it.

Decisions come from a seeded random source; ``max_per_key`` bounds how often one key is
throttled, so that a client with at least that many retries must finish (a test that is
deterministic in outcome, whatever the thread interleaving). Every request, 503 and per-key
``SlowDown`` is counted: a client that retries inside its SDK shows up as more requests than it
reports.
"""

from __future__ import annotations

import io
import logging
import random
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from tests.support.servers import MotoServer

_Hook = TypeVar("_Hook", bound="S3SlowDown")

_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_SLOW_DOWN = "Please reduce your request rate."
#: Request headers that describe the body; dropped when a throttled key is cut out of it.
_BODY_HEADERS = ("HTTP_CONTENT_MD5", "HTTP_X_AMZ_CONTENT_SHA256")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class SlowDownCounts:
    """What the hook saw and did (``DeleteObjects`` only)."""

    requests: int = 0
    #: requests answered 503 SlowDown as a whole
    throttled_requests: int = 0
    #: 200 answers carrying at least one per-key SlowDown
    answers_with_throttled_keys: int = 0
    #: per-key SlowDown errors given, over all answers
    throttled_keys: int = 0

    @property
    def throttled_answers(self) -> int:
        return self.throttled_requests + self.answers_with_throttled_keys


class S3SlowDown:
    """WSGI middleware: throttles ``request_share`` of ``DeleteObjects`` requests with a 503 and,
    in the others, ``key_share`` of the keys with a per-key ``SlowDown``. ``latency_s`` delays every
    ``DeleteObjects`` (moto on 127.0.0.1 answers in milliseconds; S3 in tens of them)."""

    def __init__(
        self,
        app: WsgiApp,
        *,
        request_share: float = 0.0,
        key_share: float = 0.0,
        max_per_key: int | None = None,
        latency_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.app = app
        self.request_share = request_share
        self.key_share = key_share
        self.max_per_key = max_per_key
        self.latency_s = latency_s
        self.counts = SlowDownCounts()
        self._hits: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        if environ.get("REQUEST_METHOD") != "POST" or "delete" not in query:
            return self.app(environ, start_response)
        if self.latency_s:
            time.sleep(self.latency_s)
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        request = ET.fromstring(body)
        keys = [e.text or "" for e in request.iter(f"{_S3_NS}Key")] or [
            e.text or "" for e in request.iter("Key")
        ]
        whole, slow = self._decide(keys)
        if whole:
            return _respond(start_response, "503 Slow Down", _error_xml("SlowDown", _SLOW_DOWN))
        if slow:
            body = _delete_request([k for k in keys if k not in slow])
            for header in _BODY_HEADERS:
                environ.pop(header, None)
            for header in [h for h in environ if h.startswith("HTTP_X_AMZ_CHECKSUM_")]:
                environ.pop(header)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        if slow and len(slow) == len(set(keys)):  # nothing left to ask moto
            empty = f'<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="{_S3_NS[1:-1]}">'
            return _respond(start_response, "200 OK", _with_errors(f"{empty}</DeleteResult>".encode(), slow))
        status, headers, answer = _call(self.app, environ)
        if slow and status.startswith("200"):
            answer = _with_errors(answer, slow)
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(answer)))])
        return [answer]

    def _decide(self, keys: list[str]) -> tuple[bool, set[str]]:
        with self._lock:
            self.counts.requests += 1
            under_cap = [k for k in keys if self.max_per_key is None or self._hits[k] < self.max_per_key]
            if len(under_cap) == len(keys) and self._random.random() < self.request_share:
                self._hits.update(keys)
                self.counts.throttled_requests += 1
                return True, set()
            slow = {k for k in under_cap if self._random.random() < self.key_share}
            self._hits.update(slow)
            self.counts.throttled_keys += len(slow)
            self.counts.answers_with_throttled_keys += int(bool(slow))
            return False, slow


class S3FailingGets:
    """WSGI middleware: answers the first ``failures`` GETs of each object with ``status`` (503
    SlowDown by default, or a 500 InternalError), then lets them through; counts every GET per
    path (``gets``). For the retries of clients that read: a client with fewer attempts than
    ``failures + 1`` fails, one with more reads the object."""

    def __init__(self, app: WsgiApp, *, failures: int, status: str = "503 Slow Down") -> None:
        self.app, self.failures, self.status = app, failures, status
        self.gets: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if environ.get("REQUEST_METHOD") != "GET" or path.strip("/").count("/") == 0:
            return self.app(environ, start_response)  # not an object's GET (a listing, a HEAD, a PUT)
        with self._lock:
            self.gets[path] += 1
            fail = self.gets[path] <= self.failures
        if not fail:
            return self.app(environ, start_response)
        code = "SlowDown" if self.status.startswith("503") else "InternalError"
        return _respond(start_response, self.status, _error_xml(code, "failed by the test hook"))


def _delete_request(keys: list[str]) -> bytes:
    objects = "".join(f"<Object><Key>{escape(k)}</Key></Object>" for k in keys)
    return f'<Delete xmlns="{_S3_NS[1:-1]}">{objects}<Quiet>false</Quiet></Delete>'.encode()


def _error_xml(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
        "<RequestId>throttled-by-test-hook</RequestId></Error>"
    ).encode()


def _with_errors(answer: bytes, keys: set[str]) -> bytes:
    errors = "".join(
        f"<Error><Key>{escape(k)}</Key><Code>SlowDown</Code><Message>{_SLOW_DOWN}</Message></Error>"
        for k in sorted(keys)
    )
    return answer.replace(b"</DeleteResult>", errors.encode() + b"</DeleteResult>")


def _respond(start_response: Callable[..., Any], status: str, body: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


def _call(app: WsgiApp, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    captured: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        captured["status"], captured["headers"] = status, headers

    chunks = app(environ, start_response)
    try:
        body = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return captured["status"], list(captured["headers"]), body


@contextmanager
def moto_behind(
    wrap: Callable[[Any], _Hook], name: str = "moto-behind-hook"
) -> Iterator[tuple[MotoServer, _Hook]]:
    """moto's S3 (the process-wide backend) on a port of its own, behind the WSGI hook that
    ``wrap`` builds around moto's app; yields the server and the hook (to read its counters)."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    access_log = logging.getLogger("werkzeug")
    level = access_log.level
    access_log.setLevel(logging.WARNING)
    hook = wrap(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, hook, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield MotoServer(endpoint_url=f"http://127.0.0.1:{server.server_address[1]}"), hook
    finally:
        server.shutdown()
        thread.join(timeout=10)
        access_log.setLevel(level)


@contextmanager
def throttled_moto_server(**hook: Any) -> Iterator[tuple[MotoServer, S3SlowDown]]:
    """moto behind :class:`S3SlowDown` (keyword arguments: its settings). The hook's settings may
    be changed while it runs."""
    with moto_behind(lambda app: S3SlowDown(app, **hook), name="throttled-moto") as served:
        yield served
