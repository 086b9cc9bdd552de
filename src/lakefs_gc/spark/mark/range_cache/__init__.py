"""The range cache: metarange and range contents kept by id between a service's marks.

:mod:`.cache` is the driver side (records, planning; its docstring has the layout and the
guarantees), :mod:`.generation` one generation's record, :mod:`.retention` the byte cap,
:mod:`.tasks` the executor side (reading ranges into cache parts, lookups), :mod:`.committed` every
address the active ranges hold, kept once between marks (the classification's), :mod:`.heads` the
identity-twin guard's HEAD trees through the cache.
"""

from lakefs_gc.spark.mark.range_cache.cache import RangeCache, committed_frames_cached, plan_metaranges
from lakefs_gc.spark.mark.range_cache.generation import Generation
from lakefs_gc.spark.mark.range_cache.tasks import Part, RangeCacheError

__all__ = [
    "Generation",
    "Part",
    "RangeCache",
    "RangeCacheError",
    "committed_frames_cached",
    "plan_metaranges",
]
