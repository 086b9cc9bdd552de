"""Synthetic lakeFS repositories at any size, streamed: memory does not grow with the objects.

``synth`` writes a repository straight into the test server's state (SQLite: repository,
commits, branches, staging, GC rules) and storage namespace (objects, ranges, metaranges), so
that ``lakefs-gc test-server`` with the same state directory and storage root serves it, then a
ground-truth manifest telling, for every physical object, whether a correct GC must delete it.
Everything is written as it is generated; what stays in memory is a few numbers per commit and
per branch, one tree's range list and the blocks of recently touched ranges (bounded).

The shape (every count is a parameter; lakeFS's GC design states its bottom line on 20M objects,
1K branches, 30K commits, 5M uncommitted and 1M stale objects: ``--bottom-line``):

commits      about 2/3 on main, 1/3 on live branches, plus 1-3 on each deleted branch; main's
             spread evenly over --days (jittered). No commit within a day of the retention
             threshold, so which commits are active does not depend on when, that day, GC runs.
objects      committed objects in the branch heads at the end. Each commit appends one
             partition, tables/tNNNN/date=YYYY-MM-DD/part-PID-N.parquet, to one table drawn by
             Zipf(1.1) popularity (--tables, default one per 100 main commits, hot tables spread
             over the key space); its size is lognormal (sigma 1): many small commits, a few
             big loads; a branch commit adds a tenth of a main one on average.
ranges       split as lakeFS splits them: after a key whose FNV-1a 64 hash is divisible by
             --range-entries (lakeFS's range_raggedness_entries, 50,000 by default; here
             sqrt(objects) by default, which minimises what a long history writes: a commit
             rewrites ranges in proportion to their size and a metarange in proportion to their
             number), or at --range-max-bytes (lakeFS: 20 MiB). A commit rewrites only the ranges
             its changes fall into, as lakeFS's committer does; appends land at a table's end,
             inside the key space, so a commit touches one range (two or three with scratch
             data and overwrites) and shares every other range with its parent.
addresses    data/<slice>/<xid>, slices of --slice-objects (10,000: 2K slices at 20M objects,
             as in the design's listing experiment).
branches     --branches - 1 besides main (one hidden), forked at uniformly drawn main commits, so
             most keep an old tree alive; 40% never commit, the others share the branch
             commits by Pareto(1.2) weights (a few busy branches).
uncommitted  staged objects on main (weight 5) and the live branches (Pareto(1) weights); 10%
             re-upload committed paths; 1% more staged entries delete committed paths.
garbage      exactly --garbage objects when the history has room for them: 40% short-lived
             scratch data (written under a table's _tmp/, deleted by the next commit), 30%
             overwritten partition parts (re-uploaded by the next commit), both only at commits
             older than the retention that no live branch starts from; 15% on deleted branches
             (committed before the retention, plus what they had staged); 15% reset uploads,
             2 days old or more. The same scratch and overwrite churn goes on after the
             threshold, where it is kept (still referenced by active commits).

The ground truth takes lakeFS's active commits (the retention algorithm of the test server) on
the finished commit graph; an object is garbage iff no active commit's tree holds it and no live
branch stages it (see :mod:`.ledger`). The manifest is a directory of parquet parts (address,
size, last_modified, kind, garbage). Object sizes are lognormal (median ``object_size``, default
256 KiB, ``size_sigma`` 2), so two objects rarely share one, as in a data lake; physical objects
are sparse files. With ``physical=False`` (``--no-objects``) no object is
written; an S3 Inventory delivery (Parquet, or gzip CSV with form-encoded keys) lists them the
way a 20M-object namespace is marked in production: ``lakefs-gc mark --inventory DEST``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lakefs_gc.testing.synth.spec import BOTTOM_LINE, InventoryFormat, SynthReport, SynthSpec

if TYPE_CHECKING:
    from lakefs_gc.testing.context import ServerContext
    from lakefs_gc.testing.synth.outputs import InventoryTarget

__all__ = ["BOTTOM_LINE", "InventoryFormat", "SynthReport", "SynthSpec", "synthesize"]


def synthesize(
    ctx: ServerContext,
    spec: SynthSpec,
    *,
    manifest: Path | None = None,
    inventory: InventoryTarget | None = None,
    progress: Callable[[str], None] = print,
) -> SynthReport:
    """Write the repository ``spec`` describes into the server state and storage of ``ctx``."""
    from lakefs_gc.testing.synth.generator import generate

    return generate(ctx, spec, manifest=manifest, inventory=inventory, progress=progress)
