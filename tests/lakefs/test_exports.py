"""Readers for the commits CSV and the uncommitted parquet directory (local filesystem)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from lakefs_gc.errors import ExportError
from lakefs_gc.lakefs.exports import (
    ActiveCommit,
    read_commits_csv,
    read_uncommitted_addresses,
    uncommitted_files,
)

FS = pafs.LocalFileSystem()


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


# ---- commits CSV ----------------------------------------------------------------------------


def test_keeps_expired_false_case_insensitively(tmp_path: Path) -> None:
    path = write(
        tmp_path / "commits.csv",
        "commit_id,expired,metarange_id\n"
        "c1,false,mr1\n"
        "c2,TRUE,mr2\n"
        "c3,False,mr3\n"
        "c4,true,mr4\n"
        "c5,FALSE,mr1\n",
    )
    active = read_commits_csv(FS, path)
    assert active.commits == [ActiveCommit("c1", "mr1"), ActiveCommit("c3", "mr3"), ActiveCommit("c5", "mr1")]
    assert active.expired == 2
    assert active.metarange_ids == ["mr1", "mr3"]


def test_empty_metarange_is_counted_not_read(tmp_path: Path) -> None:
    path = write(tmp_path / "commits.csv", "commit_id,expired,metarange_id\nc0,false,\nc1,false,mr1\n")
    active = read_commits_csv(FS, path)
    assert active.commits == [ActiveCommit("c1", "mr1")]
    assert active.without_metarange == 1


def test_column_order_quoting_and_crlf_do_not_matter(tmp_path: Path) -> None:
    path = write(tmp_path / "c.csv", 'metarange_id,commit_id,expired,extra\r\n"mr1","c1","false","x,y"\r\n')
    assert read_commits_csv(FS, path).commits == [ActiveCommit("c1", "mr1")]


def test_header_only_means_no_active_commits(tmp_path: Path) -> None:
    path = write(tmp_path / "c.csv", "commit_id,expired,metarange_id\n")
    active = read_commits_csv(FS, path)
    assert active.commits == [] and active.metarange_ids == []


@pytest.mark.parametrize(
    "header", ["commit_id,metarange_id", "commit_id,expired", "", "id,expired,metarange"]
)
def test_missing_column_is_an_error_naming_the_file(tmp_path: Path, header: str) -> None:
    path = write(tmp_path / "bad.csv", header + "\n")
    with pytest.raises(ExportError, match=rf"{path}.*missing column"):
        read_commits_csv(FS, path)


@pytest.mark.parametrize("value", ["", "no", "0", "falsy"])
def test_unknown_expired_value_is_an_error(tmp_path: Path, value: str) -> None:
    path = write(tmp_path / "c.csv", f"commit_id,expired,metarange_id\nc1,false,mr1\nc2,{value},mr2\n")
    with pytest.raises(ExportError, match=rf"{path}: line 3 has expired="):
        read_commits_csv(FS, path)


def test_empty_commit_id_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "c.csv", "commit_id,expired,metarange_id\n,false,mr1\n")
    with pytest.raises(ExportError, match="empty commit_id"):
        read_commits_csv(FS, path)


def test_missing_csv_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="does not exist"):
        read_commits_csv(FS, str(tmp_path / "nope.csv"))


# ---- uncommitted parquet ----------------------------------------------------------------------


def write_part(directory: Path, name: str, addresses: list[str]) -> None:
    """A part as lakeFS writes it: GZIP parquet, no extension, physical_address + creation_date."""
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "physical_address": pa.array(addresses, pa.string()),
            "creation_date": pa.array([1_700_000_000] * len(addresses), pa.int64()),
        }
    )
    pq.write_table(table, directory / name, compression="gzip")


def test_reads_every_part_ignoring_underscore_and_dot_files(tmp_path: Path) -> None:
    d = tmp_path / "uncommitted"
    write_part(d, "cpb1q3ef5pvec73cpia80", ["data/a/1", "data/a/2"])
    write_part(d, "cpb1q3ef5pvec73cpia81", ["data/b/1"])
    (d / "_SUCCESS").write_bytes(b"")
    (d / ".hidden.crc").write_bytes(b"not parquet")
    (d / "subdir").mkdir()
    table = read_uncommitted_addresses(FS, str(d) + "/", required=True)
    assert table.schema == pa.schema([("physical_address", pa.string())])
    assert sorted(table.column("physical_address").to_pylist()) == ["data/a/1", "data/a/2", "data/b/1"]
    assert [Path(p).name for p in uncommitted_files(FS, str(d), required=True)] == [
        "cpb1q3ef5pvec73cpia80",
        "cpb1q3ef5pvec73cpia81",
    ]


def test_missing_directory_is_empty_only_when_not_required(tmp_path: Path) -> None:
    missing = str(tmp_path / "never-written" / "uncommitted")
    assert read_uncommitted_addresses(FS, missing, required=False).num_rows == 0
    with pytest.raises(ExportError, match="refusing to treat the repository as having no uncommitted"):
        read_uncommitted_addresses(FS, missing, required=True)


def test_directory_with_only_markers_is_an_error_when_required(tmp_path: Path) -> None:
    d = tmp_path / "uncommitted"
    d.mkdir()
    (d / "_SUCCESS").write_bytes(b"")
    with pytest.raises(ExportError, match=str(d)):
        read_uncommitted_addresses(FS, str(d), required=True)


def test_part_without_physical_address_is_an_error_naming_it(tmp_path: Path) -> None:
    d = tmp_path / "uncommitted"
    d.mkdir()
    pq.write_table(pa.table({"address": ["x"]}), d / "part1", compression="gzip")
    with pytest.raises(ExportError, match=rf"{d / 'part1'} has no column 'physical_address'"):
        read_uncommitted_addresses(FS, str(d), required=True)


def test_corrupt_part_is_an_error_naming_it(tmp_path: Path) -> None:
    d = tmp_path / "uncommitted"
    write_part(d, "good", ["data/a/1"])
    (d / "bad").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(ExportError, match=rf"cannot read uncommitted parquet {d / 'bad'}"):
        read_uncommitted_addresses(FS, str(d), required=True)
