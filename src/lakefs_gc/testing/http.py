"""A minimal HTTP framework for the test server: routing, Basic auth, lakeFS error bodies.

Standard library only (``http.server``), threaded, so the server starts in-process in a
fraction of a second for every test and for ``lakefs-gc demo``. The standard library parses
request lines and headers and answers ``Expect: 100-continue``; :mod:`.framing` delimits the
bodies (``Content-Length`` or chunked), so a keep-alive connection never reads part of one
request as the next. The fault injection of :mod:`.faults` needs this raw control of the
connection (half a body, then close), which a WSGI server would not give.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
import logging
import re
import secrets
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from lakefs_gc.testing.context import ApiError, BadRequest, NotFound, Unauthorized
from lakefs_gc.testing.framing import FramingError, read_body

_log = logging.getLogger(__name__)
API_PREFIX = "/api/v1"


class Faults(Protocol):
    """What the server asks of its fault plan (:class:`lakefs_gc.testing.faults.FaultPlan`, which
    builds on this module's requests and responses): empty or not, and how to answer a request."""

    def __len__(self) -> int: ...

    def serve(self, request: Request, answer: Callable[[Request], Response]) -> Response: ...


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    def flag(self, name: str, default: bool = False) -> bool:
        """A boolean query parameter as Go's ``strconv.ParseBool`` reads it."""
        value = self.arg(name)
        if value is None or value == "":
            return default
        if value in ("1", "t", "T", "TRUE", "true", "True"):
            return True
        if value in ("0", "f", "F", "FALSE", "false", "False"):
            return False
        raise BadRequest(f"invalid boolean for query parameter {name!r}: {value!r}")

    def required(self, name: str) -> str:
        value = self.arg(name)
        if value is None:
            raise BadRequest(f"query parameter {name!r} is required")
        return value

    def json(self) -> dict[str, Any]:
        if not self.body:
            return {}
        try:
            value = json.loads(self.body)
        except ValueError as e:
            raise BadRequest(f"request body is not JSON: {e}") from e
        if not isinstance(value, dict):
            raise BadRequest("request body must be a JSON object")
        return value

    def upload(self) -> tuple[bytes, str]:
        """The uploaded bytes and their content type as lakeFS's UploadObject takes them: a raw
        body with the request's Content-Type, or the first multipart field ``content`` with the
        part's own Content-Type (empty when the part has none)."""
        ctype = self.headers.get("content-type", "")
        if ctype.split(";", 1)[0].strip().lower() != "multipart/form-data":
            return self.body, ctype
        message = BytesParser(policy=HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + self.body
        )
        if not message.is_multipart():
            raise ApiError("multipart upload without a boundary")  # lakeFS: 500
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "content":
                payload = part.get_payload(decode=True)
                return (payload if isinstance(payload, bytes) else b""), str(part.get("content-type", ""))
        raise ApiError("multipart upload missing key 'content'")  # lakeFS: 500


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    #: injected fault (:mod:`.faults`): full Content-Length, half the body, then close
    truncate: bool = False
    #: Content-Length of an answer to HEAD, which has no body (None: the body's length)
    head_length: int | None = None


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, json.dumps(value).encode(), "application/json", headers or {})


Handler = Callable[[Request], Response]


class Router:
    #: how many unrouted requests :attr:`unrouted` remembers
    UNROUTED_KEPT = 100

    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        #: ``"METHOD /path"`` of recent requests no route serves (answered 404 or 405): a client
        #: calling an API the test server lacks shows up here, not as a plausible-looking error
        self.unrouted: deque[str] = deque(maxlen=self.UNROUTED_KEPT)

    def add(self, method: str, template: str, handler: Handler) -> None:
        pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)
        self._routes.append((method, re.compile(f"^{pattern}$"), handler))

    def dispatch(self, request: Request) -> Response:
        """The route of the request's method; HEAD falls back to GET's route (without a body)."""
        matches = []
        for method, pattern, handler in self._routes:
            match = pattern.match(request.path)
            if match is not None:
                matches.append((method, match, handler))
        for wanted in (request.method, "GET" if request.method == "HEAD" else None):
            for method, match, handler in matches:
                if method == wanted:
                    request.params = {k: unquote(v) for k, v in match.groupdict().items()}
                    return handler(request)
        self.unrouted.append(f"{request.method} {request.path}")
        if matches:
            return json_response({"message": f"method {request.method} not allowed"}, 405)
        raise NotFound(f"no such API route: {request.method} {request.path}")


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str

    def check(self, header: str | None) -> None:
        if not header or not header.startswith("Basic "):
            raise Unauthorized("error authenticating request")
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError) as e:
            raise Unauthorized("error authenticating request") from e
        ok = hmac.compare_digest(user, self.access_key_id) & hmac.compare_digest(
            password, self.secret_access_key
        )
        if not ok:
            raise Unauthorized("error authenticating request")

    @classmethod
    def generate(cls) -> Credentials:
        """A fresh key pair shaped like lakeFS's: an ``AKIA…`` access key id and a secret that is the
        standard base64 of 30 random bytes. (A URL-safe secret could start with ``-``, which no
        lakeFS secret does and which a command line reads as an option.)"""
        return cls("AKIA" + secrets.token_hex(8).upper(), base64.b64encode(secrets.token_bytes(30)).decode())


