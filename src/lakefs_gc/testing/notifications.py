"""Object notifications from the test server, as the cloud would send them.

The streaming collector learns about new and deleted objects from queue messages. On S3 moto
already sends bucket notifications to SQS; Azurite has no Event Grid and a local directory has no
notification service at all. So :class:`~lakefs_gc.testing.blockstore.NamespaceStore` calls a
:class:`Notifier` after every successful write and delete, and the implementations here write what
the real service would deliver:

* :class:`DirectoryNotifier`: the demo's local queue (:mod:`lakefs_gc.events.local`);
* :class:`AzureQueueNotifier`: Event Grid blob events delivered to a Storage Queue endpoint
  (docs/formats/notifications.md, "Event Grid schemas"), one event per message, base64-encoded
  JSON by default.

Enable them with ``ServerSettings(notifications=...)``; :class:`NotifierGroup` combines several.
"""

from __future__ import annotations

import base64 as _base64
import json
import threading
import time as _time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote

from lakefs_gc.errors import StorageError
from lakefs_gc.events.local import LocalEventWriter
from lakefs_gc.events.model import Kind
from lakefs_gc.storage.filesystems import parse_connection_string
from lakefs_gc.storage.locations import StorageLocation

AzureSchema = Literal["EventGridEvent", "CloudEvent"]
#: the subscription id in the ``topic`` of the Azure events we emit (there is no real one)
TEST_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
TEST_RESOURCE_GROUP = "test"
BLOB_CREATED = "Microsoft.Storage.BlobCreated"
BLOB_DELETED = "Microsoft.Storage.BlobDeleted"


class Notifier(Protocol):
    """Told about every object the test server wrote or deleted in a storage namespace.

    ``location`` is the object's own location (``namespace.join(key)``): for a local namespace
    ``key`` is the absolute file path; for Azure, ``account``/``container``/``key`` name the blob.
    The store calls a notifier only for the storage kinds it :meth:`handles`, and only after the
    write or delete succeeded, as a cloud only notifies about what happened. A notifier that fails
    raises (:class:`~lakefs_gc.errors.StorageError`) and so fails the request: an event lost
    silently would show up much later as a streaming test that misses an object.
    """

    def handles(self, kind: str) -> bool:
        """Whether objects of this storage kind (``"local"``, ``"s3"``, ``"azure"``) are notified."""
        ...

    def object_created(
        self, location: StorageLocation, *, size: int, time: datetime, etag: str | None = None
    ) -> None: ...

    def object_deleted(self, location: StorageLocation, *, time: datetime) -> None: ...


class NotifierGroup:
    """Several notifiers as one (e.g. local and Azure namespaces on one server)."""

    def __init__(self, notifiers: Sequence[Notifier]) -> None:
        self.notifiers = tuple(notifiers)

    def handles(self, kind: str) -> bool:
        return any(n.handles(kind) for n in self.notifiers)

    def object_created(
        self, location: StorageLocation, *, size: int, time: datetime, etag: str | None = None
    ) -> None:
        for n in self.notifiers:
            if n.handles(location.kind):
                n.object_created(location, size=size, time=time, etag=etag)

    def object_deleted(self, location: StorageLocation, *, time: datetime) -> None:
        for n in self.notifiers:
            if n.handles(location.kind):
                n.object_deleted(location, time=time)


class DirectoryNotifier:
    """Local namespaces: one :mod:`lakefs_gc.events.local` message file per write or delete."""

    def __init__(self, directory: Path) -> None:
        self.writer = LocalEventWriter(directory)

    @property
    def directory(self) -> Path:
        return self.writer.directory

    def handles(self, kind: str) -> bool:
        return kind == "local"

    def object_created(
        self, location: StorageLocation, *, size: int, time: datetime, etag: str | None = None
    ) -> None:
        self.writer.created(_local_path(location), size, time)

    def object_deleted(self, location: StorageLocation, *, time: datetime) -> None:
        self.writer.deleted(_local_path(location), time)


def _local_path(location: StorageLocation) -> str:
    if location.kind != "local":
        raise StorageError(f"the directory notifier only handles local objects, not {location}")
    return location.key


