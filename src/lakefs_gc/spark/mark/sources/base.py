"""What every candidate source gives a mark: the candidate objects, and what to say about them.

Three sources (:mod:`.listing`, :mod:`.inventory`, :mod:`.candidate_set`) give the same DataFrame
(:data:`LISTED_SCHEMA`, one row per address), so the rest of the mark (classification against the
references, the cutoff, the report) does not know which it got.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Progress = Callable[[str], None]
#: the candidates' columns, whichever source gave them
LISTED_SCHEMA = "address string, size long, last_modified timestamp"
#: an optional column after them: the MD5 of the object's bytes where the source proves it (an S3
#: inventory with ETags and encryption status: lakefs_gc.gc.twins.content_md5), else null. The
#: identity-twin guard rules pairs out with it; a source without it proves nothing.
CONTENT_MD5 = "md5"


@dataclass(frozen=True)
class Candidates:
    """The candidate objects of one mark and what their source adds to the report."""

    objects: DataFrame  # LISTED_SCHEMA, one row per address
    first_slice: str | None  # lakeFS's informational field; None: take it from the objects
    stats: dict[str, Any] = field(default_factory=dict)  # source-specific summary keys
    #: ``objects`` are hash-partitioned by address into this many partitions, each sorted by
    #: address (:mod:`.prefetch`); None: as the source read them
    partitions: int | None = None


class CandidateProvider(Protocol):
    """What a mark needs of its candidate source: its report entry and the objects."""

    @property
    def summary(self) -> dict[str, Any]: ...

    def candidates(self, spark: SparkSession, *, parallelism: int, say: Progress) -> Candidates: ...
