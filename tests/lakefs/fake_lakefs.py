"""A tiny scriptable lakeFS HTTP server for exercising the real client over real HTTP.

Each route (method + path under ``/api/v1``) gets a queue of replies; replies are consumed in
order and the last one repeats. Basic auth is checked on every request, and every request is
recorded so tests can assert what the client sent. ``Reply(DROP)`` closes the connection
without answering, to simulate a transport failure.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

API = "/api/v1"
DROP = 0  # pseudo status: close the connection without an answer


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]


@dataclass
class FakeLakeFS:
    access_key_id: str = "AKIAFAKE"
    secret_access_key: str = "fake-secret"
    endpoint: str = ""
    requests: list[Recorded] = field(default_factory=list)
    _routes: dict[tuple[str, str], deque[Reply]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, method: str, path: str, *replies: Reply) -> None:
        """Script ``method path`` (path relative to /api/v1) to answer ``replies`` in order."""
        with self._lock:
            self._routes[(method.upper(), path)] = deque(replies)

    def calls(self, method: str, path: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.method == method.upper() and r.path == path]

    def answer(self, method: str, raw_path: str, body: Any, headers: dict[str, str]) -> Reply:
        parts = urlsplit(raw_path)
        path = parts.path[len(API) :] if parts.path.startswith(API) else parts.path
        with self._lock:
            self.requests.append(Recorded(method, path, parse_qs(parts.query), body, headers))
            if not self._authorized(headers.get("Authorization", "")):
                return Reply(401, {"message": "error authenticating request"})
            queue = self._routes.get((method, path))
            if not queue:
                return Reply(404, {"message": f"fake lakeFS: unscripted route {method} {path}"})
            return queue[0] if len(queue) == 1 else queue.popleft()

    def _authorized(self, header: str) -> bool:
        expected = base64.b64encode(f"{self.access_key_id}:{self.secret_access_key}".encode()).decode()
        return header == f"Basic {expected}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        reply = self.server.fake.answer(self.command, self.path, body, dict(self.headers.items()))
        if reply.status == DROP:
            self.close_connection = True
            return
        payload = b"" if reply.body is None else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeLakeFS) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class RunningFakeLakeFS:
    """Context manager running a :class:`FakeLakeFS` on 127.0.0.1 (random port) in a thread."""

    def __init__(self, fake: FakeLakeFS | None = None) -> None:
        self.fake = fake or FakeLakeFS()
        self._server = _Server(self.fake)
        port = self._server.server_address[1]
        self.fake.endpoint = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self) -> FakeLakeFS:
        self._thread.start()
        return self.fake

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# ---- lakeFS JSON bodies ---------------------------------------------------------------------


def repository_json(
    repo: str = "repo1", namespace: str = "s3://bucket/ns", storage_id: str = "", read_only: bool = False
) -> dict[str, Any]:
    return {
        "id": repo,
        "creation_date": 1_700_000_000,
        "default_branch": "main",
        "storage_id": storage_id,
        "storage_namespace": namespace,
        "read_only": read_only,
    }


def storage_config_json(blockstore_type: str = "s3", blockstore_id: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "blockstore_type": blockstore_type,
        "blockstore_namespace_example": f"{blockstore_type}://example-bucket/",
        "blockstore_namespace_ValidityRegex": f"^{blockstore_type}://",
        "pre_sign_support": True,
        "pre_sign_support_ui": False,
        "import_support": True,
        "import_validity_regex": f"^{blockstore_type}://",
    }
    if blockstore_id is not None:
        config["blockstore_id"] = blockstore_id
    return config


def uncommitted_page_json(run_id: str, location: str, token: str | None) -> dict[str, Any]:
    page: dict[str, Any] = {"run_id": run_id, "gc_uncommitted_location": location}
    if token is not None:
        page["continuation_token"] = token
    return page


def prepare_result_json(run_id: str = "run-c1", namespace: str = "s3://bucket/ns") -> dict[str, Any]:
    return {
        "run_id": run_id,
        "gc_commits_location": f"{namespace}/_lakefs/retention/gc/commits/run_id={run_id}/commits.csv",
        "gc_addresses_location": f"{namespace}/_lakefs/retention/gc/addresses/",
        "gc_commits_presigned_url": "https://presigned.example/commits.csv",
    }


def task_status_json(
    task_id: str, *, completed: bool, result: dict[str, Any] | None = None, error: str | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "task_id": task_id,
        "completed": completed,
        "update_time": "2026-01-01T00:00:00Z",
    }
    if result is not None:
        status["result"] = result
    if error is not None:
        status["error"] = {"message": error}
    return status
