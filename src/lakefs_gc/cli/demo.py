"""``lakefs-gc demo``: garbage collection end to end on this machine, with nothing else running.

Starts the lakeFS-compatible test server in-process on a temporary local namespace, builds a
repository whose history holds every kind of garbage next to objects that must survive
(:mod:`lakefs_gc.testing.demo`), marks and sweeps it on local Spark with the default safety
settings, then prints what became of each object and why, and checks it: exit status 0 only
when every object met its expected fate and nothing else in the namespace was touched.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from lakefs_gc.cli.options import add_output_option
from lakefs_gc.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakefs_gc.settings import GcSettings
    from lakefs_gc.spark.mark.result import MarkResult
    from lakefs_gc.spark.sweep.job import SweepResult
    from lakefs_gc.testing.demo import DemoCheck, Scenario

#: exit status when the GC did not do what the demo expects
EXIT_EXPECTATIONS_FAILED = ExitCode.CHECK_FAILED

DESCRIPTION = """\
Run a complete garbage collection on a demo repository, locally, in about a minute.

The demo starts lakeFS's stand-in (the lakeFS-compatible test server, in this process) on a
temporary directory, and builds a repository through the lakeFS API with retention rules
(14 days on main, 7 elsewhere) and a history that produces every kind of garbage: deletes and
overwrites past their retention, a deleted branch, uploads that were reset or deleted before
being committed, a legacy root-level object. Next to them are objects that must survive: live
data, data deleted but still within retention, a hidden branch, a recently deleted branch, a
staged upload and a fresh upload younger than the 24h safety cutoff.

It then marks and sweeps the repository on local Spark with the default safety settings, prints
a table (object, what happened to it, expected fate, actual fate, why) and checks the result.
"""

EPILOG = """\
exit status: 0 when every object met its expected fate and nothing else was touched;
  11 when an expectation failed (each failure is printed on stderr); 2 or 3 for bad options;
  the other codes of `lakefs-gc --help` when lakefs-gc itself failed (printed on stderr).

examples:
  lakefs-gc demo                          # temporary directory, removed at the end
  lakefs-gc demo --keep /tmp/gc-demo      # keep storage, server state and reports to look at
  lakefs-gc demo --output json | jq .ok
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        help="start here: a complete GC of a demo repository on local Spark, explained",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--keep", type=Path, metavar="DIR",
        help="build everything in DIR (new or empty) and keep it: storage/ (the namespace with the GC "
        "reports) and state/ (serve it again with `lakefs-gc test-server --storage-root DIR/storage "
        "--state DIR/state`). Default: a temporary directory, removed at the end",
    )  # fmt: skip
    parser.add_argument(
        "--spark-master", metavar="URL",
        help="Spark master (default local[2]; a local one, since the demo's storage is a local "
        "directory); ignored when this process already runs a Spark session",
    )  # fmt: skip
    add_output_option(
        parser,
        help="text: the table for people (default); json: one JSON document for scripts. "
        "Progress goes to stderr either way",
    )
    parser.set_defaults(handler=run)


@dataclass(frozen=True)
class DemoRun:
    scenario: Scenario
    mark: MarkResult
    sweep: SweepResult
    check: DemoCheck
    workdir: Path
    kept: bool
    seconds: float


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    say = _progress
    with _workdir(args.keep.resolve() if args.keep else None) as workdir:
        result = _run(workdir, args.spark_master, say, started, kept=args.keep is not None)
        if args.output == "json":
            print(json.dumps(as_json(result), indent=2))
        else:
            render_text(result, sys.stdout)
    if not result.check.ok:
        failures = result.check.failures
        print(f"lakefs-gc: demo FAILED: {len(failures)} expectation(s) not met:", file=sys.stderr)
        for failure in failures:
            print(f"  - {failure}", file=sys.stderr)
        return EXIT_EXPECTATIONS_FAILED
    return 0


