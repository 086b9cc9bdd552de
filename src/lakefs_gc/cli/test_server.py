"""``lakefs-gc test-server``: run the lakeFS-compatible test server from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from lakefs_gc.cli.options import DefaultsHelpFormatter, add_repo_option, add_state_option
from lakefs_gc.durations import parse_duration
from lakefs_gc.errors import ConfigError
from lakefs_gc.storage.filesystems import AzureOptions, S3Options, StorageOptions

if TYPE_CHECKING:
    from lakefs_gc.testing.http import Credentials

EPILOG = """\
The server speaks lakeFS's REST API (lakefs-sdk, lakectl and lakefs-gc cannot tell it from lakeFS)
for what garbage collection needs: repositories, branches, objects, commits, merges, tags, GC rules
and the GC preparation endpoints. It prints one JSON line with the endpoint and the credentials,
then serves until interrupted (Ctrl-C).

storage namespaces:
  local://<path>                                   under --storage-root, as lakeFS's local blockstore
  s3://<bucket>/<prefix>                           with --s3-endpoint (e.g. a moto or MinIO server)
  https://<account>.blob.core.windows.net/<container>/<prefix>   with --azure-blob-endpoint (Azurite)

example:
  lakefs-gc test-server --storage-root /tmp/lakefs --state /tmp/lakefs-state
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "test-server",
        help="run the lakeFS-compatible test server (for tests, demos and benchmarks)",
        description="Run the lakeFS-compatible test server.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default 0: any free port)")
    parser.add_argument("--storage-root", type=Path, help="root directory of local:// namespaces (required)")
    parser.add_argument("--grace-period", default="24h", help="link-address validity window (default 24h)")
    add_state_option(parser, help="keep repositories, commits and staging here across restarts")
    parser.add_argument("--access-key-id", help="credentials to accept (default: generated, kept in --state)")
    parser.add_argument("--secret-access-key")
    parser.add_argument(
        "--s3-endpoint", help="S3 endpoint URL for s3:// namespaces (enables the s3 blockstore)"
    )
    parser.add_argument("--s3-region", default="us-east-1")
    parser.add_argument(
        "--azure-blob-endpoint", help="Azure blob endpoint for https:// namespaces (enables azure)"
    )
    parser.add_argument("--azure-account-key", help="Azure shared key for the blob endpoint")
    parser.add_argument(
        "--events-dir", type=Path,
        help="write a notification file for every object written or deleted under local:// namespaces "
        "(the demo's local event queue, read by `lakefs-gc serve`)",
    )  # fmt: skip
    parser.add_argument(
        "--uncommitted-page-entries", type=int, default=100_000,
        help="staged entries per prepare_uncommitted page (default 100000; lower it to test pagination)",
    )  # fmt: skip
    parser.set_defaults(handler=run)
    sub = parser.add_subparsers(title="test-server commands", metavar="COMMAND")
    _add_synth(sub)


