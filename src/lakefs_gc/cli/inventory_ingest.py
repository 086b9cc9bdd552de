"""``lakefs-gc inventory ingest``: every new inventory delivery into the candidate table, once.

Runs the service's inventory stream with an ``availableNow`` trigger (see
:mod:`lakefs_gc.spark.ingest.inventory.stream`): complete deliveries not yet ingested are read on
the executors, routed to the repositories' namespaces and appended, one delivery per micro-batch;
rejected ones are recorded with the file and the reason; pending ones wait for a later run.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from lakefs_gc.cli.exits import exit_status_help
from lakefs_gc.cli.options import (
    SETTINGS_EPILOG,
    add_output_option,
    add_repo_option,
    add_settings_options,
    progress,
    settings_from_args,
    storage_settings_from_args,
)
from lakefs_gc.errors import ConfigError, ExitCode
from lakefs_gc.inventory.delivery import InventoryError
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.settings import StorageSettings
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace

#: what the inventory commands can end with (besides the common codes); ingest adds lakeFS and Spark
EXIT_CODES = (ExitCode.STORAGE, ExitCode.INVENTORY)

DESCRIPTION = """\
Ingest every complete inventory delivery under DEST that this checkpoint has not ingested yet
into the candidate table, then stop. Each delivery is ingested exactly once, even if the
command is killed and started again with the same --checkpoint. A delivery that cannot be
trusted (checksum mismatch, missing data file, unparsable row, schema mismatch, unknown
format) is rejected as a whole, with the file and the reason, and the others continue.
Deliveries still being written (no checksum yet, Azure "Pending") are left for a later run.

Rows are routed to repositories by storage namespace (the longest matching prefix wins); rows
outside every namespace, under _lakefs/ or directly under data/ are dropped.

The report of every run is kept in the table, under _ingest/ (one JSON file per micro-batch).
"""

EXAMPLES = """
examples:
  lakefs-gc inventory ingest --inventory s3://inventory-bucket/daily --table s3://gc-state/candidates \\
      --checkpoint /var/lib/lakefs-gc/ingest --repo analytics --repo ml
  lakefs-gc inventory ingest --inventory /tmp/inv --table /tmp/candidates --checkpoint /tmp/ck \\
      --namespace demo=file:///tmp/storage/demo

A run that rejected a delivery exits 7 (the rest were ingested; the reasons are on stderr and in
the report), so that cron notices.
"""


def register_ingest(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "ingest",
        help="ingest new inventory deliveries into the candidate table (exactly once)",
        description=DESCRIPTION,
        epilog=EXAMPLES
        + "\n"
        + SETTINGS_EPILOG
        + "\n"
        + exit_status_help(*EXIT_CODES, ExitCode.LAKEFS, ExitCode.SPARK),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = parser.add_argument_group("what to ingest")
    add = what.add_argument
    add("--inventory", required=True, metavar="DEST",
        help="S3 Inventory destination prefix or Azure inventory container")  # fmt: skip
    add("--table", required=True, metavar="URI", help="candidate table location (any store)")
    add("--checkpoint", required=True, type=Path, metavar="DIR",
        help="Spark checkpoint directory (local or mounted disk); keep it between runs")  # fmt: skip
    add_repo_option(
        what, repeat=True, help="repository whose namespace to ingest for (asks lakeFS for it; repeat)"
    )
    add("--namespace", action="append", default=[], metavar="REPO=NAMESPACE",
        help="a repository's storage namespace, given instead of asking lakeFS (repeat)")  # fmt: skip
    add("--flavour", choices=("s3", "azure"), help="only this layout (default: find both)")
    add("--deliveries-per-batch", type=int, default=1, metavar="N",
        help="deliveries per micro-batch (default 1: bounds memory, finest restart)")  # fmt: skip
    add("--trust-checksums", action="store_const", const=True, default=None,
        help="also keep each candidate's ETag and EncryptionStatus: the content evidence a mark with "
        "gc.trust_checksums gives the identity-twin guard (default: gc.trust_checksums, off; without "
        "it they are neither parsed nor stored)")  # fmt: skip
    groups = add_settings_options(parser)
    add_output_option(groups["settings"])
    parser.set_defaults(handler=run_ingest)


def run_ingest(args: argparse.Namespace) -> int:
    from lakefs_gc.spark.ingest.inventory.source import SourceConfig
    from lakefs_gc.spark.ingest.inventory.stream import ingest_available
    from lakefs_gc.spark.ingest.inventory.table import CandidateTable, describe
    from lakefs_gc.spark.runtime.session import build_session

    environ = dict(os.environ)
    settings = storage_settings_from_args(args, environ, gc={"trust_checksums": args.trust_checksums})
    if args.deliveries_per_batch < 1:
        raise ConfigError("--deliveries-per-batch must be at least 1")
    routes = namespace_routes(args, settings, environ)
    destination = parse_location(args.inventory)
    source = SourceConfig(
        destination=destination,
        storage=settings.storage,
        routes=routes,
        flavour=args.flavour,
        max_deliveries_per_batch=args.deliveries_per_batch,
        etags=settings.gc.trust_checksums,
    )
    table = CandidateTable(parse_location(args.table), settings.storage)
    progress(f"ingesting {destination} into {table} for {', '.join(r.repository for r in routes)}")
    spark = build_session(
        "lakefs-gc ingest", environ=os.environ, master=settings.spark.master, conf=settings.spark.conf
    )
    result = ingest_available(spark, source, table, args.checkpoint, say=progress)
    if args.output == "json":
        body: dict[str, Any] = {"command": "inventory ingest", "table": str(table),
                                "deliveries": [d.__dict__ for d in result.deliveries]}  # fmt: skip
        print(json.dumps(body, separators=(",", ":")), flush=True)
    else:
        for delivery in result.deliveries:
            print(describe(delivery))
        if not result.deliveries:
            print(f"no new complete delivery under {destination}")
    return InventoryError.exit_code if result.rejected else 0


def namespace_routes(
    args: argparse.Namespace, settings: StorageSettings, environ: dict[str, str]
) -> tuple[NamespaceRoute, ...]:
    """``--namespace REPO=NS`` pairs, then the repositories' namespaces as lakeFS reports them.

    lakeFS is asked (and so must be configured) only when repositories are named.
    """
    routes = [_route(pair, settings) for pair in args.namespace]
    if settings.repositories:
        from lakefs_gc.lakefs.client import LakeFSClient

        connection = settings_from_args(args, environ).lakefs
        with LakeFSClient(connection, source="ingest") as client:
            for repository in settings.repositories:
                namespace = client.get_repository(repository).storage_namespace
                location = parse_storage_namespace(namespace, local_root=settings.storage.local_root)
                routes.append(NamespaceRoute.of(repository, location))
    if not routes:
        raise ConfigError("no repository to ingest for: pass --repo REPO or --namespace REPO=NAMESPACE")
    return tuple(routes)


def _route(pair: str, settings: StorageSettings) -> NamespaceRoute:
    repository, sep, namespace = pair.partition("=")
    if not sep or not repository or not namespace:
        raise ConfigError(f"--namespace expects REPO=NAMESPACE, got {pair!r}")
    location = parse_storage_namespace(namespace, local_root=settings.storage.local_root)
    return NamespaceRoute.of(repository, location)
