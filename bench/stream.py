"""Benchmark: the streaming service's event sources and GC cycles (numbers, not a test).

Events. For each queue (moto's SQS and Azurite's Storage Queue), N realistic notifications (S3
``ObjectCreated:Put``/``ObjectRemoved:Delete`` records for SQS; Event Grid ``BlobCreated``/
``BlobDeleted`` events, base64 as ``AzureQueueNotifier`` writes them, for Azurite; 9 in 10 creates,
1 in 50 outside every namespace) go through four paths, each timed on its own fresh queue:

* **adapter**: ``open_queue(config)``: ``receive`` until empty, then ``acknowledge`` (no Spark);
* **spool**: the event source's driver side alone (``EventStreamReader.latestOffset`` drains into
  spool files, then ``commit`` acknowledges), no Spark;
* **availableNow runs**: ``run_event_stream`` with ``availableNow`` into an event table on local
  Spark, one run per round; the last run's acknowledgements (Spark calls ``commit`` only at the
  next run) are timed apart;
* **running query**: one ``run_event_stream`` with a 0 s processing-time trigger (the service's
  kind of query) until every message is in the table and acknowledged.

Both emulators cost O(messages in the queue) per call (moto: each SendMessage or message received
computes every queue attribute, each a scan of the queue with two ``datetime`` calls per message:
14 s per ReceiveMessage at 20K deep; Azurite: receive and delete scan the queue too, 64 ms per
delete at 20K deep). A 20K-deep queue therefore measures the emulators, not us. So the N
messages go in rounds of ``--depth`` (default 1000: what a trigger interval brings at 100
events/s), each put straight into the queue before the round (SQS: into moto's backend, in its
own process; Azurite: ``send_message`` from 4 threads) and not timed. moto answers on this
machine's CPU, which Spark needs too; ``--sqs-latency-ms`` adds a round trip to every SQS request
instead (a sleep, requests overlap), so that waiting on the queue, not sharing 2 cores with it, is
what the paths differ by, as against SQS. In its own process moto's
SQS also gets three equivalent but faster helpers (``--moto-as-is`` keeps moto's): a
``time.time()`` clock, a retention check that reads the retention period instead of computing
every attribute, and a receipt-handle check that builds no list. CPU seconds of this driver, of
Spark (JVM and Python workers) and of the queue server are reported for each path: they say
whether the emulator or our code is the bottleneck, on any machine load. Each path gets a fresh
emulator, and besides the overall rate the rate of its median round is reported: Azurite's queue
GC (a mark-and-sweep of its message extents every 60 s, not configurable) blocks it for up to a
minute or two once a few thousand messages went through, which lands in whichever round is
running then (and can expire a pop receipt: one acknowledgement fails, the message comes again).

GC cycles. The synthetic repository of bench/mark.py (default 1M committed objects, 1K commits,
100 branches, objects/10 staged and objects/10 garbage; synthesized once and reused) is cloned
with hard links (its files are never written in place) and served by the test server. A cycle is
what the service does per repository: ``mark_run`` with a range cache and the namespace listing as
the candidate source (the service lists when it has no inventory snapshot), then ``sweep_run`` of
that mark (revalidation on, as by default). The first cycle fills the range cache and sweeps the
garbage; then 1% new commits (``--new-fraction``: 10 commits on 10 branches, 10K objects in
existing table partitions, uploaded and committed through the lakeFS API) and the second cycle.
For comparison, an uncached mark (no sweep) runs before the first cycle and after the second.

    python bench/stream.py [--events N] [--depth N] [--sources sqs,azure] [--objects N]
                           [--new-fraction F] [--no-events] [--no-gc] [--no-uncached]
                           [--workdir DIR] [--master local[2]] [--json FILE] [--moto-as-is]
                           [--sqs-latency-ms MS]

Results and how to read them: bench/README.md.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

from mark import (
    REPOSITORY,
    Spec,
    Timeline,
    child,
    cpu_seconds,
    gc_settings,
    process_tree,
    say,
    spark_session,
    stage_times,
    synthesized,
    test_server,
)

HERE = Path(__file__).resolve()
BUCKET = CONTAINER = "bench-events"
ACCOUNT = "devstoreaccount1"  # Azurite's
NAMESPACES = {"alpha": "repos/alpha/", "beta": "repos/beta/", "gamma": "warehouse/gamma/"}
EVENT_BASE = datetime(2026, 11, 21, 6, 0, tzinfo=timezone.utc)
AZURE_SEND_THREADS = 4
UPLOAD_THREADS = 4


# ---- notifications -------------------------------------------------------------------------


def event_of(i: int) -> tuple[str | None, str, str]:
    """(repository or None, key, kind) of the i-th notification: keys shaped like lakeFS's
    ``<namespace>data/<slice>/<object>``, 1 in 50 outside every namespace, 1 in 10 a delete."""
    if i % 50 == 49:
        return None, f"elsewhere/logs/{i:012d}.log", "created"
    repository = sorted(NAMESPACES)[i % len(NAMESPACES)]
    key = f"{NAMESPACES[repository]}data/gbench{i // 1000:07d}/c{i:012d}"
    return repository, key, "deleted" if i % 10 == 9 else "created"


def s3_body(i: int) -> str:
    """An S3 event notification as S3 sends it to SQS (one record per message)."""
    _repo, key, kind = event_of(i)
    when = EVENT_BASE + timedelta(milliseconds=i)
    obj: dict[str, Any] = {"key": quote_plus(key)}
    if kind == "created":
        obj.update(size=1024 + i % 4096, eTag=uuid.UUID(int=i).hex)
    obj["sequencer"] = f"{0x0055AED6DCD90281E5 + i:018X}"
    record = {
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
        "eventName": "ObjectCreated:Put" if kind == "created" else "ObjectRemoved:Delete",
        "userIdentity": {"principalId": "AWS:AIDAJDPLRKLG7UEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "10.0.3.17"},
        "responseElements": {"x-amz-request-id": f"{i:016X}",
                             "x-amz-id-2": base64.b64encode(uuid.UUID(int=i).bytes * 3).decode()},
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "lakefs-gc",
               "bucket": {"name": BUCKET, "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                          "arn": f"arn:aws:s3:::{BUCKET}"},
               "object": obj},
    }  # fmt: skip
    return json.dumps({"Records": [record]})


def azure_body(i: int, blob_endpoint: str) -> str:
    """An Event Grid blob event in a Storage Queue message, as ``AzureQueueNotifier`` writes it."""
    from lakefs_gc.testing.notifications import blob_event, storage_account_topic

    _repo, key, kind = event_of(i)
    event = blob_event(
        "created" if kind == "created" else "deleted",
        schema="EventGridEvent",
        topic=storage_account_topic(ACCOUNT),
        container=CONTAINER,
        blob=key,
        url=f"{blob_endpoint.rstrip('/')}/{CONTAINER}/{quote(key, safe='/')}",
        time=EVENT_BASE + timedelta(milliseconds=i),
        sequencer=f"{i:032x}",
        size=1024 + i % 4096 if kind == "created" else None,
        etag=f"0x8DC{i:013X}" if kind == "created" else None,
    )
    return base64.b64encode(json.dumps(event, separators=(",", ":")).encode()).decode("ascii")


def routed(start: int, n: int) -> int:
    """How many of notifications ``start..start+n`` name an object of a repository."""
    return sum(1 for i in range(start, start + n) if event_of(i)[0] is not None)


# ---- moto's SQS in a child process ---------------------------------------------------------


def faster_moto_sqs() -> None:
    """Equivalent, faster versions of the moto 5 SQS helpers that make each call O(queue depth)
    with a large constant (the behaviour is unchanged; only the cost of calling them is)."""
    import moto.sqs.models

    models: Any = moto.sqs.models

    def unix_time(dt: datetime | None = None) -> float:
        if dt is None:
            return time.time()
        return (dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt).timestamp()  # naive: UTC

    models.unix_time = unix_time
    models.unix_time_millis = lambda dt=None: unix_time(dt) * 1000.0

    def retention_ok(self: Any, queue_name: str, message: Any) -> bool:
        retention = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention + message.sent_timestamp / 1000 > time.time())

    def had_receipt_handle(self: Any, receipt_handle: str) -> bool:
        return bool(receipt_handle == self.receipt_handle or receipt_handle in self._old_receipt_handles)

    models.SQSBackend.is_message_valid_based_on_retention_period = retention_ok
    models.Message.had_receipt_handle = had_receipt_handle


def serve_moto(as_is: bool, latency_ms: int = 0) -> int:
    """Child mode: moto (SQS) on a free port; stdin commands fill a queue through the backend
    (``{"op": "fill", "queue", "start", "n"}``) and report its depth (``{"op": "depth"}``)."""
    import logging
    import threading

    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from moto.sqs.models import Message, sqs_backends
    from werkzeug.serving import make_server

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test kit: tests/support
    from tests.support.servers import serialize_moto_sqs, sqs_lock

    if not as_is:
        faster_moto_sqs()
    serialize_moto_sqs()  # the adapters keep several requests in flight; moto's queues have no lock
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = DomainDispatcherApplication(create_backend_app)

    def delayed(environ: dict[str, Any], start_response: Any) -> Any:
        time.sleep(latency_ms / 1000)  # SQS's round trip; releases the GIL, so requests overlap
        return app(environ, start_response)

    served = delayed if latency_ms else app
    server = make_server("127.0.0.1", 0, served, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(json.dumps({"endpoint": f"http://127.0.0.1:{server.server_address[1]}", "pid": os.getpid()}),
          flush=True)  # fmt: skip
    backend = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    for line in sys.stdin:
        command = json.loads(line)
        queue = backend.get_queue(command["queue"])
        if command["op"] == "fill":
            with sqs_lock():  # beside the requests in flight
                for i in range(command["start"], command["start"] + command["n"]):
                    message = Message(str(uuid.uuid4()), s3_body(i))
                    message.mark_sent(delay_seconds=0)
                    queue.add_message(message)
        print(json.dumps({"depth": len(queue._messages)}), flush=True)
    return 0


# ---- CPU accounting ------------------------------------------------------------------------


def cpu_snapshot(servers: Mapping[str, int]) -> dict[int, tuple[str, float]]:
    """pid -> (role, CPU seconds so far) of this driver process ("driver"), of Spark (its JVM and
    the JVM's Python workers: "spark") and of each named server process with its descendants."""
    me = os.getpid()
    tree = process_tree(me)
    roots = {pid: role for role, pid in servers.items()}
    roots.update({pid: "spark" for pid, (ppid, name) in tree.items() if ppid == me and name == "java"})
    out = {me: ("driver", cpu_seconds(me))}
    for pid in tree:
        walk = pid
        while walk not in roots and walk in tree:
            walk = tree[walk][0]
        if walk in roots:
            with suppress(OSError):  # a worker that just exited
                out[pid] = (roots[walk], cpu_seconds(pid))
    return out


class Meter:
    """Wall and CPU seconds summed over the timed sections of one path (the CPU of a process
    that ends within a section is not counted)."""

    def __init__(self, servers: Mapping[str, int]) -> None:
        self.servers = servers
        self.seconds = 0.0
        self.sections: list[float] = []  # wall seconds of each timed section
        self.cpu: dict[str, float] = {"driver": 0.0, "spark": 0.0, **dict.fromkeys(servers, 0.0)}

    @contextmanager
    def timed(self) -> Iterator[None]:
        before, start = cpu_snapshot(self.servers), time.perf_counter()
        try:
            yield
        finally:
            self.sections.append(time.perf_counter() - start)
            self.seconds += self.sections[-1]
            for pid, (role, value) in cpu_snapshot(self.servers).items():
                self.cpu[role] = self.cpu.get(role, 0.0) + value - before.get(pid, (role, 0.0))[1]

    def result(self, messages: int, **extra: Any) -> dict[str, Any]:
        return {
            "messages": messages, "seconds": round(self.seconds, 2),
            "msgs_per_s": round(messages / self.seconds) if self.seconds else None,
            "cpu": {k: round(v, 2) for k, v in self.cpu.items()}, **extra,
        }  # fmt: skip


# ---- the three paths -----------------------------------------------------------------------


class Source:
    """One queue service: makes fresh queues, fills them, names its server process."""

    def __init__(self, kind: str, servers: dict[str, int], make: Callable[[str], Any], fill: Any) -> None:
        self.kind, self.servers, self._make, self._fill = kind, servers, make, fill

    def queue(self, name: str) -> Any:
        """A new empty queue's QueueConfig."""
        return self._make(f"{self.kind}-{name}-{uuid.uuid4().hex[:6]}")

    def fill(self, config: Any, start: int, n: int) -> None:
        self._fill(config, start, n)


def rounds(events: int, depth: int) -> list[tuple[int, int]]:
    return [(s, min(depth, events - s)) for s in range(0, events, depth)]


def bench_adapter(source: Source, events: int, depth: int) -> dict[str, Any]:
    from lakefs_gc.events.queues import open_queue

    config = source.queue("adapter")
    queue = open_queue(config)
    receive, ack = Meter(source.servers), Meter(source.servers)
    got = failed = calls = 0
    for start, n in rounds(events, depth):
        source.fill(config, start, n)
        receipts: list[str] = []
        with receive.timed():
            while batch := queue.receive(10_000, 0):
                receipts.extend(m.receipt for m in batch)
                calls += 1
        with ack.timed():
            failed += len(queue.acknowledge(receipts))
        got += len(receipts)
    queue.close()
    both = Meter(source.servers)
    both.seconds = receive.seconds + ack.seconds
    both.cpu = {k: receive.cpu.get(k, 0) + ack.cpu.get(k, 0) for k in receive.cpu.keys() | ack.cpu.keys()}
    return {
        "receive": receive.result(got, calls=calls), "acknowledge": ack.result(got, failed=failed),
        "total": both.result(got), "round_seconds": _plus(receive.sections, ack.sections),
    }  # fmt: skip


def _plus(*sections: list[float]) -> list[float]:
    return [round(sum(parts), 3) for parts in zip(*sections, strict=True)]


def event_config(config: Any, run_dir: Path, name: str) -> Any:
    from lakefs_gc.events.routing import EventRoute
    from lakefs_gc.spark.ingest.events.source import EventSourceConfig
    from lakefs_gc.storage.locations import parse_location

    base = (
        f"s3://{BUCKET}/" if config.type == "sqs" else f"https://{ACCOUNT}.blob.core.windows.net/{CONTAINER}/"
    )
    routes = tuple(EventRoute.of(repo, parse_location(base + prefix)) for repo, prefix in NAMESPACES.items())
    return EventSourceConfig(
        name=name, queue=config, routes=routes, spool=str(run_dir / name / "spool"), receive_wait_seconds=0
    )


def bench_spool(source: Source, events: int, depth: int, run_dir: Path) -> dict[str, Any]:
    """The driver side of the event source without Spark: drain to spool files, acknowledge."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from lakefs_gc.events.spool import Spool
    from lakefs_gc.spark.ingest.events.source import EventStreamReader

    config = event_config(source.queue("spool"), run_dir, f"{source.kind}-spool")
    reader = EventStreamReader(config)
    drain, ack = Meter(source.servers), Meter(source.servers)
    offset, files = {"spool": 0}, 0
    for start, n in rounds(events, depth):
        source.fill(config.queue, start, n)
        reader.prepareForTriggerAvailableNow()
        with drain.timed():
            while (end := reader.latestOffset(offset, ReadMaxRows(config.max_messages_per_batch))) != offset:
                offset, files = end, files + 1
        with ack.timed():
            reader.commit(offset)
    reader.stop()
    left = len(Spool(Path(config.spool)).sequences())
    return {
        "drain": drain.result(events, spool_files=files), "acknowledge": ack.result(events, left=left),
        "round_seconds": _plus(drain.sections, ack.sections),
    }  # fmt: skip


def bench_end_to_end(spark: Any, source: Source, events: int, depth: int, run_dir: Path) -> dict[str, Any]:
    """``availableNow`` runs of the event source into a fresh event table, one per round."""
    from lakefs_gc.events.spool import Spool
    from lakefs_gc.spark.ingest.events.source import EventStreamReader

    config = event_config(source.queue("e2e"), run_dir, f"{source.kind}-e2e")
    runs, ack = Meter(source.servers), Meter(source.servers)
    counts: list[Any] = []
    durations: dict[str, int] = {}
    for start, n in rounds(events, depth):
        source.fill(config.queue, start, n)
        with runs.timed():
            progress = stream_once(spark, config, run_dir, counts)
        add_durations(durations, progress)
    spool = Spool(Path(config.spool))
    reader = EventStreamReader(config)
    with ack.timed():  # what the next run would acknowledge first: the last run's batch
        reader.commit({"spool": max(spool.sequences(), default=0)})
    reader.stop()
    return {
        "runs": runs.result(events, runs=len(rounds(events, depth)), batches=len(counts)),
        "last_acknowledge": ack.result(rounds(events, depth)[-1][1]),
        "round_seconds": _plus(runs.sections),  # run i also acknowledges round i - 1
        "durations_ms": durations,
        **outcome(counts, events),
    }  # fmt: skip


def outcome(counts: list[Any], events: int) -> dict[str, int]:
    return {
        "received": sum(c.received for c in counts), "stored": sum(c.events for c in counts),
        "expected": routed(0, events), "dead_lettered": sum(c.dead_lettered for c in counts),
        "unrouted": sum(c.unrouted for c in counts), "deduplicated": sum(c.deduplicated for c in counts),
    }  # fmt: skip


def add_durations(durations: dict[str, int], progress: list[Any]) -> None:
    """Sum the ``durationMs`` of Spark's progress reports into ``durations``."""
    for p in progress:
        for key, ms in (p.durationMs or {}).items():
            durations[key] = durations.get(key, 0) + int(ms)


def bench_continuous(spark: Any, source: Source, events: int, depth: int, run_dir: Path) -> dict[str, Any]:
    """One running query (trigger every 0 s, as the service's but without waiting) until every
    message is in the table and acknowledged. The next round is put in the queue from the sink's
    callback once the round's messages are in, so the query waits meanwhile; that time is taken
    off."""
    from lakefs_gc.events.spool import Spool
    from lakefs_gc.spark.ingest.events.table import EventTable, run_event_stream
    from lakefs_gc.storage.filesystems import StorageOptions
    from lakefs_gc.storage.locations import parse_location

    config = event_config(source.queue("live"), run_dir, f"{source.kind}-live")
    plan, whole, fills = rounds(events, depth), Meter(source.servers), Meter(source.servers)
    counts: list[Any] = []
    filled = [plan[0][1], 1]  # messages put in the queue, rounds put
    marks: list[float] = []  # when each round was in the table; after each fill, when it ended

    def on_batch(batch: Any) -> None:
        counts.append(batch)
        if sum(c.received for c in counts) >= filled[0]:
            marks.append(time.perf_counter())
            if filled[1] < len(plan):
                with fills.timed():
                    source.fill(config.queue, *plan[filled[1]])
                marks.append(time.perf_counter())
                filled[0], filled[1] = filled[0] + plan[filled[1]][1], filled[1] + 1

    source.fill(config.queue, *plan[0])
    spool = Spool(Path(config.spool))
    table = EventTable(parse_location(str(run_dir / config.name / "table")), StorageOptions())
    with whole.timed():
        marks.append(time.perf_counter())
        query = run_event_stream(
            spark, config, table, run_dir / config.name / "checkpoint",
            trigger={"processingTime": "0 seconds"}, on_batch=on_batch,
        )  # fmt: skip
        while sum(c.received for c in counts) < events or spool.sequences():
            if not query.isActive:
                raise RuntimeError(f"event stream {config.name} stopped: {query.exception()}")
            time.sleep(0.05)
    durations: dict[str, int] = {}
    add_durations(durations, [p for p in query.recentProgress if p.numInputRows])
    durations["addBatch"] = durations.get("addBatch", 0) - round(fills.seconds * 1000)  # fills ran in it
    query.stop()
    whole.seconds -= fills.seconds
    whole.cpu = {k: v - fills.cpu.get(k, 0.0) for k, v in whole.cpu.items()}
    # round i: from the end of its fill (the query's start for the first) until it is in the table;
    # it includes the acknowledgement of round i - 1
    spans = [round(marks[k + 1] - marks[k], 3) for k in range(0, len(marks) - 1, 2)]
    return {"query": whole.result(events, batches=len(counts), fill_seconds=round(fills.seconds, 2)),
            "durations_ms": durations,
            "round_seconds": spans, **outcome(counts, events)}  # fmt: skip


def stream_once(spark: Any, config: Any, run_dir: Path, counts: list[Any]) -> list[Any]:
    """One ``availableNow`` run; its progress reports."""
    from lakefs_gc.spark.ingest.events.table import EventTable, run_event_stream
    from lakefs_gc.storage.filesystems import StorageOptions
    from lakefs_gc.storage.locations import parse_location

    table = EventTable(parse_location(str(run_dir / config.name / "table")), StorageOptions())
    query = run_event_stream(
        spark, config, table, run_dir / config.name / "checkpoint",
        trigger={"availableNow": True}, on_batch=counts.append,
    )  # fmt: skip
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"event stream {config.name} failed: {query.exception()}")
    return list(query.recentProgress)


