"""Errors raised in Spark tasks, carried back to the driver whole.

Executors raise our own errors (a corrupt range, an unreachable store, lakeFS refusing a range
location, an inventory data file failing its MD5 or schema check); Spark wraps whatever a task
raised in a ``PythonException`` whose text is the worker's traceback. To hand the operator the
original error (its class, so its exit code, and its fields: an SSTable's file and byte offset,
lakeFS's status), every task body runs :func:`on_executor`, which turns a
:class:`~lakefs_gc.errors.GcError` into a :class:`TaskError` whose message is its **wire
encoding**, one line::

    lakefs-gc-error:{"class": "lakefs_gc.errors.SSTableFormatError", "message": "...",
                     "fields": {"name": "...", "offset": 4096, "reason": "..."}}

and :func:`job_failure` finds that line in the Spark failure and rebuilds the error with
:meth:`GcError.from_wire <lakefs_gc.errors.GcError.from_wire>`, its message prefixed with what the
job was doing. An error of ours without the encoding (raised where no task body wraps it) is
rebuilt from the traceback's last ``lakefs_gc...Error: message`` line, with its message only.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from lakefs_gc.errors import ExitCode, GcError

WIRE_PREFIX = "lakefs-gc-error:"
_WIRE = re.compile(r"lakefs-gc-error:(\{.*\})\s*$", re.MULTILINE)
_RAISED = re.compile(r"^(lakefs_gc(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)
_PYTHON_RAISED = re.compile(r"^((?:\w+\.)*\w*(?:Error|Exception|Interrupt|Exit): .+)$", re.MULTILINE)

T = TypeVar("T")


class SparkJobError(GcError):
    """A Spark job failed for a reason that is not one of ours (JVM error, lost executor...)."""

    exit_code = ExitCode.SPARK


class TaskError(Exception):
    """A :class:`GcError` raised in a Spark task, as its wire encoding (never seen by users)."""


def to_wire(error: GcError) -> str:
    """The one line that carries ``error`` through Spark: its class, message and fields."""
    kind = type(error)
    body = {
        "class": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(error),
        "fields": error.wire_fields(),
    }
    return WIRE_PREFIX + json.dumps(body, default=str)


def from_wire(line: str) -> GcError | None:
    """The error a :func:`to_wire` line describes (None: not one)."""
    match = _WIRE.search(line)
    if match is None:
        return None
    try:
        body = json.loads(match.group(1))
        module, _, name = str(body["class"]).rpartition(".")
        cls = _error_class(module, name)
        return cls.from_wire(str(body["message"]), dict(body.get("fields") or {}))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class on_executor(Generic[T]):
    """A task body whose :class:`GcError` leaves the task wire-encoded (picklable: it holds ``body``)."""

    def __init__(self, body: Callable[[T], Iterable[Any]]) -> None:
        self.body = body

    def __call__(self, batches: T) -> Iterator[Any]:
        return encode_errors(self.body(batches))


def encode_errors(items: Iterable[T]) -> Iterator[T]:
    """``items``, with a :class:`GcError` raised while producing them re-raised as a :class:`TaskError`."""
    try:
        yield from items
    except GcError as e:
        raise TaskError(to_wire(e)) from None


def is_spark_failure(exc: BaseException) -> bool:
    """True for errors raised by Spark or its Py4J bridge (which wrap what the tasks raised)."""
    return type(exc).__module__.startswith(("pyspark", "py4j"))


def job_failure(exc: BaseException, doing: str) -> GcError:
    """The GcError to raise when a Spark action for ``doing`` failed with ``exc``."""
    if isinstance(exc, GcError):
        return exc
    text = str(exc)
    lines = _WIRE.findall(text)
    error = from_wire(WIRE_PREFIX + lines[-1]) if lines else None
    if error is None:
        matches = _RAISED.findall(text)
        if matches:
            module, name, message = matches[-1]
            error = _error_class(module, name).from_wire(message.strip(), {})
    if error is not None:
        error.args = (f"{doing}: {error}",)
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