PUBLIC_ROUTES = {"/healthcheck", "/setup_lakefs", "/config/version"}


class ClosingHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server whose :meth:`server_close` also ends the connections it serves.

    Keep-alive connections outlive ``shutdown()``: each holds a handler thread reading its next
    request, and a descriptor on both ends, for as long as the client keeps its pool. A process
    that starts and stops servers by the hundred (the test suite) would run out of descriptors
    below 1024, the only ones py4j's ``select()`` can watch.
    """

    daemon_threads = True
    #: how long :meth:`server_close` lets the answers being written finish before it cuts them
    ANSWER_GRACE_SECONDS = 5.0

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        self._answering = threading.Condition(self._open_lock)
        self._busy: set[socket.socket] = set()
        super().__init__(address, handler)

    @contextlib.contextmanager
    def answering(self, connection: socket.socket) -> Iterator[None]:
        """A handler holds this while it reads a request and writes its answer: :meth:`server_close`
        then lets it finish (a delayed request woken by the stop answers whole, not cut half-way)."""
        with self._open_lock:
            self._busy.add(connection)
        try:
            yield
        finally:
            with self._answering:
                self._busy.discard(connection)
                self._answering.notify_all()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self._answering:
            self._answering.wait_for(lambda: not self._busy, timeout=self.ANSWER_GRACE_SECONDS)
            still_open = list(self._open)
        for connection in still_open:
            with contextlib.suppress(OSError):  # already closed by its client
                connection.shutdown(socket.SHUT_RDWR)  # its handler reads EOF, ends, and closes it


class ApiServer(ClosingHTTPServer):
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        router: Router,
        credentials: Credentials,
        faults: Faults | None = None,
    ) -> None:
        self.router = router
        self.credentials = credentials
        self.faults = faults
        super().__init__(address, _RequestHandler)

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="lakefs-test-server", daemon=True
        )
        thread.start()
        return thread


class _RequestHandler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"
    #: headers and body go out in two sends; without TCP_NODELAY each response waits for the
    #: client's delayed ACK (~40 ms a request)
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.address_string(), *args)

    def _handle(self) -> None:
        with self.server.answering(self.connection):
            self._handle_request()

    def _handle_request(self) -> None:
        try:
            body = read_body(self.rfile, self.headers)
        except FramingError as e:  # the rest of the connection cannot be delimited: answer, then close
            self.close_connection = True
            self._send(json_response({"message": e.message}, e.status))
            return
        if body.close:
            self.close_connection = True
        parts = urlsplit(self.path)
        path = parts.path[len(API_PREFIX) :] if parts.path.startswith(API_PREFIX) else parts.path
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            headers.setdefault(name.lower(), value)  # Go's Header.Get: the first value
        request = Request(
            self.command,
            path.rstrip("/") or "/",
            parse_qs(parts.query, keep_blank_values=True),
            headers,
            body.data,
        )
        faults = self.server.faults
        if faults:
            self._send_despite_faults(faults.serve(request, self._answer))
        else:
            self._send(self._answer(request))

    def _send_despite_faults(self, response: Response) -> None:
        """A delayed answer often finds the client gone (it timed out): that is expected."""
        try:
            self._send(response)
        except (BrokenPipeError, ConnectionResetError) as e:
            _log.debug("client left before the answer to %s %s: %s", self.command, self.path, e)
            self.close_connection = True

    def _answer(self, request: Request) -> Response:
        try:
            if request.path not in PUBLIC_ROUTES:
                self.server.credentials.check(self.headers.get("Authorization"))
            return self.server.router.dispatch(request)
        except ApiError as e:
            return json_response({"message": e.message}, e.status)
        except Exception as e:  # the server must answer, like lakeFS's 500s do
            _log.exception("internal error on %s %s", self.command, self.path)
            return json_response({"message": f"internal error: {e}"}, 500)

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        if response.status not in (204, 304):  # these have no body, nor a Content-Length (RFC 9110 §8.6)
            self.send_header("Content-Type", response.content_type)
            length = len(response.body)
            if self.command == "HEAD" and response.head_length is not None:
                length = response.head_length
            self.send_header("Content-Length", str(length))
        if self.close_connection:
            self.send_header("Connection", "close")
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if response.truncate:
            self._send_truncated(response.body)
        elif self.command != "HEAD":
            self.wfile.write(response.body)

    def _send_truncated(self, body: bytes) -> None:
        if self.command != "HEAD":
            self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True
