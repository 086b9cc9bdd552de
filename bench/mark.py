"""Benchmark: mark and sweep at scale on this machine (numbers, not a test).

Mark: a synthetic repository (default 1M committed objects, 1K commits, 100 branches, objects/10
staged and objects/10 garbage; written once by ``lakefs-gc test-server synth`` and reused) is
served by the lakeFS-compatible test server and marked on local Spark. Reported: mark wall time
with the time of each of its phases and Spark stages, range entries decoded per second, peak RSS
of the Spark driver (this Python process and its JVM, separately, plus the Python workers), and
whether the marked set equals the manifest's garbage set.

Sweep: N objects (default 100K) are deleted from a moto S3 server twice in the same run: by a
single-threaded loop of ``DeleteObjects`` (1000 keys per request) and by ``sweep_run`` on a mark
listing them. Reported: deletes/second of each and the ratio.

Aims: mark of the 1M-object namespace under 3 minutes; sweep at least 4x the loop; driver RSS
flat between ``--objects 100000`` and ``--objects 1000000``.

The lakeFS test server and moto run in child processes, so that the driver's RSS is the GC's own
and neither server competes with the driver for the GIL.

    python bench/mark.py [--objects N] [--sweep-objects N] [--workdir DIR] [--json FILE]
                         [--master local[2]] [--no-mark] [--s3-latency-ms MS] [--sweep-partitions N]
                         [--moto-listings indexed|scan]

moto answers listings from an index by directory (:func:`index_listings`), at about S3's cost;
``--moto-listings scan`` keeps moto's own, which scans the whole bucket for each one.

Results, profiles and how to read them: bench/README.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
BUCKET = "lakefs-gc-bench"
REPOSITORY = "synth"
S3_KEYS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}
QUIET_LOG4J2 = "rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n" + (
    "appender.console.type = Console\nappender.console.name = console\n"
    "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
    "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex\n"
    "logger.window.name = org.apache.spark.sql.execution.window.WindowExec\nlogger.window.level = error\n"
)


def say(message: str) -> None:
    now = time.time()
    print(
        f"[{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}] {message}",
        file=sys.stderr,
        flush=True,
    )


# ---- /proc -----------------------------------------------------------------------------------


def proc_status(pid: int | str, field_name: str) -> int:
    """A ``kB`` field of /proc/<pid>/status (VmHWM: peak RSS, VmRSS: current), in MiB; 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every descendant of ``root``."""
    parents: dict[int, list[int]] = {}
    info: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        ppid = int(rest.split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
        info[int(entry.name)] = (ppid, name)
    out: dict[int, tuple[int, str]] = {}
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            out[child] = info[child]
            todo.append(child)
    return out


def driver_memory() -> dict[str, Any]:
    """Peak RSS (MiB) of this Python driver, of its JVM (the driver JVM is a child of this
    process; in local mode it is also the executor), of executor JVMs (local-cluster mode: its
    descendants), of the largest Spark Python worker (a python process under a JVM) and of the
    largest other Python child: the benchmark's own servers (the lakeFS test server, moto), which
    are not the product's. Before they were told apart, the test server's 1.1 GB at the bottom
    line read as a Spark worker's."""
    tree = process_tree(os.getpid())
    me = os.getpid()
    java = [pid for pid, (ppid, name) in tree.items() if name == "java" and ppid == me]
    executors = [pid for pid, (ppid, name) in tree.items() if name == "java" and ppid != me]
    pythons = [pid for pid, (_ppid, name) in tree.items() if name.startswith("python")]
    workers = [pid for pid in pythons if _under_java(pid, tree)]
    servers = [pid for pid in pythons if pid not in workers]
    return {
        "python_driver_peak_mib": proc_status("self", "VmHWM"),
        "jvm_peak_mib": max((proc_status(p, "VmHWM") for p in java), default=0),
        "executor_jvm_peak_mib": max((proc_status(p, "VmHWM") for p in executors), default=0),
        "executor_jvms": len(executors),
        "python_worker_peak_mib": max((proc_status(p, "VmHWM") for p in workers), default=0),
        "python_workers": len(workers),
        "bench_servers_peak_mib": max((proc_status(p, "VmHWM") for p in servers), default=0),
    }


def _under_java(pid: int, tree: dict[int, tuple[int, str]]) -> bool:
    """Whether a JVM of the tree is among ``pid``'s ancestors (Spark forks its Python workers)."""
    while pid in tree:
        pid = tree[pid][0]
        if tree.get(pid, (0, ""))[1] == "java":
            return True
    return False


# ---- child processes -----------------------------------------------------------------------


