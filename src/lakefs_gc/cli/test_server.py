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
    _register_synth(parser.add_subparsers(title="test-server commands", metavar="COMMAND"))


def _register_synth(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    synth = sub.add_parser(
        "synth",
        help="write a synthetic repository into --state/--storage-root, then exit",
        description="Write a synthetic repository (history, branches, staging and garbage of every kind) "
        "straight into the server's state and storage, plus a manifest telling, for every physical object, "
        "whether a correct GC must delete it. Serve it afterwards with `lakefs-gc test-server` and the same "
        "--storage-root/--state.",
        formatter_class=DefaultsHelpFormatter,
    )
    synth.add_argument(
        "--storage-root", type=Path, required=True, help="root directory of local:// namespaces"
    )
    add_state_option(synth, required=True, help="server state directory")
    add_repo_option(synth, repeat=False, default="synth", help="repository name")
    synth.add_argument("--namespace", help="storage namespace (default: local://<repository>)")
    synth.add_argument("--objects", type=int, default=10_000, help="committed objects")
    synth.add_argument("--commits", type=int, default=100, help="commits on main")
    synth.add_argument("--days", type=int, default=30, help="days the history spans")
    synth.add_argument("--branches", type=int, default=10, help="branches at the end, main included")
    synth.add_argument("--uncommitted", type=int, default=1_000, help="staged objects")
    synth.add_argument("--garbage", type=int, default=1_000, help="garbage objects to create (approximate)")
    synth.add_argument("--retention-days", type=int, default=7, help="default GC retention rule")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument(
        "--manifest", type=Path, help="parquet manifest (default: <state>/<repo>-manifest.parquet)"
    )
    synth.set_defaults(handler=run_synth)


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
    from lakefs_gc.testing.context import ServerContext, ServerSettings
    from lakefs_gc.testing.store import Store
    from lakefs_gc.testing.synth import SynthSpec, synthesize

    args.storage_root.mkdir(parents=True, exist_ok=True)
    settings = ServerSettings(storage=StorageOptions(local_root=str(args.storage_root.resolve())))
    spec = SynthSpec(
        repository=args.repo, namespace=args.namespace, objects=args.objects,
        commits=args.commits,
        days=args.days, branches=args.branches, uncommitted=args.uncommitted, garbage=args.garbage,
        retention_days=args.retention_days, seed=args.seed,
    )  # fmt: skip
    manifest = args.manifest or args.state / f"{args.repo}-manifest.parquet"
    store = Store(args.state)
    try:
        report = synthesize(ServerContext(store, settings), spec, manifest=manifest, progress=_progress)
    finally:
        store.close()
    print(json.dumps({**report.__dict__, "manifest": str(manifest)}, indent=2))
    return 0


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
