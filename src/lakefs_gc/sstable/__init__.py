"""Reading and writing lakeFS range and metarange files (pebble/RocksDB SSTables).

``SSTableReader`` reads any RocksDB block-based table (format v2, CRC-32C, none/Snappy
blocks, one- or two-level index); ``graveler`` decodes lakeFS's values on top of it;
``TableWriter`` / ``write_range`` / ``write_metarange`` produce tables lakeFS, pebble and
RocksDB read back.
"""

from lakefs_gc.errors import SSTableFormatError
from lakefs_gc.sstable.catalog import AddressType, Entry
from lakefs_gc.sstable.committed import RangeData
from lakefs_gc.sstable.graveler import (
    RangeInfo,
    iter_metarange,
    iter_range_addresses,
    iter_range_entries,
    table_type,
    write_metarange,
    write_range,
)
from lakefs_gc.sstable.reader import RandomAccessSource, SSTableReader
from lakefs_gc.sstable.writer import TableWriter

__all__ = [
    "AddressType",
    "Entry",
    "RandomAccessSource",
    "RangeData",
    "RangeInfo",
    "SSTableFormatError",
    "SSTableReader",
    "TableWriter",
    "iter_metarange",
    "iter_range_addresses",
    "iter_range_entries",
    "table_type",
    "write_metarange",
    "write_range",
]
