"""``lakefs-gc mark | sweep | run``: the batch garbage collection commands.

Thin: parse flags, load :class:`~lakefs_gc.settings.GcSettings` once, start Spark, call
:func:`~lakefs_gc.spark.mark.job.mark_run` / :func:`~lakefs_gc.spark.sweep.job.sweep_run` per repository,
print the outcome. Progress goes to stderr; results go to stdout (``--output json``: one JSON line
per repository and phase, for scripts).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
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
from lakefs_gc.cli.preflight import preflight
from lakefs_gc.cli.results import Printer
from lakefs_gc.errors import ConfigError, ExitCode, GcError
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.settings import GcSettings

EPILOG = (
    SETTINGS_EPILOG
    + """
safety:
  Nothing modified less than --min-age ago (default 24h, raised to lakeFS's grace period) is deleted;
  nothing referenced by an active commit or staged on any branch; nothing outside the storage namespace
  or under _lakefs/. Any error while reading references fails the mark (summary.json success=false),
  and only a successful mark can be swept. A sweep asks lakeFS again first and keeps what is referenced
  again (--no-revalidate skips it; not for marks older than --max-mark-age), and refuses to delete more
  than --max-delete-fraction of the namespace unless --force.

reports: <namespace>/_lakefs/retention/gc/unified/<mark_id>/ with summary.json, deleted/ (parquet,
column address), deleted.text/ and, after a sweep, swept/ (address, outcome, error) — the layout of
lakeFS's own GC, so either tool can sweep the other's marks.
"""
)

COMMANDS: dict[str, tuple[str, str]] = {
    "mark": (
        "find the garbage and write a report (deletes nothing)",
        "Mark: list the storage namespace (or read its inventory, --inventory), subtract everything "
        "referenced by active commits and staging areas, and write the report of what a sweep would "
        "delete. Prints the mark id.",
    ),
    "sweep": (
        "delete what a successful mark listed",
        "Sweep: delete the objects a successful mark (ours or lakeFS's Scala GC) listed in deleted/, and "
        "write swept/ with the outcome of every object.",
    ),
    "run": (
        "mark, show the summary, confirm, sweep",
        "Run: mark, show what would be deleted, ask for confirmation (on a terminal; --yes skips it), "
        "then sweep.",
    ),
}


_MARK_EXITS = (ExitCode.LAKEFS, ExitCode.EXPORT, ExitCode.STORAGE, ExitCode.INVENTORY, ExitCode.CORRUPT_RANGE,
               ExitCode.SPARK)  # fmt: skip
_SWEEP_EXITS = (ExitCode.LAKEFS, ExitCode.EXPORT, ExitCode.STORAGE, ExitCode.PARTIAL, ExitCode.REFUSED,
                ExitCode.SPARK)  # fmt: skip
#: the exit statuses each command can end with (besides the common ones)
EXIT_CODES: dict[str, tuple[ExitCode, ...]] = {
    "mark": _MARK_EXITS,
    "sweep": _SWEEP_EXITS,
    "run": _MARK_EXITS + _SWEEP_EXITS,
}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, (summary, description) in COMMANDS.items():
        parser = commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=EPILOG + "\n" + exit_status_help(*EXIT_CODES[name]),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_options(parser, name)
        parser.set_defaults(handler=lambda args, command=name: run_command(command, args))


def _add_options(parser: argparse.ArgumentParser, command: str) -> None:
    target = parser.add_argument_group("what to collect")
    add_repo_option(
        target,
        repeat=True,
        help="repository to collect (repeat for several; default: repositories in the config)",
    )
    if command == "sweep":
        target.add_argument(
            "--mark-id", action="append", dest="mark_ids", metavar="MARK_ID",
            help="the mark to sweep (printed by `mark`), one per --repo in the same order",
        )  # fmt: skip
    if command == "run":
        target.add_argument("--yes", "-y", action="store_true", help="do not ask before deleting")
    groups = add_settings_options(parser)
    add_output_option(groups["settings"])
    safety = parser.add_argument_group("safety")
    safety.add_argument(
        "--min-age", metavar="DURATION",
        help="keep objects modified less than this ago (default 24h; raised to lakeFS's grace period)",
    )  # fmt: skip
    safety.add_argument(
        "--unsafe-min-age", metavar="DURATION",
        help="force a min age below lakeFS's grace period (tests only: may delete objects being linked)",
    )  # fmt: skip
    if command in ("mark", "run"):
        _add_inventory_options(parser)
    if command in ("sweep", "run"):
        _add_sweep_options(parser)


def _add_sweep_options(parser: argparse.ArgumentParser) -> None:
    sweep = parser.add_argument_group(
        "sweep pace",
        "Throttling answers (S3 SlowDown/503, Azure ServerBusy/503) are retried with exponential backoff\n"
        "and full jitter, and halve a task's requests in flight; good answers raise them again up to\n"
        "--sweep-concurrency. A key still throttled after --sweep-max-retries is reported failed in\n"
        "swept/ (exit code 9), never dropped; sweeping the same mark again deletes it.",
    )
    sweep.add_argument(
        "--sweep-concurrency", type=int, metavar="N",
        help="bulk-delete requests in flight per Spark task, at most (default 8)",
    )  # fmt: skip
    sweep.add_argument(
        "--sweep-max-retries", type=int, metavar="N",
        help="retries of a throttled or transiently failed request (default 10)",
    )  # fmt: skip
    sweep.add_argument(
        "--max-deletes-per-second", type=float, metavar="RATE",
        help="ceiling on objects deleted per second over the whole sweep (default: none)",
    )  # fmt: skip
    rails = parser.add_argument_group(
        "sweep safety rails",
        "Before deleting, the sweep asks lakeFS again what is referenced (a fresh uncommitted dump and\n"
        "active commits; only ranges the mark did not read are read) and keeps every marked object that\n"
        "is referenced again, e.g. by a branch created from an expired commit since the mark. If lakeFS\n"
        "cannot answer, nothing is deleted. A mark older than --max-mark-age is swept only so revalidated.\n"
        "A sweep that would delete more than --max-delete-fraction of the objects the mark listed is\n"
        "refused unless --force. Refusals delete nothing and exit with code 10.",
    )
    rails.add_argument(
        "--no-revalidate", dest="revalidate", action="store_const", const=False, default=None,
        help="delete what the mark listed without asking lakeFS again (objects referenced again since "
        "the mark are deleted; refused for marks older than --max-mark-age)",
    )  # fmt: skip
    rails.add_argument(
        "--max-mark-age", metavar="DURATION",
        help="a mark older than this is swept only when revalidated (default 7d)",
    )  # fmt: skip
    rails.add_argument(
        "--max-delete-fraction", type=float, metavar="FRACTION",
        help="refuse to delete more than this share (0 < F <= 1) of the objects the mark listed in the "
        "namespace (default 0.5)",
    )  # fmt: skip
    rails.add_argument(
        "--dry-run", action="store_true",
        help="delete nothing: run the sweep (guards, revalidation) and list what it would delete in the "
        "mark's dry-run/ (swept/ and summary.json are left as they are)",
    )  # fmt: skip
    rails.add_argument(
        "--force", action="store_true",
        help="sweep even past --max-delete-fraction, or a mark that does not say how many objects it "
        "listed (lakeFS's Scala job)",
    )  # fmt: skip


def _add_inventory_options(parser: argparse.ArgumentParser) -> None:
    inventory = parser.add_argument_group(
        "candidates from an inventory",
        "Instead of listing the storage namespace (hours and millions of requests on a large bucket),\n"
        "take the candidates from the newest complete, verified inventory snapshot (manifest checksum,\n"
        "data-file sizes, S3's per-file MD5s). Objects created after the snapshot are simply not\n"
        "candidates this time; a later snapshot has them. No delivery, only pending ones, a snapshot\n"
        "older than --max-inventory-age or a corrupt data file fails the mark (exit code 7): an\n"
        "unusable inventory never reads as an empty bucket.",
    )
    inventory.add_argument(
        "--inventory", metavar="DEST",
        help="inventory destination: the S3 Inventory destination prefix (s3://inventory-bucket/prefix, "
        "holding <source-bucket>/<config-id>/...) or the Azure Blob inventory container "
        "(https://<account>.blob.core.windows.net/<container>); a delivery of the namespace's own "
        "bucket (S3) or storage account (Azure) is used",
    )  # fmt: skip
    inventory.add_argument(
        "--max-inventory-age", metavar="DURATION",
        help="refuse a newest snapshot older than this when the mark starts (default 8d)",
    )  # fmt: skip
    inventory.add_argument(
        "--trust-checksums", action="store_const", const=True, default=None,
        help="let the identity-twin guard rule out, without a stat, the pairs whose bytes an S3 "
        "inventory's ETag and EncryptionStatus fields prove different; assumes every checksum lakeFS "
        "recorded describes its own object's bytes (gc.trust_checksums; default off)",
    )  # fmt: skip


def gc_settings(args: argparse.Namespace, environ: dict[str, str]) -> GcSettings:
    """The job's settings: file < environment < flags (sweep has no inventory flags: they count as unset)."""
    gc = {
        "min_age": args.min_age,
        "unsafe_min_age": args.unsafe_min_age,
        "sweep_concurrency": getattr(args, "sweep_concurrency", None),
        "sweep_max_retries": getattr(args, "sweep_max_retries", None),
        "max_deletes_per_second": getattr(args, "max_deletes_per_second", None),
        "revalidate": getattr(args, "revalidate", None),
        "max_mark_age": getattr(args, "max_mark_age", None),
        "max_delete_fraction": getattr(args, "max_delete_fraction", None),
        "inventory": getattr(args, "inventory", None),
        "max_inventory_age": getattr(args, "max_inventory_age", None),
        "trust_checksums": getattr(args, "trust_checksums", None),
    }
    return settings_from_args(args, environ, gc=gc)


def validate_run_mode(command: str, repositories: Sequence[str], mark_ids: Sequence[str]) -> None:
    """lakeFS's ``validateRunModeConfigs``, in CLI terms."""
    if not repositories:
        raise ConfigError("no repository given: pass --repo REPO (or list repositories in the config file)")
    if command in ("mark", "run") and mark_ids:
        raise ConfigError(f"Can't provide mark ID for mark mode: `{command}` creates its own mark")
    if command == "sweep":
        if not mark_ids:
            raise ConfigError("Please provide a mark ID (--mark-id) for sweep-only mode")
        if len(mark_ids) != len(repositories):
            raise ConfigError(
                f"sweep needs one --mark-id per --repo, in the same order "
                f"(got {len(repositories)} repositories and {len(mark_ids)} mark ids)"
            )


def run_command(command: str, args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    settings = gc_settings(args, environ)
    repositories = list(settings.repositories)
    mark_ids = list(getattr(args, "mark_ids", None) or [])
    validate_run_mode(command, repositories, mark_ids)
    confirm = _confirmer(command, args)
    with LakeFSClient(settings.lakefs, source=command) as client:
        checked = preflight(settings, client, command, repositories, mark_ids)  # before Spark: fail fast
        failures = [e for _, e in checked.failures]
        if len(repositories) == 1 and failures:
            raise failures[0]
        for repository, error in checked.failures:
            print(f"lakefs-gc: error: {repository}: {error}", file=sys.stderr)
        printer = Printer(args.output)
        if checked.ready:
            run = _Run(_start_spark(command, settings), settings, client, printer, args)
        for repository, mark_id in checked.ready:
            try:
                if mark_id is not None:
                    run.sweep(repository, mark_id)
                else:
                    run.mark_and_maybe_sweep(repository, command, confirm)
            except GcError as e:
                if len(repositories) == 1:
                    raise
                print(f"lakefs-gc: error: {repository}: {e}", file=sys.stderr)
                failures.append(e)
    if failures:
        print(f"lakefs-gc: {len(failures)} of {len(repositories)} repositories failed", file=sys.stderr)
        return failures[0].exit_code
    return printer.exit_code


def _start_spark(command: str, settings: GcSettings) -> Any:
    from lakefs_gc.spark.runtime.session import build_session

    progress("starting Spark")
    return build_session(
        "lakefs-gc " + command, environ=os.environ, master=settings.spark.master, conf=settings.spark.conf
    )


class _Run:
    """One command's jobs: one Spark session, one lakeFS client, one printer."""

    def __init__(
        self,
        spark: Any,
        settings: GcSettings,
        client: LakeFSClient,
        printer: Printer,
        args: argparse.Namespace,
    ) -> None:
        self.spark, self.settings, self.client, self.printer = spark, settings, client, printer
        self.force, self.dry_run = bool(getattr(args, "force", False)), bool(getattr(args, "dry_run", False))

    def mark_and_maybe_sweep(self, repository: str, command: str, confirm: Callable[[str], bool]) -> None:
        from lakefs_gc import jobs

        result = jobs.mark(self.spark, self.settings, repository, client=self.client, progress=progress)
        self.printer.mark(result)
        if command != "run":
            return
        saving = f", est. saving {result.monthly_saving}/month" if result.monthly_saving else ""
        question = (
            f"Delete {result.marked} objects ({human_bytes(result.marked_bytes)}{saving}) "
            f"from {result.storage_namespace}?"
        )
        if result.marked and not self.dry_run and not confirm(question):
            progress(f"{repository}: not swept; sweep later with: lakefs-gc sweep --repo {repository} "
                     f"--mark-id {result.mark_id}")  # fmt: skip
            return
        self.sweep(repository, result.mark_id)

    def sweep(self, repository: str, mark_id: str) -> None:
        from lakefs_gc import jobs

        result = jobs.sweep(
            self.spark, self.settings, repository, mark_id, client=self.client, force=self.force,
            dry_run=self.dry_run, progress=progress,
        )  # fmt: skip
        self.printer.sweep(result)


def _confirmer(command: str, args: argparse.Namespace) -> Callable[[str], bool]:
    if command != "run" or args.yes:
        return lambda _question: True
    if not sys.stdin.isatty():
        raise ConfigError(
            "`run` asks before deleting, but stdin is not a terminal: pass --yes (or use mark + sweep)"
        )

    def ask(question: str) -> bool:
        answer = input(f"{question} [y/N] ").strip().lower()
        return answer in ("y", "yes")

    return ask
