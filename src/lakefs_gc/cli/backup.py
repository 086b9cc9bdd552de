"""``lakefs-gc backup | restore``: copy a mark's objects away before a sweep, and back after it.

Thin like :mod:`lakefs_gc.cli.gc`: parse flags, load settings once, start Spark, call
:func:`~lakefs_gc.spark.sweep.backup.backup_run` / :func:`~lakefs_gc.spark.sweep.backup.restore_run`, print
the counts (stdout; ``--output json`` one line), progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from typing import Any

from lakefs_gc.cli.exits import exit_status_help
from lakefs_gc.cli.options import (
    SETTINGS_EPILOG,
    add_output_option,
    add_repo_option,
    add_settings_options,
    human_bytes,
    progress,
    settings_from_args,
)
from lakefs_gc.errors import ConfigError, ExitCode

EPILOG = (
    SETTINGS_EPILOG
    + """
layout:
  <URI>/<repo>/<mark_id>/<address>, where <address> is the object's key relative to the storage
  namespace (data/<slice>/<object>, or a legacy root object): the namespace's own layout, so a
  restore maps back exactly and rclone or `aws s3 sync` can restore by hand too.

copies:
  Server-side within a store (S3 CopyObject between buckets of the endpoint, Azure Copy Blob within
  a storage account), streamed through the Spark tasks across stores. Every copy is verified by size,
  and by MD5 where both sides report one (S3 ETags of single-part objects, Azure Content-MD5).

outcomes (per object, in <namespace>/_lakefs/retention/gc/unified/<mark_id>/backup/ or restore/,
parquet: address, outcome, error, size; backup.json / restore.json name the latest run):
  copied     copied and verified
  already    the destination already has the same object (a resumed run skips it)
  missing    neither side has it
  conflict   the destination has a different object: not overwritten
  failed     see the error column

Nothing is deleted or overwritten. Only a successful mark can be backed up or restored; restore
writes only the addresses the mark listed, never under _lakefs/ or outside the namespace.
Killed or failed part-way, run the same command again: it resumes. Exit status 9 when objects
failed or conflicted (restore: or were missing from both sides); 10 for a failed mark; 3 for a
mark that does not exist or a backup location overlapping the namespace.

"""
    + exit_status_help(
        ExitCode.LAKEFS, ExitCode.EXPORT, ExitCode.STORAGE, ExitCode.PARTIAL, ExitCode.REFUSED, ExitCode.SPARK
    )
)

COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "backup": (
        "copy the objects a mark listed to a backup location (before sweeping)",
        "Backup: copy every object a successful mark listed in deleted/ from the repository's storage "
        "namespace to <URI>/<repo>/<mark_id>/, on the Spark executors. Resumable and verified.",
        "--to",
        "backup root: s3://bucket/prefix, https://<account>.blob.core.windows.net/<container>/prefix, "
        "file:///path or /path (must not overlap the storage namespace)",
    ),
    "restore": (
        "copy a mark's objects back from a backup location (after sweeping)",
        "Restore: copy the objects a mark listed back from <URI>/<repo>/<mark_id>/ to their addresses in "
        "the repository's storage namespace, on the Spark executors. Never overwrites: an object already "
        "there with a different size is a conflict and is left alone.",
        "--from",
        "the backup root given to `lakefs-gc backup --to`",
    ),
}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, (summary, description, flag, flag_help) in COMMANDS.items():
        parser = commands.add_parser(
            name,
            help=summary,
            description=textwrap.fill(description, 100),
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        target = parser.add_argument_group("what to copy")
        add_repo_option(target, repeat=False, required=True, help="the repository")
        target.add_argument(
            "--mark-id", required=True, metavar="MARK_ID", help="the mark whose objects to copy"
        )
        target.add_argument(flag, required=True, dest="location", metavar="URI", help=flag_help)
        groups = add_settings_options(parser)
        add_output_option(groups["settings"])
        groups["Spark"].add_argument(
            "--copy-concurrency",
            type=int,
            default=8,
            metavar="N",
            help="copies in flight per Spark task (default 8; lower it if a store throttles)",
        )
        parser.set_defaults(handler=lambda args, command=name: run_command(command, args))


def run_command(command: str, args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    settings = settings_from_args(args, environ)
    if args.copy_concurrency < 1:
        raise ConfigError(f"--copy-concurrency must be at least 1, got {args.copy_concurrency}")
    from lakefs_gc import jobs
    from lakefs_gc.spark.runtime.session import build_session

    with jobs.lakefs_client(settings, command) as client:
        progress("starting Spark")
        spark = build_session(
            "lakefs-gc " + command, environ=os.environ, master=settings.spark.master, conf=settings.spark.conf
        )
        result = jobs.copy(
            spark, settings, command, args.repo, args.mark_id, args.location, client=client,
            concurrency=args.copy_concurrency, progress=progress,
        )  # fmt: skip
    _print(result, args.output)
    return ExitCode.OK if result.ok else ExitCode.PARTIAL


def _print(result: Any, output: str) -> None:
    if output == "json":
        fields = {
            "command": result.direction,
            "repository": result.repository,
            "mark_id": result.mark_id,
            "location": result.location,
            **result.counts,
            "bytes_copied": result.bytes_copied,
            "report": result.report_location,
        }
        print(json.dumps(fields, separators=(",", ":")), flush=True)
        return
    c = result.counts
    print(f"repository {result.repository}: {result.direction} of mark {result.mark_id} ({result.location})")
    print(
        f"  copied {c['copied']} ({human_bytes(result.bytes_copied)}), already there {c['already']}, "
        f"missing {c['missing']}, conflict {c['conflict']}, failed {c['failed']}"
    )
    if not result.ok:
        print(f"  see {result.report_location}/ (outcome and error of every object)")
