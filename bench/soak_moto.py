"""The issue's world for ``bench/soak.py``: moto S3 + SQS, the test server and the load, each a process.

* **moto** (``python -m moto.server``) in its own process: the bucket holding the repository's
  storage namespace, an inventory bucket, and an SQS queue. The bucket's notification configuration
  sends ``s3:ObjectCreated:*`` and ``s3:ObjectRemoved:*`` to the queue, as in
  ``tests/service/conftest.py``'s ``s3_world``: moto itself emits the S3 event messages (the load
  generator sends nothing to SQS).
* **the lakeFS test server** (``lakefs-gc test-server --s3-endpoint``) in its own process, with a
  short grace period; the repository's GC rules retain ``--retention-days`` (0: only what lakeFS
  keeps whatever the rules, the branch heads, stays active, so commits expire within the run).
* **the load** in its own process (``multiprocessing``, spawn): ``threads`` writers, each on its own
  branch, overwrite a fixed pool of ``live_keys`` paths round-robin (after the first pass every
  write replaces an object), delete one path in four (re-created on the next pass), commit every
  ``commit_every`` seconds and replace their branch every ``branch_every`` seconds (the new branch
  from the old one's head, then the old one deleted). The live set is bounded by the pool: the
  workload is steady after the first pass.

:func:`final_check` judges the namespace after the load stopped and the service ran two more
cycles past the cutoff: every object an active commit or a branch (staging included) references is
there, and every other object older than the load's end is gone.
"""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPOSITORY = "soak"
BUCKET = "soak"
CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing"}
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class MotoWorld:
    endpoint: str
    queue_url: str
    connection: dict[str, str]  # the test server's endpoint and credentials
    workdir: Path

    @property
    def namespace(self) -> str:
        return f"s3://{BUCKET}/repos/{REPOSITORY}"

    @property
    def inventory(self) -> str:
        return f"s3://{BUCKET}-inventory/inventory"

    @property
    def s3_section(self) -> dict[str, str]:
        return {"endpoint_url": self.endpoint, "region": REGION, **CREDENTIALS}

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service, endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip

    def service_config(self, *, metrics_port: int, min_age: str) -> dict[str, Any]:
        """The service's settings: SQS source, S3 inventory, a cycle every minute."""
        events = {"type": "sqs", "queue_url": self.queue_url, "endpoint_url": self.endpoint,
                  "region": REGION, **CREDENTIALS, "visibility_timeout_seconds": 120}  # fmt: skip
        return {
            "lakefs": self.connection,
            "storage": {"s3": self.s3_section},
            # steady overwrites make most of what a mark lists garbage: the fraction guard would refuse
            "gc": {"min_age": min_age, "max_delete_fraction": 1.0},
            "repositories": [REPOSITORY],
            "service": {
                "state": str(self.workdir / "state"),
                "metrics_host": "127.0.0.1",
                "metrics_port": metrics_port,
                "interval": "1m",
                "tick": "15s",
                "inventory": self.inventory,
                "inventory_trigger": "10s",
                "events": {"s3": events},
                "events_trigger": "2s",
                "shutdown_timeout": "120s",
            },
        }

    def deliver_inventory(self) -> str:
        from lakefs_gc.inventory.generate import generate_delivery
        from lakefs_gc.storage.filesystems import S3Options, StorageOptions
        from lakefs_gc.storage.locations import parse_location, parse_storage_namespace

        options = StorageOptions(s3=S3Options.model_validate(self.s3_section))
        return generate_delivery(
            parse_storage_namespace(self.namespace), options, parse_location(self.inventory)
        )


