"""Fault injection into the test server (:mod:`lakefs_gc.testing.faults`), seen by both clients.

Each action is shown through plain lakefs-sdk (what the wire looks like) and through our
:class:`LakeFSClient` (that it fails closed, after its retries, with a :class:`LakeFSError`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import urllib3
from lakefs_sdk.api.health_check_api import HealthCheckApi
from lakefs_sdk.exceptions import ApiException
from lakefs_sdk.models.prepare_gc_uncommitted_request import PrepareGCUncommittedRequest

from lakefs_gc.errors import LakeFSError, NoRetentionRulesError
from lakefs_gc.lakefs.client import LakeFSClient, PollingPolicy
from lakefs_gc.lakefs.retry import RetryPolicy
from lakefs_gc.lakefs.settings import LakeFSConnection
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.faults import Fault, FaultPlan
from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.sdk import Lakefs

REPO = "repo"
GET_REPO = Fault(method="GET", path=rf"^/repositories/{REPO}$", status=500)
UNCOMMITTED = r"/gc/prepare_uncommited$"
ATTEMPTS = 3


@pytest.fixture
def server(storage_root: Path) -> Iterator[LakeFSTestServer]:
    """One staged entry per uncommitted page, so a dump of three objects takes three pages."""
    settings = ServerSettings(uncommitted_page_entries=1)
    with LakeFSTestServer(storage_root=storage_root, settings=settings) as running:
        yield running


@pytest.fixture
def repo(lakefs: Lakefs) -> str:
    lakefs.create_repo(REPO, f"local://{REPO}")
    lakefs.set_rules(REPO, default_days=7)
    for name in ("a", "b", "c"):
        lakefs.upload(REPO, "main", name, name.encode())
    return REPO


@pytest.fixture
def retry_sleeps() -> list[float]:
    return []


def make_client(server: LakeFSTestServer, sleeps: list[float], *, read_timeout: float = 5) -> LakeFSClient:
    connection = LakeFSConnection.model_validate(
        {**server.connection_info(), "connect_timeout": 2, "read_timeout": read_timeout}
    )
    retry = RetryPolicy(max_attempts=ATTEMPTS, base_delay=0.01, max_delay=0.01, sleep=sleeps.append)
    return LakeFSClient(connection, retry=retry, polling=PollingPolicy(initial_delay=0.01), source="tests")


@pytest.fixture
def client(server: LakeFSTestServer, retry_sleeps: list[float]) -> Iterator[LakeFSClient]:
    with make_client(server, retry_sleeps) as c:
        yield c


def uncommitted_page(lakefs: Lakefs, token: str | None = None) -> dict[str, Any]:
    request = PrepareGCUncommittedRequest(continuation_token=token)
    page = lakefs.internal.prepare_garbage_collection_uncommitted(REPO, request)
    body: dict[str, Any] = page.to_dict()  # type: ignore[no-untyped-call]
    return body


# ---- status -------------------------------------------------------------------------------


def test_status_fault_answers_a_lakefs_error_body_without_handling(
    server: LakeFSTestServer, lakefs: Lakefs, repo: str
) -> None:
    fault = server.faults.inject(
        Fault(method="POST", path=UNCOMMITTED, status=503, message="lakeFS is overloaded")
    )
    with pytest.raises(ApiException) as e:
        uncommitted_page(lakefs)
    assert e.value.status == 503
    assert e.value.body is not None and '"message": "lakeFS is overloaded"' in e.value.body
    assert server.faults.hits(fault) == 1


def test_500_on_get_repository_is_a_lakefs_error_after_retries(
    server: LakeFSTestServer, client: LakeFSClient, repo: str, retry_sleeps: list[float]
) -> None:
    fault = server.faults.inject(GET_REPO)
    with pytest.raises(LakeFSError, match=r"get repository .* failed: HTTP 500: injected fault") as e:
        client.get_repository(repo)
    assert e.value.status == 500
    assert server.faults.hits(fault) == ATTEMPTS
    assert len(retry_sleeps) == ATTEMPTS - 1


def test_one_503_then_success_is_retried(
    server: LakeFSTestServer, client: LakeFSClient, repo: str, retry_sleeps: list[float]
) -> None:
    fault = server.faults.inject(Fault(method="GET", path=rf"/repositories/{repo}$", status=503, times=1))
    assert client.get_repository(repo).storage_namespace == f"local://{repo}"
    assert server.faults.hits(fault) == 1
    assert len(retry_sleeps) == 1


def test_404_on_async_prepare_commits_is_no_retention_rules(
    server: LakeFSTestServer, client: LakeFSClient, repo: str
) -> None:
    fault = server.faults.inject(Fault(method="POST", path=r"/gc/prepare_commits/async$", status=404))
    with pytest.raises(NoRetentionRulesError):
        client.prepare_commits(repo)
    assert server.faults.hits(fault) == 1  # a 404 is an answer: not retried
    server.faults.clear()
    assert client.prepare_commits(repo).location  # the repository does have rules


# ---- delay --------------------------------------------------------------------------------


def test_delay_beyond_the_read_timeout_is_a_lakefs_error(
    server: LakeFSTestServer, repo: str, retry_sleeps: list[float]
) -> None:
    fault = server.faults.inject(Fault(path=rf"^/repositories/{repo}$", delay=5))
    started = time.monotonic()
    with (
        make_client(server, retry_sleeps, read_timeout=0.2) as impatient,
        pytest.raises(LakeFSError, match="cannot reach lakeFS") as e,
    ):
        impatient.get_repository(repo)
    assert e.value.status is None
    assert server.faults.hits(fault) == ATTEMPTS
    assert time.monotonic() - started < 4


def test_delay_within_the_read_timeout_only_slows_the_answer(
    server: LakeFSTestServer, client: LakeFSClient, repo: str
) -> None:
    fault = server.faults.inject(Fault(path=rf"^/repositories/{repo}$", delay=0.3))
    started = time.monotonic()
    assert client.get_repository(repo).id == repo
    assert time.monotonic() - started >= 0.3
    assert server.faults.hits(fault) == 1


def test_clear_ends_pending_delays(server: LakeFSTestServer, lakefs: Lakefs, repo: str) -> None:
    server.faults.inject(Fault(path=rf"^/repositories/{repo}$", delay=60))
    answers: list[str] = []
    waiting = threading.Thread(target=lambda: answers.append(lakefs.repositories.get_repository(repo).id))
    started = time.monotonic()
    waiting.start()
    time.sleep(0.2)
    server.faults.clear()
    waiting.join(timeout=10)
    assert answers == [repo]
    assert time.monotonic() - started < 10


def test_stopping_the_server_answers_delayed_requests(storage_root: Path) -> None:
    with LakeFSTestServer(storage_root=storage_root) as running:
        running.faults.inject(Fault(path="/healthcheck", delay=60))
        statuses: list[int] = []

        def call() -> None:
            with running.sdk_client() as api:
                try:
                    HealthCheckApi(api).health_check()
                except ApiException as e:
                    statuses.append(e.status)

        waiting = threading.Thread(target=call)
        waiting.start()
        time.sleep(0.2)
    waiting.join(timeout=10)
    assert statuses == [503]


# ---- truncate -----------------------------------------------------------------------------


def test_truncated_answer_breaks_the_sdk_call(server: LakeFSTestServer, lakefs: Lakefs, repo: str) -> None:
    server.faults.inject(Fault(method="POST", path=UNCOMMITTED, truncate=True, times=1))
    with pytest.raises(urllib3.exceptions.ProtocolError, match=r"IncompleteRead|Connection broken"):
        uncommitted_page(lakefs)
    assert uncommitted_page(lakefs)["run_id"]  # the next request is answered in full


def test_truncated_uncommitted_page_is_a_lakefs_error(
    server: LakeFSTestServer, client: LakeFSClient, repo: str
) -> None:
    fault = server.faults.inject(Fault(method="POST", path=UNCOMMITTED, truncate=True, after=1))
    with pytest.raises(LakeFSError, match=r"prepare uncommitted .* failed"):
        client.prepare_uncommitted(repo)
    assert server.faults.hits(fault) == ATTEMPTS  # the first page passed, the second never did


# ---- rewrite ------------------------------------------------------------------------------


def drop(key: str) -> Any:
    def rewrite(body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k != key}

    return rewrite


def test_rewrite_dropping_the_continuation_token_ends_the_dump_early(
    server: LakeFSTestServer, client: LakeFSClient, lakefs: Lakefs, repo: str
) -> None:
    assert client.prepare_uncommitted(repo).pages == 3
    fault = server.faults.inject(
        Fault(method="POST", path=UNCOMMITTED, rewrite=drop("continuation_token"), after=1, times=1)
    )
    first = uncommitted_page(lakefs)
    assert first["continuation_token"]
    second = uncommitted_page(lakefs, first["continuation_token"])
    assert "continuation_token" not in second and second["gc_uncommitted_location"]
    assert server.faults.hits(fault) == 1

    server.faults.inject(Fault(method="POST", path=UNCOMMITTED, rewrite=drop("continuation_token")))
    assert client.prepare_uncommitted(repo).pages == 1  # what the GC must not take for a full dump


def test_rewrite_dropping_the_location_is_refused_by_the_sdk(
    server: LakeFSTestServer, client: LakeFSClient, repo: str
) -> None:
    fault = server.faults.inject(
        Fault(method="POST", path=UNCOMMITTED, rewrite=drop("gc_uncommitted_location"))
    )
    with pytest.raises(LakeFSError, match="gc_uncommitted_location"):
        client.prepare_uncommitted(repo)
    assert server.faults.hits(fault) == 1  # a malformed answer is not retried


def test_rewrite_blanking_the_location(server: LakeFSTestServer, client: LakeFSClient, repo: str) -> None:
    def blank(body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "gc_uncommitted_location": ""}

    server.faults.inject(Fault(method="POST", path=UNCOMMITTED, rewrite=blank))
    dump = client.prepare_uncommitted(repo)
    assert (dump.pages, dump.pages_with_data, dump.location_source) == (3, 0, "derived")


def test_a_failing_rewrite_is_a_500_naming_the_fault(
    server: LakeFSTestServer, lakefs: Lakefs, repo: str
) -> None:
    def broken(body: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("no such field")

    server.faults.inject(Fault(method="POST", path=UNCOMMITTED, rewrite=broken))
    with pytest.raises(ApiException) as e:
        uncommitted_page(lakefs)
    assert e.value.status == 500 and e.value.body is not None and "rewrite" in e.value.body


# ---- counting, matching, clearing ---------------------------------------------------------


def test_after_and_times_select_the_requests_and_hits_counts_them(
    server: LakeFSTestServer, lakefs: Lakefs, repo: str
) -> None:
    fault = server.faults.inject(replace(GET_REPO, after=1, times=2))
    outcomes = []
    for _ in range(5):
        try:
            lakefs.repositories.get_repository(repo)
            outcomes.append(200)
        except ApiException as e:
            outcomes.append(e.status)
    assert outcomes == [200, 500, 500, 200, 200]
    assert server.faults.hits(fault) == 2


def test_method_and_path_must_both_match(server: LakeFSTestServer, lakefs: Lakefs, repo: str) -> None:
    fault = server.faults.inject(Fault(method="delete", path=rf"^/repositories/{repo}$", status=500))
    assert lakefs.repositories.get_repository(repo).id == repo
    lakefs.branch(repo, "other", "main")
    assert server.faults.hits(fault) == 0
    assert fault.method == "DELETE"


def test_the_first_due_fault_acts_and_later_ones_still_count(
    server: LakeFSTestServer, lakefs: Lakefs, repo: str
) -> None:
    first = server.faults.inject(replace(GET_REPO, status=502, times=1))
    second = server.faults.inject(replace(GET_REPO, status=504, after=1, times=1))
    statuses = []
    for _ in range(3):
        try:
            lakefs.repositories.get_repository(repo)
            statuses.append(200)
        except ApiException as e:
            statuses.append(e.status)
    assert statuses == [502, 504, 200]
    assert (server.faults.hits(first), server.faults.hits(second)) == (1, 1)


def test_clear_restores_normal_answers_and_keeps_hits(
    server: LakeFSTestServer, client: LakeFSClient, repo: str
) -> None:
    assert len(server.faults) == 0
    fault = server.faults.inject(GET_REPO)
    assert len(server.faults) == 1
    with pytest.raises(LakeFSError):
        client.get_repository(repo)
    server.faults.clear()
    assert len(server.faults) == 0
    assert client.get_repository(repo).id == repo
    assert server.faults.hits(fault) == ATTEMPTS


def test_hits_of_a_fault_never_injected_is_an_error() -> None:
    with pytest.raises(KeyError):
        FaultPlan().hits(GET_REPO)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"status": 500, "truncate": True},
        {"delay": 1.0, "rewrite": dict},
        {"status": 200},
        {"status": 500, "times": 0},
        {"status": 500, "after": -1},
        {"delay": -1.0},
        {"truncate": True, "message": "only for status"},
    ],
)
def test_invalid_faults_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Fault(path="/", **kwargs)


def test_an_invalid_path_pattern_is_refused() -> None:
    with pytest.raises(ValueError):
        Fault(path="(", status=500)
