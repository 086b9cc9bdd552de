"""Fixtures of the service's end-to-end tests: the stores, their queues and the test server.

S3: a moto bucket whose notifications go to two SQS queues: the service's, and a *witness* the
service never reads, so a test counts every message moto sent (the test server's writes, the
collector's own reports and sweeps, the TestEvent) without predicting them. Azure: an Azurite
container whose writes and deletes the test server reports through an Event Grid-shaped queue
notifier (Azurite has no Event Grid), wrapped to count what it sent.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.notifications import AzureQueueNotifier, Notifier
from lakefs_gc.testing.server import LakeFSTestServer
from tests.service.histories import MIN_AGE_S
from tests.support.object_stores import azure_options, blob_service, s3_client, s3_options, unique_name
from tests.support.servers import AzuriteServer, MotoServer
from tests.testing.sdk import Lakefs


@dataclass
class Served:
    """The lakeFS test server and an SDK client of it."""

    server: LakeFSTestServer
    lakefs: Lakefs
    storage: dict[str, Any]  # the storage section of the service's settings

    @property
    def connection(self) -> dict[str, str]:
        return self.server.connection_info()

    @property
    def options(self) -> StorageOptions:
        return StorageOptions.model_validate(self.storage)


def storage_section(moto: MotoServer, azurite: AzuriteServer) -> dict[str, Any]:
    s3 = {"endpoint_url": moto.endpoint_url, "region": moto.region,
          "access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}  # fmt: skip
    azure = {"account_key": azurite.account_key, "blob_endpoint": azurite.blob_endpoint}
    return {"s3": s3, "azure": azure}


def serve(
    tmp_path: Path, moto: MotoServer, azurite: AzuriteServer, notifications: Notifier | None = None
) -> Iterator[Served]:
    options = StorageOptions(s3=s3_options(moto), azure=azure_options(azurite))
    settings = ServerSettings(
        grace_period=timedelta(seconds=MIN_AGE_S),
        storage=options,
        blockstores=("local", "s3", "azure"),
        notifications=notifications,
    )
    root = tmp_path / "storage"
    root.mkdir()
    with (
        LakeFSTestServer(storage_root=root, settings=settings) as server,
        server.sdk_client() as client,
    ):
        yield Served(server, Lakefs(client), storage_section(moto, azurite))


# ---- S3 ------------------------------------------------------------------------------------------


@dataclass
class S3World:
    """A notifying bucket, the service's queue, the witness queue and an inventory bucket."""

    moto: MotoServer
    bucket: str
    inventory_bucket: str
    queue_url: str
    witness_url: str
    s3: Any
    sqs: Any
    witnessed: list[str] = field(default_factory=list)  # message bodies the witness received

    def namespace(self, repo: str) -> str:
        return f"s3://{self.bucket}/repos/{repo}"

    @property
    def inventory(self) -> str:
        return f"s3://{self.inventory_bucket}/inventory"

    def queue(self, **extra: Any) -> dict[str, Any]:
        """The service's event source settings for the queue."""
        m = self.moto
        return {
            "type": "sqs", "queue_url": self.queue_url, "endpoint_url": m.endpoint_url, "region": m.region,
            "access_key_id": m.access_key_id, "secret_access_key": m.secret_access_key,
            "visibility_timeout_seconds": 120, **extra,
        }  # fmt: skip

    def keys(self, repo: str) -> set[str]:
        """Every key of the repository's namespace, relative to it."""
        prefix = f"repos/{repo}/"
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return {o["Key"][len(prefix) :] for page in pages for o in page.get("Contents", [])}

    def drain_witness(self) -> list[str]:
        """Receive and delete what the witness queue holds; returns every body it ever received."""
        while True:
            got = self.sqs.receive_message(QueueUrl=self.witness_url, MaxNumberOfMessages=10).get(
                "Messages", []
            )
            if not got:
                return self.witnessed
            for message in got:
                self.witnessed.append(message["Body"])
                self.sqs.delete_message(QueueUrl=self.witness_url, ReceiptHandle=message["ReceiptHandle"])

    def send(self, body: str) -> None:
        """A message of our own to the service's queue."""
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)


