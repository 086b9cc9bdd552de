"""An always-on service must not grow ``/metrics``: every label comes from a closed set.

The service runs several GC cycles on moto S3 + SQS while the history goes on (new commits, so
new lakeFS prepare-commits tasks and new ranges; new orphans, so new deletions). After the first
cycle has created every series a cycle creates, the number of series stays the same.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import SparkSession

from lakefs_gc.lakefs.client import OPERATIONS
from lakefs_gc.service.app import GcService
from tests.service.conftest import S3World, Served
from tests.service.histories import (
    History,
    Marks,
    Samples,
    expired_commits,
    mark_records,
    one_cycle,
    orphan,
    pause_cycles,
    running,
    scrape,
    service_settings,
    wait_for,
)

REPO = "series"


def series(samples: Samples) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return set(samples)


def test_the_number_of_series_stays_constant_over_cycles(
    spark: SparkSession, s3_world: S3World, s3_served: Served, tmp_path: Any
) -> None:
    world, served = s3_world, s3_served
    h = History(served.lakefs, REPO, world.namespace(REPO)).create()
    expired_commits(h)
    settings = service_settings(
        served.connection, tmp_path / "state", [REPO], storage=served.storage, events={"s3": world.queue()}
    )
    service = GcService(settings, spark)
    marks = Marks(service, REPO)
    with running(service):
        wait_for(lambda: mark_records(service, REPO), "a first mark", service, poll=0.1)
        pause_cycles(service)
        counts = []
        for i in range(3):
            orphan(h, f"cycle-{i}/gone")
            h.put("main", f"cycle-{i}/kept")
            h.commit("main", f"cycle {i}", days_ago=0)
            one_cycle(service, marks, datetime.now(timezone.utc))
            counts.append(series(scrape(service.status.url)))
        service.request_stop()
        assert service.wait() == 0
    grown = [sorted(b - a) for a, b in itertools.pairwise(counts)]
    assert len(counts[0]) == len(counts[1]) == len(counts[2]), grown
    operations = {dict(labels)["operation"] for name, labels in counts[-1] if "lakefs_api" in name}
    assert operations and operations <= {*OPERATIONS, "other"}  # "other": the fallback, exported at 0
