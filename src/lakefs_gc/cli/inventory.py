"""``lakefs-gc inventory show | generate``: look at inventory deliveries, or write one by listing a namespace.

Neither command needs Spark or lakeFS: they read and write object storage only. Subcommands
register through :data:`SUBCOMMANDS` (one function per subcommand), so another one slots in
beside them. Results go to stdout (text, or one JSON object with ``--output json``); progress and
errors to stderr; an unusable delivery is an :class:`~lakefs_gc.inventory.delivery.InventoryError`
(exit status 7).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pyarrow.fs as pafs

from lakefs_gc.cli.exits import exit_status_help
from lakefs_gc.cli.inventory_ingest import EXIT_CODES, register_ingest
from lakefs_gc.cli.options import (
    SETTINGS_EPILOG,
    add_output_option,
    add_settings_options,
    human_bytes,
    progress,
    storage_settings_from_args,
)
from lakefs_gc.cli.sstable import write_rows
from lakefs_gc.errors import ExitCode
from lakefs_gc.inventory.azure import verify_delivery as verify_azure_delivery
from lakefs_gc.inventory.delivery import Delivery, DiscoveryResult, Flavour, InventoryError, check_data_files
from lakefs_gc.inventory.discovery import FLAVOURS, discover, flavour_module, open_destination, read_rows
from lakefs_gc.inventory.generate import (
    check_generation,
    list_namespace,
    snapshot_or_now,
    write_inventory,
)
from lakefs_gc.inventory.s3 import CHECKSUM as S3_CHECKSUM
from lakefs_gc.inventory.s3 import MANIFEST as S3_MANIFEST
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

LAYOUTS = """\
layouts (both are found under a destination; always read through the manifest):
  S3 Inventory    <dest>/<source-bucket>/<config-id>/YYYY-MM-DDTHH-MMZ/manifest.json, complete once
                  manifest.checksum (its MD5) is beside it; data files (csv.gz, parquet, orc) under
                  <dest>/<source-bucket>/<config-id>/data/, shared by every delivery of that config
  Azure inventory <container>/YYYY/MM/DD/HH-MM-SS/<rule>/<rule>-manifest.json (written "Pending" when
                  the run starts), complete once <rule>-manifest.checksum exists and the status is
                  "Succeeded"; data files (csv, parquet) wherever the manifest's files[] say
  A delivery is complete (usable), pending (not finished yet) or rejected (cannot be trusted:
  checksum, missing or resized data file, unknown format or schema), never "an empty inventory".
"""

SHOW_DESCRIPTION = """\
Show the inventory deliveries under a destination (every one found, complete, pending or
rejected with the reason, then a summary and the first rows of the newest complete one), or
one delivery given by its manifest (S3 .../manifest.json, Azure .../<rule>-manifest.json).
"""

GENERATE_DESCRIPTION = """\
List a whole storage namespace and write one complete inventory delivery of it, in the real S3
Inventory or Azure Blob Inventory layout, as the cloud would. For buckets without inventory
configured (or not delivered yet: the first report takes up to 48 hours), for moto, Azurite and
local namespaces, for tests and the demo.

Everything under the namespace is listed, _lakefs/ included, as a bucket inventory would;
what must never be collected is dropped when the rows are routed to repositories. The listing
gives no ETags (the etag column is empty) and times are written as each format stores them
(milliseconds; Azure CSV microseconds). Prints the manifest's path.

Refused: Azure with ORC (Azure has none), Azure for a local namespace (Azure names blobs
<container>/<blob> and a local namespace has no container), and a destination at the namespace's
root or under its data/, where the GC could collect the delivery itself.
"""

GENERATE_EXAMPLES = """
examples:
  lakefs-gc inventory generate --namespace s3://bucket/repos/a --to s3://inventory/gc
  lakefs-gc inventory generate --namespace local://a --local-root /var/lakefs --to /tmp/inv --format csv
  lakefs-gc inventory show /tmp/inv