class _SynthHelp(DefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, and the shape's description kept as written."""


def _add_synth(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from lakefs_gc.testing import synth as synth_module

    doc = synth_module.__doc__ or ""
    shape = doc[doc.find("The shape") :]
    synth = sub.add_parser(
        "synth",
        help="write a synthetic repository into --state/--storage-root, then exit",
        description="Write a synthetic repository (history, branches, staging and garbage of every\n"
        "kind) straight into the server's state and storage, streaming (memory does not grow with the\n"
        "objects), plus a manifest telling, for every physical object, whether a correct GC must delete\n"
        "it. Serve it afterwards with `lakefs-gc test-server` and the same --storage-root/--state.",
        epilog=shape,
        formatter_class=_SynthHelp,
    )
    synth.add_argument(
        "--storage-root", type=Path, required=True, help="root directory of local:// namespaces"
    )
    add_state_option(synth, required=True, help="server state directory")
    add_repo_option(synth, repeat=False, default="synth", help="repository name")
    synth.add_argument("--namespace", help="storage namespace (default: local://<repository>)")
    _add_synth_shape(synth.add_argument_group("shape (see below)"))
    _add_synth_output(synth.add_argument_group("output"))
    synth.set_defaults(handler=run_synth)


def _add_synth_shape(shape_group: argparse._ArgumentGroup) -> None:
    shape_group.add_argument(
        "--bottom-line", action="store_true",
        help="lakeFS's GC design bottom line: 20M objects, 1K branches, 30K commits, 5M uncommitted, "
        "1M garbage (explicit counts override it)",
    )  # fmt: skip
    shape_group.add_argument(
        "--objects", type=int, help="committed objects in the branch heads (default 10000)"
    )
    shape_group.add_argument("--commits", type=int, help="commits, on main and branches (default 100)")
    shape_group.add_argument("--branches", type=int, help="branches at the end, main included (default 10)")
    shape_group.add_argument("--uncommitted", type=int, help="staged objects (default 1000)")
    shape_group.add_argument("--garbage", type=int, help="objects a correct GC deletes (default 1000)")
    shape_group.add_argument("--days", type=int, default=30, help="days the history spans")
    shape_group.add_argument(
        "--retention-days", type=int, default=7, help="days the default GC rule retains (default: 7)"
    )
    shape_group.add_argument(
        "--range-entries", type=int, default=0,
        help="expected entries per range, lakeFS's raggedness (default 0: sqrt(objects), 100 to 50000)",
    )  # fmt: skip
    shape_group.add_argument("--range-max-bytes", type=int, default=20 * 1024 * 1024,
                             help="largest range, as lakeFS's max_range_size_bytes")  # fmt: skip
    shape_group.add_argument(
        "--tables", type=int, default=0, help="tables commits write to (default 0: one per 100 main commits)"
    )
    shape_group.add_argument("--slice-objects", type=int, default=10_000, help="objects per data/<slice>/")
    shape_group.add_argument(
        "--object-size", type=int, default=256 * 1024, help="median bytes per object (files are sparse)"
    )
    shape_group.add_argument(
        "--size-sigma", type=float, default=2.0,
        help="spread of the lognormal object sizes (sigma of their log; 0: every object --object-size)",
    )  # fmt: skip
    shape_group.add_argument("--seed", type=int, default=0)


def _add_synth_output(out: argparse._ArgumentGroup) -> None:
    out.add_argument(
        "--manifest", type=Path,
        help="directory of parquet parts for the manifest "
        "(default: <state>/<repo>-manifest.parquet)",
    )  # fmt: skip
    out.add_argument(
        "--no-objects", action="store_true",
        help="write no physical object; an S3 Inventory delivery describes them instead (--inventory-to)",
    )  # fmt: skip
    out.add_argument(
        "--inventory-to",
        help="write an S3 Inventory delivery of the namespace here (default with --no-objects: "
        "<state>/inventory); mark with `lakefs-gc mark --inventory` on the same location",
    )  # fmt: skip
    out.add_argument("--inventory-format", choices=("parquet", "csv"), default="parquet",
                     help="Parquet, or gzip CSV with form-encoded keys, as S3 writes them")  # fmt: skip
    out.add_argument("--inventory-rows-per-file", type=int, default=100_000, help="rows per data file")
    out.add_argument("--cache-mib", type=int, default=16,
                     help="memory for the blocks of recently rewritten ranges")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.storage_root is None:
        raise ConfigError("--storage-root is required: the root directory of local:// namespaces")
    from lakefs_gc.testing.context import ServerSettings
    from lakefs_gc.testing.http import Credentials
    from lakefs_gc.testing.server import LakeFSTestServer, run_forever

    blockstores = ["local"]
    s3 = S3Options()
    azure = AzureOptions()
    if args.s3_endpoint:
        blockstores.append("s3")
        s3 = S3Options(endpoint_url=args.s3_endpoint, region=args.s3_region)
    if args.azure_blob_endpoint:
        blockstores.append("azure")
        azure = AzureOptions(blob_endpoint=args.azure_blob_endpoint, account_key=args.azure_account_key)
    settings = replace(
        ServerSettings(),
        grace_period=parse_duration(args.grace_period),
        storage=StorageOptions(s3=s3, azure=azure),
        blockstores=tuple(blockstores),
        uncommitted_page_entries=args.uncommitted_page_entries,
    )
    if args.events_dir is not None:
        from lakefs_gc.testing.notifications import DirectoryNotifier

        settings = replace(settings, notifications=DirectoryNotifier(args.events_dir.resolve()))
    args.storage_root.mkdir(parents=True, exist_ok=True)
    server = LakeFSTestServer(
        storage_root=args.storage_root.resolve(),
        settings=settings,
        state_dir=args.state,
        host=args.host,
        port=args.port,
        credentials=_credentials(args, Credentials),
    )
    run_forever(server, lambda line: print(line, flush=True))
    return 0


def _credentials(args: argparse.Namespace, cls: type[Credentials]) -> Credentials | None:
    if args.access_key_id and args.secret_access_key:
        return cls(args.access_key_id, args.secret_access_key)
    if args.state is None:
        return None
    path = args.state / "credentials.json"
    if path.is_file():
        saved = json.loads(path.read_text())
        return cls(saved["access_key_id"], saved["secret_access_key"])
    creds = cls.generate()
    args.state.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"access_key_id": creds.access_key_id, "secret_access_key": creds.secret_access_key})
    )
    path.chmod(0o600)
    print(f"credentials saved to {path}", file=sys.stderr)
    return creds


def run_synth(args: argparse.Namespace) -> int:
    from lakefs_gc.storage.locations import parse_location
    from lakefs_gc.testing.context import ServerContext, ServerSettings
    from lakefs_gc.testing.store import Store
    from lakefs_gc.testing.synth import BOTTOM_LINE, SynthSpec, synthesize
    from lakefs_gc.testing.synth.outputs import InventoryTarget

    counts = {"objects": 10_000, "commits": 100, "branches": 10, "uncommitted": 1_000, "garbage": 1_000}
    if args.bottom_line:
        counts.update(BOTTOM_LINE)
    counts.update({k: getattr(args, k) for k in counts if getattr(args, k) is not None})
    args.storage_root.mkdir(parents=True, exist_ok=True)
    settings = ServerSettings(storage=StorageOptions(local_root=str(args.storage_root.resolve())))
    spec = SynthSpec(
        repository=args.repo, namespace=args.namespace, days=args.days,
        retention_days=args.retention_days, object_size=args.object_size, size_sigma=args.size_sigma,
        seed=args.seed,
        range_entries=args.range_entries, range_max_bytes=args.range_max_bytes, tables=args.tables,
        slice_objects=args.slice_objects,
        physical=not args.no_objects, cache_mib=args.cache_mib, **counts,
    )  # fmt: skip
    manifest = args.manifest or args.state / f"{args.repo}-manifest.parquet"
    inventory = None
    destination = args.inventory_to or (str(args.state.resolve() / "inventory") if args.no_objects else None)
    if destination is not None:
        location = parse_location(destination, local_root=str(args.storage_root.resolve()))
        inventory = InventoryTarget(location, args.inventory_format, args.inventory_rows_per_file)
    store = Store(args.state)
    try:
        report = synthesize(
            ServerContext(store, settings), spec, manifest=manifest, inventory=inventory, progress=_progress
        )
    finally:
        store.close()
    print(json.dumps({**report.__dict__, "inventory_to": destination}, indent=2))
    return 0


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
