"""The sweep's port: delete objects of one storage namespace in bulk, one outcome per address.

A deleter runs inside an executor task (one per partition) and never raises for a per-object
or per-request failure: those are data, reported as ``failed`` outcomes and counted in the sweep
report. Every deleter checks each address with :func:`deletable_key` again before deleting it
(defence in depth: whatever the mark computed, nothing under ``_lakefs/``, nothing outside the
namespace, no file directly under ``data/``), and joins keys to the namespace as plain strings, so
``#``, ``?`` and ``%`` are part of the key and never URL syntax.

The mark's cutoff is enforced again at delete time where the store can compare it in the delete
path (``not_modified_since``): Azure deletes carry ``If-Unmodified-Since`` (a blob written after the
cutoff answers 412 and is ``failed``, "refused"), local files are checked with ``stat`` right before
``unlink``. S3's ``DeleteObjects`` offers no modification-time condition for general-purpose
buckets, so there the guarantee rests on the mark (lakeFS never rewrites an address) and on the
sweep's revalidation.

S3's deleter is in :mod:`lakefs_gc.storage.s3_deleter`. Batch sizes are those of lakeFS's Spark
GC (docs/formats/lakefs-gc-api.md, "Bulk deletes"): 1000 keys per S3 ``DeleteObjects``, 256 blobs
per Azure blob batch.

Throttling (S3 ``503 SlowDown``, per-key ``SlowDown`` inside a ``DeleteObjects`` answer; Azure
``503 ServerBusy`` for a batch or for one of its sub-requests) and transient failures (other 5xx,
dropped connections, timeouts) are retried here, only for the keys they hit, with the backoff,
concurrency limit and rate ceiling of a shared :class:`~lakefs_gc.storage.throttle.Throttle`.
The SDKs' own retries are off for these clients (:mod:`lakefs_gc.storage.clients`): retried
inside botocore or azure-core, a ``SlowDown`` would never reach the adaptive limit, and the two
retry loops would multiply. A key still throttled when the retry budget is spent is ``failed``
with the store's reason, never dropped. Deleting is idempotent, so a retry of a key the store
did delete before failing the request is harmless (S3 then says ``deleted``, Azure ``missing``).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Protocol

from lakefs_gc.errors import ConfigError
from lakefs_gc.gc.addresses import deletable_key
from lakefs_gc.storage.throttle import Throttle

Outcome = Literal["deleted", "missing", "failed"]
S3_MAX_BATCH = 1000
AZURE_MAX_BATCH = 256
LOCAL_MAX_BATCH = 1000  # no requests to size; only bounds the work between two sweep reports
#: Azure error codes that mean "slow down" (with HTTP 503).
AZURE_THROTTLE_CODES = frozenset({"ServerBusy", "ServiceUnavailable"})


@dataclass(frozen=True)
class DeleteOutcome:
    """What became of one address. ``missing``: the store said it was already gone (S3 cannot say
    so, see :class:`S3BulkDeleter`); ``failed``: not deleted, ``error`` says why."""

    address: str
    outcome: Outcome
    error: str | None = None


@dataclass(frozen=True)
class Retry:
    """A key the store did not settle this time: throttled (slow down) or transient; ``error`` says how."""

    error: str
    throttled: bool


BatchAnswer = dict[str, "DeleteOutcome | Retry"]


class BulkDeleter(Protocol):
    """Deletes namespace-relative keys; the one storage dependency of the sweep.

    ``delete`` returns one outcome per input address, in input order, and splits the input into
    requests of at most ``max_batch`` keys itself. It raises only for programming errors, never
    for what the store answers.
    """

    max_batch: int

    def delete(self, addresses: Sequence[str]) -> list[DeleteOutcome]: ...

    def close(self) -> None: ...


class BatchingDeleter(ABC):
    """The shared part: the safety re-check, de-duplication, batching and ordering of outcomes."""

    max_batch: int

    def __init__(self, max_batch: int, limit: int, throttle: Throttle | None) -> None:
        if not 1 <= max_batch <= limit:
            raise ConfigError(f"{type(self).__name__} max_batch must be within 1..{limit}, got {max_batch}")
        self.max_batch = max_batch
        self.throttle = throttle or Throttle()

    def delete(self, addresses: Sequence[str]) -> list[DeleteOutcome]:
        outcomes: dict[str, DeleteOutcome] = {}
        pending: list[str] = []
        for address in dict.fromkeys(addresses):  # each key once, first-seen order
            if deletable_key(address):
                pending.append(address)
            else:
                outcomes[address] = DeleteOutcome(
                    address, "failed", f"refused: {address!r} is not a deletable key"
                )
        for start in range(0, len(pending), self.max_batch):
            outcomes.update(self._delete_with_retries(pending[start : start + self.max_batch]))
        return [outcomes[a] for a in addresses]

    def _delete_with_retries(self, batch: list[str]) -> dict[str, DeleteOutcome]:
        """One request, then one per retry with only the keys still unsettled, within the budget."""
        throttle = self.throttle
        settled: dict[str, DeleteOutcome] = {}
        unsettled: dict[str, Retry] = {}
        todo = batch
        for attempt in range(throttle.max_retries + 1):
            ticket = throttle.before_request(len(todo), attempt)
            answer: BatchAnswer = {}
            try:
                answer = self._delete_batch(todo)
            finally:
                throttled = any(isinstance(a, Retry) and a.throttled for a in answer.values())
                throttle.after_request(ticket, throttled=throttled)
            unsettled = {}
            for address in todo:
                result = answer.get(address) or DeleteOutcome(
                    address, "failed", "the store's answer did not mention this key"
                )
                if isinstance(result, Retry):
                    unsettled[address] = result
                else:
                    settled[address] = result
            if not unsettled:
                break
            todo = list(unsettled)
        retries = throttle.max_retries
        for address, retry in unsettled.items():
            settled[address] = DeleteOutcome(address, "failed", f"{retry.error} (after {retries} retries)")
        return settled

    @abstractmethod
    def _delete_batch(self, addresses: list[str]) -> BatchAnswer:
        """Delete ≤ max_batch distinct, already checked addresses once; never raises for store errors.

        Keys to try again (throttled, transient failure) are answered with a :class:`Retry`."""

    def close(self) -> None:  # noqa: B027 - a no-op unless a client needs closing
        """Release the client."""

    def __enter__(self) -> BatchingDeleter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def key_prefix(namespace_key: str) -> str:
    """``a/b/`` for a namespace key ``a/b`` or ``a/b/``; ``""`` at the bucket/container root."""
    stripped = namespace_key.strip("/")
    return stripped + "/" if stripped else ""


class AzureBlobBulkDeleter(BatchingDeleter):
    """Blob batch (``ContainerClient.delete_blobs``) with up to 256 blobs per request, snapshots
    included. Sub-response 202 is ``deleted``, 404 ``BlobNotFound`` ``missing``, anything else
    (a lease, a missing container, ...) ``failed`` with status, reason and error code.

    The SDK pairs sub-responses with blobs by position (Azure answers in request order), and
    builds sub-request paths from the container URL, so path-style endpoints (Azurite:
    ``http://host:port/<account>/<container>/<blob>``) work as they are: verified against Azurite
    3.35 with shared key, SAS and connection-string clients. Azurite accepts more than 256
    sub-requests, Azure does not; the limit is enforced here. A 503 (``ServerBusy``) of the batch
    or of a sub-request is throttling, other 5xx and connection failures are transient; both are
    retried. Any other failure of the whole request marks every blob of its batch ``failed``.
    """

    def __init__(
        self,
        container_client: Any,
        namespace_key: str,
        *,
        max_batch: int = AZURE_MAX_BATCH,
        throttle: Throttle | None = None,
        not_modified_since: datetime | None = None,
    ) -> None:
        super().__init__(max_batch, AZURE_MAX_BATCH, throttle)
        self.container_client = container_client
        self.prefix = key_prefix(namespace_key)
        self.cutoff = not_modified_since

    def _delete_batch(self, addresses: list[str]) -> BatchAnswer:
        from azure.core.exceptions import (
            AzureError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        condition = {"if_unmodified_since": self.cutoff} if self.cutoff is not None else {}
        try:
            responses = list(
                self.container_client.delete_blobs(
                    *[self.prefix + a for a in addresses],
                    delete_snapshots="include",
                    raise_on_any_failure=False,
                    **condition,
                )
            )
        except HttpResponseError as e:
            error = f"blob batch failed: {_first_line(e)}"
            status = int(e.status_code or 0)
            throttled = status == 503 or getattr(e, "error_code", None) in AZURE_THROTTLE_CODES
            if throttled or status >= 500:
                return dict.fromkeys(addresses, Retry(error, throttled))
            return {a: DeleteOutcome(a, "failed", error) for a in addresses}
        except (ServiceRequestError, ServiceResponseError) as e:
            return dict.fromkeys(addresses, Retry(f"blob batch failed: {_first_line(e)}", False))
        except AzureError as e:
            return {a: DeleteOutcome(a, "failed", f"blob batch failed: {e}") for a in addresses}
        if len(responses) != len(addresses):  # cannot pair them: claim nothing
            error = f"blob batch answered {len(responses)} sub-responses for {len(addresses)} blobs"
            return {a: DeleteOutcome(a, "failed", error) for a in addresses}
        return {a: _azure_outcome(a, r) for a, r in zip(addresses, responses, strict=True)}

    def close(self) -> None:
        self.container_client.close()


def _azure_outcome(address: str, response: Any) -> DeleteOutcome | Retry:
    """A 404 is ``missing`` only for the blob itself: a missing container also answers 404 per blob
    (``ContainerNotFound``, seen on Azurite), and that is a misconfiguration, not a deleted object."""
    status = response.status_code
    code = response.headers.get("x-ms-error-code")
    if status == 202:
        return DeleteOutcome(address, "deleted")
    if status == 404 and code in (None, "BlobNotFound"):
        return DeleteOutcome(address, "missing")
    if status == 412 and code == "ConditionNotMet":  # If-Unmodified-Since (412 is also a lease)
        return DeleteOutcome(address, "failed", "refused: modified after the mark's cutoff (ConditionNotMet)")
    error = f"{status} {response.reason}" + (f" ({code})" if code else "")
    if status >= 500:
        return Retry(error, status == 503 or code in AZURE_THROTTLE_CODES)
    return DeleteOutcome(address, "failed", error)


def _first_line(error: Exception) -> str:
    """azure-core's messages run on with the whole error body; its first line says what happened."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


class LocalBulkDeleter(BatchingDeleter):
    """``os.unlink`` under a local namespace directory (lakeFS's local blockstore, tests).

    Besides the key check, a file is refused when its directory resolves outside the namespace
    (a symlinked directory), so nothing outside the namespace is ever unlinked.
    """

    def __init__(
        self,
        root: str,
        *,
        max_batch: int = LOCAL_MAX_BATCH,
        throttle: Throttle | None = None,
        not_modified_since: datetime | None = None,
    ) -> None:
        super().__init__(max_batch, LOCAL_MAX_BATCH, throttle)
        self.root = root.rstrip("/") or "/"
        self._real_root = os.path.realpath(self.root)
        self.cutoff = not_modified_since

    def _delete_batch(self, addresses: list[str]) -> BatchAnswer:
        return {a: self._unlink(a) for a in addresses}

    def _unlink(self, address: str) -> DeleteOutcome:
        path = os.path.join(self.root, address)
        parent = os.path.realpath(os.path.dirname(path))
        if os.path.commonpath([parent, self._real_root]) != self._real_root:
            return DeleteOutcome(address, "failed", f"refused: {address!r} resolves outside the namespace")
        try:
            if self.cutoff is not None and os.stat(path).st_mtime >= self.cutoff.timestamp():
                modified = datetime.fromtimestamp(os.stat(path).st_mtime, self.cutoff.tzinfo)
                return DeleteOutcome(
                    address, "failed", f"refused: modified {modified.isoformat()}, after the mark's cutoff"
                )
            os.unlink(path)
        except FileNotFoundError:
            return DeleteOutcome(address, "missing")
        except OSError as e:
            return DeleteOutcome(address, "failed", f"{type(e).__name__}: {e.strerror or e}")
        return DeleteOutcome(address, "deleted")
