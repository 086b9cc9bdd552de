"""A worker of the standalone cluster killed (``kill -9``) during a mark, and another during its sweep.

``lakefs-gc run --spark-master spark://…`` collects lakeFS's TestUnifiedGC scenario on moto, through
a front (:class:`ExecutorGate`) that holds one request of an executor at each kill point and tells
the test which worker sent it (the process holding the client's socket):

1. the mark: the first read of a range (``_lakefs/<id>``) by an executor. The task waits for its
   answer when its worker dies: its executor, its Python workers and what they hold (cached
   blocks, shuffle output) are lost mid-stage. The worker is started again right away.
2. the sweep: the first ``swept/`` part an executor writes. The part lands, then the task waits
   for the answer and dies: its outcomes are in ``swept/`` while Spark runs the task again on the
   other worker, which must neither ask S3 for them again nor record them twice.

Spark re-runs the lost tasks (the event log shows each lost task and its partition's success on
another executor), and the results are exact: the survivors table holds, the sweep deleted the
mark's list and nothing else was asked of S3, and ``swept/`` holds each marked address once.
"""

from __future__ import annotations

import io
import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from tests.cluster.test_standalone import TIMEOUT_S, lakefs_gc_process, spark_section
from tests.support.gc_env import GcEnv
from tests.support.object_stores import s3_client
from tests.support.processes import socket_owner
from tests.support.servers import MotoServer
from tests.support.spark_cluster import StandaloneCluster
from tests.support.throttling import S3SlowDown, moto_behind
from tests.testing.unified_gc import EXPECTED_SURVIVORS, build_unified_gc

REPO = "lost"
GC = "_lakefs/retention/gc"
#: how long a held request waits for the test to kill its worker
HOLD_S = 120


@dataclass
class KillPoint:
    """One request to hold: the first of an executor that ``matches``."""

    name: str
    matches: Callable[[str, str], bool]  # (method, path)
    #: hold the answer after moto handled the request (a write that lands) instead of before
    after: bool
    worker: int | None = None
    path: str = ""
    reached: threading.Event = field(default_factory=threading.Event)  # an executor's request matched
    landed: threading.Event = field(default_factory=threading.Event)  # it is held (after moto, if after)
    released: threading.Event = field(default_factory=threading.Event)


class ExecutorGate(S3SlowDown):
    """moto's front: holds the first request of an executor at each :class:`KillPoint` (in order)
    until the test killed its worker; counts every key a ``DeleteObjects`` asks for."""

    def __init__(self, app: Any, cluster: StandaloneCluster, points: list[KillPoint]) -> None:
        super().__init__(app)
        self.cluster, self.points = cluster, points
        self.asked: Counter[str] = Counter()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        point = self._armed(environ)
        if point is None:
            return super().__call__(environ, start_response)
        if point.after:
            answer = list(super().__call__(environ, start_response))
            point.landed.set()
            point.released.wait(HOLD_S)
            return answer
        point.landed.set()
        point.released.wait(HOLD_S)
        return super().__call__(environ, start_response)

    def _armed(self, environ: dict[str, Any]) -> KillPoint | None:
        with self._lock:
            point = next((p for p in self.points if not p.reached.is_set()), None)
            method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
            if point is None or not point.matches(method, path):
                return None
            pid = socket_owner(int(environ.get("REMOTE_PORT", 0)), int(environ.get("SERVER_PORT", 0)))
            worker = self.cluster.worker_of(pid) if pid is not None else None
            if worker is None:  # the driver's request
                return None
            point.worker, point.path = worker, path
            point.reached.set()  # (the next request meets the next point)
            return point

    def _decide(self, keys: list[str]) -> tuple[bool, set[str]]:
        with self._lock:
            self.asked.update(keys)
        return super()._decide(keys)


def mark_reads_a_range(method: str, path: str) -> bool:
    return method == "GET" and "/_lakefs/" in path and f"/{GC}/" not in path


def sweep_writes_a_part(method: str, path: str) -> bool:
    return method == "PUT" and "/swept/part-" in path


@pytest.fixture
def gate(spark_cluster: StandaloneCluster) -> Iterator[tuple[MotoServer, ExecutorGate]]:
    points = [KillPoint("mark", mark_reads_a_range, after=False),
              KillPoint("sweep", sweep_writes_a_part, after=True)]  # fmt: skip
    with moto_behind(lambda app: ExecutorGate(app, spark_cluster, points), name="executor-gate") as served:
        yield served
        for point in points:  # a request still held lets the server stop
            point.released.set()


