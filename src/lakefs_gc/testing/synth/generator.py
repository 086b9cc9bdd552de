"""One synthesis: plan, history, ground truth, outputs."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from lakefs_gc.storage.locations import parse_storage_namespace
from lakefs_gc.testing.context import ServerContext
from lakefs_gc.testing.retention import GCRules, active_commits
from lakefs_gc.testing.synth.history import History
from lakefs_gc.testing.synth.ledger import liveness
from lakefs_gc.testing.synth.objects import Objects
from lakefs_gc.testing.synth.outputs import InventoryTarget, write_outputs
from lakefs_gc.testing.synth.plan import make_plan
from lakefs_gc.testing.synth.spec import SynthReport, SynthSpec
from lakefs_gc.testing.synth.tables import RangeSplit, Tables


def generate(
    ctx: ServerContext,
    spec: SynthSpec,
    *,
    manifest: Path | None,
    inventory: InventoryTarget | None,
    progress: Callable[[str], None],
) -> SynthReport:
    started = time.perf_counter()
    namespace = spec.namespace or f"local://{spec.repository}"
    store = ctx.namespace_store(namespace)
    now = ctx.now()
    plan = make_plan(spec, now)
    split = RangeSplit(spec.effective_range_entries, spec.range_max_bytes)
    tables = Tables(store, split, spec.cache_mib << 20)
    objects = Objects(store, spec.seed, spec.slice_objects, spec.object_size, spec.physical, spec.size_sigma)
    history = History(ctx, spec, plan, namespace, tables, objects, progress)
    try:
        history.run()
    finally:
        objects.close()
    tables.forget()  # the cached blocks are of no use to the outputs
    heads = {name: head for name, (head, _hidden) in history.heads.items()}
    active = active_commits(history.nodes, heads, GCRules(spec.retention_days, {}), now)
    forked: dict[int, list[str]] = {}
    for b in plan.branches:
        forked.setdefault(b.fork, []).extend(history.branch_ids[b.index])
    live = liveness(active, history.main_ids, forked, history.branch_ids)
    progress(f"{len(active):,} active commits of {len(history.nodes):,}; writing the manifest")
    target = None
    if inventory is not None:
        location = parse_storage_namespace(namespace, local_root=ctx.settings.storage.local_root)
        target = (inventory, location, ctx.settings.storage)
    snapshot = datetime.now(timezone.utc)
    counts, delivery = write_outputs(history.ledger.groups, live, objects, manifest, target, snapshot)
    stats = tables.stats
    report = SynthReport(
        spec.repository, namespace, commits=len(history.nodes), branches=len(history.heads),
        deleted_branches=sum(1 for b in plan.branches if b.deleted), physical_objects=counts.physical,
        garbage=counts.garbage, live=counts.physical - counts.garbage,
        by_kind=dict(sorted(counts.by_kind.items())),
        tables=plan.tables, range_entries=split.raggedness, ranges_written=stats.ranges,
        range_records_written=stats.range_records, metaranges_written=stats.metaranges,
        metadata_bytes=stats.bytes, head_ranges=history.head_ranges, staged_entries=history.staged_entries,
        manifest=str(manifest or ""), inventory=delivery,
    )  # fmt: skip
    report.seconds = round(time.perf_counter() - started, 1)
    report.peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return report
