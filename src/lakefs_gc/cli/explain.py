"""``lakefs-gc explain``: why an object is (or was) kept or collected, without Spark.

Thin: parse flags, load settings, open one lakeFS client, gather the facts (the storage object,
:func:`~lakefs_gc.lakefs.referrers.find_referrers`, the newest mark's report) and print the
verdicts of :mod:`lakefs_gc.gc.explain`, a text block per object or one JSON line each.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timedelta

import pyarrow.fs as pafs

from lakefs_gc.cli.exits import exit_status_help
from lakefs_gc.cli.options import (
    SETTINGS_EPILOG,
    add_output_option,
    add_repo_option,
    add_settings_options,
    settings_from_args,
)
from lakefs_gc.errors import ConfigError, ExitCode, StorageError
from lakefs_gc.gc.cutoff import Cutoff, compute_cutoff
from lakefs_gc.gc.explain import MarkRecord, ObjectFacts, explain, render_text
from lakefs_gc.gc.ports import utc_now
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.commit_graph import LakeFSCommitGraph
from lakefs_gc.lakefs.referrers import Referrers, Repo, find_referrers
from lakefs_gc.settings import GcSettings
from lakefs_gc.spark.report.history import mark_records, newest_mark
from lakefs_gc.spark.report.layout import ReportDir
from lakefs_gc.storage.filesystems import filesystem_for
from lakefs_gc.storage.locations import parse_storage_namespace

DESCRIPTION = """\
Explain: for each object, its verdict (the reason a mark would give it now) and why: the active
commits that hold it (id, date, the branch and rule that keep the commit), the branch that stages
it, its last-modified time against the cutoff, the guard that saved it (retention cross-check,
identity twin, the sweep's revalidation), and what the newest mark listed and its sweep did.
Reads what a mark reads (lakeFS's uncommitted dump and active commits, the commit graph, the
active ranges), on this machine: no Spark. Deletes nothing."""

EXIT_CODES = (ExitCode.LAKEFS, ExitCode.EXPORT, ExitCode.STORAGE, ExitCode.CORRUPT_RANGE)
#: lakeFS's LinkAddressTime, assumed for servers too old to report their grace period
DEFAULT_GRACE_PERIOD = timedelta(hours=24)

#: an object in storage: (exists, last modified, size)
_Stat = tuple[bool, datetime | None, int | None]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "explain",
        help="why an object is kept or collected (no Spark; deletes nothing)",
        description=DESCRIPTION,
        epilog=SETTINGS_EPILOG + "\n" + exit_status_help(*EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_argument_group("what to explain")
    add_repo_option(target, repeat=False, required=True, help="the repository")
    target.add_argument(
        "addresses", nargs="*", metavar="ADDRESS",
        help="physical address: namespace-relative (data/<slice>/<id>) or as lakeFS shows it",
    )  # fmt: skip
    target.add_argument("--path", metavar="PATH", help="a lakeFS path, looked up at --ref")
    target.add_argument("--ref", metavar="REF", help="branch, tag or commit of --path")
    target.add_argument("--mark-id", metavar="MARK_ID", help="the mark to report on (default: the newest)")
    groups = add_settings_options(parser, spark=False)
    add_output_option(groups["settings"])
    safety = parser.add_argument_group("cutoff (as for mark)")
    safety.add_argument("--min-age", metavar="DURATION", help="as `mark --min-age` (default 24h)")
    safety.add_argument("--unsafe-min-age", metavar="DURATION", help="as `mark --unsafe-min-age`")
    parser.set_defaults(handler=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    if bool(args.addresses) == bool(args.path) or bool(args.path) != bool(args.ref):
        raise ConfigError("explain needs ADDRESS... or --path PATH --ref REF (one of them)")
    gc = {"min_age": args.min_age, "unsafe_min_age": args.unsafe_min_age}
    settings = settings_from_args(args, dict(os.environ), gc=gc)
    with LakeFSClient(settings.lakefs, source="explain") as client:
        facts, cutoff = _gather(client, settings, args)
    for item in facts:
        result = explain(item, cutoff)
        if args.output == "json":
            line = {"command": "explain", "repository": args.repo, **result.to_json()}
            print(json.dumps(line, separators=(",", ":")), flush=True)
        else:
            print(render_text(result))
    return 0


def _gather(
    client: LakeFSClient, settings: GcSettings, args: argparse.Namespace
) -> tuple[list[ObjectFacts], Cutoff]:
    info = client.get_repository(args.repo)
    options = settings.storage
    repo = Repo(
        info.id,
        info.storage_namespace,
        parse_storage_namespace(info.storage_namespace, local_root=options.local_root),
        options,
    )
    params = settings.mark_params(args.repo)
    now = utc_now()
    grace = client.grace_period(default=DEFAULT_GRACE_PERIOD)
    cutoff = compute_cutoff(
        now, grace_period=grace, min_age=params.min_age, unsafe_min_age=params.unsafe_min_age
    )
    graph = LakeFSCommitGraph(client)
    looked_up = None
    if args.path:
        served = graph.served_address(repo.id, args.ref, args.path)
        if served.kind != "address" or served.address is None:
            raise ConfigError(f"{args.path!r} at {args.ref!r} in {repo.id!r}: {served.detail or 'not found'}")
        given, looked_up = [served.address], f"{args.path!r} at {args.ref!r}"
    else:
        given = list(args.addresses)
    keys = {a: repo.relative(a) for a in given}
    inside = sorted({k for k in keys.values() if k is not None})
    stats = {k: _stat(repo, k) for k in inside}
    sizes = {k: s[2] for k, s in stats.items() if s[0]}
    targets: dict[str, int | None] = {k: sizes.get(k) for k in inside}
    timeout = params.prepare_commits_timeout.total_seconds()
    found = find_referrers(client, graph, repo, targets, start=now, timeout=timeout)
    report = (
        ReportDir.of(repo.storage_namespace, args.mark_id, options)
        if args.mark_id
        else newest_mark(repo.namespace, options)
    )
    records = mark_records(report, set(inside)) if report else {}
    facts = [_facts(a, k, stats, found, records, looked_up) for a, k in keys.items()]
    return facts, cutoff


def _stat(repo: Repo, key: str) -> _Stat:
    fs, _ = filesystem_for(repo.namespace, repo.options)
    location = repo.namespace.join(key)
    try:
        info = fs.get_file_info(location.fs_path)
    except OSError as e:
        raise StorageError(f"cannot stat {location}: {e}") from e
    if info.type != pafs.FileType.File:
        return False, None, None
    return True, info.mtime, int(info.size) if info.size is not None else None


def _facts(
    given: str,
    key: str | None,
    stats: dict[str, _Stat],
    found: Referrers,
    records: dict[str, MarkRecord],
    looked_up: str | None,
) -> ObjectFacts:
    if key is None:
        return ObjectFacts(
            given, False, looked_up=looked_up, notes=("outside the repository's storage namespace",)
        )
    exists, mtime, size = stats[key]
    return ObjectFacts(
        key, exists, mtime, size, looked_up=looked_up,
        committed=tuple(found.committed.get(key, ())), staged=key in found.staged,
        staged_on=tuple(found.staged_on.get(key, ())), twin=found.twins.get(key),
        last_mark=records.get(key),
    )  # fmt: skip
