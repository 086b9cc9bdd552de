"""``lakefs-gc serve``: the always-on GC service (see :mod:`lakefs_gc.service.app`).

With ``--config`` (or repositories from the environment) it serves those; with neither it runs the
embedded demo setting (:mod:`lakefs_gc.testing.serve_demo`), so ``lakefs-gc serve`` alone shows
the service at work.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakefs_gc.cli.options import (
    SETTINGS_EPILOG,
    add_repo_option,
    add_settings_options,
    add_state_option,
    progress,
    typed_settings_from_args,
)
from lakefs_gc.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    from lakefs_gc.service.settings import ServiceSettings

DESCRIPTION = """\
Run the GC service: a Spark Structured Streaming application that keeps each repository's
candidate set current (inventory deliveries + object notifications) and marks and sweeps on a
schedule, with Prometheus metrics on /metrics and probes on /healthz and /readyz.

Without --config and without repositories it runs an embedded demo: the lakeFS test server with
the `demo` repository on a temporary local namespace, an inventory of it, and a local directory of
object notifications as its queue. Stop it with Ctrl-C (or SIGTERM: running cycles finish first).
"""

EPILOG = (
    """\
service settings (the `service` section of --config; see the README for a complete file):
  state               where spools, tables, range cache, cycle records and the lease live: a path,
                      file://, s3:// or Azure https://<account>.blob... (on a cluster: an object store)
  checkpoints         the Spark checkpoints, only the driver's: a directory, or a Hadoop URI
                      (file://, s3a://, abfss://; default: under state when it is a path)
  interval / sweep_delay / sweep   per-repository schedule defaults (repositories: [{name, ...}])
  inventory           inventory destination whose snapshots seed the candidate sets
  events              named notification queues: {type: sqs|azure-queue|eventgrid|directory, ...}
  metrics_port, tick, retry_delay, events_trigger, inventory_trigger, shutdown_timeout, lease_ttl

"""
    + SETTINGS_EPILOG
)


#: Spark settings ``serve`` sets unless ``spark.conf`` does. Offset and commit logs kept per query
#: (Spark's default, stated: the checkpoints stay bounded). And the driver's status store: Spark keeps
#: the history of finished jobs, stages, tasks, SQL executions and streaming progress for its UI,
#: up to caps made for one batch application (1,000 executions, 100,000 tasks). A service runs
#: three queries' micro-batches all day: its heap grows with each of them until those caps, history
#: for a UI nobody reads (its metrics are Prometheus'). These caps keep the last minutes of it.
SERVE_SPARK_DEFAULTS: dict[str, str] = {
    "spark.sql.streaming.minBatchesToRetain": "100",
    "spark.sql.ui.retainedExecutions": "100",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    "spark.sql.streaming.ui.retainedQueries": "20",
    "spark.sql.streaming.ui.retainedProgressUpdates": "100",
}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="run the GC service (streaming ingest, periodic mark and sweep, metrics)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    service = parser.add_argument_group("service")
    add_state_option(service, location=True, help="service.state (default: from --config)")
    service.add_argument(
        "--checkpoints",
        metavar="DIR|URI",
        help="service.checkpoints: the Spark checkpoints (a driver directory, file://, s3a://, abfss://)",
    )
    service.add_argument("--metrics-port", type=int, metavar="PORT", help="default 9464; 0: any free port")
    service.add_argument("--interval", metavar="DURATION", help="default time between a repository's marks")
    service.add_argument("--sweep-delay", metavar="DURATION", help="wait between a mark and its sweep")
    service.add_argument("--tick", metavar="DURATION", help="how often the schedulers look (default 1m)")
    service.add_argument("--mark-only", action="store_true", help="never sweep (a dry run)")
    service.add_argument(
        "--cycles",
        type=int,
        metavar="N",
        help="stop after every repository ran N GC cycles (default: run on)",
    )
    service.add_argument("--log-format", choices=("text", "json"), default="text", help="stderr log lines")
    service.add_argument(
        "--trace-memory",
        type=int,
        metavar="FRAMES",
        help="trace the driver's Python allocations (FRAMES per site; 1 is enough) so that "
        "/debug/memory lists them and what grew; costs CPU and memory, for finding a leak",
    )
    service.add_argument(
        "--keep", type=Path, metavar="DIR", help="demo only: build the demo setting in DIR and keep it"
    )
    add_repo_option(parser, repeat=True, help="repository to serve (repeatable)")
    add_settings_options(parser)
    parser.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from lakefs_gc.service.logs import configure_logging
    from lakefs_gc.service.memory import start_tracing
    from lakefs_gc.spark.runtime.memory import limit_malloc_arenas

    configure_logging(args.log_format)
    limit_malloc_arenas()  # before Spark's and py4j's threads (spark/runtime/memory.py says why)
    if args.trace_memory:
        start_tracing(args.trace_memory)
    environ = dict(os.environ)
    if args.config is None and not args.repos and not environ.get("LAKEFS_GC_REPOSITORIES"):
        return _serve_demo(args)
    if args.keep is not None:
        raise ConfigError("--keep is for the embedded demo (serve without --config)")
    return _serve(_settings(args, environ), args)


def _settings(args: argparse.Namespace, environ: dict[str, str]) -> ServiceSettings:
    """--config < LAKEFS_GC_* < flags, as for every command; unset flags (None) leave the rest."""
    from lakefs_gc.service.settings import ServiceSettings

    service = {
        "state": str(args.state) if args.state else None,
        "checkpoints": getattr(args, "checkpoints", None),
        "metrics_port": args.metrics_port,
        "interval": args.interval,
        "sweep_delay": args.sweep_delay,
        "tick": args.tick,
        "sweep": False if args.mark_only else None,
    }
    return typed_settings_from_args(args, environ, ServiceSettings, service=service)


def _serve(settings: ServiceSettings, args: argparse.Namespace, *, quiet_spark: bool = False) -> int:
    from lakefs_gc.service.app import GcService
    from lakefs_gc.service.layout import take_layout
    from lakefs_gc.service.lease import StateLease
    from lakefs_gc.service.state import ServiceState
    from lakefs_gc.spark.runtime.session import LOG4J2, QUIET, build_session

    names = ", ".join(s.name for s in settings.schedules()) or "none"
    where = ServiceState.of(settings)
    progress(f"serving {names}; state in {where.display}, checkpoints in {where.checkpoints}")
    lease = StateLease(where.directory, settings.service.lease_ttl)
    lease.acquire()  # a second service on this state stops here, before Spark starts
    try:
        take_layout(where.directory)  # and a state of a newer release (exit 3)
    except BaseException:
        lease.release()
        raise
    conf = dict(settings.spark.conf)
    for key, value in SERVE_SPARK_DEFAULTS.items():
        conf.setdefault(key, value)
    if quiet_spark:  # the demo: Spark's own warnings would bury the story
        conf.setdefault("spark.log.level", "ERROR")
    spark = build_session(
        "lakefs-gc serve", environ=os.environ, master=settings.spark.master, conf=conf,
        log_config=QUIET if quiet_spark else LOG4J2,
    )  # fmt: skip
    service = GcService(settings, spark, lease=lease)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: service.request_stop())
    try:
        service.start()
        progress(f"metrics on {service.status.url}/metrics; Ctrl-C or SIGTERM stops")
        return service.wait(cycles=args.cycles)
    finally:
        service.stop()
        lease.release()
        spark.stop()


def _serve_demo(args: argparse.Namespace) -> int:
    import yaml

    from lakefs_gc.testing.serve_demo import demo_setting

    with _workdir(args.keep) as workdir:
        progress(f"no --config: serving the embedded demo in {workdir}")
        with demo_setting(workdir) as setting:
            port = 9464 if args.metrics_port is None else args.metrics_port
            config = workdir / "gc.yaml"  # the demo's settings as a config file, to read and reuse
            body = setting.settings(metrics_port=port, interval="2m", tick="5s")
            config.write_text(yaml.safe_dump(body, sort_keys=False))
            progress(
                f"repository 'demo' (namespace {setting.scenario.namespace_dir}); notifications land "
                f"in {setting.events_dir}; an inventory of it is in {setting.inventory_dir}; "
                f"settings in {config}"
            )
            args.config = config
            status = _serve(_settings(args, {}), args, quiet_spark=True)
            return _judge(setting.scenario, status)


def _judge(scenario: Any, status: int) -> int:
    """After the demo: did each object of the story meet its fate?"""
    from lakefs_gc.testing.serve_demo import fates

    deleted, problems = fates(scenario)
    garbage = sum(o.expect_deleted for o in scenario.objects)
    for problem in problems:
        progress(f"demo check FAILED: {problem}")
    if problems:
        return status or ExitCode.CHECK_FAILED
    progress(f"demo check: {deleted} of {garbage} garbage objects deleted, "
             f"all {len(scenario.objects) - garbage} that must survive intact")  # fmt: skip
    return status


@contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="lakefs-gc-serve-demo-") as tmp:
        yield Path(tmp)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_serve(argparse.Namespace()))
