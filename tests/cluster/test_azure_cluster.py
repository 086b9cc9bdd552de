"""The batch GC on the standalone cluster with the storage namespace on Azure (Azurite).

The same isolation as :mod:`tests.cluster.test_standalone` (workers without the driver's disk);
the namespace is an Azure ``https://<account>.blob.core.windows.net/<container>/…`` location on
Azurite, so the executors list, read and write it through ``pyarrow``'s Azure filesystem with the
account key of the storage section. The key reaches them pickled inside the tasks' settings
(a ``SecretStr``), never as a Spark setting: the event log, which records every Spark property
and the environment of the application, must not contain it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.test_standalone import TIMEOUT_S, run_unified_gc_on_the_cluster
from tests.support.gc_env import GcEnv
from tests.support.servers import AzuriteServer
from tests.support.spark_cluster import StandaloneCluster


def test_batch_run_on_the_cluster_on_azure(
    spark_cluster: StandaloneCluster, cloud_env: GcEnv, azurite: AzuriteServer, azure_container: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    """lakeFS's TestUnifiedGC scenario on Azurite through ``lakefs-gc run --spark-master spark://…``."""
    namespace = f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}/repos/unified"
    azure = {"account_key": azurite.account_key, "blob_endpoint": azurite.blob_endpoint}
    run_unified_gc_on_the_cluster(
        spark_cluster, cloud_env, namespace, {"azure": azure}, tmp_path, azurite.account_key
    )


pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * TIMEOUT_S)]
