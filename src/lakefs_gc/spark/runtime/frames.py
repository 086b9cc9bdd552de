"""Small driver-side tables as Spark frames that read without a Python worker.

``spark.createDataFrame`` of a Python list is a Python RDD of pickled rows: every action that
scans it runs Python tasks to unpickle them again. The task lists our jobs hand to ``mapInArrow``
(files, buckets, metaranges) and the small tables the mark joins with are scanned by every
action built on them, so that cost is paid over and over: 350 ms an action of a join of ten
rows with itself, against 105 ms for the same rows as an Arrow table (a ``LocalRelation``, which
the JVM scans itself; measured on 2 cores, local mode). :func:`local_frame` builds the Arrow table,
and :func:`task_frame` the task lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def local_frame(spark: SparkSession, rows: Iterable[Sequence[Any]], ddl: str) -> DataFrame:
    """``rows`` (tuples in the order of ``ddl``'s columns, e.g. ``"path string, size long"``) as a
    frame of that schema, held in the plan as an Arrow table. For tables the driver holds anyway
    (thousands of rows, not millions): the rows travel inside the plan. A timestamp without a
    time zone is read in the session's (``spark.sql.session.timeZone``, UTC in our sessions)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_string

    schema = _parse_datatype_string(ddl)
    if not isinstance(schema, StructType):
        raise ValueError(f"not a table schema: {ddl!r}")
    arrow = to_arrow_schema(schema, timezone=spark.conf.get("spark.sql.session.timeZone") or "UTC")
    columns = list(zip(*rows, strict=True)) or [() for _ in arrow]
    arrays = [pa.array(column, type=field.type) for column, field in zip(columns, arrow, strict=True)]
    return spark.createDataFrame(pa.Table.from_arrays(arrays, schema=arrow), schema)


def task_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], ddl: str, parallelism: int) -> DataFrame:
    """A task list: :func:`local_frame` of ``rows`` in ``min(parallelism, len(rows))`` partitions
    (one at least), so that the ``mapInArrow`` built on it runs that many tasks, each over its
    share of the rows. A local relation alone is one partition: one task would do all the work."""
    frame = local_frame(spark, rows, ddl)
    return frame.repartition(max(1, min(parallelism, len(rows))))