def bench_source(
    spark: Any, kind: str, opened: Callable[[], Any], args: Any, run_dir: Path
) -> dict[str, Any]:
    """The four paths of one queue service, each against a fresh emulator (Azurite slows down
    with every message it ever held: a shared one would make later paths look slower). A path
    that fails is recorded as such and the next one runs."""
    n, depth = args.events, args.depth

    def end_to_end(source: Source) -> dict[str, Any]:
        say(f"{kind}: warm-up run (not timed)")
        warm = event_config(source.queue("warm"), run_dir, f"{kind}-warm")
        source.fill(warm.queue, 0, 100)
        stream_once(spark, warm, run_dir, [])
        return bench_end_to_end(spark, source, n, depth, run_dir)

    paths: list[tuple[str, str, Callable[[Source], dict[str, Any]]]] = [
        ("adapter", f"queue adapter, {n:,} messages in rounds of {depth:,}",
         lambda source: bench_adapter(source, n, depth)),
        ("spool", "event source drain to spool", lambda source: bench_spool(source, n, depth, run_dir)),
        ("end_to_end", "end-to-end into the event table, availableNow runs", end_to_end),
        ("continuous", "end-to-end into the event table, one running query",
         lambda source: bench_continuous(spark, source, n, depth, run_dir)),
    ]  # fmt: skip
    out: dict[str, Any] = {}
    for key, what, run in paths:
        say(f"{kind}: {what}")
        try:
            with opened() as source:
                out[key] = run(source)
        except Exception as e:  # a benchmark keeps the numbers it has
            say(f"{kind}: {what} FAILED: {e!r}"[:2000])
            out[key] = {"error": repr(e)[:2000]}
    return out


