"""Flags every Spark-running command shares: settings file, lakeFS, storage, Spark; and stderr progress.

One definition, so ``mark``, ``sweep``, ``run`` and the ``inventory`` commands spell a setting the
same way and load it through the same precedence: ``--config`` file < ``LAKEFS_GC_*``
environment < flags (:func:`lakefs_gc.settings.load_settings`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lakefs_gc.errors import ConfigError
from lakefs_gc.settings import G, GcSettings, StorageSettings, load_settings, load_storage_settings

SETTINGS_EPILOG = """\
settings (each from, in increasing priority: --config file, LAKEFS_GC_* environment, flags):
  lakeFS     --lakefs-endpoint/--lakefs-access-key-id/--lakefs-secret-access-key, else lakectl's
             LAKECTL_SERVER_ENDPOINT_URL, LAKECTL_CREDENTIALS_* and ~/.lakectl.yaml
  S3         boto3's credential chain (AWS_* variables, profiles, instance roles); --s3-endpoint for
             MinIO and friends
  Azure      --azure-connection-string, --azure-account-key, --azure-sas-token or a service
             principal (--azure-client-id/--azure-client-secret/--azure-tenant-id)
  local      --local-root: lakeFS's blockstore.local.path, to resolve local:// namespaces
  environment: LAKEFS_GC_<SECTION>__<KEY>, e.g. LAKEFS_GC_STORAGE__S3__ENDPOINT_URL,
             LAKEFS_GC_STORAGE__AZURE__ACCOUNT_KEY, LAKEFS_GC_GC__MIN_AGE=48h, LAKEFS_GC_REPOSITORIES=a,b
"""


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only where there is a default to show (never ``None``), and never
    twice when the help text already names its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action) or text


Group = argparse._ArgumentGroup | argparse.ArgumentParser


def add_output_option(group: Group, *, help: str = "result format (stdout)") -> None:
    """``--output text|json``: the one spelling of every command's result format."""
    group.add_argument("--output", choices=("text", "json"), default="text", help=help)


def add_repo_option(
    group: Group, *, repeat: bool, help: str, required: bool = False, default: str | None = None
) -> None:
    """``--repo REPO``: the one spelling of "which repository" (``repeat``: a list in ``repos``,
    else one name in ``repo``). ``--repository`` is accepted, hidden, for older scripts."""
    dest = "repos" if repeat else "repo"
    action = "append" if repeat else "store"
    options = group.add_mutually_exclusive_group(required=required) if required else group
    options.add_argument("--repo", action=action, dest=dest, metavar="REPO", help=help, default=default)
    options.add_argument("--repository", action=action, dest=dest, help=argparse.SUPPRESS)


def add_state_option(group: Group, *, help: str, required: bool = False, location: bool = False) -> None:
    """``--state DIR``: the one spelling of "the directory this process keeps its state in" (in
    ``state``). ``--state-dir`` is accepted, hidden, for older scripts and the benchmarks.
    ``location``: a URI (``s3://…``) or a path, kept as written."""
    options = group.add_mutually_exclusive_group(required=required) if required else group
    kind, metavar = (str, "LOCATION") if location else (Path, "DIR")
    options.add_argument("--state", type=kind, metavar=metavar, help=help)
    options.add_argument("--state-dir", type=kind, dest="state", help=argparse.SUPPRESS)


