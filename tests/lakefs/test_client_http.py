"""LakeFSClient over lakefs-sdk over real HTTP against the scriptable fake server."""

from __future__ import annotations

import re
import socket
from datetime import timedelta

import pytest

from lakefs_gc import __version__
from lakefs_gc.errors import LakeFSError, NoRetentionRulesError
from lakefs_gc.lakefs.client import LakeFSClient
from tests.lakefs.conftest import FakeClock, make_client
from tests.lakefs.fake_lakefs import (
    DROP,
    FakeLakeFS,
    Reply,
    prepare_result_json,
    repository_json,
    storage_config_json,
    task_status_json,
    uncommitted_page_json,
)

REPO = "/repositories/repo1"
UNCOMMITTED = f"{REPO}/gc/prepare_uncommited"
ASYNC = f"{REPO}/gc/prepare_commits/async"
STATUS = f"{REPO}/gc/prepare_commits/status"
BLOCKING = f"{REPO}/gc/prepare_commits"
NS = "s3://bucket/ns"


# ---- repository, config, auth ---------------------------------------------------------------


def test_get_repository_sends_basic_auth_and_client_header(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("GET", REPO, Reply(200, repository_json(namespace=NS, storage_id="s1", read_only=True)))
    repo = client.get_repository("repo1")
    assert (repo.id, repo.storage_namespace, repo.storage_id, repo.default_branch, repo.read_only) == (
        "repo1",
        NS,
        "s1",
        "main",
        True,
    )
    (request,) = fake.calls("GET", REPO)
    assert request.headers["X-Lakefs-Client"] == f"lakefs-gc/{__version__}/tests"
    assert request.headers["Authorization"].startswith("Basic ")


def test_wrong_credentials_are_a_clear_error_without_retries(
    fake: FakeLakeFS, retry_sleeps: list[float]
) -> None:
    expected = r"get repository for repository 'repo1' failed: HTTP 401"
    with (
        make_client(fake.endpoint, secret="wrong", retry_sleeps=retry_sleeps) as bad,
        pytest.raises(LakeFSError, match=expected) as e,
    ):
        bad.get_repository("repo1")
    assert e.value.status == 401
    assert len(fake.calls("GET", REPO)) == 1
    assert retry_sleeps == []


def test_endpoint_with_api_prefix_reaches_the_same_server(fake: FakeLakeFS) -> None:
    fake.on("GET", REPO, Reply(200, repository_json()))
    with make_client(fake.endpoint + "/api/v1/") as c:
        assert c.get_repository("repo1").id == "repo1"


@pytest.mark.parametrize(
    ("config", "storage_id", "expected"),
    [
        ({"storage_config": storage_config_json("s3"), "storage_config_list": []}, "", "s3"),
        ({"storage_config": storage_config_json("azure")}, "whatever", "azure"),
        (
            {
                "storage_config": storage_config_json("gs"),
                "storage_config_list": [storage_config_json("gs", "a")],
            },
            "a",
            "gs",
        ),
        (
            {
                "storage_config": storage_config_json("s3", "x"),
                "storage_config_list": [storage_config_json("s3", "x"), storage_config_json("azure", "y")],
            },
            "y",
            "azure",
        ),
    ],
)
def test_blockstore_type(
    fake: FakeLakeFS, client: LakeFSClient, config: dict[str, object], storage_id: str, expected: str
) -> None:
    fake.on("GET", "/config", Reply(200, config))
    assert client.blockstore_type(storage_id) == expected


def test_blockstore_type_unknown_storage_id(fake: FakeLakeFS, client: LakeFSClient) -> None:
    config = {"storage_config_list": [storage_config_json("s3", "x"), storage_config_json("azure", "y")]}
    fake.on("GET", "/config", Reply(200, config))
    with pytest.raises(LakeFSError, match=r"no blockstore with id 'z'.*\['x', 'y'\]"):
        client.blockstore_type("z")


def test_grace_period(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("GET", "/config/garbage-collection", Reply(200, {"grace_period": 86400}))
    assert client.grace_period() == timedelta(days=1)


def test_grace_period_unavailable(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("GET", "/config/garbage-collection", Reply(404, {"message": "not found"}))
    assert client.grace_period(default=timedelta(hours=24)) == timedelta(hours=24)
    with pytest.raises(LakeFSError) as e:
        client.grace_period()
    assert e.value.status == 404


def test_metadata_locations(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("GET", f"{REPO}/metadata/meta_range/mr1", Reply(200, {"location": "_lakefs/mr1"}))
    fake.on("GET", f"{REPO}/metadata/range/r1", Reply(200, {"location": "_lakefs/r1"}))
    assert client.meta_range_location("repo1", "mr1") == "_lakefs/mr1"
    assert client.range_location("repo1", "r1") == "_lakefs/r1"


# ---- uncommitted pagination -----------------------------------------------------------------


def test_uncommitted_keeps_location_across_an_empty_last_page(fake: FakeLakeFS, client: LakeFSClient) -> None:
    location = f"{NS}/_lakefs/retention/gc/uncommitted/run-u1/uncommitted/"
    fake.on(
        "POST",
        UNCOMMITTED,
        Reply(201, uncommitted_page_json("run-u1", location, "tok-1")),
        Reply(201, uncommitted_page_json("run-u1", "", "tok-2")),
        Reply(201, uncommitted_page_json("run-u1", location, "tok-3")),
        Reply(201, uncommitted_page_json("run-u1", "", None)),  # the risky empty last page
    )
    dump = client.prepare_uncommitted("repo1", storage_namespace=NS)
    assert (dump.run_id, dump.location, dump.pages, dump.pages_with_data) == ("run-u1", location, 4, 2)
    assert dump.location_source == "server" and dump.data_expected
    tokens = [(r.body or {}).get("continuation_token") for r in fake.calls("POST", UNCOMMITTED)]
    assert tokens == [None, "tok-1", "tok-2", "tok-3"]


def test_uncommitted_without_any_location_derives_it(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("GET", REPO, Reply(200, repository_json(namespace=NS + "/")))
    fake.on(
        "POST",
        UNCOMMITTED,
        Reply(201, uncommitted_page_json("run-u2", "", "tok-1")),
        Reply(201, uncommitted_page_json("run-u2", "", "")),  # blank token ends too
    )
    dump = client.prepare_uncommitted("repo1")
    assert dump.location == f"{NS}/_lakefs/retention/gc/uncommitted/run-u2/uncommitted/"
    assert dump.location_source == "derived" and not dump.data_expected
    assert (dump.pages, dump.pages_with_data) == (2, 0)


def test_uncommitted_run_id_must_not_change(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on(
        "POST",
        UNCOMMITTED,
        Reply(201, uncommitted_page_json("run-a", "", "tok-1")),
        Reply(201, uncommitted_page_json("run-b", "", None)),
    )
    with pytest.raises(LakeFSError, match="page 2 has run_id 'run-b', earlier pages had 'run-a'"):
        client.prepare_uncommitted("repo1", storage_namespace=NS)


def test_uncommitted_repeated_token_is_not_an_endless_loop(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("POST", UNCOMMITTED, Reply(201, uncommitted_page_json("run-a", "", "same")))
    with pytest.raises(LakeFSError, match="not progressing"):
        client.prepare_uncommitted("repo1", storage_namespace=NS)


def test_uncommitted_page_failure_is_retried_with_the_same_token(
    fake: FakeLakeFS, client: LakeFSClient, retry_sleeps: list[float]
) -> None:
    fake.on(
        "POST",
        UNCOMMITTED,
        Reply(201, uncommitted_page_json("run-u3", "", "tok-1")),
        Reply(503, {"message": "slow down"}),
        Reply(201, uncommitted_page_json("run-u3", "", None)),
    )
    dump = client.prepare_uncommitted("repo1", storage_namespace=NS)
    tokens = [(r.body or {}).get("continuation_token") for r in fake.calls("POST", UNCOMMITTED)]
    assert tokens == [None, "tok-1", "tok-1"]
    assert dump.pages == 2 and len(retry_sleeps) == 1


# ---- active commits -------------------------------------------------------------------------


def test_prepare_commits_polls_the_async_task_with_backoff(
    fake: FakeLakeFS, client: LakeFSClient, poll_clock: FakeClock
) -> None:
    fake.on("POST", ASYNC, Reply(202, {"id": "GCPCtask1"}))
    pending = Reply(200, task_status_json("GCPCtask1", completed=False))
    done = Reply(200, task_status_json("GCPCtask1", completed=True, result=prepare_result_json("run-c1")))
    fake.on("GET", STATUS, *([pending] * 8), done)
    export = client.prepare_commits("repo1")
    assert export.run_id == "run-c1" and export.task_id == "GCPCtask1"
    assert export.location == f"{NS}/_lakefs/retention/gc/commits/run_id=run-c1/commits.csv"
    assert export.presigned_url == "https://presigned.example/commits.csv"
    assert poll_clock.sleeps == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8]
    assert {tuple(r.query["id"]) for r in fake.calls("GET", STATUS)} == {("GCPCtask1",)}
    assert fake.calls("POST", BLOCKING) == []


def test_prepare_commits_times_out(fake: FakeLakeFS, retry_sleeps: list[float]) -> None:
    clock = FakeClock()
    fake.on("POST", ASYNC, Reply(202, {"id": "GCPCslow"}))
    fake.on("GET", STATUS, Reply(200, task_status_json("GCPCslow", completed=False)))
    with (
        make_client(fake.endpoint, poll_clock=clock, timeout=60) as c,
        pytest.raises(LakeFSError, match=r"task GCPCslow not completed within 60s"),
    ):
        c.prepare_commits("repo1")
    assert sum(clock.sleeps) == pytest.approx(60)
    assert max(clock.sleeps) <= 15


@pytest.mark.parametrize("message", ["get GC rules: not found", "no GC rules configured"])
def test_async_task_without_rules_is_no_retention_rules_error(
    fake: FakeLakeFS, client: LakeFSClient, message: str
) -> None:
    fake.on("POST", ASYNC, Reply(202, {"id": "GCPCt"}))
    fake.on("GET", STATUS, Reply(200, task_status_json("GCPCt", completed=True, error=message)))
    with pytest.raises(NoRetentionRulesError, match="repo1"):
        client.prepare_commits("repo1")


def test_async_task_other_error_is_lakefs_error(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("POST", ASYNC, Reply(202, {"id": "GCPCt"}))
    fake.on("GET", STATUS, Reply(200, task_status_json("GCPCt", completed=True, error="disk on fire")))
    with pytest.raises(LakeFSError, match="disk on fire") as e:
        client.prepare_commits("repo1")
    assert not isinstance(e.value, NoRetentionRulesError)


def test_async_start_404_is_no_retention_rules_never_empty(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("POST", ASYNC, Reply(404, {"message": "no GC rules: not found"}))
    with pytest.raises(NoRetentionRulesError, match="no garbage collection rules") as e:
        client.prepare_commits("repo1")
    assert e.value.status == 404
    assert fake.calls("POST", BLOCKING) == []


def test_unknown_task_status_404_is_not_mistaken_for_missing_rules(
    fake: FakeLakeFS, client: LakeFSClient
) -> None:
    fake.on("POST", ASYNC, Reply(202, {"id": "GCPCgone"}))
    fake.on("GET", STATUS, Reply(404, {"message": "task not found"}))
    with pytest.raises(LakeFSError, match=r"task GCPCgone.*HTTP 404") as e:
        client.prepare_commits("repo1")
    assert not isinstance(e.value, NoRetentionRulesError)


def test_async_start_500_falls_back_to_blocking(
    fake: FakeLakeFS, client: LakeFSClient, retry_sleeps: list[float]
) -> None:
    fake.on("POST", ASYNC, Reply(500, {"message": "internal"}))
    fake.on("POST", BLOCKING, Reply(201, prepare_result_json("run-b1")))
    export = client.prepare_commits("repo1")
    assert (export.run_id, export.task_id) == ("run-b1", None)
    assert len(fake.calls("POST", ASYNC)) == 1  # a 500 is not retried here: it selects the fallback
    assert len(fake.calls("POST", BLOCKING)) == 1
    assert retry_sleeps == []


def test_blocking_fallback_404_is_no_retention_rules(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("POST", ASYNC, Reply(500, {"message": "internal"}))
    fake.on("POST", BLOCKING, Reply(404, {"message": "not found"}))
    with pytest.raises(NoRetentionRulesError):
        client.prepare_commits("repo1")


def test_async_start_503_is_retried_not_a_fallback(
    fake: FakeLakeFS, client: LakeFSClient, retry_sleeps: list[float]
) -> None:
    fake.on("POST", ASYNC, Reply(503, {"message": "busy"}), Reply(202, {"id": "GCPCt"}))
    fake.on(
        "GET", STATUS, Reply(200, task_status_json("GCPCt", completed=True, result=prepare_result_json()))
    )
    assert client.prepare_commits("repo1").task_id == "GCPCt"
    assert len(retry_sleeps) == 1 and fake.calls("POST", BLOCKING) == []


# ---- retries --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_transient_status_recovers_after_retries(
    fake: FakeLakeFS, client: LakeFSClient, retry_sleeps: list[float], status: int
) -> None:
    fake.on(
        "GET", REPO, Reply(status, {"message": "try later"}), Reply(status), Reply(200, repository_json())
    )
    assert client.get_repository("repo1").id == "repo1"
    assert len(fake.calls("GET", REPO)) == 3
    assert len(retry_sleeps) == 2
    assert 0 <= retry_sleeps[0] <= 0.5 and 0 <= retry_sleeps[1] <= 1.0  # full jitter, doubling


def test_persistent_5xx_gives_up_after_max_attempts(
    fake: FakeLakeFS, client: LakeFSClient, retry_sleeps: list[float]
) -> None:
    fake.on("GET", REPO, Reply(503, {"message": "overloaded"}))
    with pytest.raises(LakeFSError, match="HTTP 503: overloaded") as e:
        client.get_repository("repo1")
    assert e.value.status == 503
    assert len(fake.calls("GET", REPO)) == 4 and len(retry_sleeps) == 3


@pytest.mark.parametrize("status", [400, 403, 404, 409])
def test_other_4xx_is_not_retried(
    fake: FakeLakeFS, client: LakeFSClient, retry_sleeps: list[float], status: int
) -> None:
    fake.on("GET", REPO, Reply(status, {"message": "nope"}))
    with pytest.raises(LakeFSError, match=f"repository 'repo1' failed: HTTP {status}: nope") as e:
        client.get_repository("repo1")
    assert e.value.status == status
    assert len(fake.calls("GET", REPO)) == 1 and retry_sleeps == []


def test_dropped_connection_is_retried(
    fake: FakeLakeFS, client: LakeFSClient, retry_sleeps: list[float]
) -> None:
    fake.on("GET", REPO, Reply(DROP), Reply(200, repository_json()))
    assert client.get_repository("repo1").id == "repo1"
    assert len(retry_sleeps) == 1


def test_unreachable_server_is_retried_then_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps: list[float] = []
    expected = re.escape(f"cannot reach lakeFS at http://127.0.0.1:{port}/api/v1")
    with (
        make_client(f"http://127.0.0.1:{port}", retry_sleeps=sleeps) as c,
        pytest.raises(LakeFSError, match=expected) as e,
    ):
        c.get_repository("repo1")
    assert e.value.status is None
    assert len(sleeps) == 3


def test_malformed_answers_are_lakefs_errors(fake: FakeLakeFS, client: LakeFSClient) -> None:
    fake.on("POST", UNCOMMITTED, Reply(201, {"gc_uncommitted_location": ""}))  # no run_id
    with pytest.raises(LakeFSError, match="'repo1' failed: ValidationError"):
        client.prepare_uncommitted("repo1", storage_namespace=NS)
    fake.on("GET", REPO, Reply(200, "not a repository"))
    with pytest.raises(LakeFSError, match="get repository"):
        client.get_repository("repo1")
