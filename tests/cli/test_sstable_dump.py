"""``lakefs-gc sstable dump`` through the real console entry point and in-process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakefs_gc.cli.main import main
from lakefs_gc.sstable import TableWriter
from tests.support.object_stores import blob_service, s3_client
from tests.support.servers import AzuriteServer, MotoServer


def dump(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["sstable", "dump", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_range_jsonl(capsys: pytest.CaptureFixture[str], lakefs_sstables: Path) -> None:
    code, out, _ = dump(capsys, str(lakefs_sstables / "range.sst"))
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert rows[0] == {
        "key": "a/b/c/no",
        "address": "b0c968736d8f42a2b1c6284835f08226",
        "address_type": "RELATIVE",
        "size": 11,
        "etag": "664c688b4ea9c56730daacfc3d70aeed",
        "last_modified": "2021-08-05T11:39:44.471124555Z",
        "content_type": "",
    }
    assert [r["key"] for r in rows] == ["a/b/c/no", "a/b/c/yes"]


def test_metarange_jsonl(capsys: pytest.CaptureFixture[str], lakefs_sstables: Path) -> None:
    code, out, _ = dump(capsys, str(lakefs_sstables / "metarange.sst"))
    assert code == 0
    assert json.loads(out) == {
        "key": "a/b/c/yes",
        "range_id": "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e",
        "min_key": "a/b/c/no",
        "max_key": "a/b/c/yes",
        "count": 2,
        "estimated_size": 1190,
    }


def test_two_level_range_and_deprecated_addresses(
    capsys: pytest.CaptureFixture[str], lakefs_sstables: Path
) -> None:
    code, out, _ = dump(capsys, str(lakefs_sstables / "56569996.sst"))
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 13_868
    assert {r["address_type"] for r in rows} == {"FULL", "RELATIVE"}
    code, out, _ = dump(capsys, str(lakefs_sstables / "ok1.sst"))
    assert {json.loads(line)["address_type"] for line in out.splitlines()} == {"BY_PREFIX_DEPRECATED"}


def test_plain_rocksdb_table_prints_key_and_value(
    capsys: pytest.CaptureFixture[str], pebble_testdata: Path
) -> None:
    code, out, _ = dump(capsys, str(pebble_testdata / "h.no-compression.two_level_index.sst"))
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 1710
    assert rows[0] == {"key": "a", "value": "97"} and rows[-1] == {"key": "youth", "value": "5"}


def test_non_utf8_keys_and_values_are_hex(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = io.BytesIO()
    writer = TableWriter(out_file)
    writer.add(b"ok", b"\xff\xfe")
    writer.add(b"\xc3\x28", b"fine")
    writer.finish()
    path = tmp_path / "bin.sst"
    path.write_bytes(out_file.getvalue())
    code, out, _ = dump(capsys, str(path))
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        {"key": "ok", "value": "hex:fffe"},
        {"key": "hex:c328", "value": "fine"},
    ]


def test_table_format(capsys: pytest.CaptureFixture[str], lakefs_sstables: Path) -> None:
    code, out, _ = dump(capsys, str(lakefs_sstables / "range.sst"), "--format", "table")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0].split() == [
        "KEY",
        "ADDRESS",
        "ADDRESS_TYPE",
        "SIZE",
        "ETAG",
        "LAST_MODIFIED",
        "CONTENT_TYPE",
    ]
    assert lines[1].split()[:4] == ["a/b/c/no", "b0c968736d8f42a2b1c6284835f08226", "RELATIVE", "11"]


def test_properties(capsys: pytest.CaptureFixture[str], lakefs_sstables: Path) -> None:
    code, out, _ = dump(capsys, str(lakefs_sstables / "56569996.sst"), "--properties")
    props = json.loads(out)
    assert code == 0
    assert props["type"] == "ranges" and props["count"] == "13868"
    assert props["rocksdb.block.based.table.index.type"] == 2
    assert props["rocksdb.index.partitions"] == 31
    assert props["rocksdb.comparator"] == "leveldb.BytewiseComparator"
    code, out, _ = dump(capsys, str(lakefs_sstables / "range.sst"), "--properties", "--format", "table")
    assert code == 0 and "estimated_size_bytes" in out


@pytest.mark.parametrize(("name", "status"), [("h.ldb", 8), ("missing.sst", 6)])
def test_bad_input_one_line_error(
    capsys: pytest.CaptureFixture[str], pebble_testdata: Path, name: str, status: int
) -> None:
    code, out, err = dump(capsys, str(pebble_testdata / name))
    assert code == status and out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("lakefs-gc: error: ") and name in err


def test_corrupt_block_in_the_middle(
    capsys: pytest.CaptureFixture[str], lakefs_sstables: Path, tmp_path: Path
) -> None:
    data = bytearray((lakefs_sstables / "56569996.sst").read_bytes())
    data[500_000] ^= 0x01
    path = tmp_path / "corrupt.sst"
    path.write_bytes(bytes(data))
    code, _out, err = dump(capsys, str(path))
    assert code == 8
    assert "checksum mismatch" in err and "byte offset" in err and len(err.strip().splitlines()) == 1


def test_console_script_help_and_exit_codes(lakefs_sstables: Path, pebble_testdata: Path) -> None:
    exe = [sys.executable, "-m", "lakefs_gc.cli.main"]
    help_text = subprocess.run(
        [*exe, "sstable", "dump", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--format" in help_text and "--properties" in help_text and "exit status" in help_text
    ok = subprocess.run(
        [*exe, "sstable", "dump", str(lakefs_sstables / "range.sst")], capture_output=True, text=True
    )
    assert ok.returncode == 0 and len(ok.stdout.splitlines()) == 2
    bad = subprocess.run(
        [*exe, "sstable", "dump", str(pebble_testdata / "h.ldb")], capture_output=True, text=True
    )
    assert bad.returncode == 8 and "Traceback" not in bad.stderr


def test_dump_of_a_range_in_a_namespace_on_every_store(
    capsys: pytest.CaptureFixture[str],
    lakefs_sstables: Path,
    tmp_path: Path,
    moto: MotoServer,
    s3_bucket: str,
    azurite: AzuriteServer,
    azure_container: str,
) -> None:
    """``<namespace>/_lakefs/<range-id>`` as the README shows it: local://, s3:// and Azure URLs."""
    data = (lakefs_sstables / "range.sst").read_bytes()
    (tmp_path / "repo" / "_lakefs").mkdir(parents=True)
    (tmp_path / "repo" / "_lakefs" / "r1").write_bytes(data)
    s3_client(moto).put_object(Bucket=s3_bucket, Key="repo/_lakefs/r1", Body=data)
    blob_service(azurite).get_container_client(azure_container).upload_blob("repo/_lakefs/r1", data)
    config = tmp_path / "gc.yaml"
    creds = {"access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}
    config.write_text(yaml.safe_dump({"storage": {"s3": creds}}))
    account = "https://devstoreaccount1.blob.core.windows.net"
    cases = [
        ["local://repo/_lakefs/r1", "--local-root", str(tmp_path)],
        [f"s3://{s3_bucket}/repo/_lakefs/r1", "--config", str(config), "--s3-endpoint", moto.endpoint_url,
         "--s3-region", moto.region],
        [f"{account}/{azure_container}/repo/_lakefs/r1", "--azure-blob-endpoint", azurite.blob_endpoint,
         "--azure-account-key", azurite.account_key],
    ]  # fmt: skip
    expected = dump(capsys, str(lakefs_sstables / "range.sst"))[1]
    for argv in cases:
        code, out, err = dump(capsys, *argv)
        assert (code, err) == (0, ""), argv
        assert out == expected and len(out.splitlines()) == 2
    code, out, err = dump(capsys, f"s3://{s3_bucket}/repo/_lakefs/nope", *cases[1][1:])
    assert code == 6 and "no such object" in err and out == ""
