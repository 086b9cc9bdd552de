"""lakefs-gc: a garbage collector for lakeFS repositories on Apache Spark."""

from lakefs_gc.errors import GcError

__version__ = "0.1.0"

__all__ = ["GcError", "__version__"]
