"""Turning a failed Spark job back into the :class:`GcError` an executor task raised.

Executors raise our own errors (a corrupt range, an unreachable store, lakeFS refusing a range
location, an inventory data file failing its MD5 or schema check); Spark wraps them in a
``PythonException`` whose text holds the Python traceback. The operator should see the original
one-line message and the CLI should exit with that error's code, so the class and message are
recovered from the traceback's last ``lakefs_gc...Error: message``.
"""

from __future__ import annotations

import importlib
import re

from lakefs_gc.errors import ExitCode, GcError

_RAISED = re.compile(r"^(lakefs_gc(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)
_PYTHON_RAISED = re.compile(r"^((?:\w+\.)*\w*(?:Error|Exception|Interrupt|Exit): .+)$", re.MULTILINE)


class SparkJobError(GcError):
    """A Spark job failed for a reason that is not one of ours (JVM error, lost executor...)."""

    exit_code = ExitCode.SPARK


def is_spark_failure(exc: BaseException) -> bool:
    """True for errors raised by Spark or its Py4J bridge (which wrap what the tasks raised)."""
    return type(exc).__module__.startswith(("pyspark", "py4j"))


def job_failure(exc: BaseException, doing: str) -> GcError:
    """The GcError to raise when a Spark action for ``doing`` failed with ``exc``."""
    if isinstance(exc, GcError):
        return exc
    text = str(exc)
    matches = _RAISED.findall(text)
    if matches:
        module, name, message = matches[-1]
        cls = _error_class(module, name)
        error = cls.__new__(cls)
        Exception.__init__(error, f"{doing}: {message.strip()}")
        error.__dict__.setdefault("status", None)  # LakeFSError's attribute, for callers that read it
        return error
    raised = _PYTHON_RAISED.findall(text)  # what a Python task raised: its traceback's last line
    first = raised[-1] if raised else next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return SparkJobError(f"{doing} failed in Spark: {(first or type(exc).__name__)[:800]}")


def _error_class(module: str, name: str) -> type[GcError]:
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        found = None
    if isinstance(found, type) and issubclass(found, GcError):
        return found
    return SparkJobError
