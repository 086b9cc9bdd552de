"""``lakefs-gc serve`` killed with SIGKILL and restarted: the same final state as an uninterrupted run.

A repository gets a history on an S3 namespace (moto), in a bucket whose notifications go to two
SQS queues: the service's, and a *witness* nobody reads, which tells the test every notification
moto sent. An inventory delivery is taken half-way through the history, so both ingest paths feed
the candidate set: the first half's objects come with the snapshot (and as events), the second
half's only as events.

An uninterrupted service ends with each upload's fate (every garbage object deleted, every live
one kept) and every notification stored once: the killed service's end is checked against those,
as the uninterrupted services of tests/service/test_serve_s3.py and tests/cluster/test_standalone.py
(its state on S3) are, rather than against a second service run beside it (a third JVM on the
machine, for a comparison those checks already imply). The service runs as a subprocess that is
killed (SIGKILL to all its processes at once, as a container's OOM kill would) and restarted with
the same configuration each time:

1. while ingesting and while marking: the event source has drained messages into its spool and
   their batch is not in the event table yet, the inventory ingest runs beside it, and the first
   mark is started (lakeFS handed out its uncommitted dump) without an outcome;
2. while sweeping: the restarted service marked again and its sweep deleted part of the garbage.

The last restart runs to ``--cycles 2``. The repository must end as its history says: every
garbage object deleted, every live one there and readable through lakeFS. After a last drain of
the queue, the event table holds no notification twice and loses none: every object's creation
and every garbage object's deletion, never more notifications of an object than moto sent. Each
mark's ``swept/`` lists each address once, and no address the killed sweep's ``swept/`` confirmed
was asked of S3 again; the killed mark never got a summary and its cycle batch marked again; the
inventory delivery was ingested once.

The service keeps its state in a local directory (``[local]``, the Spark checkpoints inside it)
or on moto S3 (``[s3]``: a prefix of the inventory bucket, reached through ``pyarrow`` like the
namespaces; the checkpoints in a directory of the driver), and the test reads it there.

The service reaches S3 through a moto front that delays every ``DeleteObjects`` and serialises
them per bucket, so a sweep of two tasks is half done for a while; lakeFS (the test server in this
process) writes to moto directly and keeps serving while the service is down.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import boto3
import pyarrow.parquet as pq
import pytest
import yaml
from pyspark.sql import SparkSession

from lakefs_gc.errors import ExitCode
from lakefs_gc.events.queues import QueueConfig
from lakefs_gc.inventory.generate import generate_delivery
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.service.cycle import INTERRUPTED
from lakefs_gc.spark.ingest.events.source import EventSourceConfig
from lakefs_gc.spark.ingest.events.table import EventTable, event_records, run_event_stream
from lakefs_gc.spark.ingest.inventory.table import CandidateTable, ingest_records, ingested_deliveries
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.server import LakeFSTestServer
from tests.service.histories import (
    MIN_AGE_S,
    History,
    deleted_branch,
    expired_commits,
    orphan,
    recent_commit,
    staging,
)
from tests.support.object_stores import s3_client, s3_options, unique_name
from tests.support.processes import kill_tree
from tests.support.servers import MotoServer
from tests.support.throttling import S3SlowDown, moto_behind
from tests.testing.sdk import Lakefs

pytestmark = pytest.mark.slow

GC = "_lakefs/retention/gc"
EVENT_SOURCE = "s3"
#: each DeleteObjects the services send waits this long, one at a time per bucket
DELETE_LATENCY_S = 1.5
VISIBILITY_S = 8
SERVE_TIMEOUT_S = 240
WORKER_TIMEOUT = "Python worker failed to connect back"
WORKER_TIMEOUT_RESTARTS = 5


# ---- the world: buckets, queues, history ----------------------------------------------------------


@dataclass
class World:
    """One repository's bucket, its two queues, its inventory destination and its history."""

    role: str  # names its files, queues and namespace ("killed")
    bucket: str
    queue_url: str
    witness_url: str
    inventory: str
    history: History

    @property
    def repo(self) -> str:
        return self.history.repo

    @property
    def prefix(self) -> str:
        """The namespace's key prefix in the bucket."""
        return f"repos/{self.repo}/"


