"""The batch GC on the standalone cluster with the storage namespace on Azure (Azurite).

The same isolation as :mod:`tests.cluster.test_standalone` (workers without the driver's disk);
the namespace is an Azure ``https://<account>.blob.core.windows.net/<container>/…`` location on
Azurite, so the executors list, read and write it through ``pyarrow``'s Azure filesystem with the
account key of the storage section. The key reaches them pickled inside the tasks' settings
(a ``SecretStr``), never as a Spark setting: the event log, which records every Spark property
and the environment of the application, must not contain it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cluster.test_standalone import TIMEOUT_S, assert_ran_on_both_workers, lakefs_gc, spark_section
from tests.support.gc_env import GcEnv
from tests.support.servers import AzuriteServer
from tests.support.spark_cluster import StandaloneCluster
from tests.testing.unified_gc import EXPECTED_SURVIVORS, build_unified_gc


def test_batch_run_on_the_cluster_on_azure(
    spark_cluster: StandaloneCluster, cloud_env: GcEnv, azurite: AzuriteServer, azure_container: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    """lakeFS's TestUnifiedGC scenario on Azurite through ``lakefs-gc run --spark-master spark://…``."""
    namespace = f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}/repos/unified"
    scenario = build_unified_gc(cloud_env.lakefs, "unified", namespace)
    before = spark_cluster.executors_with_tasks()
    config = tmp_path / "cluster.yaml"
    azure = {"account_key": azurite.account_key, "blob_endpoint": azurite.blob_endpoint}
    config.write_text(yaml.safe_dump({"storage": {"azure": azure}, "spark": spark_section(spark_cluster)}))
    info = cloud_env.server.connection_info()
    run = lakefs_gc(
        ["run", "--repo", "unified", "--yes", "--unsafe-min-age", "0s", "--output", "json",
         "--max-delete-fraction", "1", "--spark-master", spark_cluster.master_url, "--config", str(config),
         "--lakefs-endpoint", info["endpoint"], f"--lakefs-access-key-id={info['access_key_id']}",
         f"--lakefs-secret-access-key={info['secret_access_key']}"],
        tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-5000:] + spark_cluster.executor_logs()
    mark, sweep = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    garbage = [n for n, survives in EXPECTED_SURVIVORS.items() if not survives]
    assert mark["summary"]["num_deleted_objects"] == len(garbage) == sweep["deleted"]
    store = cloud_env.store(namespace)
    assert {n: store.exists(scenario.relative(n)) for n in scenario.address} == EXPECTED_SURVIVORS
    assert_ran_on_both_workers(spark_cluster, before, info["secret_access_key"], azurite.account_key)


pytestmark = pytest.mark.timeout(2 * TIMEOUT_S)
