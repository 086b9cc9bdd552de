"""The service's HTTP endpoints: ``/metrics`` (Prometheus), ``/healthz``, ``/readyz`` and
``/debug/memory``.

* ``/healthz`` answers 200 while the process is alive and no streaming query has died (Kubernetes
  restarts the pod on a failing liveness probe: a dead query never recovers by itself).
* ``/readyz`` answers 200 once every query has started and until shutdown begins (a rolling
  update waits for it; a terminating service stops being ready first).

Both answer a small JSON body saying why, so ``curl`` explains a failing probe.
``/debug/memory`` lists the driver's Python allocation sites and what grew since the last request
(:mod:`lakefs_gc.service.memory`; off unless the service runs with ``--trace-memory``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lakefs_gc.errors import ConfigError
from lakefs_gc.service.memory import HeapSites
from lakefs_gc.service.metrics import Metrics

_NOT_FOUND = b"not found: try /metrics, /healthz, /readyz or /debug/memory\n"
#: () -> (ok, details): the service's current health or readiness
Probe = Callable[[], tuple[bool, dict[str, Any]]]


class StatusServer:
    """Serves the endpoints in a daemon thread; ``port=0`` picks a free port (see :attr:`port`).

    The port is bound with ``SO_REUSEADDR`` (``HTTPServer``'s default), so a restart right after a
    scraped run finds its port although the last connections are in TIME_WAIT. A port another
    process really holds is an error, never a silent move to another port: Prometheus scrapes
    the configured one.
    """

    def __init__(self, metrics: Metrics, *, host: str, port: int, health: Probe, ready: Probe) -> None:
        handler = _handler(metrics, {"/healthz": health, "/readyz": ready}, HeapSites())
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as e:
            raise ConfigError(
                f"cannot serve metrics on {host}:{port}: {e.strerror or e}; is another lakefs-gc serve "
                "running? (choose another --metrics-port, or 0 for any free port)"
            ) from e
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="lakefs-gc-status", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}"

    def start(self) -> StatusServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever() that never started
            self._server.shutdown()
        self._server.server_close()


def _handler(metrics: Metrics, probes: dict[str, Probe], heap: HeapSites) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(metrics.registry))
            elif path in probes:
                ok, details = probes[path]()
                body = json.dumps({"ok": ok, **details}, default=str).encode()
                self._send(200 if ok else 503, "application/json", body)
            elif path == "/debug/memory":
                status, text = heap.report()
                self._send(status, "text/plain; charset=utf-8", text.encode())
            else:
                self._send(404, "text/plain", _NOT_FOUND)

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
            pass

    return Handler
