"""The standalone Spark cluster, started once for the tests that ask for it
(:mod:`tests.support.spark_cluster`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.service.conftest import s3_served, s3_world  # noqa: F401  (the service tests' S3 world)
from tests.support.spark_cluster import StandaloneCluster, cluster_fixture, isolation_problem


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    problem = isolation_problem()
    if problem is not None:
        pytest.skip(problem)
    yield from cluster_fixture(tmp_path_factory.mktemp("spark-cluster"))