def sqs_client(moto: MotoServer) -> Any:
    return boto3.client(
        "sqs", endpoint_url=moto.endpoint_url, region_name=moto.region,
        aws_access_key_id=moto.access_key_id, aws_secret_access_key=moto.secret_access_key,
    )  # fmt: skip


def make_world(lakefs: Lakefs, moto: MotoServer, name: str, role: str, inventory_bucket: str) -> World:
    s3, sqs = s3_client(moto), sqs_client(moto)
    urls = [sqs.create_queue(QueueName=f"{name}-{q}")["QueueUrl"] for q in ("gc", "witness")]
    arns = [
        sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for u in urls
    ]
    s3.create_bucket(Bucket=name)
    events = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
    s3.put_bucket_notification_configuration(
        Bucket=name,
        NotificationConfiguration={
            "QueueConfigurations": [
                {"Id": f"q{i}", "QueueArn": arn, "Events": events} for i, arn in enumerate(arns)
            ]
        },
    )
    history = History(lakefs, role, f"s3://{name}/repos/{role}")
    # (a destination prefix ending in the source bucket's name confuses the manifest reader's
    # mapping of data file keys: inventory/s3/manifest.py _data_path takes the first match)
    return World(role, name, urls[0], urls[1], f"s3://{inventory_bucket}/{role}", history)


def write_history(world: World, moto: MotoServer) -> None:
    """Half the history, the inventory delivery, the other half (known only from events)."""
    h = world.history.create()
    head = expired_commits(h)
    deleted_branch(h, "exp")
    staging(h)
    generate_delivery(
        parse_storage_namespace(h.namespace),
        StorageOptions(s3=s3_options(moto)),
        parse_location(world.inventory),
    )
    recent_commit(h, head)
    deleted_branch(h, "late")
    for i in range(5):
        h.garbage(orphan(h, f"late/orphan-{i}"), "uploaded after the snapshot, deleted uncommitted")
    for i in range(3):
        h.live(h.put("main", f"late/staged-{i}"), "staged after the snapshot")


# ---- the service ----------------------------------------------------------------------------------


