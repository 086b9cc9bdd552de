"""The object stores backup and restore copy between: one root (a bucket or container prefix, or
a directory) of S3, Azure Blob or a local disk, addressed by namespace-relative keys.

Each store states what it knows about an object (:class:`ObjectInfo`: size, MD5 where it has one),
writes a new object only if none is there (never overwriting), and copies server-side from another
root of the same store where it can. :mod:`.copiers` builds on them.
"""

from __future__ import annotations

import os
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, BinaryIO

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.clients import azure_container_client, s3_client
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation


class CopyVerificationError(StorageError):
    """A copy finished but does not match its source (raised and caught inside the copier)."""


#: S3's largest single CopyObject; larger objects are copied server-side in parts.
S3_MAX_COPY_OBJECT = 5 * 1024**3
#: Streamed uploads up to this size are one PUT, so S3's ETag stays the MD5 and is verified.
S3_SINGLE_PUT_MAX = 64 * 1024**2
STREAM_CHUNK = 1024**2
_NO_MD5_ENCRYPTION = ("aws:kms", "aws:kms:dsse")


@dataclass(frozen=True)
class ObjectInfo:
    """What a store says about an object: enough to tell whether two copies are the same."""

    size: int
    md5: str | None = None  # hex; None where the store has no content MD5 to offer
    copy_status: str | None = None  # Azure: a blob whose server-side copy is pending or failed

    def differs(self, other: ObjectInfo) -> str | None:
        """Why ``other`` is not the same object as this one, or None."""
        if self.size != other.size:
            return f"size {other.size} instead of {self.size}"
        if self.md5 and other.md5 and self.md5 != other.md5:
            return f"MD5 {other.md5} instead of {self.md5}"
        return None


class ObjectStore(ABC):
    """One root (bucket/container prefix or directory) of a store, addressed by relative keys."""

    def __init__(self, location: StorageLocation) -> None:
        self.location = location

    def describe(self, key: str) -> str:
        return str(self.location.join(key))

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """The object's size and MD5, None if it does not exist; raises for other errors."""

    @abstractmethod
    def open(self, key: str) -> Any:
        """A readable binary stream of the object (``read(n)``, ``close()``)."""

    @abstractmethod
    def write_new(self, key: str, stream: BinaryIO, size: int) -> bool:
        """Write ``size`` bytes from ``stream`` atomically; False (nothing written) if ``key`` exists."""

    def copy_from(self, source: ObjectStore, key: str, info: ObjectInfo) -> bool:
        """Copy ``key`` of ``source`` here server-side if this store can; False to stream instead."""
        return False

    def close(self) -> None:  # noqa: B027 - a no-op unless a client needs closing
        """Release the client."""


def _prefix(location: StorageLocation) -> str:
    stripped = location.key.strip("/")
    return stripped + "/" if stripped else ""


class S3ObjectStore(ObjectStore):
    """A bucket prefix through boto3: ``HeadObject``, ``GetObject``, ``PutObject``, ``CopyObject``."""

    def __init__(self, location: StorageLocation, client: Any) -> None:
        super().__init__(location)
        self.client = client
        self.bucket = location.container
        self.prefix = _prefix(location)

    def stat(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        etag = str(head.get("ETag", "")).strip('"')
        encrypted = head.get("ServerSideEncryption") in _NO_MD5_ENCRYPTION or "SSECustomerAlgorithm" in head
        md5 = etag.lower() if len(etag) == 32 and "-" not in etag and not encrypted else None
        return ObjectInfo(int(head["ContentLength"]), md5)

    def open(self, key: str) -> Any:
        return self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]

    def write_new(self, key: str, stream: BinaryIO, size: int) -> bool:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=S3_SINGLE_PUT_MAX, use_threads=False)
        self.client.upload_fileobj(stream, self.bucket, self.prefix + key, Config=config)
        return True

    def copy_from(self, source: ObjectStore, key: str, info: ObjectInfo) -> bool:
        """Server-side between any two buckets of the endpoint (one set of S3 options serves both)."""
        if not isinstance(source, S3ObjectStore):
            return False
        copy_source = {"Bucket": source.bucket, "Key": source.prefix + key}
        if info.size <= S3_MAX_COPY_OBJECT:  # one request; the copy keeps a single-part ETag
            self.client.copy_object(CopySource=copy_source, Bucket=self.bucket, Key=self.prefix + key)
        else:
            self.client.copy(copy_source, self.bucket, self.prefix + key)  # multipart UploadPartCopy
        return True

    def close(self) -> None:
        self.client.close()


