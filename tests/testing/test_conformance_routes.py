"""The routes real lakeFS clients need beyond the GC's own, against lakeFS's OpenAPI spec and semantics:
ranged reads, upload metadata and content types (and their part in an entry's identity), object copy,
revert, cherry-pick, diffs, repository metadata, tag deletion, user-metadata updates.

Same oracle as ``test_conformance``: lakefs-sdk over HTTP, every answer checked against the spec.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lakefs_sdk.exceptions import ApiException
from lakefs_sdk.models import (
    BranchCreation,
    CherryPickCreation,
    Merge,
    ObjectCopyCreation,
    RepositoryMetadataKeys,
    RepositoryMetadataSet,
    RevertCreation,
    TagCreation,
    UpdateObjectUserMetadata,
)

from lakefs_gc.sstable import Entry
from lakefs_gc.sstable.catalog import entry_identity
from tests.testing.swagger import LakeFSSpec, lakefs_spec
from tests.testing.test_conformance import CheckedLakefs, running

pytestmark = pytest.mark.filterwarnings("ignore:.* is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def lakefs_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CheckedLakefs]:
    with running(tmp_path_factory.mktemp("storage"), lakefs_spec()) as running_lakefs:
        yield running_lakefs


@pytest.fixture
def repo(lakefs_api: CheckedLakefs) -> str:
    return lakefs_api.new_repo()


@pytest.fixture(scope="module")
def spec() -> LakeFSSpec:
    return lakefs_spec()


def upload(
    api: CheckedLakefs, repo: str, branch: str, path: str, data: bytes, tmp_path: Path, **headers: str
) -> dict[str, Any]:
    """An SDK upload; the part's content type follows the file name's extension (lakefs-sdk's way)."""
    source = tmp_path / Path(path).name
    source.write_bytes(data)
    response = api.sdk.objects_api.upload_object_with_http_info(
        repo, branch, path, content=str(source), _headers=headers
    )
    stats: dict[str, Any] = api.ok("uploadObject", 201, response)
    return stats


def stat(api: CheckedLakefs, repo: str, ref: str, path: str, **kwargs: Any) -> dict[str, Any]:
    body: dict[str, Any] = api.ok(
        "statObject", 200, api.sdk.objects_api.stat_object_with_http_info(repo, ref, path, **kwargs)
    )
    return body


def diff_branch(api: CheckedLakefs, repo: str, branch: str, **kwargs: Any) -> dict[str, Any]:
    body: dict[str, Any] = api.ok(
        "diffBranch", 200, api.sdk.branches_api.diff_branch_with_http_info(repo, branch, **kwargs)
    )
    return body


def diff_refs(api: CheckedLakefs, repo: str, left: str, right: str, **kwargs: Any) -> list[tuple[str, str]]:
    body = api.ok("diffRefs", 200, api.sdk.refs_api.diff_refs_with_http_info(repo, left, right, **kwargs))
    return [(d["type"], d["path"]) for d in body["results"]]


# -- metadata, content types, identity --------------------------------------------------------------


def test_upload_keeps_user_metadata_and_content_type(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    headers = {"X-Lakefs-Meta-Owner": "Data Team", "x-lakefs-internal-client-mtime": "17", "X-Other": "no"}
    created = upload(lakefs_api, repo, "main", "t/table.csv", b"a,b\n1,2\n", tmp_path, **headers)
    expected = {"owner": "Data Team", "::lakefs::client-mtime": "17"}
    assert (created["content_type"], created["metadata"]) == ("text/csv", expected)
    assert stat(lakefs_api, repo, "main", "t/table.csv")["metadata"] == expected
    assert stat(lakefs_api, repo, "main", "t/table.csv", user_metadata=False)["metadata"] == {}
    plain = upload(lakefs_api, repo, "main", "t/plain.bin", b"x", tmp_path)
    assert (plain["content_type"], plain["metadata"]) == ("application/octet-stream", {})
    listed = lakefs_api.ok(
        "listObjects", 200, lakefs_api.sdk.objects_api.list_objects_with_http_info(repo, "main")
    )
    by_path = {o["path"]: o for o in listed["results"]}
    assert by_path["t/table.csv"]["metadata"] == expected and "metadata" not in by_path["t/plain.bin"]
    assert by_path["t/table.csv"]["content_type"] == "text/csv"
    bare = lakefs_api.sdk.objects_api.list_objects_with_http_info(repo, "main", user_metadata=False)
    assert all("metadata" not in o for o in lakefs_api.ok("listObjects", 200, bare)["results"])


def test_identity_counts_metadata_and_content_type_but_not_the_address(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    upload(lakefs_api, repo, "main", "d/a.csv", b"same", tmp_path, **{"x-lakefs-meta-v": "1"})
    lakefs_api.commit(repo, "main")
    upload(lakefs_api, repo, "main", "d/a.csv", b"same", tmp_path, **{"x-lakefs-meta-v": "1"})
    assert diff_branch(lakefs_api, repo, "main")["results"] == []  # a new address, the same identity
    upload(lakefs_api, repo, "main", "d/a.csv", b"same", tmp_path, **{"x-lakefs-meta-v": "2"})
    assert [d["type"] for d in diff_branch(lakefs_api, repo, "main")["results"]] == ["changed"]
    upload(lakefs_api, repo, "main", "d/a.csv", b"same", tmp_path, **{"x-lakefs-meta-v": "1"})
    assert diff_branch(lakefs_api, repo, "main")["results"] == []
    upload(lakefs_api, repo, "main", "d/a.txt", b"same", tmp_path)
    lakefs_api.commit(repo, "main")
    upload(lakefs_api, repo, "main", "d/a.txt", b"same", tmp_path)
    assert diff_branch(lakefs_api, repo, "main")["results"] == []
    source = tmp_path / "other.json"
    source.write_bytes(b"same")  # same bytes, another content type (application/json)
    lakefs_api.sdk.objects_api.upload_object(repo, "main", "d/a.txt", content=str(source))
    assert [d["type"] for d in diff_branch(lakefs_api, repo, "main")["results"]] == ["changed"]


def test_entry_identity_is_lakefs_entry_to_value() -> None:
    """``catalog.EntryToValue``: SHA-256 of typed size, ETag, sorted metadata and, if set, content type."""

    def typed_int(v: int) -> bytes:
        return b"\x02\x08" + v.to_bytes(8, "big")

    def typed_str(v: str) -> bytes:
        return b"\x01" + typed_int(len(v.encode())) + v.encode()

    stream = typed_int(5) + typed_str("etag") + b"\x04" + typed_int(2)
    stream += typed_str("a") + typed_str("1") + typed_str("b") + typed_str("2")
    entry = Entry("data/x", size=5, etag="etag", metadata={"b": "2", "a": "1"})
    assert entry_identity(entry) == hashlib.sha256(stream).digest()  # no content type: none hashed
    typed = Entry("data/y", size=5, etag="etag", metadata={"a": "1", "b": "2"}, content_type="text/csv")
    assert entry_identity(typed) == hashlib.sha256(stream + typed_str("text/csv")).digest()


def test_update_object_user_metadata_stages_a_change(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    upload(lakefs_api, repo, "main", "u.bin", b"u", tmp_path)
    lakefs_api.commit(repo, "main")
    response = lakefs_api.sdk.objects_api.update_object_user_metadata_with_http_info(
        repo, "main", "u.bin", UpdateObjectUserMetadata(set={"k": "v"})
    )
    assert response.status_code == 204  # what lakeFS's controller answers (its spec says 201)
    assert stat(lakefs_api, repo, "main", "u.bin")["metadata"] == {"k": "v"}
    assert [d["type"] for d in diff_branch(lakefs_api, repo, "main")["results"]] == ["changed"]


# -- reads ------------------------------------------------------------------------------------------


def test_get_object_ranges_and_conditional_reads(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    data = bytes(range(256)) * 4
    created = upload(lakefs_api, repo, "main", "r.bin", data, tmp_path)
    api = lakefs_api.sdk.objects_api
    for spec, expected, content_range in [
        ("bytes=3-8", data[3:9], "bytes 3-8/1024"),
        ("bytes=1000-", data[1000:], "bytes 1000-1023/1024"),
        ("bytes=-5", data[-5:], "bytes 1019-1023/1024"),
        ("bytes=1020-5000", data[1020:], "bytes 1020-1023/1024"),
    ]:
        response = api.get_object_with_http_info(repo, "main", "r.bin", range=spec)
        assert lakefs_api.ok("getObject", 206, response) == expected
        assert response.headers["Content-Range"] == content_range
    response = api.get_object_with_http_info(repo, "main", "r.bin")
    assert lakefs_api.ok("getObject", 200, response) == data
    assert response.headers["ETag"] == f'"{created["checksum"]}"'
    assert response.headers["Content-Disposition"] == "attachment"
    body = lakefs_api.fails(
        "getObject", 416, api.get_object_with_http_info, repo, "main", "r.bin", range="bytes=1024-"
    )
    assert body["message"] == "Requested Range Not Satisfiable"
    with pytest.raises(ApiException) as refused:
        api.get_object(repo, "main", "r.bin", range="bytes=1024-")
    assert refused.value.headers["Content-Range"] == "bytes */1024"
    with pytest.raises(ApiException) as not_modified:
        api.get_object(repo, "main", "r.bin", if_none_match=f'"{created["checksum"]}"')
    assert not_modified.value.status == 304 and not not_modified.value.body


def test_get_object_serves_the_stored_content_type(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    upload(lakefs_api, repo, "main", "notes.txt", b"hi", tmp_path)
    response = lakefs_api.sdk.objects_api.get_object_with_http_info(repo, "main", "notes.txt")
    assert response.headers["Content-Type"] == "text/plain"  # lakeFS serves the entry's type
    assert response.headers["Content-Disposition"] == "inline"


# -- copy -------------------------------------------------------------------------------------------


def test_copy_gives_committed_and_staged_sources_a_new_address_with_their_data(
    lakefs_api: CheckedLakefs, repo: str, tmp_path: Path
) -> None:
    api = lakefs_api.sdk.objects_api
    source = upload(lakefs_api, repo, "main", "c/src.csv", b"committed", tmp_path, **{"x-lakefs-meta-k": "v"})
    lakefs_api.commit(repo, "main")
    lakefs_api.sdk.tags_api.create_tag(repo, TagCreation(id="v1", ref="main"))
    lakefs_api.sdk.branches_api.create_branch(repo, BranchCreation(name="dev", source="main"))
    staged = upload(lakefs_api, repo, "dev", "c/staged.bin", b"staged", tmp_path)
    for src_ref, src_path, original, data in [
        ("v1", "c/src.csv", source, b"committed"),
        ("dev", "c/staged.bin", staged, b"staged"),
        (None, "c/src.csv", source, b"committed"),  # no src_ref: the destination branch
    ]:
        dest = f"copies/{src_ref}-{Path(src_path).name}"
        creation = ObjectCopyCreation(src_path=src_path, src_ref=src_ref)
        copied = lakefs_api.ok(
            "copyObject", 201, api.copy_object_with_http_info(repo, "main", dest, creation)
        )
        assert copied["physical_address"] != original["physical_address"]
        assert lakefs_api.file(copied["physical_address"]).read_bytes() == data
        same = ("checksum", "size_bytes", "content_type")
        assert {k: copied[k] for k in same} == {k: original[k] for k in same}
        assert copied["metadata"] == original["metadata"] and copied["path"] == dest
        assert api.get_object(repo, "main", dest) == data
    assert lakefs_api.file(staged["physical_address"]).read_bytes() == b"staged"  # the source is untouched
    with pytest.raises(ApiException) as shallow:  # lakeFS answers 501, which its spec does not list
        api.copy_object(repo, "main", "x", ObjectCopyCreation(src_path="c/src.csv", shallow=True))
    assert shallow.value.status == 501
    missing = ObjectCopyCreation(src_path="c/none")
    lakefs_api.fails("copyObject", 404, api.copy_object_with_http_info, repo, "main", "x", missing)
    lakefs_api.fails("copyObject", 404, api.copy_object_with_http_info, repo, "nope", "x", creation)


# -- revert and cherry-pick -------------------------------------------------------------------------


def test_revert_restores_the_parent_tree(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    branches, objects = lakefs_api.sdk.branches_api, lakefs_api.sdk.objects_api
    upload(lakefs_api, repo, "main", "x", b"x1", tmp_path)
    lakefs_api.commit(repo, "main", "first")
    upload(lakefs_api, repo, "main", "x", b"x2", tmp_path)
    upload(lakefs_api, repo, "main", "y", b"y", tmp_path)
    second = lakefs_api.commit(repo, "main", "second")
    revert = RevertCreation(ref=second["id"], parent_number=0)
    assert (
        lakefs_api.ok("revertBranch", 204, branches.revert_branch_with_http_info(repo, "main", revert))
        is None
    )
    assert objects.get_object(repo, "main", "x") == b"x1"
    lakefs_api.fails("statObject", 404, objects.stat_object_with_http_info, repo, "main", "y")
    head = lakefs_api.sdk.commits_api.get_commit(repo, "main")
    assert head.message == f"Revert {second['id']}" and head.parents == [second["id"]]
    body = lakefs_api.fails("revertBranch", 400, branches.revert_branch_with_http_info, repo, "main", revert)
    assert "no changes" in body["message"]  # reverting it again changes nothing
    revert_overridden = RevertCreation(ref=second["id"], parent_number=0, allow_empty=True)
    lakefs_api.ok("revertBranch", 204, branches.revert_branch_with_http_info(repo, "main", revert_overridden))
    upload(lakefs_api, repo, "main", "dirty", b"d", tmp_path)
    lakefs_api.fails("revertBranch", 400, branches.revert_branch_with_http_info, repo, "main", revert)
    bad = RevertCreation(ref=second["id"], parent_number=2)
    lakefs_api.sdk.objects_api.delete_object(repo, "main", "dirty")
    lakefs_api.fails("revertBranch", 400, branches.revert_branch_with_http_info, repo, "main", bad)
    lakefs_api.fails(
        "revertBranch", 404, branches.revert_branch_with_http_info, repo, "main",
        RevertCreation(ref="no-such-ref", parent_number=0),
    )  # fmt: skip


def test_revert_conflicts_and_merge_commits(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    branches = lakefs_api.sdk.branches_api
    upload(lakefs_api, repo, "main", "f", b"1", tmp_path)
    changed = lakefs_api.commit(repo, "main")
    upload(lakefs_api, repo, "main", "f", b"2", tmp_path)
    lakefs_api.commit(repo, "main")  # f changed again after the commit to revert: a conflict
    revert = RevertCreation(ref=changed["id"], parent_number=0)
    lakefs_api.fails("revertBranch", 409, branches.revert_branch_with_http_info, repo, "main", revert)
    branches.create_branch(repo, BranchCreation(name="side", source="main"))
    upload(lakefs_api, repo, "side", "g", b"g", tmp_path)
    lakefs_api.commit(repo, "side")
    merge = lakefs_api.sdk.refs_api.merge_into_branch(repo, "side", "main", merge=Merge())
    merged = lakefs_api.sdk.commits_api.get_commit(repo, merge.reference)
    assert merged.metadata == {".lakefs.merge.strategy": "default"}
    no_parent = RevertCreation(ref=merge.reference, parent_number=0)
    lakefs_api.fails("revertBranch", 409, branches.revert_branch_with_http_info, repo, "main", no_parent)
    by_first = RevertCreation(ref=merge.reference, parent_number=1)
    lakefs_api.ok("revertBranch", 204, branches.revert_branch_with_http_info(repo, "main", by_first))
    lakefs_api.fails(
        "statObject", 404, lakefs_api.sdk.objects_api.stat_object_with_http_info, repo, "main", "g"
    )


def test_cherry_pick(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    branches = lakefs_api.sdk.branches_api
    upload(lakefs_api, repo, "main", "base", b"b", tmp_path)
    lakefs_api.commit(repo, "main")
    branches.create_branch(repo, BranchCreation(name="feature", source="main"))
    upload(lakefs_api, repo, "feature", "new", b"n", tmp_path)
    picked_commit = lakefs_api.commit(repo, "feature", "add new", metadata={"k": "v"})
    before = lakefs_api.head(repo, "main")
    pick = CherryPickCreation(ref=picked_commit["id"])
    body = lakefs_api.ok("cherryPick", 201, branches.cherry_pick_with_http_info(repo, "main", pick))
    assert body["parents"] == [before] and body["message"] == "add new"
    assert body["metadata"] == {
        "k": "v",
        "cherry-pick-origin": picked_commit["id"],
        "cherry-pick-committer": "admin",
    }
    assert lakefs_api.sdk.objects_api.get_object(repo, "main", "new") == b"n"
    assert lakefs_api.head(repo, "main") == body["id"]
    empty = lakefs_api.commit(repo, "feature", "empty", allow_empty=True)
    lakefs_api.fails(
        "cherryPick",
        400,
        branches.cherry_pick_with_http_info,
        repo,
        "main",
        CherryPickCreation(ref=empty["id"]),
    )  # no changes
    for name in ("target", "other"):
        branches.create_branch(repo, BranchCreation(name=name, source=before))
    merge = lakefs_api.sdk.refs_api.merge_into_branch(repo, "feature", "target", merge=Merge())
    merge_pick = CherryPickCreation(ref=merge.reference)
    lakefs_api.fails("cherryPick", 400, branches.cherry_pick_with_http_info, repo, "other", merge_pick)
    by_first = CherryPickCreation(ref=merge.reference, parent_number=1)
    lakefs_api.ok("cherryPick", 201, branches.cherry_pick_with_http_info(repo, "other", by_first))
    assert lakefs_api.sdk.objects_api.get_object(repo, "other", "new") == b"n"


# -- diffs ------------------------------------------------------------------------------------------


def test_diff_branch_lists_uncommitted_changes(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    for path in ("keep", "gone", "dir/old"):
        upload(lakefs_api, repo, "main", path, b"old", tmp_path)
    lakefs_api.commit(repo, "main")
    upload(lakefs_api, repo, "main", "dir/old", b"changed", tmp_path)
    upload(lakefs_api, repo, "main", "dir/new", b"new!", tmp_path)
    upload(lakefs_api, repo, "main", "transient", b"t", tmp_path)
    lakefs_api.sdk.objects_api.delete_object(repo, "main", "transient")  # staged then deleted: no change
    lakefs_api.sdk.objects_api.delete_object(repo, "main", "gone")
    body = diff_branch(lakefs_api, repo, "main")
    assert [(d["type"], d["path"], d["size_bytes"]) for d in body["results"]] == [
        ("added", "dir/new", 4), ("changed", "dir/old", 7), ("removed", "gone", 0),
    ]  # fmt: skip
    grouped = diff_branch(lakefs_api, repo, "main", delimiter="/")
    assert [(d["type"], d["path"], d["path_type"]) for d in grouped["results"]] == [
        ("prefix_changed", "dir/", "common_prefix"), ("removed", "gone", "object"),
    ]  # fmt: skip
    first = diff_branch(lakefs_api, repo, "main", amount=2)
    assert first["pagination"] == {
        "has_more": True,
        "next_offset": "dir/old",
        "results": 2,
        "max_per_page": 1000,
    }
    rest = diff_branch(lakefs_api, repo, "main", after="dir/old", prefix="")
    assert [d["path"] for d in rest["results"]] == ["gone"]
    assert [d["path"] for d in diff_branch(lakefs_api, repo, "main", prefix="dir/")["results"]] == [
        "dir/new", "dir/old",
    ]  # fmt: skip
    lakefs_api.fails("diffBranch", 404, lakefs_api.sdk.branches_api.diff_branch_with_http_info, repo, "nope")


def test_diff_refs_two_and_three_dot(lakefs_api: CheckedLakefs, repo: str, tmp_path: Path) -> None:
    upload(lakefs_api, repo, "main", "shared", b"0", tmp_path)
    upload(lakefs_api, repo, "main", "both", b"0", tmp_path)
    lakefs_api.commit(repo, "main")
    lakefs_api.sdk.branches_api.create_branch(repo, BranchCreation(name="dev", source="main"))
    upload(lakefs_api, repo, "dev", "dev-only", b"d", tmp_path)
    upload(lakefs_api, repo, "dev", "both", b"dev", tmp_path)
    lakefs_api.commit(repo, "dev")
    upload(lakefs_api, repo, "main", "main-only", b"m", tmp_path)
    upload(lakefs_api, repo, "main", "both", b"main", tmp_path)
    lakefs_api.commit(repo, "main")
    assert diff_refs(lakefs_api, repo, "main", "dev") == [
        ("conflict", "both"),
        ("added", "dev-only"),
    ]  # fmt: skip  (three-dot: what dev changed since the merge base)
    assert diff_refs(lakefs_api, repo, "main", "dev", type="two_dot") == [
        ("changed", "both"), ("added", "dev-only"), ("removed", "main-only"),
    ]  # fmt: skip
    stats = lakefs_api.sdk.refs_api.diff_refs_with_http_info(repo, "main", "dev", include_right_stats=True)
    right = {d["path"]: d["right"] for d in lakefs_api.ok("diffRefs", 200, stats)["results"]}
    assert right["dev-only"]["checksum"] == hashlib.md5(b"d").hexdigest()
    assert right["dev-only"]["content_type"] == "application/octet-stream"
    lakefs_api.fails(
        "diffRefs", 400, lakefs_api.sdk.refs_api.diff_refs_with_http_info, repo, "main", "dev", type="x"
    )
    lakefs_api.fails("diffRefs", 404, lakefs_api.sdk.refs_api.diff_refs_with_http_info, repo, "main", "nope")


# -- repository metadata and tags -------------------------------------------------------------------


def test_repository_metadata(lakefs_api: CheckedLakefs, repo: str) -> None:
    api, internal = lakefs_api.sdk.repositories_api, lakefs_api.sdk.internal_api
    assert lakefs_api.ok("getRepositoryMetadata", 200, api.get_repository_metadata_with_http_info(repo)) == {}
    update = RepositoryMetadataSet(metadata={"team": "gc", "tier": "1"})
    assert (
        lakefs_api.ok(
            "setRepositoryMetadata", 204, internal.set_repository_metadata_with_http_info(repo, update)
        )
        is None
    )
    keys = RepositoryMetadataKeys(keys=["tier", "absent"])
    lakefs_api.ok(
        "deleteRepositoryMetadata", 204, internal.delete_repository_metadata_with_http_info(repo, keys)
    )
    got = lakefs_api.ok("getRepositoryMetadata", 200, api.get_repository_metadata_with_http_info(repo))
    assert got == {"team": "gc"}
    lakefs_api.fails("getRepositoryMetadata", 404, api.get_repository_metadata_with_http_info, "no-such-repo")
    lakefs_api.fails(
        "setRepositoryMetadata", 404, internal.set_repository_metadata_with_http_info, "no-such-repo", update
    )


def test_delete_tag(lakefs_api: CheckedLakefs, repo: str) -> None:
    tags = lakefs_api.sdk.tags_api
    tags.create_tag(repo, TagCreation(id="v1", ref="main"))
    assert lakefs_api.ok("deleteTag", 204, tags.delete_tag_with_http_info(repo, "v1")) is None
    lakefs_api.fails("getTag", 404, tags.get_tag_with_http_info, repo, "v1")
    lakefs_api.fails("deleteTag", 404, tags.delete_tag_with_http_info, repo, "v1")
    lakefs_api.fails("deleteTag", 404, tags.delete_tag_with_http_info, "no-such-repo", "v1")