# ---- the queue services --------------------------------------------------------------------


@contextmanager
def sqs_source(as_is: bool, latency_ms: int = 0) -> Iterator[Source]:
    import boto3
    from pydantic import SecretStr

    from lakefs_gc.events.queues import QueueConfig

    argv = [sys.executable, str(HERE), "--serve-moto", "--sqs-latency-ms", str(latency_ms)]
    argv += ["--moto-as-is"] if as_is else []
    with child(argv) as moto:
        endpoint = moto.info["endpoint"]
        sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip

        def make(name: str) -> QueueConfig:
            url = sqs.create_queue(QueueName=name)["QueueUrl"]
            return QueueConfig(
                type="sqs", queue_url=url, endpoint_url=endpoint, region="us-east-1",
                access_key_id="testing", secret_access_key=SecretStr("testing"),
            )  # fmt: skip

        def fill(config: QueueConfig, start: int, n: int) -> None:
            assert config.queue_url is not None
            moto.request({"op": "fill", "queue": config.queue_url.rsplit("/", 1)[1], "start": start, "n": n})

        yield Source("sqs", {"queue server": moto.info["pid"]}, make, fill)


@contextmanager
def azure_source() -> Iterator[Source]:
    from azure.storage.queue import QueueClient
    from pydantic import SecretStr

    from lakefs_gc.events.queues import QueueConfig

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test kit: tests/support
    from tests.support.servers import azurite

    before = set(process_tree(os.getpid()))
    with azurite() as server:
        node = [
            p for p, (_pp, name) in process_tree(os.getpid()).items() if p not in before and name == "node"
        ]
        connection = server.connection_string

        def make(name: str) -> QueueConfig:
            QueueClient.from_connection_string(connection, name).create_queue()
            return QueueConfig(type="azure-queue", connection_string=SecretStr(connection), queue_name=name)

        def fill(config: QueueConfig, start: int, n: int) -> None:
            assert config.queue_name is not None
            name = config.queue_name

            def send(part: range) -> None:
                with QueueClient.from_connection_string(connection, name) as client:
                    for i in part:
                        client.send_message(azure_body(i, server.blob_endpoint))

            parts = [range(start + k, start + n, AZURE_SEND_THREADS) for k in range(AZURE_SEND_THREADS)]
            with ThreadPoolExecutor(AZURE_SEND_THREADS) as pool:
                list(pool.map(send, parts))

        yield Source("azure", {"queue server": node[0]} if node else {}, make, fill)


