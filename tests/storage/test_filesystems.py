"""filesystem_for: local files fully, S3 against a moto server, Azure construction only."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import boto3
import pyarrow.fs as pafs
import pytest
from pydantic import SecretStr

from lakefs_gc.errors import StorageError
from lakefs_gc.lakefs.exports import read_commits_csv
from lakefs_gc.storage.filesystems import AzureOptions, S3Options, StorageOptions, filesystem_for
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace

CSV = "commit_id,expired,metarange_id\nc1,false,mr1\nc2,true,mr2\n"


def test_local_namespace_reads_through_local_filesystem(tmp_path: Path) -> None:
    target = tmp_path / "block" / "repo1" / "_lakefs" / "retention" / "gc" / "commits" / "run_id=r1"
    target.mkdir(parents=True)
    (target / "commits.csv").write_text(CSV)
    options = StorageOptions(local_root=str(tmp_path / "block"))
    ns = parse_storage_namespace("local://repo1", local_root=options.local_root)
    fs, path = filesystem_for(ns.join("_lakefs/retention/gc/commits/run_id=r1/commits.csv"), options)
    assert isinstance(fs, pafs.LocalFileSystem)
    assert [c.commit_id for c in read_commits_csv(fs, path).commits] == ["c1"]


def test_gs_is_not_supported_yet() -> None:
    with pytest.raises(StorageError, match="not supported yet"):
        filesystem_for(parse_location("gs://b/k"), StorageOptions())


def test_azure_filesystem_is_configured_for_the_locations_account() -> None:
    options = StorageOptions(
        azure=AzureOptions(account_key=SecretStr("a2V5"), blob_endpoint="http://127.0.0.1:10000")
    )
    fs, path = filesystem_for(parse_location("https://acct.blob.core.windows.net/container/repo/x"), options)
    assert isinstance(fs, pafs.AzureFileSystem)
    assert path == "container/repo/x"


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_s3_through_moto(moto_endpoint: str) -> None:
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket="gc-bucket")
    key = "repo1/_lakefs/retention/gc/commits/run_id=r1/commits.csv"
    s3.put_object(Bucket="gc-bucket", Key=key, Body=CSV.encode())
    options = StorageOptions(
        s3=S3Options(
            endpoint_url=moto_endpoint,
            region="us-east-1",
            access_key_id="testing",
            secret_access_key=SecretStr("testing"),
        )
    )
    ns = parse_storage_namespace("s3://gc-bucket/repo1/")
    fs, path = filesystem_for(ns.join("_lakefs/retention/gc/commits/run_id=r1/commits.csv"), options)
    assert path == f"gc-bucket/{key}"
    assert [c.metarange_id for c in read_commits_csv(fs, path).commits] == ["mr1"]
    missing_fs, missing = filesystem_for(ns.join("nope.csv"), options)
    assert missing_fs.get_file_info(missing).type == pafs.FileType.NotFound


def test_uncommitted_directory_through_moto(moto_endpoint: str, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lakefs_gc.lakefs.exports import read_uncommitted_addresses

    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket="gc-uncommitted")
    prefix = "repo1/_lakefs/retention/gc/uncommitted/run1/uncommitted/"
    for name, addresses in {"cpb1a": ["data/a/1", "data/a/2"], "cpb1b": ["data/b/1"]}.items():
        pq.write_table(pa.table({"physical_address": addresses}), tmp_path / name, compression="gzip")
        s3.upload_file(str(tmp_path / name), "gc-uncommitted", prefix + name)
    s3.put_object(Bucket="gc-uncommitted", Key=prefix + "_SUCCESS", Body=b"")
    options = StorageOptions(
        s3=S3Options(
            endpoint_url=moto_endpoint,
            region="us-east-1",
            access_key_id="testing",
            secret_access_key=SecretStr("testing"),
        )
    )
    location = parse_location("s3://gc-uncommitted/" + prefix)
    fs, path = filesystem_for(location, options)
    table = read_uncommitted_addresses(fs, path, required=True)
    assert sorted(table.column("physical_address").to_pylist()) == ["data/a/1", "data/a/2", "data/b/1"]
    derived = parse_location("s3://gc-uncommitted/repo1/_lakefs/retention/gc/uncommitted/run2/uncommitted/")
    fs, path = filesystem_for(derived, options)
    assert read_uncommitted_addresses(fs, path, required=False).num_rows == 0


@pytest.mark.parametrize("status", ["503 Slow Down", "500 Internal Server Error"])
def test_s3_reads_retry_throttling_and_transient_errors(moto_endpoint: str, status: str) -> None:
    """An object whose first 3 GETs are answered 503 SlowDown (or 500) is read whole through
    filesystem_for's S3 filesystem, as boto3's clients would read it; pyarrow's own default (3
    attempts) gives up: an inventory delivery read so would be rejected, a mark failed. (More
    failures would make the test slow: the backoff doubles per retry, up to 20 s.)"""
    from lakefs_gc.storage.reads import read_once
    from tests.support.object_stores import s3_options
    from tests.support.throttling import S3FailingGets, moto_behind

    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    s3.create_bucket(Bucket="flaky")
    body = bytes(range(256)) * 4096
    s3.put_object(Bucket="flaky", Key="inventory/data/part-0.parquet", Body=body)
    with moto_behind(lambda app: S3FailingGets(app, failures=3, status=status)) as (server, hook):
        options = StorageOptions(s3=s3_options(server))
        fs, path = filesystem_for(parse_location("s3://flaky/inventory/data/part-0.parquet"), options)
        with read_once(fs, path) as read, open(read.path, "rb") as copy:
            assert copy.read() == body
        assert read.md5 == hashlib.md5(body).hexdigest()
        assert hook.gets["/flaky/inventory/data/part-0.parquet"] == 4  # 3 failed, then the read

        hook.gets.clear()
        host = server.endpoint_url.split("//")[1]
        default = pafs.S3FileSystem(
            endpoint_override=host, scheme="http", region="us-east-1", access_key="t", secret_key="t"
        )
        with pytest.raises(OSError), default.open_input_stream(path) as stream:
            stream.read()
        assert hook.gets["/flaky/inventory/data/part-0.parquet"] == 3


def test_small_objects_answered_503_are_read_after_retries(moto_endpoint: str) -> None:
    """An object smaller than S3's error document, answered 503 SlowDown: pyarrow reports it as an
    INTERNAL_FAILURE the AWS SDK does not retry (``is_misread``); ``read_whole``, ``read_once`` and
    a state directory's ``read`` retry it and return the bytes."""
    from lakefs_gc.storage.directories import StoreDirectory
    from lakefs_gc.storage.filesystems import is_misread
    from lakefs_gc.storage.reads import read_once, read_whole
    from tests.support.object_stores import s3_options
    from tests.support.throttling import S3FailingGets, moto_behind

    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    s3.create_bucket(Bucket="small")
    s3.put_object(Bucket="small", Key="state/lease.json", Body=b'{"owner": "a"}')
    with moto_behind(lambda app: S3FailingGets(app, failures=2)) as (server, hook):
        options = StorageOptions(s3=s3_options(server))
        fs, path = filesystem_for(parse_location("s3://small/state/lease.json"), options)
        with pytest.raises(OSError) as raw, fs.open_input_stream(path) as stream:
            stream.read()  # pyarrow alone: one GET, not retried
        assert is_misread(raw.value) and hook.gets["/small/state/lease.json"] == 1

        assert read_whole(fs, path) == b'{"owner": "a"}'
        assert hook.gets["/small/state/lease.json"] == 3
        hook.gets.clear()
        with read_once(fs, path) as read:
            assert read.md5 == hashlib.md5(b'{"owner": "a"}').hexdigest()
        hook.gets.clear()
        assert StoreDirectory.of("s3://small/state", options).read("lease.json") == b'{"owner": "a"}'
        assert hook.gets["/small/state/lease.json"] == 3


def test_lakefs_commits_export_of_a_small_repository_is_read_after_retries(moto_endpoint: str) -> None:
    """lakeFS's commits CSV of a repository with a few commits is smaller than S3's error document:
    a 503 on it is the misread above, retried (before: the mark failed on one SlowDown)."""
    from tests.support.object_stores import s3_options
    from tests.support.throttling import S3FailingGets, moto_behind

    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    s3.create_bucket(Bucket="small-repo")
    key = "repo1/_lakefs/retention/gc/commits/run_id=r1/commits.csv"
    s3.put_object(Bucket="small-repo", Key=key, Body=CSV.encode())
    with moto_behind(lambda app: S3FailingGets(app, failures=2)) as (server, hook):
        options = StorageOptions(s3=s3_options(server))
        fs, path = filesystem_for(parse_location(f"s3://small-repo/{key}"), options)
        commits = read_commits_csv(fs, path)
        assert [c.metarange_id for c in commits.commits] == ["mr1"]
        assert hook.gets[f"/small-repo/{key}"] == 3