"""


def register(commands: SubParsers) -> None:
    group = commands.add_parser(
        "inventory",
        help="inspect S3 / Azure inventory deliveries, or generate one by listing a namespace",
        description="Inventory deliveries (S3 Inventory, Azure Blob Inventory): the GC's bucket listing.",
        epilog=LAYOUTS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group.set_defaults(handler=lambda _args: _usage(group))
    sub = group.add_subparsers(title="inventory commands", metavar="COMMAND")
    for add in SUBCOMMANDS.values():
        add(sub)


def add_subcommand(
    sub: SubParsers, name: str, summary: str, description: str, epilog: str = LAYOUTS
) -> argparse.ArgumentParser:
    """A subcommand parser with the shared flags (settings file, storage, ``--output``)."""
    parser = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog + "\n" + SETTINGS_EPILOG + "\n" + exit_status_help(*EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups = add_settings_options(parser, lakefs=False, spark=False)
    add_output_option(groups["settings"], help="result format on stdout")
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return ExitCode.USAGE


def storage_options(args: argparse.Namespace) -> StorageOptions:
    """Storage settings from the usual sources (file < ``LAKEFS_GC_*`` environment < flags)."""
    return storage_settings_from_args(args, dict(os.environ)).storage


def print_json(document: dict[str, Any]) -> None:
    print(json.dumps(document, ensure_ascii=False, default=str), flush=True)


def iso(when: datetime) -> str:
    """UTC time as ISO-8601 with ``Z``."""
    return when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------------------------
# show


def _register_show(sub: SubParsers) -> None:
    parser = add_subcommand(
        sub, "show", "list the deliveries under a destination, or show one delivery", SHOW_DESCRIPTION
    )
    parser.add_argument(
        "uri", metavar="URI",
        help="a destination (s3://bucket/prefix, Azure https://<account>.blob.core.windows.net/<container>, "
        "a local path) or one delivery's manifest",
    )  # fmt: skip
    parser.add_argument("--rows", type=_count, default=10, metavar="N", help="rows to print (default 10)")
    parser.add_argument(
        "--flavour", choices=FLAVOURS, help="only this flavour's deliveries (default: both / from the name)"
    )
    parser.set_defaults(handler=run_show)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def manifest_flavour(path: str) -> Flavour | None:
    """The flavour a manifest's file name says (``manifest.json``: S3; ``<rule>-manifest.json``:
    Azure), or None when ``path`` names a destination."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if name == S3_MANIFEST:
        return "s3"
    return "azure" if name.endswith("-manifest.json") else None


def load_delivery(fs: pafs.FileSystem, manifest_path: str, flavour: Flavour) -> Delivery:
    """One delivery given by its manifest, verified as discovery verifies it (completion marker,
    checksum, data files present with their sizes); pending or untrustworthy: InventoryError."""
    if fs.get_file_info(manifest_path).type != pafs.FileType.File:
        raise InventoryError(f"{manifest_path}: no such manifest")
    checksum = (
        manifest_path.rsplit("/", 1)[0] + "/" + S3_CHECKSUM
        if flavour == "s3"
        else manifest_path.removesuffix(".json") + ".checksum"
    )
    if fs.get_file_info(checksum).type != pafs.FileType.File:
        raise InventoryError(
            f"{manifest_path}: pending: no {checksum.rsplit('/', 1)[-1]} (completion marker) yet"
        )
    delivery: Delivery = flavour_module(flavour).load_manifest(fs, manifest_path)
    if flavour == "azure":
        verify_azure_delivery(fs, delivery)
    else:
        check_data_files(fs, delivery)
    return delivery


def run_show(args: argparse.Namespace) -> int:
    fs, path, _ = open_destination(args.uri, storage_options(args))
    flavour = manifest_flavour(path)
    if flavour is not None:
        delivery = load_delivery(fs, path, args.flavour or flavour)
        entries = [_complete_entry(delivery)]
    else:
        found = discover(fs, path, args.flavour)
        entries = _entries(found)
        if not found.complete:
            _print_show(args, entries, None, [], listing=True)
            raise InventoryError(f"no complete inventory delivery under {args.uri}{_not_complete(found)}")
        delivery = found.complete[-1]
    _print_show(args, entries, delivery, _first_rows(fs, delivery, args.rows), listing=flavour is None)
    return 0


def _not_complete(found: DiscoveryResult) -> str:
    parts = [f"{len(found.pending)} pending"] if found.pending else []
    parts += [f"{len(found.rejected)} rejected"] if found.rejected else []
    return f" ({', '.join(parts)})" if parts else ""


def _format(delivery: Delivery) -> str:
    return delivery.files[0].format if delivery.files else "-"


def _complete_entry(d: Delivery) -> dict[str, Any]:
    return {
        "status": "complete", "manifest": d.manifest_path, "flavour": d.flavour, "format": _format(d),
        "snapshot_time": iso(d.snapshot_time), "data_files": len(d.files), "source": d.source,
    }  # fmt: skip


def _entries(found: DiscoveryResult) -> list[dict[str, Any]]:
    """Every delivery found: complete ones oldest first, then pending, then rejected with the reason."""
    entries = [_complete_entry(d) for d in found.complete]
    entries += [{"status": "pending", "manifest": path} for path in found.pending]
    entries += [{"status": "rejected", "manifest": e.manifest_path, "reason": str(e)} for e in found.rejected]
    return entries


def _summary(d: Delivery) -> dict[str, Any]:
    sizes = [f.size for f in d.files]
    return {
        **_complete_entry(d),
        "columns": list(d.columns),
        "versioned": d.versioned,
        "data_file_bytes": sum(s for s in sizes if s is not None) if None not in sizes else None,
        "files": [f.path for f in d.files],
    }