def test_workers_killed_during_the_mark_and_the_sweep(
    spark_cluster: StandaloneCluster,
    cloud_env: GcEnv,
    moto: MotoServer,
    gate: tuple[MotoServer, ExecutorGate],
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    front, hook = gate
    namespace = f"s3://{s3_bucket}/repos/{REPO}"
    scenario = build_unified_gc(cloud_env.lakefs, REPO, namespace)
    config = tmp_path / "cluster.yaml"
    s3 = {"access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}
    settings = {"storage": {"s3": s3}, "gc": {"sweep_concurrency": 1}, "spark": spark_section(spark_cluster)}
    config.write_text(yaml.safe_dump(settings))
    args = [a if not a.endswith("gc.yaml") else str(config) for a in cloud_env.args()]
    args = [front.endpoint_url if a == moto.endpoint_url else a for a in args]  # the executors too
    logs_before = set(spark_cluster.event_logs.iterdir())

    run = lakefs_gc_process(
        ["run", "--repo", REPO, "--yes", "--unsafe-min-age", "0s", "--output", "json",
         "--max-delete-fraction", "1", "--spark-master", spark_cluster.master_url, *args],
        tmp_path,
    )  # fmt: skip
    killed: list[int] = []
    try:
        for point in hook.points:
            wait_for(point.landed.is_set, run, f"an executor's request at the {point.name} kill point")
            assert point.worker is not None
            spark_cluster.kill_worker(point.worker)
            killed.append(point.worker)
            point.released.set()
            if point.name == "mark":  # back for the sweep: the application gets a new executor
                spark_cluster.restart_worker(point.worker)
        out, err = run.communicate(timeout=TIMEOUT_S)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        for i, worker in enumerate(spark_cluster.workers):
            if worker.poll() is not None:
                spark_cluster.restart_worker(i)
    assert run.returncode == 0, err[-5000:] + spark_cluster.executor_logs()

    mark, sweep = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    garbage = {scenario.relative(n) for n, survives in EXPECTED_SURVIVORS.items() if not survives}
    store = cloud_env.store(namespace)
    assert {n: store.exists(scenario.relative(n)) for n in scenario.address} == EXPECTED_SURVIVORS
    assert mark["summary"]["num_deleted_objects"] == len(garbage) == sweep["deleted"]
    report = Report(moto, s3_bucket, f"repos/{REPO}/{GC}/unified/{mark['mark_id']}/")
    marked = report.rows("deleted")
    swept = report.rows("swept")
    assert sorted(r["address"] for r in marked) == sorted(garbage)
    assert sorted(r["address"] for r in swept) == sorted(garbage)  # each address once
    assert {r["outcome"] for r in swept} <= {"deleted", "missing"}
    prefix = f"repos/{REPO}/"
    asked = {k[len(prefix) :] for k in hook.asked}
    assert asked <= garbage, asked - garbage  # no live object was asked for
    assert any(hook.points[1].path.endswith(p) for p in report.parts("swept"))  # the lost task's part

    lost = lost_tasks(set(spark_cluster.event_logs.iterdir()) - logs_before)
    assert len(lost) >= 2, lost  # one task at each kill point, at least
    print(f"\nkilled workers {killed}; lost tasks (stage, partition, executor) {sorted(lost)}")


def wait_for(condition: Callable[[], bool], run: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if run.poll() is not None:
            _, err = run.communicate()
            pytest.fail(f"lakefs-gc ended (exit {run.returncode}) before {what}:\n{err[-5000:]}")
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


class Report:
    """A mark's report directory on moto, read with boto3."""

    def __init__(self, moto: MotoServer, bucket: str, prefix: str) -> None:
        self.s3, self.bucket, self.prefix = s3_client(moto), bucket, prefix

    def parts(self, name: str) -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + name
        )
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        return [k for k in keys if k.endswith(".parquet") and not k.rsplit("/", 1)[1].startswith("_")]

    def rows(self, name: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for key in self.parts(name + "/"):
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            rows.extend(pq.read_table(io.BytesIO(body)).to_pylist())
        return rows


def lost_tasks(event_logs: set[Path]) -> set[tuple[int, int, str]]:
    """(stage, partition, executor) of every task lost with its executor whose partition then
    succeeded on another executor, from the application's event log. By ``Partition ID``, not the
    task's ``Index``: a lost task whose retry meets the lost shuffle output (FetchFailed) is run
    again in a new attempt of its stage that holds only the missing partitions, indexed from 0."""
    ends = []
    for path in event_logs:
        for line in path.read_text(errors="replace").splitlines():
            if '"SparkListenerTaskEnd"' in line:
                ends.append(json.loads(line))
    lost, succeeded = set(), set()
    for end in ends:
        info, reason = end["Task Info"], end["Task End Reason"]["Reason"]
        task = (end["Stage ID"], info.get("Partition ID", info["Index"]), info["Executor ID"])
        if reason == "ExecutorLostFailure":
            lost.add(task)
        elif reason == "Success":
            succeeded.add(task)
    return {
        (stage, index, executor)
        for stage, index, executor in lost
        if any(s == stage and i == index and e != executor for s, i, e in succeeded)
    }


pytestmark = [pytest.mark.slow, pytest.mark.timeout(3 * TIMEOUT_S)]
