"""A fake Azure Event Grid namespace (data plane, api-version 2024-06-01) for the real SDK client.

There is no Event Grid emulator (docs/formats/notifications.md, "Delivery options"), so the queue
adapter is tested against this: ``azure.eventgrid.EventGridConsumerClient`` (and
``EventGridPublisherClient`` with a ``namespace_topic``) talk to it over HTTP exactly as to
Azure. The wire format is the SDK's own (``azure/eventgrid/_operations/_operations.py``,
``models/_models.py`` of azure-eventgrid 4.22.1)::

    POST /topics/{topic}:publish                                  CloudEvent or array -> {}
    POST /topics/{topic}/eventsubscriptions/{sub}:receive?maxEvents=&maxWaitTime=
         -> {"value": [{"brokerProperties": {"lockToken", "deliveryCount"}, "event": {CloudEvent}}]}
    POST .../{sub}:acknowledge | :reject | :renewLock             {"lockTokens": [...]}
    POST .../{sub}:release?releaseDelayInSeconds=                 {"lockTokens": [...]}
         -> {"succeededLockTokens": [...], "failedLockTokens": [{"lockToken", "error": {"code", "message"}}]}

Every request needs ``api-version=2024-06-01`` and ``Authorization: SharedAccessKey <key>``
(what ``AzureKeyCredential`` sends). Plain ``http`` is fine: only bearer tokens make azure-core
insist on https, key credentials do not.

Semantics kept: a received event is locked for ``lock_duration`` seconds; an expired lock makes it
receivable again with ``deliveryCount`` + 1 and its old token fails; after ``max_delivery_count``
deliveries it is dead-lettered (kept in :attr:`dead_letters`), as is a rejected one. Not kept:
an empty receive answers at once (the real broker waits up to ``maxWaitTime``, at least 10 s),
unless ``max_wait`` is set; error codes of failed tokens are descriptive, not Azure's exact ones.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lakefs_gc.testing.http import ClosingHTTPServer

API_VERSION = "2024-06-01"
_SUBSCRIPTION_PATH = re.compile(
    r"^/topics/([^/:]+)/eventsubscriptions/([^/:]+):(receive|acknowledge|release|reject|renewLock)$"
)
_PUBLISH_PATH = re.compile(r"^/topics/([^/:]+):publish$")


class _HttpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


@dataclass
class _Entry:
    event: dict[str, Any]
    delivery_count: int = 0
    lock_token: str | None = None
    locked_until: float = 0.0
    available_at: float = 0.0


@dataclass
class _Subscription:
    entries: list[_Entry] = field(default_factory=list)


class FakeEventGridNamespace:
    """An in-process Event Grid namespace on 127.0.0.1 (use as a context manager)."""

    def __init__(
        self,
        *,
        key: str = "fake-eventgrid-key",
        lock_duration: float = 60.0,
        max_delivery_count: int = 10,
        max_wait: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key, self.lock_duration, self.max_delivery_count = key, lock_duration, max_delivery_count
        self.max_wait, self.clock = max_wait, clock
        self.topics: dict[str, dict[str, _Subscription]] = {}
        self.dead_letters: list[dict[str, Any]] = []
        self.requests: list[str] = []  # "<operation> <topic>/<subscription>", for assertions
        self._changed = threading.Condition()
        self._http: ClosingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        if self._http is None:
            raise RuntimeError("the fake Event Grid namespace is not running")
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeEventGridNamespace:
        self._http = ClosingHTTPServer(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self._http.serve_forever, name="fake-eventgrid", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    # ---- test API ------------------------------------------------------------------------------

    def create_subscription(self, topic: str, subscription: str) -> None:
        """A queue-mode subscription of ``topic``; it receives what is published from now on."""
        with self._changed:
            self.topics.setdefault(topic, {}).setdefault(subscription, _Subscription())

    def publish(self, topic: str, events: Iterable[Mapping[str, Any] | Any]) -> None:
        """Deliver CloudEvents (JSON dicts or ``azure.core.messaging.CloudEvent``) to every
        subscription of ``topic``."""
        docs = [_event_doc(e) for e in events]
        with self._changed:
            subscriptions = self.topics.get(topic)
            if subscriptions is None:
                raise KeyError(f"no topic {topic!r}: create a subscription first")
            for subscription in subscriptions.values():
                subscription.entries.extend(_Entry(dict(doc)) for doc in docs)
            self._changed.notify_all()

    def counts(self, topic: str, subscription: str) -> dict[str, int]:
        """How many events of the subscription are available and how many are locked now."""
        with self._changed:
            entries = self._subscription(topic, subscription).entries
            self._expire(entries)
            locked = sum(1 for e in entries if e.lock_token is not None)
            return {"available": len(entries) - locked, "locked": locked}

    # ---- operations (under the lock) -----------------------------------------------------------

    def handle(self, path: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        if (match := _PUBLISH_PATH.match(path)) is not None:
            events = body if isinstance(body, list) else [body]
            self.requests.append(f"publish {unquote(match.group(1))}")
            try:
                self.publish(unquote(match.group(1)), events)
            except KeyError as e:
                raise _HttpError(404, "NotFound", str(e)) from None
            return {}
        match = _SUBSCRIPTION_PATH.match(path)
        if match is None:
            raise _HttpError(404, "NotFound", f"no such operation: {path}")
        topic, name, operation = unquote(match.group(1)), unquote(match.group(2)), match.group(3)
        self.requests.append(f"{operation} {topic}/{name}")
        if operation == "receive":
            return self._receive(topic, name, query)
        tokens = body.get("lockTokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not tokens:
            raise _HttpError(400, "BadRequest", "lockTokens: a non-empty array is required")
        delay = float(query.get("releaseDelayInSeconds", "0") or 0)
        with self._changed:
            entries = self._subscription(topic, name).entries
            self._expire(entries)
            return _settle(entries, [str(t) for t in tokens], operation, self, delay)

    def _receive(self, topic: str, name: str, query: dict[str, str]) -> dict[str, Any]:
        max_events = _int_param(query, "maxEvents", 1, 1, 100)
        max_wait = _int_param(query, "maxWaitTime", 60, 10, 120)
        deadline = self.clock() + min(max_wait, self.max_wait)
        with self._changed:
            while True:
                entries = self._subscription(topic, name).entries
                self._expire(entries)
                now = self.clock()
                ready = [e for e in entries if e.lock_token is None and e.available_at <= now][:max_events]
                if ready or now >= deadline:
                    break
                self._changed.wait(min(0.05, deadline - now))
            for entry in ready:
                entry.delivery_count += 1
                entry.lock_token = secrets.token_urlsafe(24)
                entry.locked_until = now + self.lock_duration
        value = [
            {
                "brokerProperties": {"lockToken": e.lock_token, "deliveryCount": e.delivery_count},
                "event": e.event,
            }
            for e in ready
        ]
        return {"value": value}

    def _subscription(self, topic: str, name: str) -> _Subscription:
        subscription = self.topics.get(topic, {}).get(name)
        if subscription is None:
            raise _HttpError(404, "NotFound", f"no event subscription {name!r} on topic {topic!r}")
        return subscription

    def _expire(self, entries: list[_Entry]) -> None:
        """Locks past their time are lost; events delivered too often are dead-lettered."""
        now = self.clock()
        for entry in list(entries):
            if entry.lock_token is not None and entry.locked_until <= now:
                entry.lock_token = None
                if entry.delivery_count >= self.max_delivery_count:
                    entries.remove(entry)
                    self.dead_letters.append(entry.event)


def _settle(
    entries: list[_Entry], tokens: list[str], operation: str, ns: FakeEventGridNamespace, delay: float
) -> dict[str, Any]:
    """Acknowledge, release, reject or renew the events ``tokens`` lock."""
    by_token = {e.lock_token: e for e in entries if e.lock_token is not None}
    succeeded: list[str] = []
    failed: list[dict[str, Any]] = []
    for token in tokens:
        entry = by_token.get(token)
        if entry is None:
            error = {"code": "TokenLost", "message": f"lock token {token} is unknown or its lock expired"}
            failed.append({"lockToken": token, "error": error})
            continue
        succeeded.append(token)
        if operation == "renewLock":
            entry.locked_until = ns.clock() + ns.lock_duration
            continue
        entry.lock_token = None
        if operation == "release":
            entry.available_at = ns.clock() + delay
        else:
            entries.remove(entry)
            if operation == "reject":
                ns.dead_letters.append(entry.event)
    return {"succeededLockTokens": succeeded, "failedLockTokens": failed}


def _int_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _HttpError(400, "BadRequest", f"{name}: not an integer: {raw!r}") from None
    if not low <= value <= high:
        raise _HttpError(400, "BadRequest", f"{name}: must be between {low} and {high}, got {value}")
    return value


def _event_doc(event: Mapping[str, Any] | Any) -> dict[str, Any]:
    if isinstance(event, Mapping):
        return dict(event)
    from lakefs_gc.events.azure import cloud_event_body

    doc: dict[str, Any] = json.loads(cloud_event_body(event))
    return doc


def _handler(ns: FakeEventGridNamespace) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                self._check(query)
                body = json.loads(raw) if raw else None
                self._reply(200, ns.handle(parts.path, query, body))
            except _HttpError as e:
                self._reply(e.status, {"error": {"code": e.code, "message": str(e)}})
            except ValueError as e:
                self._reply(400, {"error": {"code": "BadRequest", "message": f"body: {e}"}})

        def _check(self, query: dict[str, str]) -> None:
            if self.headers.get("Authorization") != f"SharedAccessKey {ns.key}":
                raise _HttpError(401, "Unauthorized", "missing or wrong SharedAccessKey")
            if query.get("api-version") != API_VERSION:
                raise _HttpError(400, "BadRequest", f"api-version must be {API_VERSION}")

        def _reply(self, status: int, doc: dict[str, Any]) -> None:
            payload = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read :attr:`FakeEventGridNamespace.requests` instead."""

    return Handler


@contextmanager
def fake_eventgrid(**kwargs: Any) -> Iterator[FakeEventGridNamespace]:
    """A running :class:`FakeEventGridNamespace` (keyword arguments as its constructor's)."""
    with FakeEventGridNamespace(**kwargs) as ns:
        yield ns