def _run(
    workdir: Path, master: str | None, say: Callable[[str], None], started: float, *, kept: bool
) -> DemoRun:
    from lakefs_gc.testing.demo import RULES, build_scenario
    from lakefs_gc.testing.server import LakeFSTestServer

    storage_root = (workdir / "storage").resolve()
    storage_root.mkdir(parents=True, exist_ok=True)
    state_dir = workdir / "state" if kept else None
    say(f"[1/5] starting the lakeFS test server (storage in {storage_root})")
    with LakeFSTestServer(storage_root=storage_root, state_dir=state_dir) as server:
        say(f"[2/5] building repository 'demo' through the lakeFS API at {server.endpoint} ({RULES})")
        now = datetime.now(timezone.utc)
        scenario = build_scenario(server.sdk_configuration(), storage_root, now=now, scratch=workdir)
        garbage = sum(o.expect_deleted for o in scenario.objects)
        say(f"      {garbage} garbage objects and {len(scenario.objects) - garbage} that must survive")
        settings = _settings(server.connection_info(), storage_root, master)
        say(f"[3/5] starting Spark ({master or 'local[2]'}); the first start takes a few seconds")
        with _spark_session(master, say) as spark:
            return _collect(spark, settings, scenario, say, started, workdir, kept)


def _collect(
    spark: SparkSession,
    settings: GcSettings,
    scenario: Scenario,
    say: Callable[[str], None],
    started: float,
    workdir: Path,
    kept: bool,
) -> DemoRun:
    from lakefs_gc import jobs
    from lakefs_gc.testing.demo import check_results, snapshot

    before = snapshot(scenario.namespace_dir)
    detail = _detail(say, scenario.repository)
    repository = scenario.repository
    with jobs.lakefs_client(settings, "demo") as client:
        phase = time.monotonic()
        say(f"[4/5] mark: finding the garbage among the {len(scenario.objects)} objects of the namespace")
        mark = jobs.mark(spark, settings, repository, client=client, progress=detail)
        say(f"      mark done in {time.monotonic() - phase:.1f}s")
        phase = time.monotonic()
        say(f"[5/5] sweep: deleting the {mark.marked} marked objects")
        sweep = jobs.sweep(spark, settings, repository, mark.mark_id, client=client, progress=detail)
        say(f"      sweep done in {time.monotonic() - phase:.1f}s")
    after = snapshot(scenario.namespace_dir)
    marked = jobs.report_table(settings, mark.storage_namespace, mark.mark_id, "deleted")
    swept = jobs.report_table(settings, mark.storage_namespace, mark.mark_id, "swept")
    check = check_results(
        scenario,
        before=before,
        after=after,
        marked=set(marked.column("address").to_pylist()),
        swept=dict(
            zip(swept.column("address").to_pylist(), swept.column("outcome").to_pylist(), strict=True)
        ),
        reason_counts=_reason_counts(mark.summary),
    )
    seconds = time.monotonic() - started
    return DemoRun(scenario, mark, sweep, check, workdir, kept, seconds)


def _settings(connection: dict[str, str], storage_root: Path, master: str | None) -> GcSettings:
    from lakefs_gc.settings import GcSettings

    return GcSettings.model_validate(
        {"lakefs": connection, "storage": {"local_root": str(storage_root)}, "spark": {"master": master}}
    )


def _reason_counts(summary: dict[str, Any]) -> dict[str, int]:
    from lakefs_gc.gc import reasons

    counts = {reason: int(c.get("objects", 0)) for reason, c in (summary.get("kept") or {}).items()}
    counts[reasons.GARBAGE] = int(summary.get("num_deleted_objects", 0))
    return counts


@contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="lakefs-gc-demo-") as tmp:
            yield Path(tmp)
        return
    if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        raise ConfigError(
            f"--keep {keep}: not an empty directory (the demo builds its repository from scratch)"
        )
    keep.mkdir(parents=True, exist_ok=True)
    yield keep


#: Spark's own chatter (start-up banners, WARNs about the host name, progress bars) would bury the
#: story on a first run; errors still reach stderr.
@contextmanager
def _spark_session(master: str | None, say: Callable[[str], None]) -> Iterator[SparkSession]:
    """This process's Spark session if it has one (left running), else a new, quiet one (stopped after)."""
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    if existing is not None:
        say("      using the Spark session already running in this process")
        yield existing
        return
    from lakefs_gc.spark.runtime.session import QUIET, build_session

    started = time.monotonic()
    spark = build_session(
        "lakefs-gc demo",
        environ=os.environ,
        master=master,
        conf={"spark.log.level": "ERROR"},
        log_config=QUIET,
    )
    say(f"      Spark {spark.version} ready in {time.monotonic() - started:.1f}s")
    try:
        yield spark
    finally:
        spark.stop()


