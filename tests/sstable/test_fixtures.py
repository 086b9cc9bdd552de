"""Real tables written by RocksDB and by lakeFS decode exactly as docs/formats/lakefs-ranges.md,
"The fixtures" lists."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lakefs_gc.errors import SSTableFormatError
from lakefs_gc.sstable import AddressType, SSTableReader, iter_metarange, iter_range_entries
from lakefs_gc.sstable.graveler import unmarshal_value

H_FILES = [
    "h.sst",
    "h.no-compression.sst",
    "h.no-compression.two_level_index.sst",
    "h.block-bloom.no-compression.sst",
    "h.table-bloom.sst",
    "h.table-bloom.no-compression.sst",
    "h.table-bloom.no-compression.prefix_extractor.no_whole_key_filter.sst",
]


def h_txt_entries(pebble_testdata: Path) -> list[tuple[bytes, bytes]]:
    out = []
    for line in (pebble_testdata / "h.txt").read_text().splitlines():
        count, word = line[:7].strip(), line[8:]
        out.append((word.encode(), count.encode()))
    return out


def fingerprint(items: list[bytes]) -> str:
    return hashlib.sha256(b"\n".join(items)).hexdigest()[:16]


@pytest.mark.parametrize("name", H_FILES)
def test_rocksdb_tables_read_back_h_txt_in_order(pebble_testdata: Path, name: str) -> None:
    with SSTableReader(pebble_testdata / name) as reader:
        entries = list(reader)
    assert entries == h_txt_entries(pebble_testdata)
    assert fingerprint([k for k, _ in entries]) == "fe365eae0b176375"


def test_every_h_sst_fixture_is_covered(pebble_testdata: Path) -> None:
    assert sorted(p.name for p in pebble_testdata.glob("h*.sst")) == sorted(H_FILES)


def test_two_level_rocksdb_table_is_detected(pebble_testdata: Path) -> None:
    with SSTableReader(pebble_testdata / "h.no-compression.two_level_index.sst") as reader:
        assert reader.two_level_index
        assert reader.user_properties()["test.key-count"] == "1727"
    with SSTableReader(pebble_testdata / "h.sst") as reader:
        assert not reader.two_level_index


def test_leveldb_table_is_rejected(pebble_testdata: Path) -> None:
    path = pebble_testdata / "h.ldb"
    with pytest.raises(SSTableFormatError, match="LevelDB") as err:
        SSTableReader(path)
    assert err.value.offset == path.stat().st_size - 8
    assert str(path) in str(err.value)


def test_flipped_byte_in_data_block_is_rejected_with_offset(pebble_testdata: Path, tmp_path: Path) -> None:
    original = (pebble_testdata / "h.sst").read_bytes()
    with SSTableReader(original) as reader:
        handles = list(reader.data_block_handles())
    target = handles[3]
    corrupt = bytearray(original)
    corrupt[target.offset + 10] ^= 0x40
    path = tmp_path / "flipped.sst"
    path.write_bytes(bytes(corrupt))
    with SSTableReader(path) as reader, pytest.raises(SSTableFormatError, match="checksum mismatch") as err:
        list(reader)
    assert err.value.offset == target.offset
    assert err.value.name == str(path)
    assert f"at byte offset {target.offset}" in str(err.value)


def test_lakefs_range_sst(lakefs_sstables: Path) -> None:
    with SSTableReader(lakefs_sstables / "range.sst") as reader:
        props = reader.user_properties()
        entries = list(iter_range_entries(reader))
    assert props["type"] == "ranges"
    assert (props["count"], props["min_key"], props["max_key"]) == ("2", "a/b/c/no", "a/b/c/yes")
    assert props["estimated_size_bytes"] == "287"
    assert [k for k, _ in entries] == [b"a/b/c/no", b"a/b/c/yes"]
    no, yes = entries[0][1], entries[1][1]
    assert (no.address, no.address_type, no.size) == (
        "b0c968736d8f42a2b1c6284835f08226",
        AddressType.RELATIVE,
        11,
    )
    assert no.etag == "664c688b4ea9c56730daacfc3d70aeed"
    assert no.last_modified_ns == 1628163584_471124555  # 2021-08-05T11:39:44.471124555Z
    assert (yes.address, yes.size, yes.etag) == (
        "fdf87fcf9ec849f98514ddb7e041ad56",
        4,
        "eb4585ad9fe0426781ed7c49252f8225",
    )
    assert yes.last_modified_ns == 1628163573_589644914
    assert fingerprint([k for k, _ in entries]) == "a74f3f9029242c9a"
    assert fingerprint(sorted(e.address.encode() for _, e in entries)) == "61e23effc644123f"


def test_lakefs_metarange_sst(lakefs_sstables: Path) -> None:
    with SSTableReader(lakefs_sstables / "metarange.sst") as reader:
        props = reader.user_properties()
        ranges = list(iter_metarange(reader))
    assert props == {
        "type": "metaranges",
        "count": "1",
        "min_key": "a/b/c/yes",
        "max_key": "a/b/c/yes",
        "estimated_size_bytes": "125",
    }
    assert len(ranges) == 1
    key, range_id, data = ranges[0]
    assert key == b"a/b/c/yes"
    assert range_id == "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"
    assert (data.min_key, data.max_key, data.estimated_size, data.count) == (
        b"a/b/c/no",
        b"a/b/c/yes",
        1190,
        2,
    )
    assert fingerprint([key]) == "33805cc64375c537"
    assert fingerprint([range_id.encode()]) == "74f02c9a4b337b3f"


def test_lakefs_ok1_sst_deprecated_addresses(lakefs_sstables: Path) -> None:
    with SSTableReader(lakefs_sstables / "ok1.sst") as reader:
        props = reader.user_properties()
        handles = list(reader.data_block_handles())
        entries = list(iter_range_entries(reader))
    assert (props["type"], props["count"], props["max_key"]) == ("ranges", "105", "xyzzy")
    assert reader.properties["min_key"] == bytes.fromhex("2b40b36ca8")  # old writer bug, kept as is
    assert len(handles) == 4 and len(entries) == 105
    keys = [k for k, _ in entries]
    assert keys[:4] == [b"first", b"run1/a", b"run2/a", b"run2/create.sh"]
    assert keys[4:7] == [b"run2/file_1", b"run2/file_10", b"run2/file_100"]
    assert keys[-1] == b"xyzzy" and keys == sorted(keys)
    assert all(e.address_type is AddressType.BY_PREFIX_DEPRECATED for _, e in entries)
    assert entries[0][1].address == "4e068d1a46734113abd2218e87aace4c"
    assert entries[-1][1].address == "7c5dc4fac42d4846aa6cc35f7e9c91f7"
    assert fingerprint(keys) == "49c889c2112fcaa6"
    assert fingerprint(sorted(e.address.encode() for _, e in entries)) == "a75c1f0c31cb9018"


def test_lakefs_two_level_range_56569996(lakefs_sstables: Path) -> None:
    path = lakefs_sstables / "56569996.sst"
    assert path.stat().st_size == 1_762_451
    with SSTableReader(path) as reader:
        assert reader.two_level_index
        assert reader.user_properties()["type"] == "ranges"
        partitions = int.from_bytes(reader.properties["rocksdb.index.partitions"], "little")
        blocks = list(reader.data_block_handles())
        entries = list(iter_range_entries(reader))
    assert partitions == 31
    assert len(blocks) == 1306
    assert len(entries) == 13_868
    assert entries[0][0] == b"common-crawl-hive-analysis/CC-MAIN-2014-23/part-m-01364.gz"
    assert entries[-1][0] == b"phishing-domains/domains.csv"
    full = [e for _, e in entries if e.address_type is AddressType.FULL]
    relative = [(k, e) for k, e in entries if e.address_type is AddressType.RELATIVE]
    assert len(full) == 13_867 and all(e.address.startswith("s3://oz-repo/") for e in full)
    assert len(relative) == 1
    key, entry = relative[0]
    assert key == b"phishing-domains/domains.csv"
    assert (entry.address, entry.size, entry.content_type) == (
        "7f1283fbf81f4e588586d6017370ac13",
        1518443,
        "text/csv",
    )
    assert fingerprint([k for k, _ in entries]) == "c66b31e093c1397d"
    assert fingerprint(sorted(e.address.encode() for _, e in entries)) == "bcf43f50b7a6073d"


def test_lakefs_fixture_values_keep_their_identity(lakefs_sstables: Path) -> None:
    """Our Entry encoding and identity reproduce lakeFS's bytes exactly (range.sst, ok1, bench)."""
    from lakefs_gc.sstable.catalog import decode_entry, encode_entry, entry_identity

    for name in ("range.sst", "56569996.sst"):
        with SSTableReader(lakefs_sstables / name) as reader:
            for _key, value in reader:
                identity, data = unmarshal_value(value)
                entry = decode_entry(data)
                assert encode_entry(entry) == data
                assert entry_identity(entry) == identity