class AzureQueueNotifier:
    """Azure namespaces: what an Event Grid subscription with a Storage Queue endpoint delivers.

    ``connection_string`` reaches the queue service (Azurite's has ``QueueEndpoint``); its blob
    endpoint is also the base of the events' ``data.url`` when it belongs to the blob's account,
    so the URLs point at the blobs the test actually wrote. ``base64``: store the JSON
    base64-encoded, the usual Storage Queue convention (consumers decode with
    ``TextBase64DecodePolicy``); ``False`` stores the JSON text itself.
    """

    def __init__(
        self,
        connection_string: str,
        queue_name: str,
        *,
        schema: AzureSchema = "EventGridEvent",
        base64: bool = True,
        subscription: str = TEST_SUBSCRIPTION,
        resource_group: str = TEST_RESOURCE_GROUP,
    ) -> None:
        if schema not in ("EventGridEvent", "CloudEvent"):
            raise ValueError(f"unknown Event Grid schema {schema!r} (EventGridEvent or CloudEvent)")
        self.schema: AzureSchema = schema
        self.base64 = base64
        self.subscription = subscription
        self.resource_group = resource_group
        self.queue_name = queue_name
        connection = parse_connection_string(connection_string)
        self._account = connection.account_name
        self._blob_endpoint = connection.blob_endpoint
        self._sequencer = _Sequencer()
        self._queue = _open_queue(connection_string, queue_name)

    def handles(self, kind: str) -> bool:
        return kind == "azure"

    def object_created(
        self, location: StorageLocation, *, size: int, time: datetime, etag: str | None = None
    ) -> None:
        self._send(location, "created", time, size, etag)

    def object_deleted(self, location: StorageLocation, *, time: datetime) -> None:
        self._send(location, "deleted", time, None, None)

    def blob_url(self, location: StorageLocation) -> str:
        """``<blob endpoint>/<container>/<blob, percent-encoded>``, as ``data.url`` carries it."""
        account = _account(location)
        endpoint = self._blob_endpoint
        if endpoint is None or (self._account or "").lower() != account.lower():
            endpoint = f"https://{account}.blob.core.windows.net"
        return f"{endpoint.rstrip('/')}/{location.container}/{quote(location.key, safe='/')}"

    def _send(
        self, location: StorageLocation, kind: Kind, when: datetime, size: int | None, etag: str | None
    ) -> None:
        event = blob_event(
            kind,
            schema=self.schema,
            topic=storage_account_topic(_account(location), self.subscription, self.resource_group),
            container=location.container,
            blob=location.key,
            url=self.blob_url(location),
            time=when,
            sequencer=self._sequencer.next(),
            size=size,
            etag=etag,
        )
        text = json.dumps(event, separators=(",", ":"))
        body = _base64.b64encode(text.encode("utf-8")).decode("ascii") if self.base64 else text
        try:
            self._queue.send_message(body)
        except Exception as e:  # the SDK raises HttpResponseError, ServiceRequestError, ...
            raise StorageError(
                f"cannot send the {kind} event of {location} to queue {self.queue_name!r}: {e}"
            ) from e


def _open_queue(connection_string: str, queue_name: str) -> Any:
    """A QueueClient for ``queue_name``, creating the queue if it does not exist yet."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.queue import QueueClient

    queue = QueueClient.from_connection_string(connection_string, queue_name)
    try:
        queue.create_queue()
    except ResourceExistsError:
        pass
    except Exception as e:
        raise StorageError(f"cannot create the Azure queue {queue_name!r}: {e}") from e
    return queue


def _account(location: StorageLocation) -> str:
    if location.kind != "azure" or not location.account:
        raise StorageError(f"the Azure queue notifier only handles Azure blobs, not {location}")
    return location.account


def storage_account_topic(
    account: str, subscription: str = TEST_SUBSCRIPTION, group: str = TEST_RESOURCE_GROUP
) -> str:
    """The ``topic`` (``source`` in CloudEvents) of a storage account's blob events."""
    provider = f"providers/Microsoft.Storage/storageAccounts/{account}"
    return f"/subscriptions/{subscription}/resourceGroups/{group}/{provider}"


def blob_event(
    kind: Kind,
    *,
    schema: AzureSchema,
    topic: str,
    container: str,
    blob: str,
    url: str,
    time: datetime,
    sequencer: str,
    size: int | None = None,
    etag: str | None = None,
) -> dict[str, Any]:
    """One Event Grid ``BlobCreated``/``BlobDeleted`` event (EventGridEvent or CloudEvent schema).

    ``blob`` is the raw blob name (the ``subject`` carries it unencoded); ``url`` is already
    percent-encoded. Created events carry ``contentLength`` and a quoted ``eTag``.
    """
    data = _blob_data(kind, url=url, sequencer=sequencer, size=size, etag=etag)
    common = {
        "subject": f"/blobServices/default/containers/{container}/blobs/{blob}",
        "id": data["requestId"],
        "data": data,
    }
    event_type = BLOB_CREATED if kind == "created" else BLOB_DELETED
    if schema == "CloudEvent":
        return {
            "source": topic,
            "type": event_type,
            "time": event_grid_time(time),
            **common,
            "specversion": "1.0",
        }
    return {
        "topic": topic,
        "eventType": event_type,
        "eventTime": event_grid_time(time),
        **common,
        "dataVersion": "",
        "metadataVersion": "1",
    }


def _blob_data(kind: Kind, *, url: str, sequencer: str, size: int | None, etag: str | None) -> dict[str, Any]:
    """The ``data`` member, fields in the order Azure sends them."""
    data: dict[str, Any] = {"api": "PutBlob" if kind == "created" else "DeleteBlob"}
    data["clientRequestId"] = str(uuid.uuid4())
    data["requestId"] = str(uuid.uuid4())
    if kind == "created":
        data["eTag"] = _quoted(etag or _synthetic_etag())
    data["contentType"] = "application/octet-stream"
    if kind == "created":
        data["contentLength"] = size if size is not None else 0
    data["blobType"] = "BlockBlob"
    data["url"] = url
    data["sequencer"] = sequencer
    data["storageDiagnostics"] = {"batchId": str(uuid.uuid4())}
    return data


def event_grid_time(when: datetime) -> str:
    """Event Grid's spelling: UTC, seven fractional digits, ``Z`` (``2017-06-26T18:41:00.9584103Z``)."""
    if when.tzinfo is None:
        raise ValueError(f"event time {when!r} has no time zone")
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"


def _quoted(etag: str) -> str:
    return etag if etag.startswith('"') else f'"{etag}"'


def _synthetic_etag() -> str:
    return f'"0x{uuid.uuid4().hex[:15].upper()}"'


class _Sequencer:
    """32 hex digits, strictly increasing per notifier (Azure's are per blob; ours are global)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0
        self._counter = 0

    def next(self) -> str:
        with self._lock:
            self._last = max(_time.time_ns(), self._last + 1)
            self._counter += 1
            return f"{self._last:016x}{self._counter:016x}"