def service_config(
    world: World, server: LakeFSTestServer, moto: MotoServer, front: MotoServer, state: State
) -> dict[str, Any]:
    keys = {"access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}
    age = f"{MIN_AGE_S}s"
    return {
        "lakefs": server.connection_info(),
        "storage": {"s3": {"endpoint_url": front.endpoint_url, "region": moto.region, **keys}},
        # most of the namespace is garbage: the fraction guard would refuse the sweeps
        "gc": {"min_age": age, "unsafe_min_age": age, "max_delete_fraction": 1.0, "sweep_concurrency": 1},
        "spark": {"parallelism": 2},
        "repositories": [world.repo],
        "service": {
            "state": state.location,
            **({"checkpoints": str(state.checkpoints)} if state.checkpoints else {}),
            "metrics_host": "127.0.0.1",
            "metrics_port": 0,
            "tick": "1s",
            "interval": "3s",
            "retry_delay": "2s",
            "events": {
                EVENT_SOURCE: {
                    "type": "sqs",
                    "queue_url": world.queue_url,
                    "endpoint_url": moto.endpoint_url,
                    "region": moto.region,
                    "visibility_timeout_seconds": VISIBILITY_S,
                    **keys,
                }
            },
            "events_trigger": "1s",
            "inventory": world.inventory,
            "inventory_trigger": "1s",
            "shutdown_timeout": "120s",
        },
    }


@dataclass(frozen=True)
class State:
    """Where a service keeps its state: a local directory (its checkpoints inside, the default
    layout), or moto S3 (the checkpoints in a directory of the driver)."""

    location: str
    options: StorageOptions
    checkpoints: Path | None = None

    @classmethod
    def on(cls, store: str, role: str, tmp_path: Path, moto: MotoServer, bucket: str) -> State:
        if store == "local":
            return cls(str(tmp_path / role / "state"), StorageOptions())
        return cls(
            f"s3://{bucket}/state/{role}",
            StorageOptions(s3=s3_options(moto)),
            tmp_path / role / "checkpoints",
        )


class Service:
    """``python -m lakefs_gc serve --config`` for one world, as a subprocess in a session of its own."""

    def __init__(self, world: World, config: dict[str, Any], workdir: Path, state: State) -> None:
        self.world, self.workdir = world, workdir
        self.settings = config
        self.state = StoreDirectory.of(state.location, state.options)
        #: the driver's checkpoints: beside the state when it is local (the default layout)
        self.checkpoints = state.checkpoints or self.state.local_path
        self.config = workdir / f"{world.role}.yaml"
        self.config.write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        assert self.process is None or self.process.poll() is not None
        log = self.workdir / f"{self.world.role}-{len(self.logs) + 1}.log"
        self.logs.append(log)
        argv = [sys.executable, "-m", "lakefs_gc", "serve", "--config", str(self.config),
                "--log-format", "json", *extra]  # fmt: skip
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return self.process

    def finish(self, *extra: str) -> None:
        """Wait for a ``--cycles`` run (started with ``extra``) to exit by itself, with 0."""
        assert self.process is not None
        for _ in range(WORKER_TIMEOUT_RESTARTS + 1):
            try:
                code = self.process.wait(timeout=SERVE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"{self.world.role}: serve did not end in {SERVE_TIMEOUT_S}s:\n{self.tail()}")
            if not self.worker_timed_out():
                break
            self.start(*extra)
        assert code == 0, f"{self.world.role}: serve exited {code}:\n{self.tail()}"

    def worker_timed_out(self) -> bool:
        """The last run exited as a query died of the loaded machine: Spark gives a Python worker
        10 s to connect back (fixed), which a busy 2-core machine misses when the service's queries
        start at once. An orchestrator restarts the service, and so does the test."""
        code = self.process.returncode if self.process is not None else None
        return code == ExitCode.SPARK and WORKER_TIMEOUT in self.logs[-1].read_text(errors="replace")

    def kill_when(self, condition: Callable[[], bool], what: str) -> None:
        process = self.start()
        deadline, restarts = time.monotonic() + SERVE_TIMEOUT_S, WORKER_TIMEOUT_RESTARTS
        while not condition():
            if process.poll() is not None and self.worker_timed_out() and restarts:
                process, restarts = self.start(), restarts - 1
                deadline = time.monotonic() + SERVE_TIMEOUT_S
            elif process.poll() is not None:
                pytest.fail(
                    f"{self.world.role}: serve exited ({process.returncode}) before {what}:\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"{self.world.role}: never {what}:\n{self.tail()}")
            time.sleep(0.02)
        self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            kill_tree(self.process.pid)
            self.process.wait()

    def story(self) -> str:
        """What each run of this service logged about its cycles, and its batch records: the
        account a failure of the final checks needs (the runs' logs are gone with the CI machine)."""
        parts = []
        for log in self.logs:
            lines = [
                line for line in log.read_text(errors="replace").splitlines()
                if any(w in line for w in ("GC batch", "mark", "sweep", "lease", "query", "Error", "stopp"))
            ]  # fmt: skip
            parts.append(f"--- {log.name}\n" + "\n".join(lines[-60:]))
        parts.append("--- batch records\n" + "\n".join(json.dumps(b) for b in self.batches()))
        return "\n".join(parts)

    def tail(self, lines: int = 80) -> str:
        text = self.logs[-1].read_text(errors="replace") if self.logs else ""
        return f"({self.logs[-1]})\n" + "\n".join(text.splitlines()[-lines:])

    # ---- its state directory

    def spooled(self) -> list[str]:
        return [n for n in self.state.names(f"events/{EVENT_SOURCE}/spool") if n.endswith(".json")]

    def event_table(self) -> EventTable:
        return EventTable(self.state.sub("events/table").location, self.state.options)

    def event_batches(self) -> int:
        return len([n for n in self.state.names("events/table/_batches") if n.endswith(".json")])

    def candidate_table(self) -> CandidateTable:
        return CandidateTable(self.state.sub("inventory/table").location, self.state.options)

    def batches(self) -> list[dict[str, Any]]:
        directory = f"cycles/{self.world.repo}/batches"
        names = [n for n in self.state.names(directory) if n.endswith(".json")]
        return sorted((self._record(f"{directory}/{n}") for n in names), key=lambda b: b["batch_id"])

    def _record(self, relative: str) -> dict[str, Any]:
        """A batch record the running service may be rewriting: on S3, pyarrow reads an object's
        size first and its bytes next, so a record replaced in between reads torn; read it again."""
        for _ in range(20):
            try:
                record: dict[str, Any] = json.loads(self.state.read(relative) or b"{}")
                return record
            except json.JSONDecodeError:
                time.sleep(0.2)
        raise AssertionError(f"{relative}: no whole record in 20 reads")

    def marks(self) -> list[dict[str, Any]]:
        return [m for b in self.batches() for m in b["marks"]]

    def mark_in_flight(self) -> dict[str, Any] | None:
        """The batch whose mark was started and has no outcome yet."""
        return next((b for b in self.batches() if b["marks"] and b["marks"][-1]["success"] is None), None)

    def drain(self, spark: SparkSession) -> None:
        """Drain the queue into the event table once more, as the service's event source would
        (same name, checkpoint, spool and table): notifications sent after its last batch."""
        settings = self.settings["service"]
        namespace = parse_storage_namespace(self.world.history.namespace)
        config = EventSourceConfig(
            name=f"lakefs-gc-events-{EVENT_SOURCE}",
            queue=QueueConfig.model_validate(settings["events"][EVENT_SOURCE]),
            routes=(NamespaceRoute.of(self.world.repo, namespace),),
            spool=self.state.sub(f"events/{EVENT_SOURCE}/spool").uri(),
            spool_storage=self.state.options,
            receive_wait_seconds=0,
        )
        checkpoint = self.checkpoints / "events" / EVENT_SOURCE / "checkpoint"
        query = run_event_stream(
            spark, config, self.event_table(), checkpoint, trigger={"availableNow": True}
        )
        if not query.awaitTermination(120):
            query.stop()
            pytest.fail(f"{self.world.role}: the last drain did not end")
        assert query.exception() is None, query.exception()


# ---- the bucket -----------------------------------------------------------------------------------


class Bucket:
    """What is in a world's bucket, read with boto3 (never through the service's code)."""

    def __init__(self, moto: MotoServer, world: World) -> None:
        self.s3, self.sqs, self.world = s3_client(moto), sqs_client(moto), world

    def keys(self, under: str = "") -> set[str]:
        prefix = self.world.prefix + under
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.world.bucket, Prefix=prefix)
        return {o["Key"][len(self.world.prefix) :] for page in pages for o in page.get("Contents", [])}

    def data(self) -> set[str]:
        return self.keys("data/")

    def get(self, key: str) -> bytes:
        return bytes(self.s3.get_object(Bucket=self.world.bucket, Key=self.world.prefix + key)["Body"].read())

    def dumps(self) -> set[str]:
        """Run ids of the uncommitted dumps lakeFS wrote (one per mark, one per revalidation)."""
        return {k.split("/")[4] for k in self.keys(f"{GC}/uncommitted/")}

    def report(self, mark_id: str, part: str) -> list[dict[str, Any]]:
        """The rows of a mark report's ``deleted`` or ``swept`` parquet parts."""
        rows: list[dict[str, Any]] = []
        for key in sorted(self.keys(f"{GC}/unified/{mark_id}/{part}/")):
            if not key.rsplit("/", 1)[-1].startswith(("_", ".")):
                rows.extend(pq.read_table(io.BytesIO(self.get(key))).to_pylist())
        return rows

    def summary(self, mark_id: str) -> dict[str, Any] | None:
        key = f"{GC}/unified/{mark_id}/summary.json"
        return json.loads(self.get(key)) if key in self.keys(f"{GC}/unified/{mark_id}/") else None

    def witnessed(self) -> list[Notification]:
        """Every notification of the namespace's objects the witness queue received."""
        sqs, seen = self.sqs, list[Notification]()
        while got := sqs.receive_message(QueueUrl=self.world.witness_url, MaxNumberOfMessages=10).get(
            "Messages", []
        ):
            for message in got:
                for record in json.loads(message["Body"]).get("Records", []):
                    key = unquote_plus(record["s3"]["object"]["key"])  # (S3 sends keys URL-encoded)
                    kind = "created" if record["eventName"].startswith("ObjectCreated") else "deleted"
                    if key.startswith(self.world.prefix + "data/"):
                        when = datetime.fromisoformat(record["eventTime"].replace("Z", "+00:00"))
                        seen.append((key[len(self.world.prefix) :], kind, when))
                sqs.delete_message(QueueUrl=self.world.witness_url, ReceiptHandle=message["ReceiptHandle"])
        return seen


#: (address, created|deleted, event time). Without a sequencer (moto sends none) the event time
#: is what tells two notifications of an object apart: the event table stores one per time. The
#: test server writes each object twice (pyarrow's output stream), sometimes within a millisecond,
#: and moto times each queue's copy of a notification apart (the witness's times differ from the
#: service queue's by a millisecond or so): so per object, the table holds at most as many
#: notifications as the witness saw, and at least one.
Notification = tuple[str, str, datetime]


def fated(h: History, *, garbage: bool) -> set[str]:
    """The addresses the history expects deleted (``garbage``) or kept."""
    return {a for a, fate in h.fates.items() if fate.garbage == garbage}


def stored_events(service: Service) -> list[dict[str, Any]]:
    """Every row of the event table's recorded parts."""
    table = service.state.sub("events/table")
    return [
        row
        for record in event_records(service.event_table())
        if record.get("part")
        for row in pq.read_table(io.BytesIO(table.read(record["part"]) or b"")).to_pylist()
    ]


# ---- the S3 front -----------------------------------------------------------------------------------


class SlowSerialDeletes(S3SlowDown):
    """Delays each ``DeleteObjects`` by ``latency_s``, one at a time per bucket; counts the keys asked."""

    def __init__(self, app: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.asked: Counter[str] = Counter()
        self.in_flight: Counter[str] = Counter()
        self._buckets: dict[str, threading.Lock] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("REQUEST_METHOD") != "POST" or "delete" not in environ.get("QUERY_STRING", ""):
            return self.app(environ, start_response)
        bucket = environ.get("PATH_INFO", "/").strip("/").split("/", 1)[0]
        with self._lock:
            serial = self._buckets.setdefault(bucket, threading.Lock())
            self.in_flight[bucket] += 1
        try:
            with serial:
                return super().__call__(environ, start_response)
        finally:
            with self._lock:
                self.in_flight[bucket] -= 1

    def settle(self, bucket: str, timeout: float = 30) -> None:
        """Wait until no ``DeleteObjects`` of ``bucket`` is in flight."""
        deadline = time.monotonic() + timeout
        while self.in_flight[bucket]:
            assert time.monotonic() < deadline, f"DeleteObjects of {bucket} still in flight"
            time.sleep(0.05)

    def _decide(self, keys: list[str]) -> tuple[bool, set[str]]:
        with self._lock:
            self.asked.update(keys)
        return super()._decide(keys)


@pytest.fixture
def front() -> Iterator[tuple[MotoServer, SlowSerialDeletes]]:
    hook = lambda app: SlowSerialDeletes(app, latency_s=DELETE_LATENCY_S)  # noqa: E731
    with moto_behind(hook, name="slow-serial-deletes") as served:
        yield served


@pytest.fixture
def lakefs_server(tmp_path: Path, moto: MotoServer) -> Iterator[tuple[LakeFSTestServer, Lakefs]]:
    settings = ServerSettings(
        grace_period=timedelta(seconds=MIN_AGE_S),
        storage=StorageOptions(s3=s3_options(moto)),
        blockstores=("s3",),
    )
    root = tmp_path / "storage"
    root.mkdir()
    with (
        LakeFSTestServer(storage_root=root, settings=settings) as server,
        server.sdk_client() as client,
    ):
        yield server, Lakefs(client)


class Clock:
    def __init__(self) -> None:
        self.start = self.last = time.monotonic()

    def lap(self, what: str) -> None:
        now = time.monotonic()
        print(f"{now - self.start:6.1f}s (+{now - self.last:5.1f}s) {what}")
        self.last = now


# ---- the test -------------------------------------------------------------------------------------


@dataclass
class Killed:
    """What the test saw at each kill."""

    spooled: list[str] = field(default_factory=list)
    inventory_recorded: bool = False
    inventory_offsets: list[str] = field(default_factory=list)  # its checkpoint's offset log
    mark_batch: int = -1
    mark_id: str = ""  # the run id lakeFS gave the killed mark
    swept_mark: str = ""
    marked: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)  # swept/ of the killed sweep at the kill
    gone: set[str] = field(default_factory=set)


@pytest.mark.parametrize("store", ["local", "s3"])
def test_killed_service_ends_like_an_uninterrupted_one(
    store: str,
    tmp_path: Path,
    moto: MotoServer,
    front: tuple[MotoServer, SlowSerialDeletes],
    lakefs_server: tuple[LakeFSTestServer, Lakefs],
    spark: SparkSession,
    request: pytest.FixtureRequest,
) -> None:
    server, lakefs = lakefs_server
    front_server, hook = front
    inventory_bucket = unique_name(request)
    s3_client(moto).create_bucket(Bucket=inventory_bucket)
    # the random tail of the name stays: [local] and [s3] share the test's name and the session's
    # moto server, and lakeFS refuses a storage namespace another repository already used
    stem, _, tail = unique_name(request).rpartition("-")
    world = make_world(lakefs, moto, f"{stem[:26].strip('-')}-{tail}-k", "killed", inventory_bucket)
    write_history(world, moto)
    state = State.on(store, world.role, tmp_path, moto, inventory_bucket)
    killed = Service(world, service_config(world, server, moto, front_server, state), tmp_path, state)
    bucket = Bucket(moto, world)
    seen = Killed()
    clock = Clock()
    try:
        kill_while_ingesting_and_marking(killed, bucket, seen)
        clock.lap("killed while ingesting and marking")
        kill_while_sweeping(killed, bucket, seen)
        clock.lap("killed while sweeping")
        hook.settle(world.bucket)  # a request of the dead service still deletes
        asked_before = Counter(hook.asked)
        killed.start("--cycles", "2")
        killed.finish("--cycles", "2")
        asked_last = hook.asked - asked_before
        clock.lap("restarted to the end")
    finally:
        killed.kill()

    time.sleep(VISIBILITY_S + 1)  # what a stopped drain had received is visible again
    killed.drain(spark)
    clock.lap("last drain")

    try:
        check_final_state(killed, bucket)
        check_kills(killed, bucket, seen, asked_last, world.prefix)
    except AssertionError:
        print(killed.story())
        raise


def kill_while_ingesting_and_marking(service: Service, bucket: Bucket, seen: Killed) -> None:
    def due() -> bool:
        # messages spooled, their batch not recorded; the first mark started, its dump written
        return bool(
            service.spooled() and not service.event_batches() and service.mark_in_flight() and bucket.dumps()
        )

    service.kill_when(due, "spooled events while marking")
    seen.spooled = service.spooled()
    seen.inventory_recorded = bool(ingest_records(service.candidate_table()))
    offsets = service.checkpoints / "inventory" / "checkpoint" / "offsets"
    seen.inventory_offsets = sorted(p.name for p in offsets.glob("*")) if offsets.is_dir() else []
    in_flight = service.mark_in_flight()
    assert in_flight is not None and service.event_batches() == 0
    seen.mark_batch = in_flight["batch_id"]
    # the in-flight mark's dump is the newest (lakeFS's run ids sort newest first): on a slow
    # machine an earlier batch's mark, or its sweep's revalidation, may have asked for one too
    seen.mark_id = min(bucket.dumps())
    assert bucket.summary(seen.mark_id) is None


def kill_while_sweeping(service: Service, bucket: Bucket, seen: Killed) -> None:
    marked: dict[str, set[str]] = {}

    def due() -> bool:
        pending = [m for m in service.marks() if m["success"] and m["sweep"] is None]
        if not pending:
            return False
        mark_id = pending[-1]["mark_id"]
        if mark_id not in marked:
            marked[mark_id] = {r["address"] for r in bucket.report(mark_id, "deleted")}
        left = marked[mark_id] & bucket.data()
        return 0 < len(left) < len(marked[mark_id])

    service.kill_when(due, "half-way through a sweep")
    [(seen.swept_mark, seen.marked)] = marked.items()
    seen.gone = seen.marked - bucket.data()
    seen.confirmed = {
        r["address"]
        for r in bucket.report(seen.swept_mark, "swept")
        if r["outcome"] in ("deleted", "missing")
    }
    assert seen.gone and seen.gone != seen.marked


def check_final_state(service: Service, bucket: Bucket) -> None:
    h, role = service.world.history, service.world.role
    assert not h.problems(bucket.data()), (role, h.problems(bucket.data()))
    assert not h.unreadable(), (role, h.unreadable())
    assert bucket.data() == fated(h, garbage=False)  # nothing else was written under data/

    # every notification in the event table, once
    rows = stored_events(service)
    stored = [(r["address"], r["kind"], r["event_time"]) for r in rows]
    assert len(set(stored)) == len(stored), (role, [n for n, c in Counter(stored).items() if c > 1])
    witnessed = bucket.witnessed()
    sent, kept = Counter((a, k) for a, k, _ in witnessed), Counter((a, k) for a, k, _ in stored)
    assert set(kept) == set(sent), (role, set(sent) - set(kept), set(kept) - set(sent))
    assert not kept - sent, (role, kept - sent)
    assert set(sent) == {(u.address, "created") for u in h.uploads} | {
        (a, "deleted") for a in fated(h, garbage=True)
    }

    # the inventory delivery, once
    deliveries = ingested_deliveries(service.candidate_table())
    assert [d.status for d in deliveries] == ["ingested"], (role, deliveries)
    assert len(ingest_records(service.candidate_table())) == 1

    # every sweep: each marked address once in swept/
    marks = service.marks()
    marks = [m for m in marks if m["error"] != INTERRUPTED]  # closed instead of replayed (check_kills)
    assert all(m["success"] for m in marks), (role, marks)
    for mark in marks:
        assert mark["sweep"] == "done", (role, mark)
        marked = [r["address"] for r in bucket.report(mark["mark_id"], "deleted")]
        swept = [r["address"] for r in bucket.report(mark["mark_id"], "swept")]
        assert sorted(swept) == sorted(marked), (role, mark["mark_id"])
        assert len(set(swept)) == len(swept)
        assert set(marked) <= fated(h, garbage=True)
        summary = bucket.summary(mark["mark_id"])
        assert summary is not None, (role, mark["mark_id"])
        sweep = summary["sweep"]
        assert (sweep["deleted"] + sweep["missing"], sweep["failed"]) == (len(marked), 0), (role, sweep)


def check_kills(
    service: Service, bucket: Bucket, seen: Killed, asked_last: Counter[str], prefix: str
) -> None:
    # the killed mark: never summarised; its batch marked again, and that mark was swept
    assert bucket.summary(seen.mark_id) is None
    [batch] = [b for b in service.batches() if b["batch_id"] == seen.mark_batch]
    [after] = batch["marks"]
    if after["error"] == INTERRUPTED:
        # a restart stopped at once (Python-worker timeout) and Spark committed the replay of the
        # killed mark's batch: a later batch closed the mark and marked (check_final_state)
        assert (after["success"], after["mark_id"]) == (False, None)
    else:  # replayed: marked again in the same batch
        assert after["success"] and after["mark_id"] != seen.mark_id and after["sweep"] == "done"
    assert seen.mark_id not in {m["mark_id"] for m in service.marks()}

    # the killed sweep: resumed, without asking S3 for what swept/ had confirmed
    [resumed] = [m for m in service.marks() if m["mark_id"] == seen.swept_mark]
    assert resumed["sweep"] == "done"
    asked = {k[len(prefix) :] for k in asked_last if k.startswith(prefix)}
    assert not asked & seen.confirmed, asked & seen.confirmed
    assert seen.marked - seen.confirmed <= asked  # the rest was asked (again)

    # the killed ingest: the spooled messages were stored (or dropped as duplicates) after all
    spools = {seq for record in event_records(service.event_table()) for seq in record["spools"]}
    assert {int(name.split(".")[0]) for name in seen.spooled} <= spools
    print(
        f"\nkilled while ingesting {seen.spooled} (inventory: offsets {seen.inventory_offsets}, "
        f"recorded {seen.inventory_recorded}) "
        f"and marking {seen.mark_id} (batch {seen.mark_batch}); killed sweeping {seen.swept_mark}: "
        f"{len(seen.gone)}/{len(seen.marked)} deleted, {len(seen.confirmed)} confirmed; "
        f"{len(service.marks())} marks in all"
    )
