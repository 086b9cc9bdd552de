"""Pure pagination rules of the uncommitted dump (the HTTP behaviour is in test_client_http)."""

from __future__ import annotations

import pytest

from lakefs_gc.errors import LakeFSError
from lakefs_gc.lakefs.uncommitted import UncommittedPage, collect_uncommitted_dump, uncommitted_location


def pages(*items: UncommittedPage):  # type: ignore[no-untyped-def]
    queue = list(items)
    seen: list[str | None] = []

    def fetch(token: str | None) -> UncommittedPage:
        seen.append(token)
        return queue.pop(0)

    return fetch, seen


def test_single_empty_page_derives_the_location() -> None:
    fetch, seen = pages(UncommittedPage("r1", "", None))
    dump = collect_uncommitted_dump(fetch, repository="repo", storage_namespace="gs://b/ns/")
    assert dump.location == "gs://b/ns/_lakefs/retention/gc/uncommitted/r1/uncommitted/"
    assert (dump.pages, dump.pages_with_data, dump.data_expected) == (1, 0, False)
    assert seen == [None]


def test_location_gets_a_trailing_slash() -> None:
    fetch, _ = pages(UncommittedPage("r1", "s3://b/ns/_lakefs/retention/gc/uncommitted/r1/uncommitted", None))
    dump = collect_uncommitted_dump(fetch, repository="repo", storage_namespace="s3://b/ns")
    assert dump.location.endswith("/uncommitted/") and dump.data_expected


def test_different_locations_are_an_error() -> None:
    fetch, _ = pages(UncommittedPage("r1", "s3://b/x/", "t1"), UncommittedPage("r1", "s3://b/y/", None))
    with pytest.raises(LakeFSError, match="different locations"):
        collect_uncommitted_dump(fetch, repository="repo", storage_namespace="s3://b/ns")


def test_missing_run_id_is_an_error() -> None:
    fetch, _ = pages(UncommittedPage("", "", None))
    with pytest.raises(LakeFSError, match="no run_id"):
        collect_uncommitted_dump(fetch, repository="repo", storage_namespace="s3://b/ns")


def test_max_pages_guard() -> None:
    fetch, _ = pages(*(UncommittedPage("r1", "", f"t{i}") for i in range(10)))
    with pytest.raises(LakeFSError, match="not progressing"):
        collect_uncommitted_dump(fetch, repository="repo", storage_namespace="s3://b/ns", max_pages=3)


def test_uncommitted_location_needs_a_run_id() -> None:
    with pytest.raises(LakeFSError):
        uncommitted_location("s3://b/ns", "")