def bench_events(spark: Any, args: Any, run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"events": args.events, "depth": args.depth, "moto_as_is": args.moto_as_is,
                           "sqs_latency_ms": args.sqs_latency_ms}  # fmt: skip
    for kind in args.sources.split(","):
        opened = partial(sqs_source, args.moto_as_is, args.sqs_latency_ms) if kind == "sqs" else azure_source
        out[kind] = bench_source(spark, kind, opened, args, run_dir)
    return out


# ---- GC cycles -----------------------------------------------------------------------------


def clone(pristine_storage: Path, pristine_state: Path, target: Path) -> float:
    """Hard-link copy of the synthesized storage (unlinked by sweeps, never rewritten in place)
    and a real copy of the server state; seconds taken."""
    start = time.perf_counter()
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(pristine_storage), str(target / "storage")], check=True)
    subprocess.run(["cp", "-a", str(pristine_state), str(target / "state")], check=True)
    return time.perf_counter() - start


def gc_cycle(
    spark: Any, settings: Any, cache: Any, servers: Mapping[str, int], sweep: bool, commits: Any = None
) -> dict[str, Any]:
    """``mark_run`` (with ``cache`` unless None), then ``sweep_run`` of its mark; ``commits``: the
    commit cache the service keeps for its life (None: the mark reads the history afresh)."""
    from lakefs_gc import jobs

    marking = Meter(servers)
    timeline, since_ms = Timeline(), time.time() * 1000
    with marking.timed(), jobs.lakefs_client(settings, "bench") as client:
        result = jobs.mark(
            spark, settings, REPOSITORY, client=client, range_cache=cache, progress=timeline, commits=commits
        )
    s = result.summary
    out: dict[str, Any] = {"mark": {
        "mark_id": result.mark_id, "storage_namespace": result.storage_namespace,
        "seconds": round(marking.seconds, 2),
        "cpu": {k: round(v, 2) for k, v in marking.cpu.items()},
        "listed": s.get("num_listed_objects"), "marked": result.marked,
        "active_commits": s.get("num_active_commits"), "metaranges": s.get("num_metaranges"),
        "ranges": s.get("num_ranges"), "range_cache": s.get("range_cache"),
        "phases": timeline.phases(marking.seconds), "stages": stage_times(spark, since_ms),
    }}  # fmt: skip
    say(f"  mark {marking.seconds:.1f}s, {result.marked:,} marked, range cache {s.get('range_cache')}")
    if sweep:
        sweeping = Meter(servers)
        with sweeping.timed(), jobs.lakefs_client(settings, "bench") as client:
            swept = jobs.sweep(
                spark, settings, REPOSITORY, result.mark_id, client=client, progress=lambda m: say("  " + m)
            )
        out["sweep"] = {
            "seconds": round(sweeping.seconds, 2), "cpu": {k: round(v, 2) for k, v in sweeping.cpu.items()},
            "deleted": swept.deleted, "missing": swept.missing, "failed": swept.failed,
            "saved": swept.saved, "revalidated": swept.revalidated,
        }  # fmt: skip
        say(f"  sweep {sweeping.seconds:.1f}s, {swept.deleted:,} deleted")
    out["seconds"] = round(marking.seconds + out.get("sweep", {}).get("seconds", 0.0), 2)
    return out


