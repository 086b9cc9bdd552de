"""Real object-store servers on 127.0.0.1 for the test suite and the demo: moto (S3, SQS) and Azurite
(Blob, Queue).

Real servers on sockets, not in-process mocks, because most of our clients cannot see a
``mock_aws`` patch: pyarrow's C++ S3/Azure filesystems, Spark executors in other processes and the
lakeFS-compatible test server all talk HTTP. Both servers bind port 0 so parallel runs and a
developer's own emulator on the default ports never collide, and both are context managers so a
failing test or an interrupted demo still stops them.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lakefs_gc.errors import GcError

#: Azurite's well-known development account (public, documented by Microsoft; not a secret).
AZURITE_ACCOUNT_NAME = "devstoreaccount1"
AZURITE_ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
#: Overrides where the Azurite executable is looked up (e.g. a global ``npm i -g azurite``).
AZURITE_ENV = "LAKEFS_GC_AZURITE"

#: --loose/--skipApiVersionCheck: accept the newest SDK headers and API versions Azurite lags behind.
_AZURITE_FLAGS = (
    "--silent",
    "--loose",
    "--skipApiVersionCheck",
    "--disableTelemetry",
    "--inMemoryPersistence",
)
_PIPES: dict[str, Any] = {
    "stdout": subprocess.PIPE,
    "stderr": subprocess.PIPE,
    "text": True,
    "encoding": "utf-8",
    "errors": "replace",
}
_LISTENING = re.compile(r"Azurite (Blob|Queue) service is successfully listening at (http://\S+)")


@dataclass(frozen=True)
class MotoServer:
    """Where a running moto server answers; any credentials are accepted, these are conventional."""

    endpoint_url: str
    access_key_id: str = "testing"
    secret_access_key: str = "testing"
    region: str = "us-east-1"


@dataclass(frozen=True)
class AzuriteServer:
    """Where a running Azurite answers (path-style endpoints: ``http://host:port/<account>``)."""

    blob_endpoint: str
    queue_endpoint: str
    account_name: str = AZURITE_ACCOUNT_NAME
    account_key: str = AZURITE_ACCOUNT_KEY

    @property
    def connection_string(self) -> str:
        """For ``BlobServiceClient.from_connection_string`` / ``QueueServiceClient`` alike."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account_name};AccountKey={self.account_key};"
            f"BlobEndpoint={self.blob_endpoint};QueueEndpoint={self.queue_endpoint};"
        )


#: moto's SQS state is shared by the server's request threads; this lock makes each call atomic
_MOTO_SQS = threading.Condition(threading.RLock())
#: the SQS backend calls that read or change a queue's messages
_MOTO_SQS_CALLS = (
    "send_message",
    "send_message_batch",
    "receive_message",
    "delete_message",
    "delete_message_batch",
    "change_message_visibility",
    "change_message_visibility_batch",
    "purge_queue",
)


def sqs_lock() -> threading.Condition:
    """The lock :func:`serialize_moto_sqs` takes around moto's SQS calls, for code that changes
    moto's queues directly (a benchmark filling one through the backend)."""
    return _MOTO_SQS


def serialize_moto_sqs() -> None:
    """Make moto's SQS hand each message to one receive at a time, as SQS does.

    moto serves requests on threads but its queues have no lock: two concurrent ``ReceiveMessage``
    calls can both take a message, and a ``DeleteMessage`` racing a receive can be lost. Our queue
    adapters receive and delete several requests at once (``concurrency``), which real SQS is built
    for, so the emulator gets one lock around every message operation. A long poll waits on the
    lock's condition, releasing it, so sends are not held up. Idempotent; moto's backends are
    per process, so this covers every moto server of the process.
    """
    from moto.sqs import models

    if getattr(models.SQSBackend, "_lakefs_gc_serialized", False):
        return

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with _MOTO_SQS:
                try:
                    return method(*args, **kwargs)
                finally:
                    _MOTO_SQS.notify_all()  # wakes long polls (see wait_for_messages)

        return call

    for name in _MOTO_SQS_CALLS:
        setattr(models.SQSBackend, name, locked(getattr(models.SQSBackend, name)))

    def wait_for_messages(self: Any, timeout: int) -> None:
        with _MOTO_SQS:
            _MOTO_SQS.wait_for(lambda: self.messages, timeout=timeout)

    models.Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]
    setattr(models.SQSBackend, "_lakefs_gc_serialized", True)  # noqa: B010  (moto's class)


@contextmanager
def moto_server() -> Iterator[MotoServer]:
    """A moto server (all AWS services, S3 and SQS among them) in a thread of this process.

    moto keeps its state in process-wide backends, so two servers in one process share buckets:
    callers isolate by unique bucket/queue names, not by server. Its SQS is made atomic per call
    (:func:`serialize_moto_sqs`).
    """
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        raise GcError("moto[server] is not installed: pip install -e '.[test]'") from e
    # werkzeug logs every request to stderr at INFO, which drowns a demo's output; restored on exit.
    access_log = logging.getLogger("werkzeug")
    level = access_log.level
    access_log.setLevel(logging.WARNING)
    serialize_moto_sqs()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield MotoServer(endpoint_url=f"http://{host}:{port}")
    finally:
        server.stop()
        access_log.setLevel(level)