def _first_rows(fs: pafs.FileSystem, delivery: Delivery, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` rows, reading data files in the manifest's order only as far as needed."""
    rows: list[dict[str, Any]] = []
    for data_file in delivery.files:
        if len(rows) >= limit:
            break
        for batch in read_rows(fs, delivery, data_file):
            rows += batch.slice(0, limit - len(rows)).to_pylist()
            if len(rows) >= limit:
                break
    return [{**r, "last_modified": iso(r["last_modified"]) if r["last_modified"] else None} for r in rows]


def _print_show(
    args: argparse.Namespace,
    entries: list[dict[str, Any]],
    delivery: Delivery | None,
    rows: list[dict[str, Any]],
    *,
    listing: bool,
) -> None:
    """Text: the destination's deliveries (``listing``), the delivery's summary, its first rows."""
    summary = _summary(delivery) if delivery else None
    if args.output == "json":
        print_json({"uri": args.uri, "deliveries": entries, "delivery": summary, "rows": rows})
        return
    if listing:
        counts = {s: sum(e["status"] == s for e in entries) for s in ("complete", "pending", "rejected")}
        print(f"deliveries under {args.uri}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        for e in entries:
            detail = e.get("reason") or e["manifest"]
            if e["status"] == "complete":
                detail = (
                    f"{e['snapshot_time']}  {e['flavour']:<5}  {e['format']:<7}  {e['data_files']} data "
                    f"file(s)  source {e['source']}  {e['manifest']}"
                )
            print(f"  {e['status']:<9} {detail}")
        print()
    if summary is None:
        return
    _print_summary(summary)
    print(f"\nfirst {len(rows)} row(s):" if rows else "\nno rows to show")
    write_rows(iter(rows), "table", sys.stdout)


def _print_summary(s: dict[str, Any]) -> None:
    size = s["data_file_bytes"]
    print(f"delivery {s['manifest']}")
    print(f"  flavour     {s['flavour']} ({s['format']})")
    print(f"  snapshot    {s['snapshot_time']}")
    print(f"  source      {s['source'] or '-'}")
    print(f"  columns     {', '.join(s['columns'])}{'  (versioned)' if s['versioned'] else ''}")
    print(f"  data files  {s['data_files']}" + (f" ({human_bytes(size)})" if size is not None else ""))


# --------------------------------------------------------------------------------------------
# generate


def _register_generate(sub: SubParsers) -> None:
    parser = add_subcommand(
        sub, "generate", "list a namespace and write one inventory delivery of it (no inventory needed)",
        GENERATE_DESCRIPTION, epilog=LAYOUTS + GENERATE_EXAMPLES,
    )  # fmt: skip
    what = parser.add_argument_group("what to write")
    what.add_argument(
        "--namespace", required=True, metavar="NS",
        help="storage namespace to list: s3://, Azure https://, local:// (with --local-root), a path",
    )  # fmt: skip
    what.add_argument("--to", required=True, metavar="DEST", help="inventory destination to write under")
    what.add_argument("--flavour", choices=FLAVOURS, default="s3", help="whose layout (default s3)")
    what.add_argument(
        "--format", choices=("csv", "parquet", "orc"), default="parquet",
        help="data file format (default parquet; Azure writes csv or parquet only)",
    )  # fmt: skip
    what.add_argument(
        "--snapshot-time", type=_timestamp, metavar="ISO8601",
        help="the delivery's snapshot time, e.g. 2026-03-01T06:30Z (default: now; naive means UTC)",
    )  # fmt: skip
    what.add_argument(
        "--rows-per-file", type=_count, default=1_000_000, metavar="N",
        help="rows per data file (default 1000000)",
    )  # fmt: skip
    parser.set_defaults(handler=run_generate)


def _timestamp(text: str) -> datetime:
    value = text.strip()
    if value[-1:] in ("Z", "z"):  # Python 3.10's fromisoformat does not take "Z"
        value = value[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {text!r}") from None


def run_generate(args: argparse.Namespace) -> int:
    options = storage_options(args)
    namespace = parse_storage_namespace(args.namespace, local_root=options.local_root)
    destination = parse_location(args.to)
    flavour, fmt = args.flavour, args.format
    check_generation(namespace, destination, flavour=flavour, format=fmt, rows_per_file=args.rows_per_file)
    snapshot = snapshot_or_now(args.snapshot_time, None)
    progress(f"listing {namespace}")
    rows = list_namespace(namespace, options, progress=progress)
    manifest = write_inventory(
        rows, namespace, options, destination,
        flavour=flavour, format=fmt, snapshot_time=snapshot, rows_per_file=args.rows_per_file,
    )  # fmt: skip
    fs, _, _ = open_destination(args.to, options)
    delivery = load_delivery(fs, manifest, flavour)  # what we wrote reads back as complete
    total = pc.sum(rows.column("size")).as_py() or 0
    if args.output == "json":
        print_json({
            "manifest": manifest, "flavour": flavour, "format": fmt,
            "snapshot_time": iso(delivery.snapshot_time), "objects": rows.num_rows, "bytes": total,
            "data_files": len(delivery.files),
        })  # fmt: skip
    else:
        progress(f"{rows.num_rows:,} objects ({human_bytes(total)}) in {len(delivery.files)} data file(s)")
        print(manifest)
    return 0


SUBCOMMANDS: dict[str, Callable[[SubParsers], None]] = {
    "show": _register_show,
    "generate": _register_generate,
    "ingest": register_ingest,
}