@contextmanager
def moto_world(workdir: Path, *, grace: str, retention_days: int) -> Iterator[MotoWorld]:
    """moto and the test server as child processes; the bucket, its notifications, the repository."""
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": REGION}  # fmt: skip
    moto_log = open(workdir / "moto.log", "w")  # noqa: SIM115
    moto = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-moto", str(port)],
        stdout=subprocess.DEVNULL, stderr=moto_log, env=env,
    )  # fmt: skip
    server = None
    try:
        _wait_port(port)
        endpoint = f"http://127.0.0.1:{port}"
        queue_url = _bucket_and_queue(endpoint)
        server_log = open(workdir / "test-server.log", "w")  # noqa: SIM115
        server = subprocess.Popen(
            [sys.executable, "-m", "lakefs_gc", "test-server", "--storage-root", str(workdir / "storage"),
             "--s3-endpoint", endpoint, "--grace-period", grace],
            stdout=subprocess.PIPE, stderr=server_log, env=env, text=True,
        )  # fmt: skip
        assert server.stdout is not None
        connection = json.loads(server.stdout.readline())
        world = MotoWorld(endpoint, queue_url, connection, workdir)
        _create_repository(world, retention_days)
        yield world
    finally:
        for proc in (server, moto):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def serve_moto(port: int) -> None:
    """Child mode: ``moto.server`` with two of its SQS costs made linear, its SQS calls atomic,
    one notification per completed multipart upload (as S3), listings that a concurrent delete
    does not fail, and no access log.

    moto 5's SQS computes every queue attribute (three scans of the queue) for each message a
    ``ReceiveMessage`` returns (the retention check), and rebuilds the message list for each deleted
    message: a receive of k messages from a queue of n costs O(k*n). At 50 writes/s the emulator
    then spends a core on the queue and the load falls to a few writes/s (the first attempt of this
    soak). The patches keep the behaviour (same retention rule, same deletion) at O(1) and O(index);
    the approximate counts (every send computes them) come from the in-flight set, not a scan.
    """
    import logging

    from moto.s3 import models as s3_models
    from moto.server import main as moto_main
    from moto.sqs import models as sqs
    from moto.sqs.exceptions import ReceiptHandleIsInvalid

    def retained(self: Any, queue_name: str, message: Any) -> bool:
        period = int(self.get_queue(queue_name).message_retention_period)
        return bool(period + message.sent_timestamp / 1000 > time.time())

    def delete_message(self: Any, receipt_handle: str) -> None:
        if receipt_handle in self.deleted_messages:
            return
        for i, message in enumerate(self._messages):
            if message.had_receipt_handle(receipt_handle):
                self.pending_messages.discard(message)
                self.deleted_messages.update(message.all_receipt_handles)
                del self._messages[i]
                return
        raise ReceiptHandleIsInvalid()

    # moto's clock is datetime arithmetic per message and per call: the same milliseconds, cheaply
    sqs.Message.visible = property(lambda self: time.time() * 1000 > self.visible_at)
    sqs.Message.delayed = property(lambda self: time.time() * 1000 < self.delayed_until)
    # counted on every send (for ContentBasedDeduplication): approximate, as SQS's own are
    sqs.Queue.approximate_number_of_messages_not_visible = property(lambda self: len(self.pending_messages))
    sqs.Queue.approximate_number_of_messages = property(
        lambda self: max(len(self._messages) - len(self.pending_messages), 0)
    )
    sqs.Queue.approximate_number_of_messages_delayed = property(lambda self: 0)
    sqs.SQSBackend.is_message_valid_based_on_retention_period = retained
    sqs.Queue.delete_message = delete_message
    # concurrent receives and deletes (the queue adapter's ``concurrency``) need SQS's atomicity
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test kit: tests/support
    from tests.support.servers import serialize_moto_sqs

    serialize_moto_sqs()
    # moto 5 completes a multipart upload by an inner put_object that sends its own
    # ObjectCreated:Put before the ObjectCreated:CompleteMultipartUpload; S3 sends only the latter
    s3_backend = s3_models.S3Backend
    complete, put = s3_backend.complete_multipart_upload, s3_backend.put_object
    completing = threading.local()

    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(completing, "on", False):
            kwargs["disable_notification"] = True
        return put(self, *args, **kwargs)

    def complete_multipart_upload(self: Any, *args: Any, **kwargs: Any) -> Any:
        completing.on = True
        try:
            return complete(self, *args, **kwargs)
        finally:
            completing.on = False

    s3_backend.put_object = put_object
    s3_backend.complete_multipart_upload = complete_multipart_upload
    # moto lists a bucket by copying its key dict and then looking each key up again: a key deleted
    # in between (a sweep beside the test server's listings) fails the listing with
    # INTERNAL_FAILURE. S3 lists what is there; so does this
    from moto.s3 import utils as s3_utils

    def iteritems(self: Any) -> Any:
        for key, versions in self._self_iterable().items():
            if versions:
                yield key, versions[-1]

    s3_utils._VersionedKeyStore.items = s3_utils._VersionedKeyStore.iteritems = iteritems
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto_main(["-H", "127.0.0.1", "-p", str(port)])


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _bucket_and_queue(endpoint: str) -> str:
    world = MotoWorld(endpoint, "", {}, Path())
    s3, sqs = world.client("s3"), world.client("sqs")
    url = sqs.create_queue(QueueName="soak-gc")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.create_bucket(Bucket=BUCKET)
    s3.create_bucket(Bucket=f"{BUCKET}-inventory")
    events = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
    s3.put_bucket_notification_configuration(
        Bucket=BUCKET,
        NotificationConfiguration={"QueueConfigurations": [{"Id": "gc", "QueueArn": arn, "Events": events}]},
    )
    return str(url)