def add_settings_options(
    parser: argparse.ArgumentParser, *, lakefs: bool = True, spark: bool = True
) -> dict[str, argparse._ArgumentGroup]:
    """Add --config and the lakeFS / storage / Spark groups; return the groups by name for more flags."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    general = groups["settings"] = parser.add_argument_group("settings")
    general.add_argument("--config", type=Path, metavar="FILE", help="YAML settings file (see below)")
    if lakefs:
        group = groups["lakeFS"] = parser.add_argument_group("lakeFS")
        group.add_argument("--lakefs-endpoint", metavar="URL", help="lakeFS URL (with or without /api/v1)")
        group.add_argument("--lakefs-access-key-id", metavar="KEY")
        group.add_argument(
            "--lakefs-secret-access-key", metavar="SECRET", help="prefer the environment for secrets"
        )
    storage = groups["storage"] = parser.add_argument_group("storage")
    storage.add_argument(
        "--local-root", metavar="PATH", help="lakeFS blockstore.local.path (local:// namespaces)"
    )
    storage.add_argument("--s3-endpoint", metavar="URL", help="S3-compatible endpoint (default: AWS)")
    storage.add_argument("--s3-region", metavar="REGION")
    storage.add_argument("--azure-blob-endpoint", metavar="URL", help="Azure blob endpoint (e.g. Azurite)")
    storage.add_argument("--azure-connection-string", metavar="STRING")
    storage.add_argument("--azure-account-key", metavar="KEY")
    storage.add_argument("--azure-sas-token", metavar="TOKEN")
    storage.add_argument("--azure-client-id", metavar="ID")
    storage.add_argument("--azure-client-secret", metavar="SECRET")
    storage.add_argument("--azure-tenant-id", metavar="ID")
    if spark:
        group = groups["Spark"] = parser.add_argument_group("Spark")
        group.add_argument(
            "--spark-master",
            "--master",
            dest="spark_master",
            metavar="URL",
            help="e.g. spark://host:7077; default: spark-submit's, else local[2]",
        )
        group.add_argument(
            "--spark-conf", action="append", default=[], metavar="KEY=VALUE",
            help="extra Spark setting (repeat)",
        )  # fmt: skip
        group.add_argument("--parallelism", type=int, metavar="N", help="Spark tasks per job stage")
    return groups


def settings_from_args(
    args: argparse.Namespace, environ: dict[str, str], *, gc: dict[str, Any] | None = None
) -> GcSettings:
    """The command's settings: file < environment < flags (flags a command lacks count as unset)."""
    return typed_settings_from_args(args, environ, GcSettings, gc=gc)


def typed_settings_from_args(
    args: argparse.Namespace,
    environ: dict[str, str],
    model: type[G],
    *,
    gc: dict[str, Any] | None = None,
    service: dict[str, Any] | None = None,
) -> G:
    """:func:`settings_from_args` validated as ``model``, with the ``service`` section's flags."""
    overrides = {**_overrides(args, gc), "service": service or {}}
    return load_settings(
        environ=environ, config_file=getattr(args, "config", None), overrides=overrides, model=model
    )


def storage_settings_from_args(
    args: argparse.Namespace, environ: dict[str, str], *, gc: dict[str, Any] | None = None
) -> StorageSettings:
    """:func:`settings_from_args` for commands that never talk to lakeFS (``gc``: as its)."""
    overrides = _overrides(args, gc)
    return load_storage_settings(
        environ=environ, config_file=getattr(args, "config", None), overrides=overrides
    )


def _overrides(args: argparse.Namespace, gc: dict[str, Any] | None) -> dict[str, Any]:

    def flag(name: str) -> Any:
        return getattr(args, name, None)

    conf: dict[str, str] = {}
    for item in flag("spark_conf") or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--spark-conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    repos = flag("repos")
    overrides: dict[str, Any] = {
        "lakefs": {
            "endpoint": flag("lakefs_endpoint"),
            "access_key_id": flag("lakefs_access_key_id"),
            "secret_access_key": flag("lakefs_secret_access_key"),
        },
        "storage": {
            "local_root": flag("local_root"),
            "s3": {"endpoint_url": flag("s3_endpoint"), "region": flag("s3_region")},
            "azure": {
                "blob_endpoint": flag("azure_blob_endpoint"),
                "connection_string": flag("azure_connection_string"),
                "account_key": flag("azure_account_key"),
                "sas_token": flag("azure_sas_token"),
                "client_id": flag("azure_client_id"),
                "client_secret": flag("azure_client_secret"),
                "tenant_id": flag("azure_tenant_id"),
            },
        },
        "gc": gc or {},
        "spark": {"master": flag("spark_master"), "conf": conf or None, "parallelism": flag("parallelism")},
        "repositories": tuple(repos) if repos else None,
    }
    return overrides


def progress(message: str) -> None:
    """A progress line on stderr (stdout is for results, which scripts parse)."""
    print(f"lakefs-gc: {message}", file=sys.stderr, flush=True)


def human_bytes(value: Any) -> str:
    size = float(value or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
