"""lakeFS access: the API (via lakefs-sdk) and the exports it writes for a GC run.

Modules: ``settings`` (endpoint/credentials the lakectl way), ``retry`` (which failures to retry),
``client`` (the API calls), ``uncommitted`` (safe pagination of the uncommitted dump),
``exports`` (commits CSV and uncommitted parquet readers; imports pyarrow), ``addresses``
(committed address normalisation) and ``ranges`` (metarange/range reading; imports pyarrow).
"""

from lakefs_gc.lakefs.addresses import normalize_committed_address
from lakefs_gc.lakefs.client import CommitsExport, LakeFSClient, PollingPolicy, Repository
from lakefs_gc.lakefs.retry import RetryPolicy
from lakefs_gc.lakefs.settings import LakeFSConnection, default_lakectl_config_path, resolve_connection
from lakefs_gc.lakefs.uncommitted import UncommittedDump

__all__ = [
    "CommitsExport",
    "LakeFSClient",
    "LakeFSConnection",
    "PollingPolicy",
    "Repository",
    "RetryPolicy",
    "UncommittedDump",
    "default_lakectl_config_path",
    "normalize_committed_address",
    "resolve_connection",
]