def records(bodies: list[str]) -> list[dict[str, Any]]:
    """The S3 event records in message bodies (the TestEvent has none)."""
    return [r for body in bodies for r in json.loads(body).get("Records", [])]


@pytest.fixture
def s3_world(moto: MotoServer, request: pytest.FixtureRequest) -> S3World:
    name = unique_name(request)
    s3 = s3_client(moto)
    sqs = boto3.client(
        "sqs", endpoint_url=moto.endpoint_url, region_name=moto.region,
        aws_access_key_id=moto.access_key_id, aws_secret_access_key=moto.secret_access_key,
    )  # fmt: skip
    urls = [sqs.create_queue(QueueName=f"{name}-{role}")["QueueUrl"] for role in ("gc", "witness")]
    arns = [
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for url in urls
    ]
    inventory_bucket = f"inv-{uuid.uuid4().hex[:20]}"
    s3.create_bucket(Bucket=name)
    s3.create_bucket(Bucket=inventory_bucket)
    events = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
    configurations = [{"Id": f"q{i}", "QueueArn": arn, "Events": events} for i, arn in enumerate(arns)]
    s3.put_bucket_notification_configuration(
        Bucket=name, NotificationConfiguration={"QueueConfigurations": configurations}
    )
    return S3World(moto, name, inventory_bucket, urls[0], urls[1], s3, sqs)


@pytest.fixture
def s3_served(tmp_path: Path, moto: MotoServer, azurite: AzuriteServer) -> Iterator[Served]:
    yield from serve(tmp_path, moto, azurite)


# ---- Azure ---------------------------------------------------------------------------------------


class CountingNotifier:
    """Delegates to a notifier and counts the notifications it sent (one queue message each)."""

    def __init__(self, inner: Notifier) -> None:
        self.inner = inner
        self.created = self.deleted = 0
        self._lock = threading.Lock()

    @property
    def sent(self) -> int:
        with self._lock:
            return self.created + self.deleted

    def handles(self, kind: str) -> bool:
        return self.inner.handles(kind)

    def object_created(
        self, location: StorageLocation, *, size: int, time: datetime, etag: str | None = None
    ) -> None:
        self.inner.object_created(location, size=size, time=time, etag=etag)
        with self._lock:
            self.created += 1

    def object_deleted(self, location: StorageLocation, *, time: datetime) -> None:
        self.inner.object_deleted(location, time=time)
        with self._lock:
            self.deleted += 1


@dataclass
class AzureWorld:
    """A container for namespaces, one for inventories, and the Event Grid-fed queue."""

    azurite: AzuriteServer
    container: str
    inventory_container: str
    queue_name: str
    notifier: CountingNotifier

    @property
    def account_url(self) -> str:
        return f"https://{self.azurite.account_name}.blob.core.windows.net"

    def namespace(self, repo: str) -> str:
        return f"{self.account_url}/{self.container}/repos/{repo}"

    @property
    def inventory(self) -> str:
        return f"{self.account_url}/{self.inventory_container}"

    def queue(self) -> dict[str, Any]:
        connection = self.azurite.connection_string
        return {"type": "azure-queue", "queue_name": self.queue_name, "connection_string": connection,
                "visibility_timeout_seconds": 120}  # fmt: skip

    def keys(self, repo: str) -> set[str]:
        prefix = f"repos/{repo}/"
        container = blob_service(self.azurite).get_container_client(self.container)
        return {b.name[len(prefix) :] for b in container.list_blobs(name_starts_with=prefix)}


@pytest.fixture
def azure_world(azurite: AzuriteServer, request: pytest.FixtureRequest) -> AzureWorld:
    name = unique_name(request)
    service = blob_service(azurite)
    service.create_container(name)
    inventory = f"inv-{uuid.uuid4().hex[:20]}"
    service.create_container(inventory)
    notifier = CountingNotifier(AzureQueueNotifier(azurite.connection_string, name))
    return AzureWorld(azurite, name, inventory, name, notifier)


@pytest.fixture
def azure_served(
    tmp_path: Path, moto: MotoServer, azurite: AzuriteServer, azure_world: AzureWorld
) -> Iterator[Served]:
    yield from serve(tmp_path, moto, azurite, azure_world.notifier)