def _sdk(connection: dict[str, str]) -> Any:
    from lakefs_sdk.api_client import ApiClient
    from lakefs_sdk.configuration import Configuration

    return ApiClient(
        Configuration(
            host=connection["endpoint"],
            username=connection["access_key_id"],
            password=connection["secret_access_key"],
        )
    )


def _create_repository(world: MotoWorld, retention_days: int) -> None:
    from lakefs_sdk.api.repositories_api import RepositoriesApi
    from lakefs_sdk.models.garbage_collection_rules import GarbageCollectionRules
    from lakefs_sdk.models.repository_creation import RepositoryCreation

    with _sdk(world.connection) as client:
        repositories = RepositoriesApi(client)
        repositories.create_repository(
            RepositoryCreation(name=REPOSITORY, storage_namespace=world.namespace, default_branch="main")
        )
        rules = {"default_retention_days": retention_days, "branches": []}
        repositories.set_gc_rules(REPOSITORY, GarbageCollectionRules.from_dict(rules))


# ---- the load, in its own process -------------------------------------------------------------


@dataclass(frozen=True)
class LoadShape:
    rate: float  # object writes per second, all threads together
    threads: int
    live_keys: int  # paths per thread
    commit_every: float
    branch_every: float


class LoadProcess:
    """The load generator as a child process; counters shared through ``multiprocessing.Value``."""

    COUNTERS = ("written", "deleted", "commits", "branches", "errors")

    def __init__(self, connection: dict[str, str], shape: LoadShape, workdir: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.counters = {name: ctx.Value("q", 0) for name in self.COUNTERS}
        self.process = ctx.Process(
            target=run_load, args=(connection, shape, str(workdir), self.stop, self.counters), daemon=True
        )

    def __enter__(self) -> LoadProcess:
        self.process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.process.join(timeout=60)
        if self.process.is_alive():
            self.process.terminate()

    def count(self, name: str) -> int:
        return int(self.counters[name].value)


def run_load(
    connection: dict[str, str], shape: LoadShape, workdir: str, stop: Any, counters: dict[str, Any]
) -> None:
    """Child process: ``shape.threads`` writers until ``stop`` is set."""
    errors_log = open(Path(workdir) / "load-errors.log", "a")  # noqa: SIM115
    lock = threading.Lock()

    def bump(name: str, error: Exception | None = None) -> None:
        with counters[name].get_lock():
            counters[name].value += 1
        if error is not None and counters[name].value <= 200:
            with lock:
                errors_log.write(f"{time.time():.0f} {type(error).__name__}: {str(error)[:300]}\n")
                errors_log.flush()

    threads = [
        threading.Thread(target=_writer, args=(connection, shape, Path(workdir), w, stop, bump), daemon=True)
        for w in range(shape.threads)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _writer(
    connection: dict[str, str], shape: LoadShape, workdir: Path, w: int, stop: Any, bump: Any
) -> None:
    from lakefs_sdk.api.branches_api import BranchesApi
    from lakefs_sdk.api.commits_api import CommitsApi
    from lakefs_sdk.api.objects_api import ObjectsApi
    from lakefs_sdk.models.branch_creation import BranchCreation
    from lakefs_sdk.models.commit_creation import CommitCreation

    content = workdir / f"load-{w}"
    per_thread, keys = shape.rate / shape.threads, shape.live_keys
    with _sdk(connection) as client:
        objects, branches, commits = ObjectsApi(client), BranchesApi(client), CommitsApi(client)
        generation = 0
        branch = f"soak-{w}-{generation}"
        branches.create_branch(REPOSITORY, BranchCreation(name=branch, source="main"))
        start = last_commit = last_branch = time.monotonic()
        n = 0
        while not stop.is_set():
            n += 1
            try:  # a size per write: identical objects are kept as identity twins (docs/invariants.md, 6)
                content.write_bytes(
                    f"soak {w} {n}\n".encode().ljust(64 + (n * 7919 + w * 104729) % 8192, b".")
                )
                objects.upload_object(REPOSITORY, branch, f"soak/{w}/{n % keys}", content=str(content))
                bump("written")
            except Exception as e:
                bump("errors", e)
            try:
                if n % 4 == 0 and n > keys // 2:  # a path written half a pass ago: it exists
                    objects.delete_object(REPOSITORY, branch, f"soak/{w}/{(n - keys // 2) % keys}")
                    bump("deleted")
                now = time.monotonic()
                if now - last_commit >= shape.commit_every:
                    last_commit = now
                    commits.commit(REPOSITORY, branch, CommitCreation(message=f"soak {w} {n}"))
                    bump("commits")
                if now - last_branch >= shape.branch_every:  # churn: the new branch carries the content
                    last_branch = now
                    generation += 1
                    new = f"soak-{w}-{generation}"
                    branches.create_branch(REPOSITORY, BranchCreation(name=new, source=branch))
                    branches.delete_branch(REPOSITORY, branch)
                    branch = new
                    bump("branches")
            except Exception as e:
                bump("errors", e)
            behind = start + n / per_thread - time.monotonic()
            if behind > 0:
                stop.wait(behind)


# ---- the end-of-run check ---------------------------------------------------------------------


def final_check(world: MotoWorld, load_end: float) -> dict[str, Any]:
    """Referenced objects all there; unreferenced objects older than ``load_end`` (unix s) all gone.

    Referenced: every object of every commit lakeFS's commits export calls active (asked now; no
    commit is made after the load's end) and of every branch, staging included.
    """
    from lakefs_sdk.api.branches_api import BranchesApi
    from lakefs_sdk.api.internal_api import InternalApi

    s3 = world.client("s3")
    prefix = f"repos/{REPOSITORY}/"
    with _sdk(world.connection) as client:
        exported = InternalApi(client).prepare_garbage_collection_commits(REPOSITORY)
        location = str(exported.gc_commits_location)
        bucket, _, key = location.removeprefix("s3://").partition("/")
        text = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        active = [r["commit_id"] for r in csv.DictReader(io.StringIO(text)) if r["expired"].lower() != "true"]
        branches = [b.id for b in BranchesApi(client).list_branches(REPOSITORY, amount=1000).results]
        referenced: set[str] = set()
        for ref in [*active, *branches]:
            referenced |= _addresses(client, ref, prefix)
    present: dict[str, float] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for o in page.get("Contents", []):
            k = o["Key"][len(prefix) :]
            if not k.startswith("_lakefs/"):
                present[k] = o["LastModified"].timestamp()
    missing = sorted(referenced - present.keys())
    unreferenced = {k: t for k, t in present.items() if k not in referenced}
    left = sorted(k for k, t in unreferenced.items() if t < load_end)
    return {
        "active_commits": len(active), "branches": len(branches), "referenced": len(referenced),
        "present": len(present), "missing_live": missing[:20], "missing_live_count": len(missing),
        "garbage_left": left[:20], "garbage_left_count": len(left),
        "young_unreferenced": len(unreferenced) - len(left),
    }  # fmt: skip


def _addresses(client: Any, ref: str, prefix: str) -> set[str]:
    from lakefs_sdk.api.objects_api import ObjectsApi

    objects, after, found = ObjectsApi(client), "", set()
    while True:
        page = objects.list_objects(REPOSITORY, ref, after=after, amount=1000)
        for o in page.results:
            address = o.physical_address.removeprefix(f"s3://{BUCKET}/")
            found.add(address.removeprefix(prefix))
        if not page.pagination.has_more:
            return found
        after = page.pagination.next_offset


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-moto"]:
        serve_moto(int(sys.argv[2]))