def add_commits(info: dict[str, Any], spec: Spec, fraction: float, tables: int) -> dict[str, Any]:
    """``fraction`` more commits (on as many branches) adding ``fraction`` more objects, each
    commit's objects a new partition at the end of one of the synthesized tables
    (``tables/tNNNN/date=…/``, as the synthesizer's own commits append)."""
    from lakefs_sdk.api.commits_api import CommitsApi
    from lakefs_sdk.api.objects_api import ObjectsApi
    from lakefs_sdk.api_client import ApiClient
    from lakefs_sdk.configuration import Configuration
    from lakefs_sdk.models.commit_creation import CommitCreation

    commits = max(1, round(spec.commits * fraction))
    objects = max(commits, round(spec.objects * fraction))
    branches = ["main", *(f"branch-{i:04d}" for i in range(0, spec.branches - 1, 2))]  # not the hidden one
    day = time.strftime("%Y-%m-%d", time.gmtime())
    tag = uuid.uuid4().hex[:6]
    configuration = Configuration(
        host=info["endpoint"], username=info["access_key_id"], password=info["secret_access_key"]
    )
    start = time.perf_counter()
    with ApiClient(configuration) as api, tempfile.NamedTemporaryFile() as content:
        content.write(b"0123456789abcdef")
        content.flush()
        uploads, commit_api = ObjectsApi(api), CommitsApi(api)
        for k in range(commits):
            branch = branches[k % len(branches)]
            table = f"tables/t{(k * 7919) % tables:04d}/date={day}"
            paths = [f"{table}/part-bench{tag}-{k:04d}-{j:06d}.parquet" for j in range(k, objects, commits)]
            upload = partial(uploads.upload_object, REPOSITORY, branch, content=content.name)
            with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
                list(pool.map(upload, paths))
            creation = CommitCreation(message=f"bench: {len(paths)} objects")  # type: ignore[call-arg]
            commit_api.commit(REPOSITORY, branch, creation)
    seconds = time.perf_counter() - start
    say(f"added {commits} commits, {objects:,} objects in {seconds:.1f}s")
    return {"commits": commits, "objects": objects, "branches": min(commits, len(branches)),
            "seconds": round(seconds, 2)}  # fmt: skip


