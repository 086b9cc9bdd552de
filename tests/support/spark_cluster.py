"""A Spark standalone cluster on 127.0.0.1 from the pip ``pyspark``: one master, two 1-core workers.

Each worker runs like another machine as far as files go: in its own mount namespace
(``unshare -m``) with a private, empty tmpfs on ``/tmp``, its work and local directories inside it.
The driver's temporary directories (every ``tmp_path`` of the tests) are under the host's ``/tmp``,
so any executor reading the driver's disk (a state directory, a spool, a range cache) fails, as it
would on a real cluster. The network is shared: lakeFS, moto and Azurite on 127.0.0.1 are reached
as over a network. Needs root (CI runs as root); without it the fixture skips with the reason.

Started lazily by the tests that ask for the ``spark_cluster`` fixture (one per module), stopped
after them. The event log of every application goes to ``event_logs``, where the tests read
which executors ran tasks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from tests.support.processes import descendants, kill_tree

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
WORKERS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def isolation_problem() -> str | None:
    """Why workers cannot be isolated here (None: they can)."""
    if os.geteuid() != 0:
        return "the standalone cluster's workers need root for unshare -m and a private tmpfs /tmp"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /tmp && test -z \"$(ls -A /tmp)\""],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return None if probe.returncode == 0 else f"unshare -m with a tmpfs /tmp failed: {probe.stderr.strip()}"


@dataclass
class StandaloneCluster:
    """The running cluster: its master URL and what a driver needs to use it."""

    master_url: str
    event_logs: Path
    logs: Path
    base: Path
    env: dict[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def workers(self) -> list[subprocess.Popen[bytes]]:
        return self.processes[1:]

    def conf(self) -> dict[str, str]:
        """Spark settings of an application on this cluster: one 1-core executor per worker."""
        return {
            "spark.executor.cores": "1",
            "spark.cores.max": str(WORKERS),
            "spark.executor.memory": "768m",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": self.event_logs.as_uri(),
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.compress": "false",  # JSON lines the tests read
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "4",
            # the executors share a host name but not a /tmp: shuffle blocks go over the network, as
            # between machines (Spark reads a "host-local" executor's shuffle files from disk otherwise)
            "spark.shuffle.readHostLocalDisk": "false",
            # an application starts only once both executors registered, so tasks spread over both
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        }

    def executor_logs(self, tail: int = 4000) -> str:
        """The end of every executor's stderr (for failure messages)."""
        paths = sorted(self.logs.parent.glob("work-*/app-*/*/stderr"))
        return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-tail:]}" for p in paths)

    def executors_with_tasks(self) -> dict[str, int]:
        """Per executor id: the tasks it finished, over every application's event log."""
        return executors_with_tasks(self.event_logs)

    def worker_of(self, pid: int) -> int | None:
        """Which worker ``pid`` runs under (the worker's JVM, its executor, their Python workers)."""
        for i, worker in enumerate(self.workers):
            if worker.poll() is None and (pid == worker.pid or pid in descendants(worker.pid)):
                return i
        return None

    def kill_worker(self, i: int) -> None:
        """``kill -9`` of worker ``i`` as of a machine lost: its JVM, its executor, their Python
        workers, all at once; its namespace (and private ``/tmp``) goes with them."""
        worker = self.workers[i]
        kill_tree(worker.pid)
        worker.wait()

    def restart_worker(self, i: int) -> None:
        """Worker ``i`` again (after :meth:`kill_worker`), once the master registered it."""
        assert self.workers[i].poll() is not None, f"worker {i} is running"
        registered = self._registered()
        self.processes[1 + i] = _launch_worker(self, i, self.env)
        self.wait_for_workers(registered + 1)

    def wait_for_workers(self, registrations: int) -> None:
        logs = [self.logs / "master.log", *(self.logs / f"worker-{i}.log" for i in range(WORKERS))]
        _wait_for("workers", lambda: self._registered() >= registrations, logs)

    def _registered(self) -> int:
        return (self.logs / "master.log").read_text(errors="replace").count("Registering worker")

    def stop(self) -> None:
        for process in reversed(self.processes):  # workers first
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def executors_with_tasks(event_logs: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in event_logs.rglob("*"):
        if not path.is_file() or path.name.startswith("appstatus"):
            continue
        for line in path.read_text(errors="replace").splitlines():
            if '"SparkListenerTaskEnd"' not in line:
                continue
            info = json.loads(line)["Task Info"]
            counts[info["Executor ID"]] = counts.get(info["Executor ID"], 0) + 1
    return counts


def _launch(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_for(what: str, ready: Callable[[], bool], logs: list[Path], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.3)
    tails = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists())
    raise RuntimeError(f"the standalone cluster's {what} did not come up in {timeout}s\n{tails}")


def start_cluster(base: Path) -> StandaloneCluster:
    """Master and :data:`WORKERS` isolated workers; returns once every worker registered."""
    logs, event_logs = base / "logs", base / "event-logs"
    logs.mkdir(parents=True)
    event_logs.mkdir()
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_LOG_DIR": str(logs),
    }
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    cluster = StandaloneCluster(master_url, event_logs, logs, base, env)
    master_log = logs / "master.log"
    cluster.processes.append(_launch(
        [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(_free_port())],
        master_log, env,
    ))  # fmt: skip
    try:
        _wait_for("master", lambda: "I have been elected leader" in master_log.read_text(errors="replace"),
                  [master_log])  # fmt: skip
        for i in range(WORKERS):
            cluster.processes.append(_launch_worker(cluster, i, env))
        cluster.wait_for_workers(WORKERS)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _launch_worker(cluster: StandaloneCluster, i: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Worker ``i`` in a mount namespace of its own: its whole world of temporary files is a tmpfs
    only it sees; its work directory (executor logs) is bind-mounted from the host first, for the
    tests to read."""
    work = cluster.base / f"work-{i}"
    work.mkdir(exist_ok=True)
    script = (
        f'mount --bind "{work}" /mnt && mount -t tmpfs -o size=2g tmpfs /tmp && '
        "mkdir -p /tmp/local && "
        f'exec "{SPARK_CLASS}" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 '
        f"--cores 1 --memory 1g --work-dir /mnt --webui-port {_free_port()} {cluster.master_url}"
    )
    worker_env = {**env, "SPARK_LOCAL_DIRS": "/tmp/local", "SPARK_WORKER_DIR": "/mnt"}
    with open(cluster.logs / f"worker-{i}.log", "ab") as out:
        return subprocess.Popen(
            ["unshare", "-m", "sh", "-c", script], stdout=out, stderr=subprocess.STDOUT,
            env=worker_env, start_new_session=True,
        )  # fmt: skip


def cluster_fixture(base: Path) -> Iterator[StandaloneCluster]:
    cluster = start_cluster(base)
    try:
        yield cluster
    finally:
        cluster.stop()