def _progress(message: str) -> None:
    print(f"lakefs-gc demo: {message}", file=sys.stderr, flush=True)


def _detail(say: Callable[[str], None], repository: str) -> Callable[[str], None]:
    """The engine's progress lines, indented under the demo's step and without the repository name."""
    return lambda message: say("      " + message.removeprefix(f"{repository}: "))


# -- output ------------------------------------------------------------------------------------
COLUMNS = ("OBJECT", "WHAT HAPPENED", "EXPECTED", "ACTUAL", "WHY")


def table_rows(result: DemoRun) -> list[tuple[str, str, str, str, str]]:
    """One row per object, the deleted ones first (story order within each group)."""
    from lakefs_gc.testing.demo import fate

    outcomes = sorted(result.check.outcomes, key=lambda o: not o.object.expect_deleted)
    rows = []
    for o in outcomes:
        actual = fate(o.deleted) + ("" if o.ok else "  <-- WRONG")
        rows.append((o.object.name, o.object.story, fate(o.object.expect_deleted), actual, o.object.why))
    return rows


def render_text(result: DemoRun, out: TextIO) -> None:
    from lakefs_gc.gc.reports import report_dir
    from lakefs_gc.testing.demo import RULES

    rows = table_rows(result)
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    summary = result.mark.summary
    cutoff = f"{summary.get('cutoff_time')} ({summary.get('cutoff_reason')})"
    out.write(f"\nRepository '{result.scenario.repository}' after garbage collection\n")
    out.write(f"  {RULES}\n  cutoff: {cutoff}; nothing modified later is ever deleted\n\n")
    for row in (COLUMNS, *rows):
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")
    outcomes = result.check.outcomes
    deleted = sum(o.deleted for o in outcomes)
    out.write("\n")
    if result.check.ok:
        out.write(
            f"OK: all {len(outcomes)} objects met their expected fate ({deleted} deleted, "
            f"{len(outcomes) - deleted} kept); nothing else in the storage namespace was touched.\n"
        )
    else:
        out.write(f"FAILED: {len(result.check.failures)} expectation(s) not met (listed on stderr).\n")
    reports = result.scenario.namespace_dir / report_dir(result.mark.mark_id)
    out.write(f"Reports of mark {result.mark.mark_id}: {reports}/\n")
    out.write("  summary.json, deleted/ (what the mark found), swept/ (what the sweep did to each object)\n")
    if result.kept:
        storage, state = result.workdir / "storage", result.workdir / "state"
        out.write(
            f"Kept in {result.workdir}. Serve it again: lakefs-gc test-server --storage-root {storage} "
        )
        out.write(f"--state {state}\n")
    else:
        out.write("(a temporary directory, removed on exit: pass --keep DIR to look at them)\n")
    out.write(f"Done in {result.seconds:.0f}s.\n")


def as_json(result: DemoRun) -> dict[str, Any]:
    """The run for scripts; ``report_path`` and ``workdir`` outlive the run only with ``--keep``."""
    from lakefs_gc.gc.reports import report_dir
    from lakefs_gc.testing.demo import fate

    return {
        "ok": result.check.ok,
        "repository": result.scenario.repository,
        "storage_namespace": result.mark.storage_namespace,
        "mark_id": result.mark.mark_id,
        "cutoff_time": result.mark.summary.get("cutoff_time"),
        "objects": [
            {
                "name": o.object.name,
                "story": o.object.story,
                "physical_address": o.object.physical_address,
                "expected": fate(o.object.expect_deleted),
                "actual": fate(o.deleted),
                "reason": o.object.reason,
                "why": o.object.why,
                "problems": list(o.problems),
            }
            for o in result.check.outcomes
        ],
        "problems": result.check.failures,
        "sweep": {
            "deleted": result.sweep.deleted,
            "missing": result.sweep.missing,
            "failed": result.sweep.failed,
        },
        "report_location": result.mark.report_location,
        "report_path": str(result.scenario.namespace_dir / report_dir(result.mark.mark_id)),
        "workdir": str(result.workdir) if result.kept else None,
        "seconds": round(result.seconds, 1),
    }