def bench_gc(spark: Any, args: Any, workdir: Path) -> dict[str, Any]:
    from lakefs_gc.lakefs.commit_graph import CommitCache
    from lakefs_gc.spark.mark.range_cache import RangeCache

    spec = Spec(args.objects, args.commits, args.branches, args.objects // 10, args.objects // 10)
    storage, state, synth = synthesized(workdir, spec)
    target = workdir / "stream-gc" / spec.tag
    say(f"gc: cloning {spec.tag} (hard links)")
    out: dict[str, Any] = {"spec": spec.__dict__, "synth": synth, "candidates": "listing"}
    out["clone_seconds"] = round(clone(storage, state, target), 1)
    with test_server(target / "storage", target / "state", None) as server:
        servers = {"lakeFS test server": server.proc.pid}
        settings = gc_settings(server.info, target / "storage")
        cache = RangeCache.for_repository(target / "service-state", REPOSITORY)
        if not args.no_uncached:
            say("gc: uncached mark of the first state (no sweep)")
            out["uncached_first"] = gc_cycle(spark, settings, None, servers, sweep=False)
        say("gc: first cycle")
        commits = CommitCache()  # as the service: one for its life
        out["first"] = gc_cycle(spark, settings, cache, servers, sweep=True, commits=commits)
        out["added"] = add_commits(server.info, spec, args.new_fraction, int(synth.get("tables") or 1))
        say("gc: second cycle")
        out["second"] = gc_cycle(spark, settings, cache, servers, sweep=True, commits=commits)
        if not args.no_uncached:
            say("gc: uncached mark of the second state")
            out["uncached"] = gc_cycle(spark, settings, None, servers, sweep=False)
    return out


def warm_up(spark: Any) -> None:
    """One job that starts the Python workers and imports what the timed jobs run, so that the
    first timed path is not also the session's first job."""

    def imports(batches: Iterator[Any]) -> Iterator[Any]:
        import lakefs_gc.spark.ingest.events.source
        import lakefs_gc.spark.mark.job
        import lakefs_gc.spark.mark.range_cache.cache
        import lakefs_gc.spark.sweep.job  # noqa: F401

        yield from batches

    partitions = spark.sparkContext.defaultParallelism
    spark.range(0, partitions, numPartitions=partitions).mapInArrow(imports, "id long").count()


# ---- report --------------------------------------------------------------------------------


def _cpu(cpu: Mapping[str, float]) -> str:
    ours = cpu.get("driver", 0) + cpu.get("spark", 0)
    return f"{ours:>8.1f} {cpu.get('queue server', cpu.get('lakeFS test server', 0)):>8.1f}"


def print_events(w: Callable[[str], Any], ev: dict[str, Any]) -> None:
    n, depth = ev["events"], ev["depth"]
    w(f"\nevent sources: {n:,} notifications per path, queues filled {depth:,} at a time "
      f"({-(-n // depth)} rounds, filling not timed); receive wait 0 s; CPU seconds: ours = this driver "
      "+ Spark JVM and workers, server = the queue emulator\n")  # fmt: skip
    w(f"  {'source':<6} {'path':<54} {'seconds':>8} {'msgs/s':>8} {'our CPU':>8} {'server':>8}\n")
    for kind in ("sqs", "azure"):
        r = ev.get(kind)
        if not r:
            continue
        for key, error in ((k, v["error"]) for k, v in r.items() if "error" in v):
            w(f"  {kind:<6} {key}: FAILED {error[:200]}\n")
        ok = {k: v for k, v in r.items() if "error" not in v}
        for label, m in _event_rows(ok):
            w(f"  {kind:<6} {label:<54} {m['seconds']:>8.1f} {m['msgs_per_s'] or 0:>8,} {_cpu(m['cpu'])}\n")
        rates = {label: n / seconds for label, seconds in _with_acks(ok).items()}
        medians = {k: depth / statistics.median(v["round_seconds"]) for k, v in ok.items()}
        w(f"  {kind:<6} msgs/s of the median round: "
          + ", ".join(f"{label} {medians[key]:,.0f}" for key, label in _PATHS.items() if key in medians)
          + "\n")  # fmt: skip
        w(f"  {kind:<6} msgs/s overall, acknowledgements included: "
          + ", ".join(f"{label} {rate:,.0f}" for label, rate in rates.items()))  # fmt: skip
        if "running query" in rates:
            w("; running query / " + ", ".join(
                f"{label} {rates['running query'] / rate:.2f}" for label, rate in rates.items()
                if label != "running query"))  # fmt: skip
        w("\n")
        for label, key in (("availableNow", "end_to_end"), ("running query", "continuous")):
            if key in ok:
                out = ok[key]
                w(f"  {kind:<6} {label} Spark progress (s): "
                  + ", ".join(f"{k} {v / 1000:.1f}" for k, v in sorted(out["durations_ms"].items()) if v)
                  + f"; stored {out['stored']:,} of {out['expected']:,} routed, unrouted {out['unrouted']}, "
                  f"dead {out['dead_lettered']}, duplicates {out['deduplicated']}\n")  # fmt: skip


def _event_rows(r: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    if "adapter" in r:
        a = r["adapter"]
        rows += [("adapter: receive until empty", a["receive"]), ("adapter: acknowledge", a["acknowledge"]),
                 ("adapter: receive + acknowledge", a["total"])]  # fmt: skip
    if "spool" in r:
        sp = r["spool"]
        rows += [(f"event source: drain to spool ({sp['drain']['spool_files']} spool files)", sp["drain"]),
                 ("event source: acknowledge (commit)", sp["acknowledge"])]  # fmt: skip
    if "end_to_end" in r:
        e = r["end_to_end"]
        rows += [(f"end-to-end: {e['runs']['runs']} availableNow runs into the table", e["runs"]),
                 ("end-to-end: the last availableNow run's acks", e["last_acknowledge"])]  # fmt: skip
    if "continuous" in r:
        c = r["continuous"]["query"]
        rows.append((f"end-to-end: one running query, {c['batches']} batches, acks incl.", c))
    return rows


_PATHS = {"adapter": "adapter", "spool": "drain to spool", "end_to_end": "availableNow runs",
          "continuous": "running query"}  # fmt: skip


def _with_acks(r: dict[str, Any]) -> dict[str, float]:
    """Seconds of each path including all of its acknowledgements."""
    out = {}
    if "adapter" in r:
        out["adapter"] = r["adapter"]["total"]["seconds"]
    if "spool" in r:
        out["drain to spool"] = r["spool"]["drain"]["seconds"] + r["spool"]["acknowledge"]["seconds"]
    if "end_to_end" in r:
        e = r["end_to_end"]
        out["availableNow runs"] = e["runs"]["seconds"] + e["last_acknowledge"]["seconds"]
    if "continuous" in r:
        out["running query"] = r["continuous"]["query"]["seconds"]
    return out


def print_gc(w: Callable[[str], Any], gc: dict[str, Any]) -> None:
    spec, added = gc["spec"], gc["added"]
    w(f"\nGC cycles on {spec['objects']:,} committed objects ({gc['synth']['physical_objects']:,} physical), "
      "candidates from the namespace listing;\n"
      "  a cycle = mark_run with the range cache + sweep_run\n")  # fmt: skip
    w(f"  between the cycles: {added['commits']} commits on {added['branches']} branches adding "
      f"{added['objects']:,} objects ({added['seconds']:.0f} s through the API, not timed)\n")  # fmt: skip
    w(f"  {'':<28} {'mark s':>7} {'sweep s':>7} {'total s':>7} {'listed':>10} {'marked':>8} {'deleted':>8}"
      f"  {'metaranges read/cached':>22} {'ranges read/cached':>18}\n")  # fmt: skip
    rows = (("uncached mark, first state", "uncached_first"), ("first cycle", "first"),
            ("second cycle (+1%)", "second"), ("uncached mark, second state", "uncached"))  # fmt: skip
    for label, key in rows:
        c = gc.get(key)
        if not c:
            continue
        m, sw, rc = c["mark"], c.get("sweep"), c["mark"]["range_cache"] or {}
        sweep_s, deleted = (
            (f"{sw['seconds']:>7.1f}", f"{sw['deleted']:>8,}") if sw else (f"{'-':>7}", f"{'-':>8}")
        )
        meta = f"{rc.get('metaranges_read', '-')}/{rc.get('metaranges_cached', '-')}"
        ranges = f"{rc.get('ranges_read', '-')}/{rc.get('ranges_cached', '-')}"
        w(f"  {label:<28} {m['seconds']:>7.1f} {sweep_s} {c['seconds']:>7.1f} {m['listed'] or 0:>10,} "
          f"{m['marked']:>8,} {deleted}  {meta:>22} {ranges:>18}\n")  # fmt: skip
    first, second = gc["first"], gc["second"]
    w(f"  first / second cycle: {first['seconds'] / second['seconds']:.2f}x; first / second mark: "
      f"{first['mark']['seconds'] / second['mark']['seconds']:.2f}x")  # fmt: skip
    if gc.get("uncached"):
        w(f"; uncached / cached mark: first state "
          f"{gc['uncached_first']['mark']['seconds'] / first['mark']['seconds']:.2f}x, second state "
          f"{gc['uncached']['mark']['seconds'] / second['mark']['seconds']:.2f}x")  # fmt: skip
    w("\n  mark phases (s, from mark_run's progress lines; a phase ends at its thread's next line):\n")
    for label, key in (("uncached, first", "uncached_first"), ("first cycle", "first"),
                       ("second cycle", "second"), ("uncached, second", "uncached")):  # fmt: skip
        if gc.get(key):
            phases = [p for p in gc[key]["mark"]["phases"] if p["seconds"] >= 0.5]
            text = "; ".join(f"{_phase(p['phase'])} {p['seconds']:.1f}" for p in phases)
            w(f"  {label:<17} {text}\n")


def _phase(line: str) -> str:
    """A mark progress line as the phase it starts."""
    names = {"uncommitted dump": "dump", "active commits": "commits (+ range cache)",
             "listing": "list + classify", "writing the report": "report"}  # fmt: skip
    return next((name for key, name in names.items() if key in line), line.split(": ", 1)[-1][:30])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20_000, help="notifications per path and queue")
    parser.add_argument("--depth", type=int, default=1_000, help="messages in the queue per round")
    parser.add_argument("--sources", default="sqs,azure", help="sqs, azure or both (comma list)")
    parser.add_argument("--objects", type=int, default=1_000_000, help="committed objects of the repository")
    parser.add_argument("--commits", type=int, default=1_000)
    parser.add_argument("--branches", type=int, default=100)
    parser.add_argument("--new-fraction", type=float, default=0.01, help="commits and objects added")
    parser.add_argument("--no-events", action="store_true")
    parser.add_argument("--no-gc", action="store_true")
    parser.add_argument("--no-uncached", action="store_true", help="skip the two uncached comparison marks")
    parser.add_argument("--moto-as-is", action="store_true", help="keep moto's slow SQS helpers")
    parser.add_argument("--sqs-latency-ms", type=int, default=0,
                        help="added to every SQS request, as SQS's round trip (default 0)")  # fmt: skip
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lakefs-gc-bench"),
                        help="synthetic repositories are kept and reused here (as by mark.py)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write all numbers to this file")
    parser.add_argument("--serve-moto", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_moto:
        return serve_moto(args.moto_as_is, args.sqs_latency_ms)
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    loadavg = Path("/proc/loadavg").read_text().strip()
    result: dict[str, Any] = {
        "environment": f"{os.cpu_count()} CPUs, Spark master {args.master}, /proc/loadavg at start: {loadavg}"
    }
    run_dir = workdir / "stream-events"
    shutil.rmtree(run_dir, ignore_errors=True)
    spark = spark_session(args.master, workdir, app="lakefs-gc bench/stream.py")
    try:
        warm_up(spark)
        if not args.no_events:
            result["events"] = bench_events(spark, args, run_dir)
            result["environment"] += f"; after the events: {Path('/proc/loadavg').read_text().strip()}"
        if not args.no_gc:
            result["gc"] = bench_gc(spark, args, workdir)
    finally:
        spark.stop()
    result["environment"] += f"; at end: {Path('/proc/loadavg').read_text().strip()}"
    w = sys.stdout.write
    w(f"\nlakefs-gc streaming benchmark\n{result['environment']}\n")
    if "events" in result:
        print_events(w, result["events"])
    if "gc" in result:
        print_gc(w, result["gc"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
