"""What to synthesize (:class:`SynthSpec`) and what came out (:class:`SynthReport`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from lakefs_gc.errors import ConfigError

#: lakeFS's GC design states its bottom line on this repository ("Minimal Performance Bottom
#: Line" of the uncommitted-GC design): 20M objects, 1K branches, 30K commits, 5M uncommitted, 1M stale
BOTTOM_LINE = {"objects": 20_000_000, "branches": 1_000, "commits": 30_000, "uncommitted": 5_000_000,
               "garbage": 1_000_000}  # fmt: skip
#: lakeFS's defaults: ``committed.permanent.range_raggedness_entries`` and ``max_range_size_bytes``
LAKEFS_RANGE_ENTRIES = 50_000
LAKEFS_RANGE_MAX_BYTES = 20 * 1024 * 1024

InventoryFormat = Literal["parquet", "csv"]


@dataclass(frozen=True)
class SynthSpec:
    """The repository to write; see the package docstring for what each count means."""

    repository: str = "synth"
    namespace: str | None = None  # default local://<repository>
    objects: int = 10_000
    commits: int = 100
    days: int = 30
    branches: int = 10  # existing at the end, main included; deleted ones come on top
    uncommitted: int = 1_000
    garbage: int = 1_000
    retention_days: int = 7
    #: median bytes per object; sizes are lognormal with ``size_sigma`` (0: all ``object_size``)
    object_size: int = 256 * 1024
    size_sigma: float = 2.0
    seed: int = 0
    #: expected entries per range (lakeFS's raggedness); 0: sqrt(objects) in [100, 50,000]
    range_entries: int = 0
    range_max_bytes: int = LAKEFS_RANGE_MAX_BYTES
    #: tables (key prefixes) commits append to; 0: one per 100 main commits, at most 1,000
    tables: int = 0
    #: objects per data slice (``data/<slice>/``): lakeFS's design measured 2K slices of 10K
    slice_objects: int = 10_000
    #: write every object as a file (False: only metadata, and an inventory describes the objects)
    physical: bool = True
    #: blocks of recently touched ranges kept in memory (the rest is read back from storage)
    cache_mib: int = 16

    def __post_init__(self) -> None:
        for name in ("objects", "uncommitted", "garbage", "tables", "range_entries"):
            if getattr(self, name) < 0:
                raise ConfigError(f"synth: --{name.replace('_', '-')} must not be negative")
        for name in ("commits", "branches", "days", "object_size", "slice_objects", "range_max_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"synth: --{name.replace('_', '-')} must be at least 1")
        if self.size_sigma < 0:
            raise ConfigError("synth: --size-sigma must not be negative")
        if self.retention_days < 1:
            raise ConfigError("synth: --retention-days must be at least 1")
        if self.garbage and self.days < self.retention_days + 3:
            raise ConfigError(
                f"synth: garbage needs history older than the retention: --days ({self.days}) must be at "
                f"least --retention-days + 3 ({self.retention_days + 3})"
            )

    @property
    def effective_range_entries(self) -> int:
        """sqrt(objects) minimises the metadata a history writes: each commit rewrites about one
        range (∝ range size) and one metarange (∝ objects / range size)."""
        if self.range_entries:
            return self.range_entries
        return min(LAKEFS_RANGE_ENTRIES, max(100, math.isqrt(max(self.objects, 1))))


@dataclass
class SynthReport:
    repository: str
    namespace: str
    seconds: float = 0.0
    physical_objects: int = 0
    commits: int = 0
    branches: int = 0
    deleted_branches: int = 0
    live: int = 0
    garbage: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    tables: int = 0
    range_entries: int = 0
    ranges_written: int = 0
    range_records_written: int = 0
    metaranges_written: int = 0
    metadata_bytes: int = 0
    head_ranges: int = 0
    staged_entries: int = 0
    manifest: str = ""
    inventory: str = ""
    peak_rss_mib: int = 0
