"""The batch GC and the service on a Spark standalone cluster whose workers cannot see the driver's disk.

Two workers (1 core each), each in its own mount namespace with a private, empty ``/tmp``
(:mod:`tests.support.spark_cluster`); the driver is a ``lakefs-gc`` process of its own (the test
session's local Spark stays as it is), its temporary files (config, checkpoints) under the host's
``/tmp``. Everything the executors read or write is on moto S3: the namespaces, and for the
service its state (spools, tables, range cache, cycle records). The Spark event log says which
executors ran tasks, and that no secret travelled as a Spark setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakefs_gc.errors import ExitCode
from lakefs_gc.inventory.generate import generate_delivery
from lakefs_gc.service.lease import LEASE
from lakefs_gc.spark.ingest.events.table import EventTable, event_records
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from lakefs_gc.testing.blockstore import NamespaceStore
from tests.service.conftest import S3World, Served
from tests.service.histories import MIN_AGE_S
from tests.support.gc_env import GcEnv
from tests.support.servers import MotoServer
from tests.support.spark_cluster import StandaloneCluster
from tests.testing.unified_gc import EXPECTED_SURVIVORS, build_unified_gc

#: a cold driver JVM, two executors and the jobs, on a busy 2-core machine
TIMEOUT_S = 400
#: Spark gives a Python worker 10 s to connect back, which a loaded machine can miss when the
#: service's three queries start theirs at once on the driver: the query dies, serve exits 12
WORKER_TIMEOUT = "Python worker failed to connect back"


def lakefs_gc(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "lakefs_gc", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd, env=driver_env())


def lakefs_gc_process(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    """``lakefs-gc`` started, for a test that acts while it runs."""
    argv = [sys.executable, "-m", "lakefs_gc", *argv]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=driver_env()
    )


def driver_env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "LAKEFS_GC_TRACEBACK": "1"}  # fmt: skip


def spark_section(cluster: StandaloneCluster) -> dict[str, Any]:
    return {"master": cluster.master_url, "conf": cluster.conf(), "parallelism": 4}


def assert_ran_on_both_workers(cluster: StandaloneCluster, since: dict[str, int], *secrets: str) -> None:
    executors = cluster.executors_with_tasks()
    new = {e: n - since.get(e, 0) for e, n in executors.items() if n > since.get(e, 0)}
    assert len(new) == 2 and "driver" not in new, executors
    logs = "".join(p.read_text(errors="replace") for p in cluster.event_logs.rglob("*") if p.is_file())
    for secret in secrets:
        assert secret not in logs  # settings reach the executors pickled with the tasks, never as conf


def run_unified_gc_on_the_cluster(
    cluster: StandaloneCluster, env: GcEnv, namespace: str, storage: dict[str, Any], tmp_path: Path,
    *secrets: str,
) -> None:  # fmt: skip
    """lakeFS's TestUnifiedGC scenario in ``namespace`` through ``lakefs-gc run --spark-master
    spark://…`` (``storage``: the config's storage section): the survivors hold, the mark's garbage is
    what was swept, tasks ran on both workers, and neither the lakeFS secret nor ``secrets`` is in the
    event log."""
    scenario = build_unified_gc(env.lakefs, "unified", namespace)
    before = cluster.executors_with_tasks()
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({"storage": storage, "spark": spark_section(cluster)}))
    args = [a if not a.endswith("gc.yaml") else str(config) for a in env.args()]
    run = lakefs_gc(
        ["run", "--repo", "unified", "--yes", "--unsafe-min-age", "0s", "--output", "json",
         "--max-delete-fraction", "1", "--spark-master", cluster.master_url, *args],
        tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-5000:] + cluster.executor_logs()
    mark, sweep = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    garbage = [n for n, survives in EXPECTED_SURVIVORS.items() if not survives]
    assert mark["summary"]["num_deleted_objects"] == len(garbage) == sweep["deleted"]
    store = env.store(namespace)
    assert {n: store.exists(scenario.relative(n)) for n in scenario.address} == EXPECTED_SURVIVORS
    lakefs_secret = env.server.connection_info()["secret_access_key"]
    assert_ran_on_both_workers(cluster, before, lakefs_secret, *secrets)


def test_batch_run_on_the_cluster(
    spark_cluster: StandaloneCluster, cloud_env: GcEnv, moto: MotoServer, s3_bucket: str, tmp_path: Path
) -> None:
    """The batch GC with the namespace on moto S3."""
    s3 = {"access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}
    namespace = f"s3://{s3_bucket}/repos/unified"
    run_unified_gc_on_the_cluster(
        spark_cluster, cloud_env, namespace, {"s3": s3}, tmp_path, moto.secret_access_key
    )


def test_serve_on_the_cluster_with_state_on_s3(
    spark_cluster: StandaloneCluster, s3_world: S3World, s3_served: Served, tmp_path: Path
) -> None:
    """One cycle of ``serve --spark-master spark://…``: events through SQS, an inventory delivery, a
    mark with the range cache and its sweep, the state on S3, the checkpoints on the driver."""
    repo = "cluster"
    namespace = s3_world.namespace(repo)
    scenario = build_unified_gc(s3_served.lakefs, repo, namespace)
    destination = parse_location(s3_world.inventory)
    generate_delivery(parse_storage_namespace(namespace), s3_served.options, destination)
    state_uri = f"s3://{s3_world.inventory_bucket}/gc-state"
    age = f"{MIN_AGE_S}s"
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({
        "lakefs": s3_served.connection,
        "storage": s3_served.storage,
        "gc": {"min_age": age, "unsafe_min_age": age, "max_delete_fraction": 1.0},
        "spark": spark_section(spark_cluster),
        "repositories": [repo],
        "service": {
            "state": state_uri, "checkpoints": str(tmp_path / "checkpoints"),
            "metrics_host": "127.0.0.1", "metrics_port": 0, "tick": "1s", "interval": "1h",
            "events": {"s3": s3_world.queue()}, "events_trigger": "1s",
            "inventory": s3_world.inventory, "inventory_trigger": "1s",
        },
    }))  # fmt: skip
    before = spark_cluster.executors_with_tasks()

    for _ in range(3):  # restarted as an orchestrator would, from its state and checkpoints
        run = lakefs_gc(["serve", "--config", str(config), "--cycles", "1"], tmp_path)
        if run.returncode != ExitCode.SPARK or WORKER_TIMEOUT not in run.stderr:
            break

    assert run.returncode == 0, run.stderr[-5000:] + spark_cluster.executor_logs()
    store = NamespaceStore(namespace, s3_served.options)
    assert {n: store.exists(scenario.relative(n)) for n in scenario.address} == EXPECTED_SURVIVORS
    state = StoreDirectory.of(state_uri, s3_served.options)
    batches = f"cycles/{repo}/batches"
    records = [json.loads(state.read(f"{batches}/{n}") or b"") for n in state.names(batches)]
    marks = [m for r in records for m in r["marks"]]
    assert marks and marks[-1]["success"] and marks[-1]["sweep"] == "done", records
    assert state.names("range-cache/" + repo + "/_gen")  # the range cache is on S3 too
    assert event_records(EventTable(state.sub("events/table").location, s3_served.options))
    assert state.read(LEASE) is None  # released at the end
    assert (tmp_path / "checkpoints/cycles" / repo / "checkpoint/offsets").is_dir()
    assert not (tmp_path / "checkpoints/events/s3/spool").exists()  # the spool is in the state
    secret = s3_served.connection["secret_access_key"]
    assert_ran_on_both_workers(spark_cluster, before, secret, s3_world.moto.secret_access_key)


pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * TIMEOUT_S)]
