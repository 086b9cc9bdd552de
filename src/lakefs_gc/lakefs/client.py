"""The lakeFS API calls a garbage collection needs, on top of ``lakefs-sdk``.

Every SDK failure is translated into :class:`LakeFSError` (carrying the HTTP status) or
:class:`NoRetentionRulesError`, with a message naming the operation and the repository, so the
CLI can print it without a traceback. Transient failures are retried (see :mod:`.retry`).

Safety: "no GC rules" is *never* read as "no active commits". The Scala client maps a 404 from
prepare-commits to a lister that returns nothing, which makes every committed object garbage
(docs/formats/lakefs-gc-api.md, "Pitfalls of lakeFS's Scala client", 2). Here it is an error the
caller cannot overlook (:mod:`.answers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import ClassVar, Literal, TypeVar, get_args

import urllib3.exceptions
from lakefs_sdk.api.config_api import ConfigApi
from lakefs_sdk.api.internal_api import InternalApi
from lakefs_sdk.api.metadata_api import MetadataApi
from lakefs_sdk.api.repositories_api import RepositoriesApi
from lakefs_sdk.api_client import ApiClient
from lakefs_sdk.configuration import Configuration
from lakefs_sdk.exceptions import OpenApiException
from lakefs_sdk.models.prepare_garbage_collection_commits_status import (
    PrepareGarbageCollectionCommitsStatus,
)
from lakefs_sdk.models.prepare_gc_uncommitted_request import PrepareGCUncommittedRequest

from lakefs_gc import __version__
from lakefs_gc.errors import LakeFSError
from lakefs_gc.lakefs.answers import HTTP_NOT_FOUND, NO_RULES, no_rules, translate
from lakefs_gc.lakefs.retry import RetryPolicy, http_status, is_retryable
from lakefs_gc.lakefs.sdk import close_sdk_client
from lakefs_gc.lakefs.settings import LakeFSConnection
from lakefs_gc.lakefs.uncommitted import UncommittedDump, UncommittedPage, collect_uncommitted_dump

_log = logging.getLogger(__name__)

#: The lakeFS calls GC makes, a closed set: the operation names the service's latency and error
#: metrics are labelled with (ids such as a task, range or metarange go into messages only, never
#: into a label, or an always-on service would grow one series per mark).
Operation = Literal[
    "get repository",
    "get config",
    "get garbage collection config",
    "prepare uncommitted",
    "start prepare commits (async)",
    "prepare commits",
    "prepare commits status",
    "get metarange",
    "get range",
    "list branches",
    "list tags",
    "get gc rules",
    "log commits",
    "get commit",
    "stat object",
    "diff branch",
]
OPERATIONS: tuple[Operation, ...] = get_args(Operation)

T = TypeVar("T")

CLIENT_HEADER = "X-Lakefs-Client"
HTTP_INTERNAL_SERVER_ERROR = 500

#: what a failing SDK call can raise (pydantic v1 validation errors are ValueErrors)
_SDK_FAILURES = (OpenApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


@dataclass(frozen=True)
class Repository:
    """The repository facts a GC run needs."""

    id: str
    storage_namespace: str
    storage_id: str
    default_branch: str
    read_only: bool


@dataclass(frozen=True)
class CommitsExport:
    """Where lakeFS wrote the active-commits CSV for this run."""

    run_id: str
    location: str
    presigned_url: str | None = None
    task_id: str | None = None  # None when produced by the blocking fallback


@dataclass(frozen=True)
class PollingPolicy:
    """How to wait for the async prepare-commits task.

    The Scala client's cap and timeout: doubling to 15 s between polls, 1200 s overall. Large
    repositories take minutes here; the overall timeout is what turns a stuck server into an
    error instead of a hung job. The first wait is 0.1 s, not the Scala client's 0.5 s: a small
    repository's task is done in milliseconds, and every mark and revalidated sweep waited 0.5 s
    for it (a status call costs lakeFS one read; a large repository's wait adds two polls)."""

    initial_delay: float = 0.1
    max_delay: float = 15.0
    multiplier: float = 2.0
    timeout: float = 1200.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)