class AzureObjectStore(ObjectStore):
    """A container prefix through azure-storage-blob; server-side ``Copy Blob`` within an account."""

    #: how long a server-side copy may stay pending (within an account it is normally immediate)
    copy_timeout_s = 600.0

    def __init__(self, location: StorageLocation, container_client: Any) -> None:
        super().__init__(location)
        self.container = container_client
        self.prefix = _prefix(location)

    def _blob(self, key: str) -> Any:
        return self.container.get_blob_client(self.prefix + key)

    def stat(self, key: str) -> ObjectInfo | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            props = self._blob(key).get_blob_properties()
        except ResourceNotFoundError:
            return None
        md5 = props.content_settings.content_md5
        status = props.copy.status if props.copy is not None else None
        return ObjectInfo(int(props.size), bytes(md5).hex() if md5 else None, status)

    def open(self, key: str) -> Any:
        return _DownloadStream(self._blob(key).download_blob())

    def write_new(self, key: str, stream: BinaryIO, size: int) -> bool:
        from azure.core.exceptions import ResourceExistsError

        try:
            self._blob(key).upload_blob(stream, length=size, overwrite=False)
        except ResourceExistsError:
            return False
        return True

    def copy_from(self, source: ObjectStore, key: str, info: ObjectInfo) -> bool:
        """Server-side within one storage account (the request's own credential authorises the
        source); across accounts the copy is streamed, because one set of Azure options serves
        both sides and cannot authorise another account's source."""
        if not isinstance(source, AzureObjectStore):
            return False
        if (source.location.account or "").lower() != (self.location.account or "").lower():
            return False
        blob = self._blob(key)
        copy = blob.start_copy_from_url(source._blob(key).url)
        status, deadline = copy.get("copy_status"), time.monotonic() + self.copy_timeout_s
        while status == "pending" and time.monotonic() < deadline:
            time.sleep(0.2)
            status = blob.get_blob_properties().copy.status
        if status != "success":
            raise CopyVerificationError(f"server-side copy to {self.describe(key)} ended {status!r}")
        return True

    def close(self) -> None:
        self.container.close()


class _DownloadStream:
    """``read(n)`` over an Azure download, chunk by chunk (never the whole blob in memory)."""

    def __init__(self, downloader: Any) -> None:
        self._chunks = downloader.chunks()
        self._buffer = b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buffer) < n:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        if n < 0:
            n = len(self._buffer)
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def close(self) -> None:
        self._buffer = b""


class LocalObjectStore(ObjectStore):
    """A local directory. A key whose directory resolves outside the root (a symlink) is refused."""

    def __init__(self, location: StorageLocation) -> None:
        super().__init__(location)
        self.root = location.key.rstrip("/") or "/"
        self._real_root = os.path.realpath(self.root)

    def _path(self, key: str) -> str:
        path = os.path.join(self.root, key)
        parent = os.path.realpath(os.path.dirname(path))
        if os.path.commonpath([parent, self._real_root]) != self._real_root:
            raise StorageError(f"refused: {key!r} resolves outside {self.root}")
        return path

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            return ObjectInfo(os.stat(self._path(key)).st_size)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def open(self, key: str) -> Any:
        return open(self._path(key), "rb")  # closed by the caller

    def write_new(self, key: str, stream: BinaryIO, size: int) -> bool:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(temporary, "xb") as out:
                while chunk := stream.read(STREAM_CHUNK):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.link(temporary, path)  # fails if the target exists: never overwrites
        except FileExistsError:
            return False
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)  # only our own temporary file
        return True


def store_for(location: StorageLocation, options: StorageOptions) -> ObjectStore:
    """The object store rooted at ``location`` (one per executor task and side)."""
    if location.kind == "s3":
        return S3ObjectStore(location, s3_client(options.s3))
    if location.kind == "azure":
        return AzureObjectStore(location, azure_container_client(location, options.azure))
    if location.kind == "local":
        return LocalObjectStore(location)
    raise StorageError(f"cannot copy {location}: storage kind {location.kind!r} is not supported")
