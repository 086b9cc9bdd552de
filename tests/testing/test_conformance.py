"""The lakeFS-compatible test server against lakeFS's OpenAPI spec, called through lakefs-sdk over HTTP.

Every call checks three things: the SDK accepts the answer, the status code is the one lakeFS documents
for the operation, and the raw body (errors included) validates against the spec's schema for that
status (:mod:`tests.testing.swagger`). Semantics the GC relies on are checked beside the shape: signed
and expiring link addresses, 410 for collected objects, merge parents, paginated uncommitted exports.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from lakefs_sdk.api_response import ApiResponse
from lakefs_sdk.client import LakeFSClient
from lakefs_sdk.configuration import Configuration
from lakefs_sdk.exceptions import ApiException
from lakefs_sdk.models import (
    BranchCreation,
    CommitCreation,
    GarbageCollectionRule,
    GarbageCollectionRules,
    Merge,
    PathList,
    PrepareGCUncommittedRequest,
    RepositoryCreation,
    ResetCreation,
    StagingLocation,
    StagingMetadata,
    TagCreation,
)

from lakefs_gc.sstable import SSTableReader, iter_metarange
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.server import LakeFSTestServer
from lakefs_gc.testing.trees import RangeSplit
from tests.testing.swagger import LakeFSSpec, lakefs_spec

pytestmark = pytest.mark.filterwarnings("ignore:.* is deprecated:DeprecationWarning")

GRACE = timedelta(hours=6)
SETTINGS = ServerSettings(
    grace_period=GRACE, range_split=RangeSplit(min_entries=2, raggedness=2, max_entries=3)
)


@pytest.fixture(scope="module")
def spec() -> LakeFSSpec:
    return lakefs_spec()


class Clock:
    """The server's injected clock: real time plus an offset the test advances."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(timezone.utc) + self.offset


