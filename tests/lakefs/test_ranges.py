"""Metarange → range ids → committed addresses, on real lakeFS files and writer-built namespaces."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
import pytest

from lakefs_gc.errors import ExportError, SSTableFormatError
from lakefs_gc.lakefs.ranges import (
    committed_addresses,
    committed_addresses_of_range,
    metadata_location,
    open_sstable,
    range_ids_of_metarange,
    range_ids_of_metaranges,
)
from lakefs_gc.sstable import AddressType, Entry, SSTableReader, TableWriter, write_metarange, write_range
from lakefs_gc.sstable.graveler import marshal_value
from lakefs_gc.storage.locations import parse_storage_namespace

if TYPE_CHECKING:
    from tests.support.servers import MotoServer

FIXTURE_RANGE_ID = "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"
FS = pafs.LocalFileSystem()


def test_fixture_metarange_lists_its_range(lakefs_sstables: Path) -> None:
    with SSTableReader(lakefs_sstables / "metarange.sst") as reader:
        assert list(range_ids_of_metarange(reader)) == [FIXTURE_RANGE_ID]


def test_fixture_range_addresses_are_relative_and_kept(lakefs_sstables: Path) -> None:
    with SSTableReader(lakefs_sstables / "range.sst") as reader:
        assert list(committed_addresses_of_range(reader, "s3://bucket/ns")) == [
            "b0c968736d8f42a2b1c6284835f08226",
            "fdf87fcf9ec849f98514ddb7e041ad56",
        ]


def test_fixture_deprecated_guids_are_kept(lakefs_sstables: Path) -> None:
    with SSTableReader(lakefs_sstables / "ok1.sst") as reader:
        addresses = list(committed_addresses_of_range(reader, "s3://bucket/ns/"))
    assert len(addresses) == 105
    assert addresses[0] == "4e068d1a46734113abd2218e87aace4c"
    assert addresses[-1] == "7c5dc4fac42d4846aa6cc35f7e9c91f7"


def test_fixture_imported_full_addresses_are_dropped(lakefs_sstables: Path) -> None:
    """56569996.sst: 13,867 FULL imports (13,461 under s3://oz-repo/datasets/, 406 under
    s3://oz-repo/dais-repo/) and one RELATIVE object."""
    with SSTableReader(lakefs_sstables / "56569996.sst") as reader:
        assert list(committed_addresses_of_range(reader, "s3://my-repo-namespace/")) == [
            "7f1283fbf81f4e588586d6017370ac13"
        ]
    with SSTableReader(lakefs_sstables / "56569996.sst") as reader:
        inside = list(committed_addresses_of_range(reader, "s3://oz-repo/datasets"))
    assert len(inside) == 13_461 + 1  # the datasets/ imports, stripped, plus the RELATIVE one
    assert all(not a.startswith("s3://") for a in inside)


def namespace_with_fixtures(tmp_path: Path, lakefs_sstables: Path) -> Path:
    """A local lakeFS namespace holding the fixture metarange and its range under _lakefs/."""
    meta = tmp_path / "root" / "repo1" / "_lakefs"
    meta.mkdir(parents=True)
    shutil.copy(lakefs_sstables / "metarange.sst", meta / "mr-fixture")
    shutil.copy(lakefs_sstables / "range.sst", meta / FIXTURE_RANGE_ID)
    return tmp_path / "root"


def test_local_namespace_end_to_end_on_fixtures(tmp_path: Path, lakefs_sstables: Path) -> None:
    root = namespace_with_fixtures(tmp_path, lakefs_sstables)
    ns = parse_storage_namespace("local://repo1", local_root=str(root))
    range_ids = range_ids_of_metaranges(FS, ns, ["mr-fixture"])
    assert range_ids == {FIXTURE_RANGE_ID}
    assert committed_addresses(FS, ns, "local://repo1", range_ids) == {
        "b0c968736d8f42a2b1c6284835f08226",
        "fdf87fcf9ec849f98514ddb7e041ad56",
    }


def test_a_namespace_on_s3_reads_each_table_in_one_download(
    moto: MotoServer, s3_bucket: str, lakefs_sstables: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lakeFS's tables on S3 give what they give locally, each fetched whole in large reads (the
    decoder reads a block at a time: in place on S3, a GET per block, about 1,300 for lakeFS's
    1.7 MiB range here), and no scratch copy outlives its reading; a missing range is still an
    ExportError naming it."""
    from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
    from lakefs_gc.storage.locations import parse_location
    from tests.support.filesystems import CountedReads
    from tests.support.object_stores import s3_options

    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "spark-local"))
    (tmp_path / "spark-local").mkdir()
    root = namespace_with_fixtures(tmp_path, lakefs_sstables)
    shutil.copy(lakefs_sstables / "56569996.sst", root / "repo1" / "_lakefs" / "big-range")
    s3, _ = filesystem_for(parse_location(f"s3://{s3_bucket}"), StorageOptions(s3=s3_options(moto)))
    pafs.copy_files(
        str(root / "repo1"), f"{s3_bucket}/repo1", source_filesystem=FS, destination_filesystem=s3
    )
    local_ns = parse_storage_namespace("local://repo1", local_root=str(root))
    ns = parse_storage_namespace(f"s3://{s3_bucket}/repo1")
    counted = CountedReads(s3)
    fs = counted.filesystem()

    assert range_ids_of_metaranges(fs, ns, ["mr-fixture"]) == {FIXTURE_RANGE_ID}
    for range_id in (FIXTURE_RANGE_ID, "big-range"):
        raw = f"s3://{s3_bucket}/repo1"
        assert committed_addresses(fs, ns, raw, [range_id]) == committed_addresses(
            FS, local_ns, raw, [range_id]
        )
    big = ns.join("_lakefs/big-range").fs_path
    assert (counted.opens[big], counted.reads[big]) == (1, 2)  # 1.7 MiB in one 8 MiB read, then the end
    assert list((tmp_path / "spark-local").iterdir()) == []
    with pytest.raises(ExportError, match=r"repo1/_lakefs/deadbeef does not exist"):
        committed_addresses(fs, ns, f"s3://{s3_bucket}/repo1", ["deadbeef"])


def test_written_ranges_normalise_and_deduplicate(tmp_path: Path) -> None:
    raw_ns = "s3://bucket/repo1"
    meta = tmp_path / "repo1" / "_lakefs"
    meta.mkdir(parents=True)
    first = write_range(
        meta,
        [
            (b"a", Entry("data/s1/o1", AddressType.RELATIVE)),
            (b"b", Entry(f"{raw_ns}/data/s1/o2", AddressType.FULL)),
            (b"c", Entry("s3://imports/x.parquet", AddressType.FULL)),
        ],
    )
    second = write_range(
        meta,
        [
            (b"d", Entry("data/s1/o1", AddressType.RELATIVE)),  # shared with the first range
            (b"e", Entry("0123456789abcdef0123456789abcdef", AddressType.BY_PREFIX_DEPRECATED)),
        ],
    )
    mr1 = write_metarange(meta, [first, second])
    mr2 = write_metarange(meta, [second])
    ns = parse_storage_namespace(f"file://{tmp_path}/repo1")
    range_ids = range_ids_of_metaranges(FS, ns, [mr1.id, mr2.id])
    assert range_ids == {first.id, second.id}
    assert committed_addresses(FS, ns, raw_ns, sorted(range_ids)) == {
        "data/s1/o1",
        "data/s1/o2",
        "0123456789abcdef0123456789abcdef",
    }


def test_missing_range_file_is_an_export_error_naming_it(tmp_path: Path) -> None:
    ns = parse_storage_namespace(f"{tmp_path}/repo1")
    with pytest.raises(ExportError, match=r"repo1/_lakefs/deadbeef does not exist"):
        committed_addresses(FS, ns, "s3://b/repo1", ["deadbeef"])


def test_metadata_location_follows_the_api_answer(tmp_path: Path) -> None:
    ns = parse_storage_namespace("s3://bucket/repo1/")
    assert metadata_location(ns, "abc").fs_path == "bucket/repo1/_lakefs/abc"
    assert metadata_location(ns, "abc", api_location="_lakefs/abc").fs_path == "bucket/repo1/_lakefs/abc"
    full = metadata_location(ns, "abc", api_location="s3://other/_lakefs/abc")
    assert (full.container, full.key) == ("other", "_lakefs/abc")


def test_open_sstable_closes_on_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"not an sstable")
    ns = parse_storage_namespace(str(tmp_path))
    with pytest.raises(SSTableFormatError, match="bad"), open_sstable(FS, ns.join("bad"), str(bad)):
        pass


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"\x0a\x02\xff\xfe\x30\x01", "undecodable range entry at key b'k/1'"),  # address not UTF-8
        (b"\x0a\x01x\x30\x03", "undecodable range entry at key b'k/1'"),  # unknown address type
        (b"\x0a\x09x", "undecodable range entry at key b'k/1'"),  # address overruns the entry
    ],
)
def test_the_marks_path_fails_closed_on_a_bad_entry(value: bytes, why: str) -> None:
    """The mark reads ranges through the addresses-only fast path; an entry it cannot decode (in
    a block whose checksum is right) aborts the mark with the general decoder's error naming the
    file and the key (docs/invariants.md, invariant 4), never a range with an entry missing."""
    out = io.BytesIO()
    writer = TableWriter(out, compress=True)
    for i in range(3):
        data = value if i == 1 else b"\x0a\x08data/s/%d\x30\x01" % i
        writer.add(b"k/%d" % i, marshal_value(b"id", data))
    writer.finish({})
    reader = SSTableReader(out.getvalue(), name="_lakefs/r1")
    with pytest.raises(SSTableFormatError, match=re.escape(why)) as err:
        list(committed_addresses_of_range(reader, "s3://bucket/ns/"))
    assert err.value.name == "_lakefs/r1"


def test_the_marks_path_fails_closed_on_a_bad_checksum(lakefs_sstables: Path) -> None:
    raw = bytearray((lakefs_sstables / "ok1.sst").read_bytes())
    raw[100] ^= 0x01  # inside the first data block
    with pytest.raises(SSTableFormatError, match=re.escape("ok1.sst")):
        list(committed_addresses_of_range(SSTableReader(bytes(raw), name="ok1.sst"), "s3://b/ns/"))