class LakeFSClient:
    """A thin, typed facade over the lakeFS endpoints used by GC (docs/formats/lakefs-gc-api.md,
    "The calls"); a :class:`~lakefs_gc.gc.ports.RefsReader`."""

    #: called after every API call (with its retries) as ``observer(operation, seconds, failed)``;
    #: the service sets it to feed its latency and error metrics (driver-side calls only)
    observer: ClassVar[Callable[[Operation, float, bool], None] | None] = None

    def __init__(
        self,
        connection: LakeFSConnection,
        *,
        retry: RetryPolicy | None = None,
        polling: PollingPolicy | None = None,
        source: str | None = None,
    ) -> None:
        self._connection = connection
        self._retry = retry or RetryPolicy(
            max_attempts=connection.max_attempts,
            base_delay=connection.retry_base_delay,
            max_delay=connection.retry_max_delay,
        )
        self._polling = polling or PollingPolicy()
        config = Configuration(
            host=connection.endpoint,
            username=connection.access_key_id,
            password=connection.secret_access_key.get_secret_value(),
        )
        config.verify_ssl = connection.verify_ssl
        config.retries = False  # type: ignore[assignment]  # we retry ourselves, with our policy, and see the raw errors
        self._api = ApiClient(config)
        suffix = f"/{source}" if source else ""
        self._api.set_default_header(  # type: ignore[no-untyped-call]
            CLIENT_HEADER, f"lakefs-gc/{__version__}{suffix}"
        )
        self._repositories = RepositoriesApi(self._api)
        self._config = ConfigApi(self._api)
        self._internal = InternalApi(self._api)
        self._metadata = MetadataApi(self._api)
        self._timeout = (connection.connect_timeout, connection.read_timeout)

    @property
    def sdk(self) -> ApiClient:
        """The SDK client, for adapters beside this one (:mod:`.commit_graph`); they call via :meth:`call`."""
        return self._api

    @property
    def request_timeout(self) -> tuple[float, float]:
        return self._timeout

    def close(self) -> None:
        close_sdk_client(self._api)

    def __enter__(self) -> LakeFSClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- repository and configuration -------------------------------------------------------

    def get_repository(self, repository: str) -> Repository:
        repo = self.call(
            "get repository",
            repository,
            lambda: self._repositories.get_repository(repository, _request_timeout=self._timeout),
        )
        return Repository(
            id=repo.id,
            storage_namespace=repo.storage_namespace,
            storage_id=repo.storage_id or "",
            default_branch=repo.default_branch,
            read_only=bool(repo.read_only),
        )

    def blockstore_type(self, storage_id: str) -> str:
        """``s3`` | ``azure`` | ``gs`` | ...: the blockstore serving ``storage_id`` (lakefs-gc-api.md,
        "The calls").

        A single-blockstore server empties ``storage_config_list``; then ``storage_config`` is
        the answer. With several blockstores the entry whose ``blockstore_id`` matches is.
        """
        config = self.call(
            "get config", None, lambda: self._config.get_config(_request_timeout=self._timeout)
        )
        configs = list(config.storage_config_list or [])
        if len(configs) <= 1:
            chosen = config.storage_config or (configs[0] if configs else None)
            if chosen is None:
                raise LakeFSError("lakeFS get config: the answer has no storage_config")
            return str(chosen.blockstore_type)
        for candidate in configs:
            if candidate.blockstore_id == storage_id:
                return str(candidate.blockstore_type)
        known = sorted(str(c.blockstore_id) for c in configs)
        raise LakeFSError(f"lakeFS get config: no blockstore with id {storage_id!r} (known: {known})")

    def grace_period(self, *, default: timedelta | None = None) -> timedelta:
        """The server's link-address validity window (objects younger are never collectable).

        Older servers do not expose it; then ``default`` is used if given, else it is an error.
        """
        try:
            gc_config = self.call(
                "get garbage collection config",
                None,
                lambda: self._internal.get_garbage_collection_config(_request_timeout=self._timeout),
            )
            seconds = gc_config.grace_period
        except LakeFSError as e:
            if e.status != HTTP_NOT_FOUND or default is None:
                raise
            seconds = None
        if seconds is None:
            if default is None:
                raise LakeFSError("lakeFS garbage collection config has no grace_period")
            return default
        return timedelta(seconds=seconds)

    # ---- uncommitted dump ---------------------------------------------------------------------

    def prepare_uncommitted(
        self, repository: str, *, storage_namespace: str | None = None
    ) -> UncommittedDump:
        """Dump all staged addresses (every page; see :mod:`.uncommitted` for the safety rules)."""
        namespace = storage_namespace or self.get_repository(repository).storage_namespace
        return collect_uncommitted_dump(
            lambda token: self._uncommitted_page(repository, token),
            repository=repository,
            storage_namespace=namespace,
        )

    def _uncommitted_page(self, repository: str, token: str | None) -> UncommittedPage:
        request = PrepareGCUncommittedRequest(continuation_token=token)
        page = self.call(
            "prepare uncommitted",
            repository,
            lambda: self._internal.prepare_garbage_collection_uncommitted(
                repository, request, _request_timeout=self._timeout
            ),
        )
        return UncommittedPage(
            run_id=page.run_id,
            location=page.gc_uncommitted_location or "",
            continuation_token=page.continuation_token or None,
        )

    # ---- active commits -----------------------------------------------------------------------

    def prepare_commits(self, repository: str, *, timeout: float | None = None) -> CommitsExport:
        """Have lakeFS compute the active commits: async task + polling, blocking only on HTTP 500.

        A 404, or a task that fails because rules are missing, raises NoRetentionRulesError.
        """
        overall = self._polling.timeout if timeout is None else timeout
        try:
            task = self.call(
                "start prepare commits (async)",
                repository,
                lambda: self._internal.prepare_garbage_collection_commits_async(
                    repository, _request_timeout=self._timeout
                ),
                retry_if=lambda e: is_retryable(e) and http_status(e) != HTTP_INTERNAL_SERVER_ERROR,
            )
        except LakeFSError as e:
            if e.status == HTTP_INTERNAL_SERVER_ERROR:
                _log.warning("async prepare commits for %s answered 500; using the blocking API", repository)
                return self._prepare_commits_blocking(repository, overall)
            if e.status == HTTP_NOT_FOUND:
                raise no_rules(repository, str(e)) from e
            raise
        return self._poll_commits_task(repository, task.id, overall)

    def _prepare_commits_blocking(self, repository: str, timeout: float) -> CommitsExport:
        try:
            result = self.call(
                "prepare commits",
                repository,
                lambda: self._internal.prepare_garbage_collection_commits(
                    repository, _request_timeout=(self._connection.connect_timeout, timeout)
                ),
            )
        except LakeFSError as e:
            if e.status == HTTP_NOT_FOUND:
                raise no_rules(repository, str(e)) from e
            raise
        return CommitsExport(
            run_id=result.run_id,
            location=result.gc_commits_location,
            presigned_url=result.gc_commits_presigned_url,
        )

    def _poll_commits_task(self, repository: str, task_id: str, timeout: float) -> CommitsExport:
        polling = self._polling
        deadline = polling.clock() + timeout
        delay = polling.initial_delay
        while True:
            status = self.call(
                "prepare commits status",
                repository,
                lambda: self._internal.prepare_garbage_collection_commits_status(
                    repository, task_id, _request_timeout=self._timeout
                ),
                detail=f"(task {task_id})",
            )
            if status.completed:
                return _task_outcome(repository, task_id, status)
            remaining = deadline - polling.clock()
            if remaining <= 0:
                raise LakeFSError(
                    f"lakeFS prepare commits for repository {repository!r}: task {task_id} "
                    f"not completed within {timeout:g}s"
                )
            polling.sleep(min(delay, remaining))
            delay = min(delay * polling.multiplier, polling.max_delay)

    # ---- metadata locations -------------------------------------------------------------------

    def meta_range_location(self, repository: str, meta_range_id: str) -> str:
        """Where the metarange file lives; usually ``_lakefs/<id>`` relative to the namespace."""
        uri = self.call(
            "get metarange",
            repository,
            lambda: self._metadata.get_meta_range(repository, meta_range_id, _request_timeout=self._timeout),
            detail=meta_range_id,
        )
        return str(uri.location)

    def range_location(self, repository: str, range_id: str) -> str:
        """Where the range file lives; usually ``_lakefs/<id>`` relative to the namespace."""
        uri = self.call(
            "get range",
            repository,
            lambda: self._metadata.get_range(repository, range_id, _request_timeout=self._timeout),
            detail=range_id,
        )
        return str(uri.location)

    # ---- plumbing -----------------------------------------------------------------------------

    def call(
        self,
        operation: Operation,
        repository: str | None,
        fn: Callable[[], T],
        *,
        detail: str = "",
        retry_if: Callable[[BaseException], bool] = is_retryable,
    ) -> T:
        """``fn`` with retries; failures translated; the observer told ``operation`` (never ``detail``)."""
        where = f"lakeFS {operation}" + (f" {detail}" if detail else "")
        where += f" for repository {repository!r}" if repository else ""
        started, failed = time.monotonic(), True
        try:
            result = self._retry.call(fn, describe=where, retry_if=retry_if)
            failed = False
            return result
        except _SDK_FAILURES as e:
            raise translate(e, where, self._connection.endpoint) from e
        finally:
            if LakeFSClient.observer is not None:
                LakeFSClient.observer(operation, time.monotonic() - started, failed)


def _task_outcome(
    repository: str, task_id: str, status: PrepareGarbageCollectionCommitsStatus
) -> CommitsExport:
    where = f"lakeFS prepare commits for repository {repository!r} (task {task_id})"
    if status.error is not None:
        message = str(status.error.message)
        if NO_RULES.search(message):
            raise no_rules(repository, f"{where} failed: {message}", status=None)
        raise LakeFSError(f"{where} failed: {message}")
    if status.result is None:
        raise LakeFSError(f"{where} completed without a result")
    return CommitsExport(
        run_id=status.result.run_id,
        location=status.result.gc_commits_location,
        presigned_url=status.result.gc_commits_presigned_url,
        task_id=task_id,
    )