@dataclass
class CheckedLakefs:
    """A running server, an SDK client for it, and the spec every answer is checked against.

    Module-scoped (repositories get unique names); distinct from conftest's per-test ``lakefs``.
    """

    server: LakeFSTestServer
    sdk: LakeFSClient
    spec: LakeFSSpec
    storage_root: Path

    def ok(self, operation_id: str, status: int, response: ApiResponse) -> Any:
        """Assert a documented success status and return the body validated against its schema."""
        assert response.status_code == status, f"{operation_id}: {response.status_code} {response.raw_data!r}"
        headers = response.headers or {}
        return self.spec.check(operation_id, status, response.raw_data, headers.get("Content-Type"))

    def fails(
        self, operation_id: str, status: int, call: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Assert the call fails with a documented status and an ``Error`` body; return the body."""
        with pytest.raises(ApiException) as caught:
            call(*args, **kwargs)
        error = caught.value
        assert error.status == status, (
            f"{operation_id}: expected {status}, got {error.status}: {error.body!r}"
        )
        body = self.spec.check(operation_id, status, error.body, (error.headers or {}).get("Content-Type"))
        self.spec.check_schema("Error", body)
        assert body["message"]
        return body

    def file(self, physical_address: str) -> Path:
        """The file behind a ``local://`` physical address (always under the storage root)."""
        assert physical_address.startswith("local://"), physical_address
        path = Path(physical_address[len("local://") :])
        assert path.resolve().is_relative_to(self.storage_root.resolve()), path
        return path

    def new_repo(self, **kwargs: Any) -> str:
        name = f"repo-{uuid.uuid4().hex[:12]}"
        creation = RepositoryCreation(name=name, storage_namespace=f"local://{name}", **kwargs)
        self.ok("createRepository", 201, self.sdk.repositories_api.create_repository_with_http_info(creation))
        return name

    def upload(self, repo: str, branch: str, path: str, data: bytes, tmp_path: Path) -> dict[str, Any]:
        source = tmp_path / f"upload-{uuid.uuid4().hex}"
        source.write_bytes(data)  # lakefs-sdk's `content` is a file path
        response = self.sdk.objects_api.upload_object_with_http_info(repo, branch, path, content=str(source))
        stats: dict[str, Any] = self.ok("uploadObject", 201, response)
        return stats

    def commit(self, repo: str, branch: str, message: str = "commit", **kwargs: Any) -> dict[str, Any]:
        creation = CommitCreation(message=message, **kwargs)
        body: dict[str, Any] = self.ok(
            "commit", 201, self.sdk.commits_api.commit_with_http_info(repo, branch, creation)
        )
        return body

    def head(self, repo: str, branch: str) -> str:
        body = self.ok("getBranch", 200, self.sdk.branches_api.get_branch_with_http_info(repo, branch))
        return str(body["commit_id"])


@contextmanager
def running(storage_root: Path, spec: LakeFSSpec, **kwargs: Any) -> Iterator[CheckedLakefs]:
    kwargs.setdefault("settings", SETTINGS)
    with LakeFSTestServer(storage_root=storage_root, **kwargs) as server:
        sdk = LakeFSClient(server.sdk_configuration())
        yield CheckedLakefs(server, sdk, spec, storage_root)


@pytest.fixture(scope="module")
def lakefs_api(tmp_path_factory: pytest.TempPathFactory, spec: LakeFSSpec) -> Iterator[CheckedLakefs]:
    with running(tmp_path_factory.mktemp("storage"), spec) as running_lakefs:
        yield running_lakefs


@pytest.fixture
def repo(lakefs_api: CheckedLakefs) -> str:
    return lakefs_api.new_repo()


# -- repositories -----------------------------------------------------------------------------------


def test_repository_lifecycle(lakefs_api: CheckedLakefs) -> None:
    api = lakefs_api.sdk.repositories_api
    name = f"repo-{uuid.uuid4().hex[:12]}"
    creation = RepositoryCreation(name=name, storage_namespace=f"local://{name}", default_branch="trunk")
    created = lakefs_api.ok("createRepository", 201, api.create_repository_with_http_info(creation))
    assert (created["id"], created["default_branch"], created["storage_namespace"]) == (
        name, "trunk", f"local://{name}",
    )  # fmt: skip
    assert lakefs_api.ok("getRepository", 200, api.get_repository_with_http_info(name)) == created
    assert (lakefs_api.storage_root / name / "_lakefs" / "dummy").is_file()

    lakefs_api.fails("createRepository", 409, api.create_repository_with_http_info, creation)
    listed = lakefs_api.ok("listRepositories", 200, api.list_repositories_with_http_info(prefix=name))
    assert [r["id"] for r in listed["results"]] == [name]
    assert listed["pagination"] == {"has_more": False, "next_offset": "", "results": 1, "max_per_page": 1000}

    assert lakefs_api.ok("deleteRepository", 204, api.delete_repository_with_http_info(name)) is None
    lakefs_api.fails("getRepository", 404, api.get_repository_with_http_info, name)
    lakefs_api.fails("deleteRepository", 404, api.delete_repository_with_http_info, name)


def test_list_repositories_paginates(lakefs_api: CheckedLakefs) -> None:
    names = sorted(lakefs_api.new_repo() for _ in range(3))
    api = lakefs_api.sdk.repositories_api
    first = lakefs_api.ok("listRepositories", 200, api.list_repositories_with_http_info(amount=2))
    assert first["pagination"]["has_more"] is True
    assert first["pagination"]["next_offset"] == first["results"][-1]["id"]
    seen = [r["id"] for r in first["results"]]
    after = first["pagination"]["next_offset"]
    while after:
        page = lakefs_api.ok(
            "listRepositories", 200, api.list_repositories_with_http_info(after=after, amount=2)
        )
        seen += [r["id"] for r in page["results"]]
        after = page["pagination"]["next_offset"]
    assert seen == sorted(seen) and set(names) <= set(seen)


# -- branches ---------------------------------------------------------------------------------------


def test_create_branch_answers_the_commit_id_as_text(lakefs_api: CheckedLakefs, repo: str) -> None:
    api = lakefs_api.sdk.branches_api
    response = api.create_branch_with_http_info(repo, BranchCreation(name="dev", source="main"))
    assert lakefs_api.ok("createBranch", 201, response) == lakefs_api.head(repo, "main").encode()
    assert response.data == lakefs_api.head(repo, "main")
    lakefs_api.fails(
        "createBranch", 409, api.create_branch_with_http_info, repo, BranchCreation(name="dev", source="main")
    )
    lakefs_api.fails(
        "createBranch", 404, api.create_branch_with_http_info, repo, BranchCreation(name="x1", source="nope")
    )


def test_get_branch(lakefs_api: CheckedLakefs, repo: str) -> None:
    body = lakefs_api.ok(
        "getBranch", 200, lakefs_api.sdk.branches_api.get_branch_with_http_info(repo, "main")
    )
    assert body["id"] == "main" and len(body["commit_id"]) == 64
    lakefs_api.fails("getBranch", 404, lakefs_api.sdk.branches_api.get_branch_with_http_info, repo, "missing")
    lakefs_api.fails(
        "getBranch", 404, lakefs_api.sdk.branches_api.get_branch_with_http_info, "no-such-repo", "main"
    )


def test_list_branches_shows_hidden_branches_only_on_request(lakefs_api: CheckedLakefs, repo: str) -> None:
    api = lakefs_api.sdk.branches_api
    api.create_branch(repo, BranchCreation(name="visible", source="main"))
    api.create_branch(repo, BranchCreation(name="secret", source="main", hidden=True))
    default = lakefs_api.ok("listBranches", 200, api.list_branches_with_http_info(repo))
    assert [b["id"] for b in default["results"]] == ["main", "visible"]
    shown = lakefs_api.ok("listBranches", 200, api.list_branches_with_http_info(repo, show_hidden=True))
    assert [b["id"] for b in shown["results"]] == ["main", "secret", "visible"]
    page = lakefs_api.ok(
        "listBranches", 200, api.list_branches_with_http_info(repo, amount=1, show_hidden=True)
    )
    assert page["pagination"] == {"has_more": True, "next_offset": "main", "results": 1, "max_per_page": 1000}
    for amount in (0, -1):  # lakeFS: the default page size
        page = lakefs_api.ok("listBranches", 200, api.list_branches_with_http_info(repo, amount=amount))
        assert page["pagination"]["results"] == 2 and page["pagination"]["has_more"] is False
    lakefs_api.fails("listBranches", 404, api.list_branches_with_http_info, "no-such-repo")


def test_delete_branch(lakefs_api: CheckedLakefs, repo: str) -> None:
    api = lakefs_api.sdk.branches_api
    api.create_branch(repo, BranchCreation(name="dev", source="main"))
    assert lakefs_api.ok("deleteBranch", 204, api.delete_branch_with_http_info(repo, "dev")) is None
    lakefs_api.fails("getBranch", 404, api.get_branch_with_http_info, repo, "dev")
    lakefs_api.fails("deleteBranch", 404, api.delete_branch_with_http_info, repo, "dev")
    lakefs_api.fails(
        "deleteBranch", 403, api.delete_branch_with_http_info, repo, "main"
    )  # ErrDeleteDefaultBranch


def test_reset_branch_whole_branch_one_object_and_a_prefix(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    lakefs_api.upload(repo, "main", "kept", b"committed", tmp_path)
    lakefs_api.commit(repo, "main")
    for path in ("a/1", "a/2", "b", "c"):
        lakefs_api.upload(repo, "main", path, path.encode(), tmp_path)
    api = lakefs_api.sdk.branches_api

    def staged() -> list[str]:
        return [o.path for o in lakefs_api.sdk.objects_api.list_objects(repo, "main").results]

    reset = ResetCreation(type="object", path="b")
    assert lakefs_api.ok("resetBranch", 204, api.reset_branch_with_http_info(repo, "main", reset)) is None
    assert staged() == ["a/1", "a/2", "c", "kept"]
    reset = ResetCreation(type="common_prefix", path="a/")
    assert lakefs_api.ok("resetBranch", 204, api.reset_branch_with_http_info(repo, "main", reset)) is None
    assert staged() == ["c", "kept"]
    reset = ResetCreation(type="reset")
    assert lakefs_api.ok("resetBranch", 204, api.reset_branch_with_http_info(repo, "main", reset)) is None
    assert staged() == ["kept"]
    lakefs_api.fails(
        "resetBranch", 404, api.reset_branch_with_http_info, repo, "nope", ResetCreation(type="reset")
    )


# -- objects ----------------------------------------------------------------------------------------


def test_upload_stat_get_and_delete_an_object(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    api = lakefs_api.sdk.objects_api
    stats = lakefs_api.upload(repo, "main", "dir/file.bin", b"hello lakeFS", tmp_path)
    assert (stats["path"], stats["path_type"], stats["size_bytes"]) == ("dir/file.bin", "object", 12)
    assert lakefs_api.file(stats["physical_address"]).read_bytes() == b"hello lakeFS"
    assert (
        lakefs_api.ok("statObject", 200, api.stat_object_with_http_info(repo, "main", "dir/file.bin"))
        == stats
    )
    response = api.get_object_with_http_info(repo, "main", "dir/file.bin")
    assert lakefs_api.ok("getObject", 200, response) == b"hello lakeFS"
    assert response.headers["ETag"] == f'"{stats["checksum"]}"'
    assert response.headers["Content-Length"] == "12" and response.headers["Last-Modified"].endswith(" GMT")

    assert (
        lakefs_api.ok("deleteObject", 204, api.delete_object_with_http_info(repo, "main", "dir/file.bin"))
        is None
    )
    lakefs_api.fails("statObject", 404, api.stat_object_with_http_info, repo, "main", "dir/file.bin")
    lakefs_api.fails("getObject", 404, api.get_object_with_http_info, repo, "main", "dir/file.bin")
    lakefs_api.fails("deleteObject", 404, api.delete_object_with_http_info, repo, "main", "dir/file.bin")


def test_get_object_is_gone_once_its_file_is_collected(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    stats = lakefs_api.upload(repo, "main", "collected", b"data", tmp_path)
    commit = lakefs_api.commit(repo, "main")
    lakefs_api.file(stats["physical_address"]).unlink()
    for ref in ("main", commit["id"]):
        body = lakefs_api.fails(
            "getObject", 410, lakefs_api.sdk.objects_api.get_object_with_http_info, repo, ref, "collected"
        )
        assert body["message"]


def test_delete_objects(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    for path in ("a", "b", "c"):
        lakefs_api.upload(repo, "main", path, b"x", tmp_path)
    api = lakefs_api.sdk.objects_api
    body = lakefs_api.ok(
        "deleteObjects",
        200,
        api.delete_objects_with_http_info(repo, "main", PathList(paths=["a", "c", "zz"])),
    )
    assert body == {"errors": []}
    assert [o.path for o in api.list_objects(repo, "main").results] == ["b"]
    # lakeFS ignores every not-found error of the batch, a missing branch's included
    response = api.delete_objects_with_http_info(repo, "nope", PathList(paths=["b"]))
    assert lakefs_api.ok("deleteObjects", 200, response) == {"errors": []}


def test_list_objects_with_prefix_delimiter_and_pages(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    paths = ["a/1", "a/2", "a/b/3", "c", "d/4"]
    for i, path in enumerate(paths):
        lakefs_api.upload(repo, "main", path, b"x", tmp_path)
        if i == 2:
            lakefs_api.commit(repo, "main")  # listing merges committed and staged entries
    api = lakefs_api.sdk.objects_api

    def ls(**kwargs: Any) -> dict[str, Any]:
        body: dict[str, Any] = lakefs_api.ok(
            "listObjects", 200, api.list_objects_with_http_info(repo, "main", **kwargs)
        )
        return body

    def listed(body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(r["path"], r["path_type"]) for r in body["results"]]

    assert listed(ls(prefix="a/")) == [("a/1", "object"), ("a/2", "object"), ("a/b/3", "object")]
    assert listed(ls(prefix="a/", delimiter="/")) == [
        ("a/1", "object"),
        ("a/2", "object"),
        ("a/b/", "common_prefix"),
    ]
    assert listed(ls(delimiter="/")) == [("a/", "common_prefix"), ("c", "object"), ("d/", "common_prefix")]

    pages, after = [], ""
    while True:
        body = ls(amount=2, after=after)
        pages.append([path for path, _ in listed(body)])
        assert body["pagination"]["results"] == len(body["results"])
        if not body["pagination"]["has_more"]:
            assert body["pagination"]["next_offset"] == ""
            break
        after = body["pagination"]["next_offset"]
        assert after == pages[-1][-1]
    assert pages == [["a/1", "a/2"], ["a/b/3", "c"], ["d/4"]]
    lakefs_api.fails("listObjects", 404, api.list_objects_with_http_info, repo, "nope")


# -- staging: physical addresses ---------------------------------------------------------------------


def _physical_address(lakefs_api: CheckedLakefs, repo: str, path: str) -> str:
    response = lakefs_api.sdk.staging_api.get_physical_address_with_http_info(repo, "main", path)
    location = lakefs_api.ok("getPhysicalAddress", 200, response)
    assert location["physical_address"].startswith(
        f"local://{lakefs_api.storage_root.resolve()}/{repo}/data/"
    )
    return str(location["physical_address"])


def _link(lakefs_api: CheckedLakefs, repo: str, path: str, address: str, size: int) -> ApiResponse:
    metadata = StagingMetadata(
        staging=StagingLocation(physical_address=address), checksum="etag", size_bytes=size
    )
    return lakefs_api.sdk.staging_api.link_physical_address_with_http_info(repo, "main", path, metadata)


def test_link_a_written_physical_address(lakefs_api: CheckedLakefs, repo: str) -> None:
    address = _physical_address(lakefs_api, repo, "linked")
    target = lakefs_api.file(address)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"written by a client")
    stats = lakefs_api.ok("linkPhysicalAddress", 200, _link(lakefs_api, repo, "linked", address, 19))
    assert (stats["path"], stats["physical_address"], stats["size_bytes"]) == ("linked", address, 19)
    assert lakefs_api.sdk.objects_api.get_object(repo, "main", "linked") == b"written by a client"


def test_link_with_a_tampered_signature_is_rejected(lakefs_api: CheckedLakefs, repo: str) -> None:
    address = _physical_address(lakefs_api, repo, "linked")
    tampered = address[:-1] + ("A" if address[-1] != "A" else "B")
    link = lakefs_api.sdk.staging_api.link_physical_address_with_http_info
    metadata = StagingMetadata(staging=StagingLocation(physical_address=tampered), checksum="e", size_bytes=1)
    lakefs_api.fails("linkPhysicalAddress", 400, link, repo, "main", "linked", metadata)
    other_path = StagingMetadata(
        staging=StagingLocation(physical_address=address), checksum="e", size_bytes=1
    )
    lakefs_api.fails("linkPhysicalAddress", 400, link, repo, "main", "another-path", other_path)


def test_link_after_the_grace_period_is_rejected(tmp_path: Path, spec: LakeFSSpec) -> None:
    clock = Clock()
    with running(tmp_path / "storage", spec, clock=clock) as lakefs_api:
        repo = lakefs_api.new_repo()
        in_time, late = (
            _physical_address(lakefs_api, repo, "in-time"),
            _physical_address(lakefs_api, repo, "late"),
        )
        clock.offset = GRACE - timedelta(seconds=5)
        lakefs_api.ok("linkPhysicalAddress", 200, _link(lakefs_api, repo, "in-time", in_time, 1))
        clock.offset = GRACE + timedelta(seconds=1)
        metadata = StagingMetadata(staging=StagingLocation(physical_address=late), checksum="e", size_bytes=1)
        link = lakefs_api.sdk.staging_api.link_physical_address_with_http_info
        body = lakefs_api.fails("linkPhysicalAddress", 400, link, repo, "main", "late", metadata)
        assert "expired" in body["message"]


# -- commits, merges, tags --------------------------------------------------------------------------


def test_commit_honours_a_date_override(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    parent = lakefs_api.head(repo, "main")
    lakefs_api.upload(repo, "main", "f", b"x", tmp_path)
    commit = lakefs_api.commit(repo, "main", "dated", date=1_600_000_000, metadata={"k": "v"})
    assert (commit["creation_date"], commit["parents"], commit["message"]) == (
        1_600_000_000,
        [parent],
        "dated",
    )
    assert commit["metadata"] == {"k": "v"} and lakefs_api.head(repo, "main") == commit["id"]
    body = lakefs_api.ok(
        "getCommit", 200, lakefs_api.sdk.commits_api.get_commit_with_http_info(repo, commit["id"])
    )
    assert body == commit
    creation = CommitCreation(message="nothing staged")
    lakefs_api.fails("commit", 400, lakefs_api.sdk.commits_api.commit_with_http_info, repo, "main", creation)
    lakefs_api.fails("commit", 404, lakefs_api.sdk.commits_api.commit_with_http_info, repo, "nope", creation)
    lakefs_api.fails("getCommit", 404, lakefs_api.sdk.commits_api.get_commit_with_http_info, repo, "0" * 64)


def test_log_commits_newest_first_in_pages(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    ids = [lakefs_api.head(repo, "main")]
    for i in range(3):
        lakefs_api.upload(repo, "main", f"f{i}", b"x", tmp_path)
        ids.append(lakefs_api.commit(repo, "main", f"c{i}", date=2_000_000_000 + i)["id"])
    api = lakefs_api.sdk.refs_api
    body = lakefs_api.ok("logCommits", 200, api.log_commits_with_http_info(repo, "main"))
    assert [c["id"] for c in body["results"]] == ids[::-1]
    seen, after = [], None
    while True:
        page = lakefs_api.ok(
            "logCommits", 200, api.log_commits_with_http_info(repo, "main", amount=2, after=after)
        )
        seen += [c["id"] for c in page["results"]]
        if not page["pagination"]["has_more"]:
            break
        after = page["pagination"]["next_offset"]
        assert after == seen[-1]
    assert seen == ids[::-1]
    lakefs_api.fails("logCommits", 404, api.log_commits_with_http_info, repo, "nope")


def test_merge_commit_has_the_destination_head_as_first_parent(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    lakefs_api.sdk.branches_api.create_branch(repo, BranchCreation(name="dev", source="main"))
    lakefs_api.upload(repo, "dev", "from-dev", b"dev", tmp_path)
    source = lakefs_api.commit(repo, "dev", "on dev")["id"]
    lakefs_api.upload(repo, "main", "from-main", b"main", tmp_path)
    destination = lakefs_api.commit(repo, "main", "on main")["id"]

    api = lakefs_api.sdk.refs_api
    merged = lakefs_api.ok(
        "mergeIntoBranch", 200, api.merge_into_branch_with_http_info(repo, "dev", "main", Merge())
    )
    commit = lakefs_api.sdk.commits_api.get_commit(repo, merged["reference"])
    assert commit.parents == [destination, source] and lakefs_api.head(repo, "main") == merged["reference"]
    assert sorted(o.path for o in lakefs_api.sdk.objects_api.list_objects(repo, "main").results) == [
        "from-dev", "from-main",
    ]  # fmt: skip
    lakefs_api.fails(
        "mergeIntoBranch", 404, api.merge_into_branch_with_http_info, repo, "nope", "main", Merge()
    )


def test_create_tag(lakefs_api: CheckedLakefs, repo: str) -> None:
    head = lakefs_api.head(repo, "main")
    api = lakefs_api.sdk.tags_api
    tag = lakefs_api.ok(
        "createTag", 201, api.create_tag_with_http_info(repo, TagCreation(id="v1", ref="main"))
    )
    assert tag == {"id": "v1", "commit_id": head}
    lakefs_api.fails("createTag", 409, api.create_tag_with_http_info, repo, TagCreation(id="v1", ref="main"))
    lakefs_api.fails("createTag", 404, api.create_tag_with_http_info, repo, TagCreation(id="v2", ref="nope"))


# -- GC rules and prepare_commits -------------------------------------------------------------------

RULES = GarbageCollectionRules(
    default_retention_days=7, branches=[GarbageCollectionRule(branch_id="main", retention_days=1)]
)
RULES_JSON = {"default_retention_days": 7, "branches": [{"branch_id": "main", "retention_days": 1}]}


def test_gc_rules_settings_api(lakefs_api: CheckedLakefs, repo: str) -> None:
    api = lakefs_api.sdk.repositories_api
    lakefs_api.fails("getGCRules", 404, api.get_gc_rules_with_http_info, repo)
    assert lakefs_api.ok("setGCRules", 204, api.set_gc_rules_with_http_info(repo, RULES)) is None
    assert lakefs_api.ok("getGCRules", 200, api.get_gc_rules_with_http_info(repo)) == RULES_JSON
    assert lakefs_api.ok("deleteGCRules", 204, api.delete_gc_rules_with_http_info(repo)) is None
    lakefs_api.fails("getGCRules", 404, api.get_gc_rules_with_http_info, repo)
    lakefs_api.fails("setGCRules", 404, api.set_gc_rules_with_http_info, "no-such-repo", RULES)


def test_gc_rules_internal_api(lakefs_api: CheckedLakefs, repo: str) -> None:
    api = lakefs_api.sdk.internal_api
    lakefs_api.fails(
        "internalGetGarbageCollectionRules",
        404,
        api.internal_get_garbage_collection_rules_with_http_info,
        repo,
    )
    response = api.internal_set_garbage_collection_rules_with_http_info(repo, RULES)
    assert lakefs_api.ok("internalSetGarbageCollectionRules", 204, response) is None
    response = api.internal_get_garbage_collection_rules_with_http_info(repo)
    assert lakefs_api.ok("internalGetGarbageCollectionRules", 200, response) == RULES_JSON
    assert lakefs_api.sdk.repositories_api.get_gc_rules(repo).default_retention_days == 7  # one set of rules
    response = api.internal_delete_garbage_collection_rules_with_http_info(repo)
    assert lakefs_api.ok("internalDeleteGarbageCollectionRules", 204, response) is None
    lakefs_api.fails(
        "internalGetGarbageCollectionRules",
        404,
        api.internal_get_garbage_collection_rules_with_http_info,
        repo,
    )


def test_prepare_gc_commits(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    api = lakefs_api.sdk.internal_api
    lakefs_api.fails(
        "prepareGarbageCollectionCommits", 404, api.prepare_garbage_collection_commits_with_http_info, repo
    )
    lakefs_api.upload(repo, "main", "f", b"x", tmp_path)
    head = lakefs_api.commit(repo, "main")
    lakefs_api.sdk.repositories_api.set_gc_rules(repo, RULES)
    response = api.prepare_garbage_collection_commits_with_http_info(repo)
    body = lakefs_api.ok("prepareGarbageCollectionCommits", 201, response)
    csv = lakefs_api.file(body["gc_commits_location"]).read_text().splitlines()
    assert csv[0] == "commit_id,expired,metarange_id"
    assert f"{head['id']},false,{head['meta_range_id']}" in csv
    assert body["run_id"] in body["gc_commits_location"]
    assert body["gc_addresses_location"].startswith(
        f"local://{lakefs_api.storage_root.resolve()}/{repo}/_lakefs/"
    )


def _wait_for_task(lakefs_api: CheckedLakefs, repo: str, task_id: str) -> dict[str, Any]:
    api = lakefs_api.sdk.internal_api
    deadline = time.monotonic() + 10
    while True:
        response = api.prepare_garbage_collection_commits_status_with_http_info(repo, task_id)
        status: dict[str, Any] = lakefs_api.ok("prepareGarbageCollectionCommitsStatus", 200, response)
        assert status["task_id"] == task_id
        if status["completed"] or time.monotonic() > deadline:
            return status
        time.sleep(0.02)


def test_prepare_gc_commits_async(lakefs_api: CheckedLakefs, repo: str) -> None:
    api = lakefs_api.sdk.internal_api
    lakefs_api.sdk.repositories_api.set_gc_rules(repo, RULES)
    response = api.prepare_garbage_collection_commits_async_with_http_info(repo)
    task = lakefs_api.ok("prepareGarbageCollectionCommitsAsync", 202, response)
    status = _wait_for_task(lakefs_api, repo, task["id"])
    assert status["completed"] is True and "error" not in status
    assert set(status["result"]) == {"run_id", "gc_commits_location", "gc_addresses_location"}
    assert lakefs_api.file(status["result"]["gc_commits_location"]).is_file()


def test_prepare_gc_commits_async_without_rules_completes_with_an_error(
    lakefs_api: CheckedLakefs, repo: str
) -> None:
    api = lakefs_api.sdk.internal_api
    task = lakefs_api.ok(
        "prepareGarbageCollectionCommitsAsync",
        202,
        api.prepare_garbage_collection_commits_async_with_http_info(repo),
    )
    status = _wait_for_task(lakefs_api, repo, task["id"])
    assert status["completed"] is True and "result" not in status and status["error"]["message"]
    status_call = api.prepare_garbage_collection_commits_status_with_http_info
    lakefs_api.fails("prepareGarbageCollectionCommitsStatus", 404, status_call, repo, "GCPC-unknown-task")
    lakefs_api.fails("prepareGarbageCollectionCommitsStatus", 404, status_call, "no-such-repo", task["id"])


# -- prepare_uncommitted ----------------------------------------------------------------------------


def _uncommitted_pages(lakefs_api: CheckedLakefs, repo: str) -> list[dict[str, Any]]:
    api = lakefs_api.sdk.internal_api
    pages: list[dict[str, Any]] = []
    token = None
    while True:
        request = PrepareGCUncommittedRequest(continuation_token=token)
        response = api.prepare_garbage_collection_uncommitted_with_http_info(repo, request)
        page = lakefs_api.ok("prepareGarbageCollectionUncommitted", 201, response)
        pages.append(page)
        token = page.get("continuation_token")
        if not token:
            return pages
        assert len(pages) < 20, "prepare_uncommitted does not terminate"


def _exported_addresses(lakefs_api: CheckedLakefs, pages: list[dict[str, Any]]) -> list[str]:
    locations = {p["gc_uncommitted_location"] for p in pages if p["gc_uncommitted_location"]}
    addresses: list[str] = []
    for location in locations:
        for part in sorted(lakefs_api.file(location).iterdir()):
            addresses += pq.read_table(io.BytesIO(part.read_bytes())).column("physical_address").to_pylist()
    return sorted(addresses)


def _stage_on_branches(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path, layout: dict[str, int]
) -> list[str]:
    """Stage ``layout[branch]`` objects per branch; return their namespace-relative addresses."""
    prefix = f"local://{lakefs_api.storage_root.resolve()}/{repo}/"
    addresses = []
    for branch, count in layout.items():
        if branch != "main":
            lakefs_api.sdk.branches_api.create_branch(repo, BranchCreation(name=branch, source="main"))
        for i in range(count):
            stats = lakefs_api.upload(repo, branch, f"{branch}/{i}", b"x", tmp_path)
            addresses.append(stats["physical_address"][len(prefix) :])
    return sorted(addresses)


def test_prepare_uncommitted_pages_by_entries(tmp_path: Path, spec: LakeFSSpec) -> None:
    settings = replace(SETTINGS, uncommitted_page_entries=2)
    with running(tmp_path / "storage", spec, settings=settings) as lakefs_api:
        repo = lakefs_api.new_repo()
        staged = _stage_on_branches(lakefs_api, repo, tmp_path, {"main": 3, "b1": 2, "b2": 1})
        pages = _uncommitted_pages(lakefs_api, repo)
        assert len(pages) >= 3
        assert len({p["run_id"] for p in pages}) == 1
        assert all(p["gc_uncommitted_location"] for p in pages)
        assert _exported_addresses(lakefs_api, pages) == staged


def test_prepare_uncommitted_last_page_can_be_empty(tmp_path: Path, spec: LakeFSSpec) -> None:
    settings = replace(SETTINGS, uncommitted_page_branches=1)
    with running(tmp_path / "storage", spec, settings=settings) as lakefs_api:
        repo = lakefs_api.new_repo()
        staged = _stage_on_branches(lakefs_api, repo, tmp_path, {"main": 2, "zz-clean": 0})
        pages = _uncommitted_pages(lakefs_api, repo)
        assert len(pages) == 2
        assert pages[0]["gc_uncommitted_location"] and "continuation_token" in pages[0]
        assert pages[-1] == {"run_id": pages[0]["run_id"], "gc_uncommitted_location": ""}
        assert _exported_addresses(lakefs_api, pages) == staged


def test_prepare_uncommitted_rejects_a_bad_continuation_token(lakefs_api: CheckedLakefs, repo: str) -> None:
    call = lakefs_api.sdk.internal_api.prepare_garbage_collection_uncommitted_with_http_info
    request = PrepareGCUncommittedRequest(continuation_token="not a token!")
    lakefs_api.fails("prepareGarbageCollectionUncommitted", 400, call, repo, request)
    lakefs_api.fails(
        "prepareGarbageCollectionUncommitted", 404, call, "no-such-repo", PrepareGCUncommittedRequest()
    )


# -- metadata: metaranges and ranges ----------------------------------------------------------------


def test_metarange_and_range_locations_and_contents(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    for i in range(6):  # several ranges with SETTINGS.range_split
        lakefs_api.upload(repo, "main", f"f{i}", b"x", tmp_path)
    metarange_id = lakefs_api.commit(repo, "main")["meta_range_id"]
    metadata, internal = lakefs_api.sdk.metadata_api, lakefs_api.sdk.internal_api
    namespace_dir = lakefs_api.storage_root / repo

    body = lakefs_api.ok("getMetaRange", 200, metadata.get_meta_range_with_http_info(repo, metarange_id))
    assert body == {"location": f"_lakefs/{metarange_id}"}
    response = internal.get_metadata_object_with_http_info(repo, metarange_id, "meta_range")
    content = lakefs_api.ok("getMetadataObject", 200, response)
    assert content == (namespace_dir / body["location"]).read_bytes()

    range_ids = [range_id for _, range_id, _ in iter_metarange(SSTableReader(bytes(content)))]
    assert len(range_ids) >= 2
    for range_id in range_ids:
        body = lakefs_api.ok("getRange", 200, metadata.get_range_with_http_info(repo, range_id))
        assert body == {"location": f"_lakefs/{range_id}"}
        response = internal.get_metadata_object_with_http_info(repo, range_id, "range")
        assert (
            lakefs_api.ok("getMetadataObject", 200, response)
            == (namespace_dir / body["location"]).read_bytes()
        )

    lakefs_api.fails("getMetaRange", 404, metadata.get_meta_range_with_http_info, repo, "0" * 64)
    lakefs_api.fails("getRange", 404, metadata.get_range_with_http_info, repo, "0" * 64)
    lakefs_api.fails(
        "getMetadataObject", 404, internal.get_metadata_object_with_http_info, repo, "0" * 64, "range"
    )
    lakefs_api.fails(
        "getMetadataObject", 400, internal.get_metadata_object_with_http_info, repo, metarange_id, "x"
    )


# -- configuration ----------------------------------------------------------------------------------


def test_config(lakefs_api: CheckedLakefs) -> None:
    config = lakefs_api.ok("getConfig", 200, lakefs_api.sdk.config_api.get_config_with_http_info())
    assert config["version_config"]["version"] == SETTINGS.version
    assert config["storage_config"]["blockstore_type"] == "local"
    storage = lakefs_api.ok(
        "getStorageConfig", 200, lakefs_api.sdk.internal_api.get_storage_config_with_http_info()
    )
    assert storage == config["storage_config"]


def test_garbage_collection_config_reports_the_grace_period(lakefs_api: CheckedLakefs) -> None:
    response = lakefs_api.sdk.internal_api.get_garbage_collection_config_with_http_info()
    assert lakefs_api.ok("getGarbageCollectionConfig", 200, response) == {
        "grace_period": GRACE.total_seconds()
    }


# -- authentication and error bodies ----------------------------------------------------------------


def _client(lakefs_api: CheckedLakefs, **credentials: str) -> LakeFSClient:
    return LakeFSClient(Configuration(host=lakefs_api.server.endpoint, **credentials))


@pytest.mark.parametrize("credentials", ["wrong-secret", "none"])
def test_authenticated_routes_answer_401(lakefs_api: CheckedLakefs, repo: str, credentials: str) -> None:
    sent = {}
    if credentials == "wrong-secret":
        sent = {"username": lakefs_api.server.credentials.access_key_id, "password": "wrong"}
    sdk = _client(lakefs_api, **sent)
    lakefs_api.fails("getRepository", 401, sdk.repositories_api.get_repository_with_http_info, repo)
    lakefs_api.fails("listRepositories", 401, sdk.repositories_api.list_repositories_with_http_info)
    lakefs_api.fails("getConfig", 401, sdk.config_api.get_config_with_http_info)
    lakefs_api.fails(
        "prepareGarbageCollectionCommits",
        401,
        sdk.internal_api.prepare_garbage_collection_commits_with_http_info,
        repo,
    )
    lakefs_api.fails("getObject", 401, sdk.objects_api.get_object_with_http_info, repo, "main", "f")


def test_unknown_access_key_is_401(lakefs_api: CheckedLakefs) -> None:
    sdk = _client(lakefs_api, username="AKIANOBODY", password=lakefs_api.server.credentials.secret_access_key)
    lakefs_api.fails("getStorageConfig", 401, sdk.internal_api.get_storage_config_with_http_info)


def test_not_found_error_bodies(lakefs_api: CheckedLakefs, repo: str) -> None:
    objects = lakefs_api.sdk.objects_api
    lakefs_api.fails(
        "getRepository", 404, lakefs_api.sdk.repositories_api.get_repository_with_http_info, "no-such-repo"
    )
    lakefs_api.fails("statObject", 404, objects.stat_object_with_http_info, repo, "main", "missing")
    lakefs_api.fails("statObject", 404, objects.stat_object_with_http_info, repo, "no-such-ref", "missing")
    lakefs_api.fails("getObject", 404, objects.get_object_with_http_info, repo, "main", "missing")
    lakefs_api.fails(
        "getPhysicalAddress",
        404,
        lakefs_api.sdk.staging_api.get_physical_address_with_http_info,
        repo,
        "nope",
        "p",
    )
    lakefs_api.fails("uploadObject", 404, objects.upload_object_with_http_info, repo, "nope", "p")


# -- the oracle itself: nothing passes by default -----------------------------------------------------


@pytest.mark.parametrize(
    ("operation_id", "status", "body", "content_type", "complaint"),
    [
        ("noSuchOperation", 200, b"{}", "application/json", "not in the lakeFS spec"),
        ("getRepository", 418, b"{}", "application/json", "not documented"),
        ("getRepository", 200, b'{"id": "r"}', "application/json", "required property"),
        ("getRepository", 200, b"not json", "application/json", "not JSON"),
        ("getBranch", 200, b'{"id": "b", "commit_id": "c", "extra": 1}', "application/json", "Additional"),
        ("getBranch", 200, b'{"id": "b", "commit_id": null}', "application/json", "not of type"),
        ("createBranch", 201, b"c0ffee", "application/json", "content type"),
        ("getConfig", 200, b"", None, "content type"),
        ("deleteRepository", 204, b"{}", "application/json", "no body"),
        ("getGarbageCollectionConfig", 200, b'{"grace_period": 1.5}', "application/json", "not of type"),
        (
            "prepareGarbageCollectionCommitsStatus",
            200,
            b'{"task_id": "t", "completed": true, "update_time": "yesterday"}',
            "application/json",
            "date-time",
        ),
    ],
)
def test_the_spec_oracle_rejects_what_lakefs_does_not_document(
    spec: LakeFSSpec, operation_id: str, status: int, body: bytes, content_type: str | None, complaint: str
) -> None:
    with pytest.raises(AssertionError, match=complaint):
        spec.check(operation_id, status, body, content_type)


def test_the_spec_oracle_honours_nullable(spec: LakeFSSpec) -> None:
    spec.check_schema("StagingLocation", {"physical_address": "s3://b/k", "presigned_url": None})
    with pytest.raises(AssertionError, match="not of type"):
        spec.check_schema("StagingLocation", {"physical_address": None})