def find_azurite(repo_root: Path | None = None) -> Path:
    """The Azurite executable: ``$LAKEFS_GC_AZURITE``, else ``node_modules/.bin/azurite`` of the
    checkout (found from ``repo_root``, this file or the working directory), else ``azurite`` on PATH.

    The environment is read here, not by callers, because this is a developer-tool lookup
    (like ``$JAVA_HOME``), not configuration of the GC.
    """
    override = os.environ.get(AZURITE_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise GcError(f"{AZURITE_ENV}={override} is not an Azurite executable")
        return path
    starts = [p for p in (repo_root, Path(__file__).resolve().parent, Path.cwd()) if p is not None]
    for start in starts:
        for directory in (start, *start.parents):
            candidate = directory / "node_modules" / ".bin" / "azurite"
            if candidate.is_file():
                return candidate
    on_path = shutil.which("azurite")
    if on_path:
        return Path(on_path)
    raise GcError(
        "Azurite is not installed: run `npm ci` at the repository root (needs Node.js >= 20), "
        f"or set {AZURITE_ENV} to an azurite executable"
    )


@contextmanager
def azurite(*, executable: Path | None = None, start_timeout: float = 30.0) -> Iterator[AzuriteServer]:
    """Azurite's Blob and Queue services (and its Table service, unused) as a child process.

    Ports are chosen by the OS (``--*Port 0``) and read back from Azurite's startup lines, which
    avoids the race of probing for a free port and handing it over. Data lives in memory and the
    working directory is a temporary one (Azurite refuses ``--location`` in memory mode), so nothing
    is left in the checkout. Telemetry is off because test machines have no internet.
    """
    exe = executable or find_azurite()
    with tempfile.TemporaryDirectory(prefix="lakefs-gc-azurite-") as workdir:
        args = [str(exe), *_AZURITE_FLAGS]
        for service in ("blob", "queue", "table"):
            args += [f"--{service}Host", "127.0.0.1", f"--{service}Port", "0"]
        try:
            proc = subprocess.Popen(args, cwd=workdir, stdin=subprocess.DEVNULL, **_PIPES)
        except OSError as e:
            raise GcError(f"cannot run Azurite ({exe}); is Node.js installed and on PATH? {e}") from e
        watcher = _AzuriteOutput(proc)
        try:
            server = watcher.wait_until_listening(start_timeout)
            yield server
        finally:
            _stop(proc)
            watcher.join()


class _AzuriteOutput:
    """Drains Azurite's stdout/stderr in threads (a full pipe would block it) and collects the
    endpoints it announces."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._proc = proc
        self._endpoints: dict[str, str] = {}
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._ready = threading.Event()
        assert proc.stdout is not None and proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._drain, args=(proc.stdout, self._stdout, True), daemon=True),
            threading.Thread(target=self._drain, args=(proc.stderr, self._stderr, False), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _drain(self, stream: IO[str], sink: list[str], parse: bool) -> None:
        for line in stream:
            sink.append(line)
            match = _LISTENING.search(line) if parse else None
            if match:
                self._endpoints[match.group(1).lower()] = match.group(2).rstrip("/")
                if {"blob", "queue"} <= self._endpoints.keys():
                    self._ready.set()
        self._ready.set()  # EOF: Azurite exited; let the waiter report why

    def wait_until_listening(self, timeout: float) -> AzuriteServer:
        deadline = time.monotonic() + timeout
        self._ready.wait(timeout)
        if not {"blob", "queue"} <= self._endpoints.keys():
            exited = self._proc.poll() is not None
            raise self._failure(
                "stopped before listening" if exited else f"did not start within {timeout:.0f}s"
            )
        for url in self._endpoints.values():
            _wait_for_port(url, deadline, self)
        account = AZURITE_ACCOUNT_NAME
        return AzuriteServer(
            blob_endpoint=f"{self._endpoints['blob']}/{account}",
            queue_endpoint=f"{self._endpoints['queue']}/{account}",
        )

    def _failure(self, what: str) -> GcError:
        code = self._proc.poll()
        if code is not None:
            self.join()  # it exited: collect its last words before quoting them
        status = f"exited with code {code}" if code is not None else "still running"
        stderr = "".join(self._stderr).strip() or "(empty)"
        stdout = "".join(self._stdout).strip() or "(empty)"
        return GcError(f"Azurite {what} ({status}).\nstderr:\n{stderr}\nstdout:\n{stdout}")

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=5)


def _wait_for_port(url: str, deadline: float, output: _AzuriteOutput) -> None:
    """Azurite prints "listening" from the listen callback; a connect proves it to this process too."""
    host, _, port = url.removeprefix("http://").partition(":")
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError as e:
            if time.monotonic() > deadline:
                raise output._failure(f"announced {url} but refuses connections: {e}") from e
            time.sleep(0.05)


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM lets Azurite close its servers; SIGKILL only if it hangs."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
