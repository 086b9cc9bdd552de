"""Where Spark checkpoints live: a local directory or a Hadoop URI, and the files we keep beside them.

Spark writes a streaming query's offset and commit logs through Hadoop's ``FileSystem``, so a
checkpoint location is whatever the cluster's Hadoop opens: a local path or ``file://`` on the
driver (a persistent volume on Kubernetes), ``s3a://bucket/prefix`` with the ``hadoop-aws``
connector jars, ``abfss://container@account.dfs.core.windows.net/prefix`` with ``hadoop-azure``.
Spark gets the location exactly as configured. Beside Spark's logs, each checkpoint holds a few
files of ours that must be kept, or reset, with it (the stream id, the inventory delivery log);
those we reach through ``pyarrow.fs`` like the state (``s3a://`` as ``s3://``, ``abfss://`` as the
Azure blob of the same account and container, with the storage section's credentials). Only the
driver ever touches either.

``s3://`` is refused: open-source Hadoop has no filesystem for it (only EMR's EMRFS does), so a
query would fail at its first batch; so are forms ``pyarrow`` cannot reach (``hdfs://``, ``gs://``,
``wasbs://``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lakefs_gc.errors import ConfigError, GcError
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, uri_scheme

#: Hadoop filesystems a checkpoint may be on, and what else to say about the ones it may not
HADOOP_SCHEMES = ("file", "s3a", "abfss", "abfs")
_REFUSED = {
    "s3": "open-source Hadoop has no s3:// filesystem (only EMR's EMRFS does): give s3a://bucket/prefix, "
    "which needs the hadoop-aws connector jars (and its AWS SDK bundle) on the cluster and its "
    "credentials in spark.hadoop.fs.s3a.*",
    "s3n": "s3n:// was removed from Hadoop: give s3a://bucket/prefix (hadoop-aws connector jars)",
    "http": "an https:// blob URL is not a Hadoop filesystem: give "
    "abfss://<container>@<account>.dfs.core.windows.net/<prefix> (hadoop-azure connector jars)",
}
_REFUSED["https"] = _REFUSED["http"]


def checkpoint_problem(location: str) -> str | None:
    """Why ``location`` cannot hold Spark checkpoints (None: it can)."""
    scheme = uri_scheme(location).lower()
    if not scheme:
        return None
    if scheme in _REFUSED:
        return f"{location!r}: {_REFUSED[scheme]}"
    if scheme not in HADOOP_SCHEMES:
        return (
            f"{location!r}: unsupported checkpoint location (expected a local directory, file://, "
            "s3a:// or abfss://; lakefs-gc keeps files of its own beside Spark's and reaches them "
            "through pyarrow, which opens these)"
        )
    try:
        parse_location(location)
    except GcError as e:
        return f"{location!r}: {e}"
    return None


@dataclass(frozen=True)
class CheckpointRoot:
    """A checkpoint location: ``spark`` as Spark gets it, ``files`` for the files we keep in it."""

    spark: str
    files: StoreDirectory

    @classmethod
    def of(
        cls, location: CheckpointRoot | str | os.PathLike[str], options: StorageOptions | None = None
    ) -> CheckpointRoot:
        """``location`` (a path: absolute as given, ``~`` expanded); a clear error if Spark or we cannot
        use it."""
        if isinstance(location, CheckpointRoot):
            return location
        text = os.fspath(location)
        problem = checkpoint_problem(text)
        if problem is not None:
            raise ConfigError(f"service.checkpoints {problem}")
        if not uri_scheme(text):
            path = Path(text).expanduser().resolve()
            return cls(str(path), StoreDirectory.of(path, options))
        return cls(text, StoreDirectory(parse_location(text), options or StorageOptions()))

    @property
    def local_path(self) -> Path | None:
        """The directory on the driver, when it is one."""
        return self.files.local_path if self.files.is_local else None

    def sub(self, relative: str) -> CheckpointRoot:
        relative = relative.strip("/")
        return CheckpointRoot(f"{self.spark.rstrip('/')}/{relative}", self.files.sub(relative))

    def __str__(self) -> str:
        return self.spark
