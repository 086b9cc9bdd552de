"""Parsing storage namespaces and lakeFS locations into StorageLocation."""

from __future__ import annotations

import pytest

from lakefs_gc.errors import ConfigError, StorageError
from lakefs_gc.storage.locations import (
    StorageLocation,
    parse_location,
    parse_storage_namespace,
    uri_scheme,
)


@pytest.mark.parametrize(
    ("uri", "kind", "container", "key", "account"),
    [
        ("s3://bucket/prefix/repo/", "s3", "bucket", "prefix/repo/", None),
        ("s3://bucket", "s3", "bucket", "", None),
        ("s3a://bucket/a/b", "s3", "bucket", "a/b", None),
        ("gs://bucket/a", "gs", "bucket", "a", None),
        ("https://acct.blob.core.windows.net/container/repo/x", "azure", "container", "repo/x", "acct"),
        ("https://acct.blob.core.windows.net/container", "azure", "container", "", "acct"),
        (
            "http://127.0.0.1:10000/devstoreaccount1/container/repo",
            "azure",
            "container",
            "repo",
            "devstoreaccount1",
        ),
        ("abfss://container@acct.dfs.core.windows.net/repo/x", "azure", "container", "repo/x", "acct"),
        ("file:///tmp/ns/", "local", "", "/tmp/ns/", None),
        ("/tmp/a/../ns", "local", "", "/tmp/ns", None),
    ],
)
def test_parse_location(uri: str, kind: str, container: str, key: str, account: str | None) -> None:
    loc = parse_location(uri)
    assert (loc.kind, loc.container, loc.key, loc.account) == (kind, container, key, account)
    assert str(loc) == uri


@pytest.mark.parametrize(
    "uri",
    ["ftp://x/y", "relative/path", "s3:///no-bucket", "https://acct.blob.core.windows.net/", "file://host/x"],
)
def test_unsupported_locations(uri: str) -> None:
    with pytest.raises(StorageError):
        parse_location(uri)


def test_join_and_fs_path() -> None:
    ns = parse_storage_namespace("s3://bucket/repo1")
    meta = ns.join("_lakefs/abc")
    assert (meta.key, meta.fs_path, str(meta)) == (
        "repo1/_lakefs/abc",
        "bucket/repo1/_lakefs/abc",
        "s3://bucket/repo1/_lakefs/abc",
    )
    assert parse_storage_namespace("s3://bucket/repo1/").join("/data/x").key == "repo1/data/x"
    assert parse_storage_namespace("s3://bucket").join("x").fs_path == "bucket/x"
    az = parse_location("https://acct.blob.core.windows.net/c/repo").join("data/")
    assert (az.fs_path, az.display()) == ("c/repo/data", "https://acct.blob.core.windows.net/c/repo/data/")


# ---- local:// exactly like lakeFS's local blockstore ---------------------------------------------


def test_local_namespace_is_under_the_root() -> None:
    assert (
        parse_storage_namespace("local://repo1", local_root="/lakefs/data/block").key
        == "/lakefs/data/block/repo1"
    )
    # path.Join semantics: a leading slash in the namespace is still under the root
    assert (
        parse_storage_namespace("local:///repo1/", local_root="/lakefs/data/block/").key
        == "/lakefs/data/block/repo1/"
    )


def test_local_api_location_is_absolute_including_the_root() -> None:
    root = "/lakefs/data/block"
    loc = parse_location(
        f"local://{root}/repo1/_lakefs/retention/gc/uncommitted/r/uncommitted/", local_root=root
    )
    assert loc.key == f"{root}/repo1/_lakefs/retention/gc/uncommitted/r/uncommitted/"
    assert loc.fs_path == f"{root}/repo1/_lakefs/retention/gc/uncommitted/r/uncommitted"


def test_local_location_derived_from_a_namespace_resolves_under_the_root() -> None:
    root = "/lakefs/data/block"
    assert parse_location("local://repo1/_lakefs/x", local_root=root).key == f"{root}/repo1/_lakefs/x"
    assert parse_location("local:///repo1/_lakefs/x", local_root=root).key == f"{root}/repo1/_lakefs/x"
    joined = parse_storage_namespace("local://repo1", local_root=root).join("_lakefs/x")
    assert (joined.key, str(joined)) == (f"{root}/repo1/_lakefs/x", "local://repo1/_lakefs/x")


def test_local_needs_a_root_and_cannot_escape_it() -> None:
    with pytest.raises(ConfigError, match=r"--local-root .*blockstore\.local\.path"):
        parse_storage_namespace("local://repo1")
    with pytest.raises(StorageError, match="outside the local blockstore root"):
        parse_storage_namespace("local://../etc", local_root="/lakefs/data")
    assert parse_location("local:///abs/path").key == "/abs/path"


def test_uri_scheme_keeps_spelling() -> None:
    assert uri_scheme("S3://b/k") == "S3"
    assert uri_scheme("data/x") == ""
    assert uri_scheme("4e068d1a46734113abd2218e87aace4c") == ""


def test_location_is_a_value() -> None:
    assert StorageLocation("s3", "b", "k") == StorageLocation("s3", "b", "k")