@dataclass
class Child:
    """A server in a child process that prints one JSON line when ready."""

    proc: subprocess.Popen[str]
    info: dict[str, Any]

    def request(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return answer


@contextmanager
def child(argv: list[str], env: dict[str, str] | None = None) -> Iterator[Child]:
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        while line and not line.startswith("{"):
            line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{argv[:4]} exited before it was ready")
        yield Child(proc, json.loads(line))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_server(storage_root: Path, state_dir: Path | None, s3_endpoint: str | None) -> Any:
    argv = [sys.executable, "-m", "lakefs_gc.cli.main", "test-server", "--storage-root", str(storage_root)]
    if state_dir is not None:
        argv += ["--state", str(state_dir)]
    if s3_endpoint:
        argv += ["--s3-endpoint", s3_endpoint]
    env = {
        "AWS_ACCESS_KEY_ID": S3_KEYS["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": S3_KEYS["secret_access_key"],
    }
    return child(argv, env)


def moto(latency_ms: int, listings: str = "indexed", read_latency_ms: int = 0) -> Any:
    serve = ["--serve-moto", "--s3-latency-ms", str(latency_ms), "--moto-listings", listings,
             "--s3-read-latency-ms", str(read_latency_ms)]  # fmt: skip
    return child([sys.executable, str(HERE), *serve])


def bench_keys(prefix: str, n: int) -> list[str]:
    """lakeFS-shaped object keys: ``<prefix>data/<slice>/<object>``, 10K objects per slice."""
    return [f"{prefix}data/gbench{i // 10_000:05d}/c{i:012d}" for i in range(n)]


def lean_delete_objects(backend: Any, environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """``DeleteObjects`` on moto's backend, answered without moto's request layer.

    moto 5.2's answer to a 1000-key ``DeleteObjects`` costs about 100 ms of its CPU (its
    model-driven serializer writes each ``<Deleted>`` entry; a per-key permission check), so on 2
    shared cores moto, not the client, capped any sweep near 10K deletes/s whatever the latency. S3
    spends that time on its own servers, which ``--s3-latency-ms`` stands for. This handler parses
    the request, deletes every key through moto's backend (``delete_objects``, as moto's own
    handler does) and writes S3's answer (``Deleted`` per key unless ``Quiet``) as one string.
    """
    import xml.etree.ElementTree as ET
    from xml.sax.saxutils import escape

    bucket = environ["PATH_INFO"].strip("/").split("/", 1)[0]
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    root = ET.fromstring(body)
    keys = [e.text or "" for e in root.iter() if e.tag.rpartition("}")[2] == "Key"]
    quiet = any(e.tag.rpartition("}")[2] == "Quiet" and (e.text or "").strip() == "true" for e in root)
    deleted, _ = backend.delete_objects(bucket, [{"Key": k} for k in keys])
    entries = "" if quiet else "".join(f"<Deleted><Key>{escape(k)}</Key></Deleted>" for k, _v, _d in deleted)
    answer = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"{entries}</DeleteResult>"
    ).encode()
    start_response("200 OK", [("Content-Type", "application/xml"), ("Content-Length", str(len(answer)))])
    return [answer]


def index_listings() -> None:
    """moto's ``ListObjects`` answered from an index of keys by directory (the child's moto only).

    moto 5.2 scans (and copies) every key of the bucket for each listing, whatever the prefix:
    0.4-0.6 s of its CPU at 1M objects, under the lock every request takes here, while S3 answers
    a prefix listing in tens of milliseconds. A sweep lists its report's directories (``deleted/``,
    ``swept/`` from the driver and from each task, lakeFS's dump), so moto's listings, not the
    sweep, were most of a 1M-object sweep's time before its first delete. The index maps each
    key's directory to its keys, kept by the key store's ``setlist``/``pop`` (how moto puts and
    deletes); a listing then looks only at the directories that can hold its prefix and hands
    those keys to moto's own ``list_objects``, so answers are moto's, key for key.
    """
    import types

    from moto.s3.models import S3Backend
    from moto.s3.utils import _VersionedKeyStore

    def directory(name: str) -> str:
        return name[: name.rfind("/") + 1]

    def index_of(store: Any) -> dict[str, set[str]]:
        index = store.__dict__.get("_by_directory")
        if index is None:
            index = {}
            for name in dict.keys(store):
                index.setdefault(directory(name), set()).add(name)
            store.__dict__["_by_directory"] = index
        return index

    setlist, pop = _VersionedKeyStore.setlist, _VersionedKeyStore.pop

    def indexed_setlist(self: Any, key: str, list_: Any) -> Any:
        result = setlist(self, key, list_)
        index_of(self).setdefault(directory(key), set()).add(key)
        return result

    def indexed_pop(self: Any, key: str) -> None:
        pop(self, key)
        index_of(self).get(directory(key), set()).discard(key)

    listing = S3Backend.list_objects

    def list_objects(self: Any, bucket: Any, prefix: Any, delimiter: Any, marker: Any, max_keys: Any) -> Any:
        if not prefix or not isinstance(getattr(bucket, "keys", None), _VersionedKeyStore):
            return listing(self, bucket, prefix, delimiter, marker, max_keys)
        subset = _VersionedKeyStore()
        for where, names in index_of(bucket.keys).items():
            if where.startswith(prefix) or prefix.startswith(where):
                for name in names:
                    if name.startswith(prefix):
                        dict.__setitem__(subset, name, dict.__getitem__(bucket.keys, name))
        return listing(self, types.SimpleNamespace(keys=subset), prefix, delimiter, marker, max_keys)

    _VersionedKeyStore.setlist = indexed_setlist  # type: ignore[method-assign]
    _VersionedKeyStore.pop = indexed_pop  # type: ignore[method-assign]
    S3Backend.list_objects = list_objects  # type: ignore[method-assign]


def serve_moto(latency_ms: int, listings: str = "indexed", read_latency_ms: int = 0) -> int:
    """Child mode: moto's S3 (as :func:`tests.support.servers.moto_server` runs it), plus

    * an optional delay before answering each ``DeleteObjects``, as a stand-in for the network
      and service time of a real S3, and a lean ``DeleteObjects`` (:func:`lean_delete_objects`);
    * an optional delay before answering each ``GET`` and ``HEAD`` (``bench/ranges_s3.py``: S3's
      time to a first byte);
    * a command channel on stdin that fills buckets without HTTP (moto answers about 200 PUTs/s
      on this machine; its backend takes about 10K/s directly).
    """
    import logging
    import threading

    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from moto.s3.models import s3_backends
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no access log line per request
    if listings == "indexed":
        index_listings()
    app = DomainDispatcherApplication(create_backend_app)

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    lock = threading.Lock()  # moto's S3 backend is not thread-safe (a listing racing deletes fails)

    gets = {"requests": 0, "bytes": 0}  # what GETs served (bench/inventory.py --store s3)

    def served(environ: dict[str, Any], start_response: Any) -> Any:
        if environ["REQUEST_METHOD"] == "POST" and "delete" in environ.get("QUERY_STRING", ""):
            time.sleep(latency_ms / 1000)  # outside the lock: concurrent requests overlap, as on S3
            with lock:
                return lean_delete_objects(backend, environ, start_response)
        if read_latency_ms and environ["REQUEST_METHOD"] in ("GET", "HEAD"):
            time.sleep(read_latency_ms / 1000)  # outside the lock, as the deletes' delay
        with lock:
            body = list(app(environ, start_response))
            if environ["REQUEST_METHOD"] == "GET":
                gets["requests"] += 1
                gets["bytes"] += sum(map(len, body))
            return body

    server = make_server("127.0.0.1", 0, served, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    print(json.dumps({"endpoint": endpoint, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        bucket = command.get("bucket", "")
        if command["op"] == "seed":
            with lock:
                for key in bench_keys(command["prefix"], command["n"]):
                    backend.put_object(bucket, key, b"0123456789abcdef")
            print(json.dumps({"seeded": command["n"]}), flush=True)
        elif command["op"] == "gets":
            with lock:
                print(json.dumps(gets), flush=True)
        elif command["op"] == "count":
            with lock:
                count = sum(1 for k in backend.get_bucket(bucket).keys if k.startswith(command["prefix"]))
            print(json.dumps({"count": count}), flush=True)
    return 0


# ---- the synthetic repository --------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    objects: int
    commits: int
    branches: int
    uncommitted: int
    garbage: int

    @property
    def tag(self) -> str:
        return f"o{self.objects}-c{self.commits}-b{self.branches}-u{self.uncommitted}-g{self.garbage}"


def synthesized(workdir: Path, spec: Spec) -> tuple[Path, Path, dict[str, Any]]:
    """(storage root, state dir, synth report) of ``spec``, synthesized on first use."""
    base = workdir / spec.tag
    storage, state, done = base / "storage", base / "state", base / "synth.json"
    if not done.is_file():
        if base.exists():
            raise SystemExit(f"{base} exists but is incomplete (no synth.json): remove it and rerun")
        say(f"synthesizing {spec.tag} into {base} (1M objects: a few minutes)")
        argv = [sys.executable, "-m", "lakefs_gc.cli.main", "test-server", "synth", "--storage-root",
                str(storage), "--state", str(state), "--repo", REPOSITORY,
                "--objects", str(spec.objects), "--commits", str(spec.commits),
                "--branches", str(spec.branches), "--uncommitted", str(spec.uncommitted),
                "--garbage", str(spec.garbage)]  # fmt: skip
        out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
        done.write_text(out)
    return storage, state, json.loads(done.read_text())


# ---- Spark ---------------------------------------------------------------------------------


def spark_session(
    master: str, workdir: Path, extra: dict[str, str] | None = None, app: str = "lakefs-gc bench/mark.py"
) -> Any:
    """A session logging quietly, with the event log on (stage timings: the UI is off)."""
    from lakefs_gc.spark.runtime.session import build_session

    log4j = workdir / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J2)
    events = workdir / "spark-events"
    events.mkdir(exist_ok=True)
    conf = {
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j.as_uri()}",
        "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "true",  # stage timings for the breakdown (the UI is off)
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        **(extra or {}),
    }
    return build_session(app, environ=os.environ, master=master, conf=conf)


#: Spark plan operators that tell a stage's work apart (the rest is plumbing)
_OPERATORS = ("parallelize", "MapInArrow", "InMemoryTableScan", "SortMergeJoin", "BroadcastHashJoin")


def stage_times(spark: Any, since_ms: float) -> list[dict[str, Any]]:
    """Stages completed since ``since_ms``, from the event log (the UI is off): when each started
    (seconds after ``since_ms``), wall and task seconds, shuffle records read and written, and
    the operators it ran (``parallelize``: a DataFrame made from a driver list)."""
    from urllib.parse import urlparse

    log = Path(urlparse(spark.sparkContext.getConf().get("spark.eventLog.dir")).path)
    files = [p for p in log.iterdir() if p.name.startswith(spark.sparkContext.applicationId)]
    stages = []
    for line in files[0].read_text().splitlines() if files else []:
        event = json.loads(line)
        if event.get("Event") != "SparkListenerStageCompleted":
            continue
        info = event["Stage Info"]
        if info.get("Submission Time", 0) < since_ms:
            continue
        metrics = {a.get("Name"): a.get("Value") for a in info.get("Accumulables", [])}
        scopes = {json.loads(r.get("Scope") or "{}").get("name") for r in info.get("RDD Info", [])}
        operators = [op for op in _OPERATORS if op in scopes]
        stages.append({
            "stage": info["Stage ID"], "tasks": info["Number of Tasks"],
            "start": round((info["Submission Time"] - since_ms) / 1000, 1),
            "seconds": round((info["Completion Time"] - info["Submission Time"]) / 1000, 2),
            "task_seconds": round(int(metrics.get("internal.metrics.executorRunTime") or 0) / 1000, 2),
            "shuffle_read": int(metrics.get("internal.metrics.shuffle.read.recordsRead") or 0),
            "shuffle_written": int(metrics.get("internal.metrics.shuffle.write.recordsWritten") or 0),
            "operators": " ".join(operators),
        })  # fmt: skip
    return sorted(stages, key=lambda st: st["stage"])


def print_stages(w: Callable[[str], Any], stages: list[dict[str, Any]]) -> None:
    w(f"  {'stage':>5} {'start':>6} {'wall s':>7} {'task s':>7} {'tasks':>5} {'shuffle in':>10} "
      f"{'shuffle out':>11}  operators\n")  # fmt: skip
    for st in stages:
        times = f"{st['stage']:>5} {st['start']:>6.1f} {st['seconds']:>7.1f} {st['task_seconds']:>7.1f}"
        shuffle = f"{st['shuffle_read']:>10,} {st['shuffle_written']:>11,}"
        w(f"  {times} {st['tasks']:>5} {shuffle}  {st['operators']}\n")


# ---- mark ----------------------------------------------------------------------------------


@dataclass
class Timeline:
    """The mark's progress lines with the seconds since its start. A line said on another thread
    (the candidates, read while lakeFS prepares the dump: spark/mark/sources/prefetch.py) is a
    lane of its own, named ``[thread]``: a phase of the mark's thread ends at that thread's next
    line, so the dump's wait is not cut in two by the candidates' progress."""

    start: float = field(default_factory=time.perf_counter)
    #: (seconds, lane, message, (RSS, peak RSS) of this driver in MiB: where its memory grows)
    lines: list[tuple[float, str, str, tuple[int, int]]] = field(default_factory=list)

    def __call__(self, message: str) -> None:
        elapsed = time.perf_counter() - self.start
        thread = threading.current_thread()
        lane = "" if thread is threading.main_thread() else thread.name
        rss, peak = proc_status("self", "VmRSS"), proc_status("self", "VmHWM")
        self.lines.append((elapsed, lane, message, (rss, peak)))
        say(f"  +{elapsed:6.1f}s [{rss}/{peak} MiB] {f'[{lane}] ' if lane else ''}{message}")

    def phases(self, end: float) -> list[dict[str, Any]]:
        """Each line's phase, until the next line of its lane (the mark's lane: the end; another
        lane's last line: its own end, 0 s)."""
        from lakefs_gc.spark.runtime.heartbeat import THREAD_NAME as HEARTBEAT_LANE

        found = []
        lanes = dict.fromkeys(lane for _, lane, _, _ in self.lines)
        for lane in (lane for lane in lanes if lane != HEARTBEAT_LANE):  # printed, not a phase
            marks = [(t, m, rss) for t, line_lane, m, rss in self.lines if line_lane == lane]
            ends = [t for t, _, _ in marks[1:]] + [end if not lane else marks[-1][0]]
            prefix = f"[{lane}] " if lane else ""
            found += [
                {"phase": (prefix + m)[:90], "seconds": round(until - t, 2), "at": round(t, 2),
                 "rss_mib": rss[0], "peak_rss_mib": rss[1]}
                for (t, m, rss), until in zip(marks, ends, strict=True)
            ]  # fmt: skip
        return sorted(found, key=lambda p: p["at"])


def gc_settings(
    server: dict[str, Any], storage_root: Path, s3_endpoint: str | None = None, partitions: int | None = None
) -> Any:
    from lakefs_gc.settings import GcSettings

    storage: dict[str, Any] = {"local_root": str(storage_root)}
    if s3_endpoint:
        storage["s3"] = {"endpoint_url": s3_endpoint, **S3_KEYS}
    return GcSettings.model_validate(
        {"lakefs": {k: server[k] for k in ("endpoint", "access_key_id", "secret_access_key")},
         "storage": storage, "spark": {"parallelism": partitions}}
    )  # fmt: skip


def bench_mark(spark: Any, settings: Any, check: Callable[[Any, Any], dict[str, Any]]) -> dict[str, Any]:
    """One timed mark of the repository; ``check(settings, result)`` compares it with the truth."""
    from lakefs_gc import jobs

    say("mark: starting")
    timeline = Timeline()
    since_ms = time.time() * 1000
    with jobs.lakefs_client(settings, "bench") as client:
        result = jobs.mark(spark, settings, REPOSITORY, client=client, progress=timeline)
    seconds = time.perf_counter() - timeline.start
    memory = driver_memory()  # before anything below reads a whole table into this process
    say(f"mark: {seconds:.1f}s, {result.marked:,} marked; peak RSS {memory}")
    return {
        "seconds": round(seconds, 2),
        "mark_id": result.mark_id,
        "summary": result.summary,
        "memory": memory,
        "phases": timeline.phases(seconds),
        "stages": stage_times(spark, since_ms),
        "correctness": check(settings, result),
    }


def check_marked(settings: Any, result: Any, state: Path) -> dict[str, Any]:
    """The marked set beside the manifest's garbage set (ground truth of the synthesizer)."""
    import pyarrow.parquet as pq

    from lakefs_gc import jobs

    manifest = pq.read_table(state / f"{REPOSITORY}-manifest.parquet", columns=["address", "garbage"])
    addresses = manifest.column("address").to_pylist()
    expected = {a for a, g in zip(addresses, manifest.column("garbage").to_pylist(), strict=True) if g}
    marked_table = jobs.report_table(settings, result.storage_namespace, result.mark_id, "deleted")
    marked = set(marked_table.column("address").to_pylist())
    return {
        "expected_garbage": len(expected),
        "marked": len(marked),
        "marked_rows": marked_table.num_rows,
        "missed": len(expected - marked),  # garbage left behind: a GC that under-collects
        "wrongly_marked": len(marked - expected),  # live data marked: a GC that loses data
        "equal": marked == expected and marked_table.num_rows == len(marked),
    }


# ---- range entries -------------------------------------------------------------------------


def bench_ranges(spark: Any, settings: Any, storage_root: Path) -> dict[str, Any]:
    """Range entries the mark decodes (each distinct range of the active metaranges once), and
    how fast they decode: in a Spark job that only reads ranges, and in one Python process."""
    from lakefs_gc.lakefs.client import LakeFSClient
    from lakefs_gc.lakefs.exports import read_commits_csv
    from lakefs_gc.lakefs.ranges import committed_addresses_of_range, open_sstable
    from lakefs_gc.spark.mark.references import committed_frames
    from lakefs_gc.sstable import SSTableReader, iter_metarange
    from lakefs_gc.storage.filesystems import filesystem_for
    from lakefs_gc.storage.locations import parse_location, parse_storage_namespace

    with LakeFSClient(settings.lakefs, source="bench") as client:
        repo = client.get_repository(REPOSITORY)
        export = client.prepare_commits(REPOSITORY)
    location = parse_location(export.location, local_root=str(storage_root))
    fs, path = filesystem_for(location, settings.storage)
    metaranges = read_commits_csv(fs, path).metarange_ids
    namespace = parse_storage_namespace(repo.storage_namespace, local_root=str(storage_root))
    counts: dict[str, int] = {}
    for metarange in metaranges:
        with SSTableReader(Path(namespace.fs_path) / "_lakefs" / metarange) as reader:
            counts.update((range_id, data.count) for _key, range_id, data in iter_metarange(reader))
    entries = sum(counts.values())

    start = time.perf_counter()
    _ids, addresses = committed_frames(
        spark, connection=settings.lakefs, repository=REPOSITORY, storage_namespace=repo.storage_namespace,
        namespace=namespace, options=settings.storage, metarange_ids=metaranges,
        parallelism=spark.sparkContext.defaultParallelism,
    )  # fmt: skip
    spark_rows = addresses.count()
    spark_seconds = time.perf_counter() - start

    start = time.perf_counter()
    decoded = 0
    for range_id in counts:
        location = namespace.join(f"_lakefs/{range_id}")
        with open_sstable(fs, location, location.fs_path) as reader:
            decoded += sum(1 for _ in committed_addresses_of_range(reader, repo.storage_namespace))
    one_seconds = time.perf_counter() - start
    return {
        "active_metaranges": len(metaranges),
        "distinct_ranges": len(counts),
        "entries": entries,
        "spark_job_rows": spark_rows,
        "spark_job_seconds": round(spark_seconds, 2),
        "one_process_decoded": decoded,
        "one_process_seconds": round(one_seconds, 2),
    }


# ---- sweep ---------------------------------------------------------------------------------


def write_s3_mark(s3: Any, namespace_key: str, mark_id: str, addresses: list[str]) -> None:
    """A lakeFS-layout mark (summary.json + deleted/ parquet parts) listing ``addresses``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = f"{namespace_key}/_lakefs/retention/gc/unified/{mark_id}"
    parts = 8
    for i in range(parts):
        buf = io.BytesIO()
        pq.write_table(pa.table({"address": addresses[i::parts]}), buf, compression="snappy")
        s3.put_object(Bucket=BUCKET, Key=f"{base}/deleted/part-{i:05d}-bench-c000.snappy.parquet",
                      Body=buf.getvalue())  # fmt: skip
    # listed: as if the namespace held 20x its garbage (the bottom line: 1M of 20M), so the sweep's
    # --max-delete-fraction guard passes as it would there
    summary = {"run_id": mark_id, "success": True, "first_slice": "", "num_deleted_objects": len(addresses),
               "num_listed_objects": 20 * len(addresses)}  # fmt: skip
    s3.put_object(Bucket=BUCKET, Key=f"{base}/summary.json", Body=json.dumps(summary).encode())


def timed_against(moto_pid: int, fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall seconds, moto's CPU seconds meanwhile)."""
    cpu, start = cpu_seconds(moto_pid), time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start, cpu_seconds(moto_pid) - cpu


def warm_up(spark: Any) -> None:
    """One job that starts the Python workers and imports the sweep's modules, as a mark before
    a sweep would have: the sweep is then timed warm, like the loop."""

    def imports(batches: Iterator[Any]) -> Iterator[Any]:
        import boto3  # noqa: F401

        import lakefs_gc.spark.sweep.job  # noqa: F401

        yield from batches

    partitions = spark.sparkContext.defaultParallelism
    spark.range(0, partitions, numPartitions=partitions).mapInArrow(imports, "id long").count()


def bench_sweep(
    spark: Any, workdir: Path, moto_server: Child, n: int, partitions: int | None
) -> dict[str, Any]:
    import boto3
    from botocore.config import Config
    from lakefs_sdk.api.repositories_api import RepositoriesApi
    from lakefs_sdk.api_client import ApiClient
    from lakefs_sdk.models.garbage_collection_rules import GarbageCollectionRules
    from lakefs_sdk.models.repository_creation import RepositoryCreation

    from lakefs_gc import jobs

    endpoint, moto_pid = moto_server.info["endpoint"], moto_server.info["pid"]
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=S3_KEYS["access_key_id"],
        aws_secret_access_key=S3_KEYS["secret_access_key"], region_name=S3_KEYS["region"],
        config=Config(s3={"addressing_style": "path"}),
    )  # fmt: skip
    s3.create_bucket(Bucket=BUCKET)
    out: dict[str, Any] = {"objects": n}

    say(f"sweep: {n:,} objects for the single-threaded DeleteObjects loop")
    moto_server.request({"op": "seed", "bucket": BUCKET, "prefix": "loop/", "n": n})
    keys = bench_keys("loop/", n)

    def loop() -> int:
        deleted = 0
        for i in range(0, len(keys), 1000):
            objects = [{"Key": k} for k in keys[i : i + 1000]]
            response = s3.delete_objects(Bucket=BUCKET, Delete={"Objects": objects, "Quiet": False})
            deleted += len(response.get("Deleted", []))
        return deleted

    deleted, seconds, moto_cpu = timed_against(moto_pid, loop)
    left = moto_server.request({"op": "count", "bucket": BUCKET, "prefix": "loop/"})["count"]
    out["loop"] = {
        "deleted": deleted,
        "left": left,
        "seconds": round(seconds, 2),
        "moto_cpu_seconds": round(moto_cpu, 2),
    }
    say(f"sweep: loop {n / seconds:,.0f} deletes/s")

    namespace_key = "sweep"
    with test_server(workdir / "sweep-storage", None, endpoint) as server:
        creation = RepositoryCreation(
            name="sweep-bench", storage_namespace=f"s3://{BUCKET}/{namespace_key}", default_branch="main"
        )  # type: ignore[call-arg]  # storage_id is optional on the wire
        rules = GarbageCollectionRules(default_retention_days=7, branches=[])  # the sweep revalidates
        with ApiClient(_sdk_configuration(server.info)) as api:
            RepositoriesApi(api).create_repository(creation)
            RepositoriesApi(api).set_gc_rules("sweep-bench", rules)
        say(f"sweep: {n:,} objects and a mark listing them for sweep_run")
        moto_server.request({"op": "seed", "bucket": BUCKET, "prefix": f"{namespace_key}/", "n": n})
        mark_id = f"bench-{uuid.uuid4().hex[:12]}"
        write_s3_mark(s3, namespace_key, mark_id, bench_keys("", n))
        settings = gc_settings(server.info, workdir / "sweep-storage", endpoint, partitions)
        since_ms = time.time() * 1000
        lines: list[str] = []
        result, seconds, moto_cpu = timed_against(
            moto_pid,
            lambda: _sweep(jobs, spark, settings, "sweep-bench", mark_id, lines),
        )
    left = moto_server.request({"op": "count", "bucket": BUCKET, "prefix": f"{namespace_key}/data/"})["count"]
    out["sweep"] = {
        "deleted": result.deleted, "missing": result.missing, "failed": result.failed, "left": left,
        "seconds": round(seconds, 2), "moto_cpu_seconds": round(moto_cpu, 2),
        "deleting_seconds": deleting_seconds(lines),
        "partitions": settings.spark.parallelism or spark.sparkContext.defaultParallelism,
        "stages": stage_times(spark, since_ms),
    }  # fmt: skip
    say(f"sweep: sweep_run {n / seconds:,.0f} deletes/s")
    return out


def _sweep(jobs: Any, spark: Any, settings: Any, repository: str, mark_id: str, lines: list[str]) -> Any:
    def progress(message: str) -> None:
        lines.append(message)
        say("  " + message)

    with jobs.lakefs_client(settings, "bench") as client:
        return jobs.sweep(spark, settings, repository, mark_id, client=client, progress=progress)


def deleting_seconds(lines: list[str]) -> float | None:
    """The deleting phase of a sweep (its outcome line: "... failed in 5.2s"), without the
    revalidation and the job's set-up before it, which do not depend on the objects' number."""
    for line in reversed(lines):
        if found := re.search(r" failed in ([0-9.]+)s", line):
            return float(found.group(1))
    return None


def _sdk_configuration(info: dict[str, Any]) -> Any:
    from lakefs_sdk.configuration import Configuration

    return Configuration(
        host=info["endpoint"], username=info["access_key_id"], password=info["secret_access_key"]
    )


# ---- report --------------------------------------------------------------------------------


def finish(result: dict[str, Any], report: Callable[[dict[str, Any]], None], json_path: Path | None) -> int:
    """The load at the end into ``result``'s environment line, the printed report, the JSON."""
    result["environment"] += f", load average {os.getloadavg()[0]:.1f} at end"
    report(result)
    if json_path:
        json_path.write_text(json.dumps(result, indent=2, default=str))
    return 0


def print_report(result: dict[str, Any]) -> None:
    w = sys.stdout.write
    spec, env = result["spec"], result["environment"]
    w(f"\nlakefs-gc mark/sweep benchmark: {spec}\n{env}\n")
    mark = result.get("mark")
    if mark:
        s, mem, c = mark["summary"], mark["memory"], mark["correctness"]
        w(f"\nmark {mark['mark_id']}: {mark['seconds']:.1f} s wall "
          f"({'meets' if mark['seconds'] < 180 else 'MISSES'} the 3-minute aim)\n")  # fmt: skip
        w(f"  listed {s.get('num_listed_objects', 0):,} objects, marked {s['num_deleted_objects']:,}; "
          f"{s.get('num_active_commits')} active commits, {s.get('num_metaranges')} metaranges, "
          f"{s.get('num_ranges')} ranges\n")  # fmt: skip
        verdict = "OK, equal" if c["equal"] else "DIFFERENT"
        w(f"  correctness: marked {c['marked']:,} vs manifest garbage {c['expected_garbage']:,}: {verdict} "
          f"(missed {c['missed']}, wrongly marked {c['wrongly_marked']})\n")  # fmt: skip
        executors = (
            f"largest of {mem['executor_jvms']} executor JVMs {mem['executor_jvm_peak_mib']}"
            if mem["executor_jvms"] else "the driver JVM is the executor (local mode)"
        )  # fmt: skip
        workers = (
            f"largest of {mem['python_workers']} python workers {mem['python_worker_peak_mib']} "
            f"(the benchmark's servers: {mem.get('bench_servers_peak_mib', '?')})"
        )
        w(f"  peak RSS MiB: python driver {mem['python_driver_peak_mib']}, driver JVM {mem['jvm_peak_mib']}, "
          f"{workers}; {executors}\n")  # fmt: skip
        w(f"  {'phase (progress line of mark_run)':<92} {'seconds':>8}\n")
        for p in mark["phases"]:
            w(f"  {p['phase']:<92} {p['seconds']:>8.1f}\n")
        print_stages(w, mark["stages"])
    ranges = result.get("ranges")
    if ranges and mark:
        e = ranges["entries"]
        w(f"\nrange entries: {e:,} in {ranges['distinct_ranges']:,} distinct ranges of "
          f"{ranges['active_metaranges']} active metaranges (each range read once)\n")  # fmt: skip
        w(f"  {'measured':<58} {'seconds':>8} {'entries/s':>11}\n")
        spark_rows, one_rows = ranges["spark_job_rows"], ranges["one_process_decoded"]
        for label, seconds in (
            ("whole mark (lists, reads ranges, joins, writes)", mark["seconds"]),
            (f"Spark job reading only the ranges ({spark_rows:,} rows)", ranges["spark_job_seconds"]),
            (f"one Python process, no Spark ({one_rows:,} rows)", ranges["one_process_seconds"]),
        ):
            w(f"  {label:<58} {seconds:>8.1f} {e / seconds:>11,.0f}\n")
    sweep = result.get("sweep")
    if sweep:
        n = sweep["objects"]
        loop, ours = sweep["loop"], sweep["sweep"]
        w(f"\nsweep of {n:,} objects on moto (S3), 1000 keys per DeleteObjects\n")
        w(f"  {'deleter':<44} {'deleted':>8} {'left':>6} {'seconds':>8} {'deletes/s':>10} {'moto CPU':>9}\n")
        for label, r in (("single-threaded DeleteObjects loop", loop),
                         (f"sweep_run ({ours['partitions']} partitions)", ours)):  # fmt: skip
            w(f"  {label:<44} {r['deleted']:>8,} {r['left']:>6} {r['seconds']:>8.1f} "
              f"{n / r['seconds']:>10,.0f} {r['moto_cpu_seconds'] / r['seconds']:>8.0%}\n")  # fmt: skip
        print_stages(w, ours["stages"])
        ratio = loop["seconds"] / ours["seconds"]
        w(f"  sweep / loop: {ratio:.2f}x, the whole sweep_run (revalidation and set-up included); "
          f"failed {ours['failed']}, missing {ours['missing']}\n")  # fmt: skip
        if ours.get("deleting_seconds"):
            phase = ours["deleting_seconds"]
            w(f"  deleting phase alone: {phase:.1f} s, {n / phase:,.0f} deletes/s, "
              f"{loop['seconds'] / phase:.2f}x the loop\n")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=1_000_000, help="committed objects")
    parser.add_argument("--commits", type=int, default=1_000)
    parser.add_argument("--branches", type=int, default=100)
    parser.add_argument("--uncommitted", type=int, help="staged objects (default objects/10)")
    parser.add_argument("--garbage", type=int, help="garbage objects (default objects/10)")
    parser.add_argument("--sweep-objects", type=int, default=100_000, help="objects to delete (0: no sweep)")
    parser.add_argument(
        "--s3-latency-ms", type=int, default=0,
        help="delay moto adds to each DeleteObjects answer, as a real S3's (default 0: moto as it is)",
    )  # fmt: skip
    parser.add_argument(
        "--sweep-partitions", type=int,
        help="partitions of the sweep (GcSettings.spark.parallelism; default Spark's default parallelism)",
    )  # fmt: skip
    parser.add_argument(
        "--moto-listings", choices=("indexed", "scan"), default="indexed",
        help="how moto answers ListObjects: from an index by directory, at about S3's cost (default), "
        "or scanning the whole bucket as moto 5.2 does (0.4-0.6 s a listing at 1M objects)",
    )  # fmt: skip
    parser.add_argument("--no-mark", action="store_true", help="only the sweep")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lakefs-gc-bench"),
                        help="synthetic repositories are kept here and reused")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write all numbers to this file")
    parser.add_argument("--serve-moto", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--s3-read-latency-ms", type=int, default=0, help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args()
    if args.serve_moto:
        return serve_moto(args.s3_latency_ms, args.moto_listings, args.s3_read_latency_ms)
    spec = Spec(args.objects, args.commits, args.branches,
                args.objects // 10 if args.uncommitted is None else args.uncommitted,
                args.objects // 10 if args.garbage is None else args.garbage)  # fmt: skip
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "spec": spec.__dict__,
        "environment": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start, "
        f"Spark master {args.master}",
    }
    storage, state = workdir, None
    if not args.no_mark:
        storage, state, result["synth"] = synthesized(workdir, spec)
    with moto(args.s3_latency_ms, args.moto_listings) as moto_server:
        spark = spark_session(args.master, workdir)
        try:
            if not args.no_mark:
                assert state is not None
                with test_server(storage, state, None) as server:
                    settings = gc_settings(server.info, storage)
                    result["mark"] = bench_mark(spark, settings, lambda s, r: check_marked(s, r, state))
                    result["ranges"] = bench_ranges(spark, settings, storage)
            if args.sweep_objects:
                if args.no_mark:
                    warm_up(spark)
                result["sweep"] = bench_sweep(
                    spark, workdir, moto_server, args.sweep_objects, args.sweep_partitions
                )
        finally:
            spark.stop()
    return finish(result, print_report, args.json)


if __name__ == "__main__":
    sys.exit(main())
