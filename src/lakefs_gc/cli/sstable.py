"""``lakefs-gc sstable dump``: look inside a lakeFS range or metarange file.

For operators who need to know what a commit references (or why a range is rejected) without
a Go toolchain or RocksDB tools.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TextIO

from lakefs_gc.cli.exits import exit_status_help
from lakefs_gc.cli.options import add_settings_options, storage_settings_from_args
from lakefs_gc.errors import ExitCode, StorageError
from lakefs_gc.sstable import SSTableReader, iter_metarange, iter_range_entries, table_type
from lakefs_gc.sstable.catalog import format_rfc3339_ns
from lakefs_gc.sstable.graveler import METARANGES, RANGES
from lakefs_gc.sstable.reader import decode_numeric_property
from lakefs_gc.storage.filesystems import filesystem_for
from lakefs_gc.storage.locations import parse_location, uri_scheme
from lakefs_gc.storage.reads import ObjectNotFound, ScratchSpaceError, fetched_file

DUMP_EPILOG = """\
output:
  ranges      key, address, address_type (RELATIVE|FULL|BY_PREFIX_DEPRECATED), size, etag,
              last_modified (RFC 3339 UTC), content_type
  metaranges  key (the range's max key), range_id, min_key, max_key, count, estimated_size
  other       key, value (tables whose values are not graveler-encoded)
  Bytes that are not valid UTF-8 are printed as hex:<hex>.

examples:
  lakefs-gc sstable dump _lakefs/4a5f...e1 | jq -r .address
  lakefs-gc sstable dump metarange.sst --format table
  lakefs-gc sstable dump range.sst --properties
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("sstable", help="inspect lakeFS range/metarange SSTable files")
    sub = group.add_subparsers(title="sstable commands", metavar="COMMAND")
    group.set_defaults(handler=lambda _args: _usage(group))
    dump = sub.add_parser(
        "dump",
        help="print every entry of a range or metarange file, decoded",
        description="Print every entry of a lakeFS range or metarange file (or any RocksDB "
        "block-based table), decoded. Checksums are verified on every block.",
        epilog=DUMP_EPILOG + "\n" + exit_status_help(ExitCode.STORAGE, ExitCode.CORRUPT_RANGE),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dump.add_argument(
        "file", metavar="FILE",
        help="the SSTable: a local path, or a URI in a storage namespace's store (local://..., "
        "s3://bucket/..., https://<account>.blob.core.windows.net/<container>/...), e.g. "
        "<namespace>/_lakefs/<range-id>",
    )  # fmt: skip
    add_settings_options(dump, lakefs=False, spark=False)
    dump.add_argument(
        "--format",
        choices=("jsonl", "table"),
        default="jsonl",
        help="jsonl: one JSON object per entry (default); table: aligned columns for people",
    )
    dump.add_argument(
        "--properties",
        action="store_true",
        help="print the table properties (RocksDB's and lakeFS's type/min_key/max_key/count/"
        "estimated_size_bytes) instead of the entries",
    )
    dump.set_defaults(handler=run_dump)


@contextmanager
def _open_table(args: argparse.Namespace) -> Iterator[SSTableReader]:
    """A reader of ``args.file``: a plain path directly, a URI through the storage settings.

    A file that is not there is a storage error (exit 6); one that is there but not a valid
    SSTable is a corrupt range (exit 8).
    """
    if uri_scheme(args.file) == "":
        if not Path(args.file).is_file():
            raise StorageError(f"{args.file}: no such file")
        with SSTableReader(args.file) as reader:
            yield reader
        return
    storage = storage_settings_from_args(args, dict(os.environ)).storage
    location = parse_location(args.file, local_root=storage.local_root)
    fs, path = filesystem_for(location, storage)
    with ExitStack() as stack:
        try:  # fetched whole (one download), not a request per data block
            source = stack.enter_context(fetched_file(fs, path))
        except ObjectNotFound as e:
            raise StorageError(f"{args.file}: no such object") from e
        except ScratchSpaceError:
            raise  # names the object and the local directory that could not hold it
        except StorageError as e:
            raise StorageError(f"{args.file}: cannot open: {e.__cause__ or e}") from e
        yield stack.enter_context(SSTableReader(source, name=args.file))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return ExitCode.USAGE


def run_dump(args: argparse.Namespace) -> int:
    with _open_table(args) as reader:
        if args.properties and args.format == "jsonl":
            rows: Iterator[dict[str, Any]] = iter([_properties(reader)])
        elif args.properties:
            rows = iter([{"property": k, "value": v} for k, v in _properties(reader).items()])
        else:
            rows = dump_rows(reader)
        write_rows(rows, args.format, sys.stdout)
    return 0


def dump_rows(reader: SSTableReader) -> Iterator[dict[str, Any]]:
    """Decoded rows of a table, shaped by its lakeFS ``type`` property."""
    kind = table_type(reader)
    if kind == RANGES:
        for key, e in iter_range_entries(reader):
            yield {
                "key": text(key),
                "address": e.address,
                "address_type": e.address_type.name,
                "size": e.size,
                "etag": e.etag,
                "last_modified": None
                if e.last_modified_ns is None
                else format_rfc3339_ns(e.last_modified_ns),
                "content_type": e.content_type,
            }
    elif kind == METARANGES:
        for key, range_id, rd in iter_metarange(reader):
            yield {
                "key": text(key),
                "range_id": range_id,
                "min_key": text(rd.min_key),
                "max_key": text(rd.max_key),
                "count": rd.count,
                "estimated_size": rd.estimated_size,
            }
    else:
        for key, value in reader:
            yield {"key": text(key), "value": text(value)}


def text(raw: bytes) -> str:
    """UTF-8 text, or ``hex:<hex>`` when the bytes are not valid UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + raw.hex()


def _properties(reader: SSTableReader) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, raw in sorted(reader.properties.items()):
        number = decode_numeric_property(name, raw) if name.startswith("rocksdb.") else None
        out[name] = number if number is not None and not _is_text_property(name) else text(raw)
    return out


def _is_text_property(name: str) -> bool:
    return name in {
        "rocksdb.comparator",
        "rocksdb.compression",
        "rocksdb.compression_options",
        "rocksdb.merge.operator",
        "rocksdb.prefix.extractor.name",
        "rocksdb.property.collectors",
        "rocksdb.block.based.table.prefix.filtering",
        "rocksdb.block.based.table.whole.key.filtering",
        "rocksdb.column.family.name",
        "rocksdb.filter.policy",
        "rocksdb.creating.db.identity",
        "rocksdb.creating.host.identity",
        "rocksdb.creating.session.identity",
    }


def write_rows(rows: Iterator[dict[str, Any]], fmt: str, out: TextIO) -> None:
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        return
    _write_table(rows, out)


def _write_table(rows: Iterator[dict[str, Any]], out: TextIO, sample: int = 1000) -> None:
    """Aligned columns; widths come from the first ``sample`` rows so output streams."""
    head: list[dict[str, Any]] = []
    for row in rows:
        head.append(row)
        if len(head) >= sample:
            break
    if not head:
        return
    columns = list(head[0])
    cells = [[_cell(r.get(c)) for c in columns] for r in head]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for r in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")
    for row in rows:
        values = [_cell(row.get(c)) for c in columns]
        out.write("  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip() + "\n")


def _cell(value: Any) -> str:
    return "" if value is None else str(value)
