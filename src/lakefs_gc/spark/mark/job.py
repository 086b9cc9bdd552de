"""The mark: which objects of a repository's storage namespace are garbage, written as a report.

The body reads like the algorithm (:func:`mark_run`)::

    cutoff = now - max(min age, lakeFS's grace period)           # gc.cutoff
    source = listing | inventory snapshot | candidate set         # chosen before lakeFS is asked
    candidates = source, read while lakeFS prepares the dump      # sources.prefetch, kept
    new commits' ranges, into the range cache meanwhile           # range_cache.ahead
    staged = lakeFS's uncommitted dump                            # first, completely
    committed = addresses of the active commits' ranges           # then; ranges read on executors
    garbage = candidates - committed - staged, older than cutoff  # gc.algebra, as joins
    write deleted/, ranges/, metaranges/, then summary.json       # the report, last

Order matters and follows lakeFS's design (docs/formats/lakefs-gc-api.md, "Order of the calls"):
the uncommitted dump completes before the active commits are computed, and ranges are read after
both, so an object committed in between is still seen. The candidates are read during the wait
for the dump (:mod:`lakefs_gc.spark.mark.sources.prefetch`): they say which objects exist, never
which are live, so when they are read does not matter; anything newer than the cutoff is kept
regardless. With an inventory the candidates come from its newest usable snapshot
(:mod:`lakefs_gc.spark.mark.sources.inventory`), chosen before the dump so that a refused
inventory leaves no mark behind.

Fail closed (docs/invariants.md, invariant 4): any error after the dump leaves a ``summary.json``
with ``success=false`` (so no sweep can follow it) and is raised; before the dump there is no
mark id and nothing is written. The report is written last, only after every reference was read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from lakefs_gc import __version__
from lakefs_gc.errors import GcError
from lakefs_gc.gc import reasons
from lakefs_gc.gc.cost import mark_cost
from lakefs_gc.gc.cutoff import Cutoff, compute_cutoff
from lakefs_gc.gc.params import MarkParams
from lakefs_gc.gc.ports import Clock, RepositoryInfo, StagedExport, utc_now
from lakefs_gc.gc.reports import COMMITS_EXPORT_RUN_ID, MarkSummary
from lakefs_gc.lakefs.addresses import collectable_namespace
from lakefs_gc.lakefs.commit_graph import CheckedCommits, cross_check_export
from lakefs_gc.lakefs.exports import ActiveCommits
from lakefs_gc.lakefs.uncommitted import UncommittedDumpError
from lakefs_gc.spark.mark.algebra import classify, garbage, keep_as
from lakefs_gc.spark.mark.during_dump import DumpWait
from lakefs_gc.spark.mark.head_contents import heads_to_read, split_references
from lakefs_gc.spark.mark.range_cache.ahead import with_read_ahead
from lakefs_gc.spark.mark.range_cache.cache import RangeCache, committed_frames_cached
from lakefs_gc.spark.mark.range_cache.heads import CachedHeadTrees
from lakefs_gc.spark.mark.references import (
    Committed,
    LakeFSRefs,
    MetadataReader,
    committed_frames,
    dump_frame,
    read_commits_export,
)
from lakefs_gc.spark.mark.result import MarkResult
from lakefs_gc.spark.mark.sources import CandidateProvider, candidate_source
from lakefs_gc.spark.mark.sources.base import CONTENT_MD5
from lakefs_gc.spark.mark.tally import Tally, observed_garbage, tally
from lakefs_gc.spark.mark.twin_evidence import marked_sizes, marked_with_evidence
from lakefs_gc.spark.mark.twins import guard_twins, guard_twins_none
from lakefs_gc.spark.report.layout import ReportDir
from lakefs_gc.spark.report.write import write_marked, write_metaranges, write_ranges, write_summary
from lakefs_gc.spark.runtime.failures import is_spark_failure, job_failure
from lakefs_gc.spark.runtime.memory import release_free_memory
from lakefs_gc.sstable.catalog import epoch_ns
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_log = logging.getLogger(__name__)

Progress = Callable[[str], None]

#: lakeFS's LinkAddressTime, assumed for servers too old to report their grace period
DEFAULT_GRACE_PERIOD = timedelta(hours=24)


def mark_run(
    spark: SparkSession,
    params: MarkParams,
    refs: LakeFSRefs,
    source: CandidateProvider | None = None,
    clock: Clock = utc_now,
    *,
    progress: Progress | None = None,
    range_cache: RangeCache | None = None,
) -> MarkResult:
    """Mark the garbage of ``params.repository``; see the module docstring for the guarantees.

    ``source``: where the candidates come from (the service's candidate set); default: a listing
    of the namespace, or the inventory snapshot ``params.inventory`` names.
    ``range_cache``: keep metarange and range contents there between marks, so that a mark reads
    from lakeFS only those it has not seen (:mod:`lakefs_gc.spark.mark.range_cache`).
    """
    say = progress or _log.info
    start, client, repository = clock(), refs.api, params.repository
    repo = client.get_repository(repository)
    namespace = collectable_namespace(repo, client.blockstore_type(repo.storage_id), refs.storage.local_root)
    grace = client.grace_period(default=DEFAULT_GRACE_PERIOD)
    min_age, unsafe = params.min_age, params.unsafe_min_age
    cutoff = compute_cutoff(start, grace_period=grace, min_age=min_age, unsafe_min_age=unsafe)
    say(f"{repository}: cutoff {cutoff.time.isoformat()} ({cutoff.reason}); "
        f"namespace {repo.storage_namespace}")  # fmt: skip
    # before the dump: a refused inventory leaves nothing behind
    source = source or candidate_source(params, namespace, refs.storage, now=start, say=say)
    reader = MetadataReader(refs.connection, repository, repo.storage_namespace, namespace, refs.storage)
    context = _MarkContext(
        spark, params, refs, repo, namespace, cutoff, source, start, clock, say, reader, range_cache
    )
    # read while lakeFS prepares the dump (during_dump.py: the mark's guarantees are unchanged)
    found = DumpWait.start(
        spark, source, parallelism=context.parallelism, say=lambda m: say(f"{repository}: {m}"),
        range_cache=range_cache, reader=reader, graph=refs.graph, now=start, heads=params.trust_checksums,
    )  # fmt: skip
    say(f"{repository}: asking lakeFS for the uncommitted dump")
    try:
        dump = client.prepare_uncommitted(repository, storage_namespace=repo.storage_namespace)
    except BaseException as e:
        found.close()
        if isinstance(e, UncommittedDumpError):  # lakeFS had started run e.run_id: record the mark as failed
            _MarkRun(context, e.run_id, None).fail(e)
        raise
    return _MarkRun(context, dump.run_id, dump, found).execute()


@dataclass(frozen=True)
class _MarkContext:
    """What a mark knows before lakeFS gives it a run id."""

    spark: SparkSession
    params: MarkParams
    refs: LakeFSRefs
    repo: RepositoryInfo
    namespace: StorageLocation
    cutoff: Cutoff
    source: CandidateProvider
    start: datetime
    clock: Clock
    say: Progress
    reader: MetadataReader  # the metaranges and ranges, on the executors
    range_cache: RangeCache | None = None

    @property
    def parallelism(self) -> int:
        return self.params.parallelism or self.spark.sparkContext.defaultParallelism


class _MarkRun:
    """One mark after the dump: everything that must end in a report, success or not."""

    def __init__(
        self, c: _MarkContext, run_id: str, dump: StagedExport | None, found: DumpWait | None = None
    ) -> None:
        self.found = found  # candidates and ranges, being read (None: a mark that only records its failure)
        self.spark, self.params, self.refs, self.repo = c.spark, c.params, c.refs, c.repo
        self.namespace, self.cutoff, self.source = c.namespace, c.cutoff, c.source
        self.run_id, self.dump = run_id, dump
        self.report = ReportDir(c.namespace, run_id, c.refs.storage)
        self.start, self.clock, self.say = c.start, c.clock, c.say
        self.range_cache, self.reader = c.range_cache, c.reader
        self.parallelism = c.parallelism
        self.stats: dict[str, Any] = {"candidates": c.source.summary}
        self.first_slice = ""
        self.persisted: list[DataFrame] = []
        self.ranges_ahead: dict[str, Any] = {}  # what the range cache's read-ahead read

    def execute(self) -> MarkResult:
        try:
            marked, marked_bytes = self._mark()
        except BaseException as e:
            error = job_failure(e, f"mark {self.run_id} of {self.repo.id}") if is_spark_failure(e) else e
            self.fail(error)
            if error is e:
                raise
            raise error from e
        finally:
            if self.found is not None:
                self.found.close()
            for df in self.persisted:
                df.unpersist()
        summary = self._summary(True, marked, {"num_deleted_bytes": marked_bytes})
        write_summary(self.report, summary)
        self.say(f"{self.repo.id}: marked {marked} objects ({marked_bytes} bytes); report {self.report}")
        return self._result(summary)

    def _mark(self) -> tuple[int, int]:
        assert self.dump is not None
        uncommitted = self._uncommitted(self.dump)
        self.say(f"{self.repo.id}: asking lakeFS for the active commits")
        export_run_id, commits = read_commits_export(
            self.refs.api,
            self.repo.id,
            options=self.refs.storage,
            timeout=self.params.prepare_commits_timeout,
        )
        self.stats[COMMITS_EXPORT_RUN_ID] = export_run_id  # the service's retention removes that export
        assert self.found is not None
        self.ranges_ahead = self.found.ranges_read()  # before the cross-check (range_cache/ahead.py)
        checked = self._cross_check(commits, export_run_id)
        metaranges = commits.metarange_ids
        self.stats.update(num_active_commits=len(commits.commits) + commits.without_metarange)
        self.stats.update(num_metaranges=len(metaranges))
        heads = heads_to_read(checked.graph, metaranges) if self.params.trust_checksums else None
        # what only the cross-check keeps is told apart (``retained``) for the summary
        read = self._committed(metaranges, heads=heads, retained=list(checked.extra_metaranges))
        range_ids, committed, retained = read.range_ids, read.addresses, read.retained
        metaranges = sorted({*metaranges, *checked.extra_metaranges})
        range_ids = self._persist(range_ids)
        self.say(
            f"{self.repo.id}: {len(commits.commits)} active commits, {len(metaranges)} metaranges; "
            f"reading ranges on {self.parallelism} partitions"
        )
        found = self.found.candidates_read()
        self.stats.update(found.stats)
        evidence = CONTENT_MD5 in found.objects.columns
        contents = None  # with content evidence, the HEAD ranges are read once for the guard too
        if read.with_heads is not None and evidence:
            committed, contents = split_references(self._persist(read.with_heads))
        level = read.lookup if contents is None else None  # the range cache's level (None: no cache)
        if level is not None:
            self.stats["range_cache"]["committed_in_place"] = int(level.fits(found.partitions))
        marked_rows, observation = observed_garbage(
            classify(
                found.objects, committed=committed if level is None else level, uncommitted=uncommitted,
                cutoff=self.cutoff, retained=retained, committed_unique=read.unique and contents is None,
                partitions=found.partitions,
            )
        )  # fmt: skip
        marked_rows = self._persist(marked_rows)
        rows = marked_rows.count()  # one pass over every candidate: the observation is complete
        self.say(f"{self.repo.id}: classified: {rows:,} garbage before the identity-twin guard")
        heads = heads if evidence else None
        guarded = self._guard_twins(marked_rows, rows, found.objects, checked, contents, heads)
        counts, first_slice = self._tally(tally(observation, guarded, f"mark {self.run_id}"), checked)
        self.first_slice = first_slice if found.first_slice is None else found.first_slice
        self.say(f"{self.repo.id}: writing the report")
        self.stats["num_ranges"] = write_ranges(range_ids, self.report)  # for a revalidation to skip
        write_metaranges(metaranges, self.report)  # after ranges/: all their ranges are recorded
        marked, marked_bytes = write_marked(garbage(guarded), self.report)
        self.stats["cost"] = mark_cost(self.namespace.kind, marked, marked_bytes, self.params.prices)
        expected = counts[reasons.GARBAGE]["objects"]
        if marked != expected:
            raise GcError(f"mark {self.run_id}: wrote {marked} marked addresses but counted {expected}")
        return marked, marked_bytes

    def _cross_check(self, commits: ActiveCommits, export_run_id: str) -> CheckedCommits:
        """lakeFS's active commits against the documented rule (invariant 6); the union is kept."""
        self.say(f"{self.repo.id}: cross-checking the active commits with the commit graph")
        checked = cross_check_export(
            self.refs.graph, self.repo.id, commits, export_run_id=export_run_id, start=self.start
        )
        release_free_memory()  # the pages the graph's reading and walk freed (spark/runtime/memory.py)
        kept = sorted(checked.check.kept_beyond_lakefs)
        if kept:  # all of them in summary.json's retention_cross_check
            self.say(
                f"{self.repo.id}: keeping {len(kept)} commits lakeFS's export expired but its documented "
                f"retention keeps (e.g. {', '.join(kept[:3])}; all in the summary's retention_cross_check)"
            )
        return checked

    def _guard_twins(
        self,
        garbage: DataFrame,
        rows: int,
        candidates: DataFrame,
        checked: CheckedCommits,
        contents: DataFrame | None,
        heads: dict[str, int] | None,
    ) -> DataFrame:
        """Identity twins among the ``rows`` of garbage kept (invariant 6; :mod:`.twins`); ``contents``:
        the HEAD entries' contents as the classification read them (:mod:`.head_contents`). With a
        range cache and content evidence (``heads``: the HEAD metaranges, each with its branches),
        they are taken from the cache's entries level instead, each entry weighted by the branches
        whose HEAD holds its range, and only those of the marked objects' sizes read: the guard
        then plans from them as the batch mark's does, never joining every HEAD entry with them."""
        marked, objects = marked_with_evidence(garbage, candidates, trusted=self.params.trust_checksums)
        if not rows:
            self.stats["identity_twins"] = guard_twins_none()
            return garbage
        refs, repo, cache, reader = self.refs, self.repo, self.range_cache, self.reader
        trees, sizes = None, None  # the guard finds the sizes itself, on the driver if it can
        if cache is not None:  # the HEAD trees through the cache the mark has just updated
            trees = CachedHeadTrees(cache, reader, self.stats.setdefault("range_cache", {}))
            if contents is None and heads:
                sizes = marked_sizes(marked)
                contents = trees.contents(self.spark, heads, parallelism=self.parallelism, sizes=sizes)
        guard = guard_twins(
            self.spark, marked, reader=reader, graph=checked.graph, lakefs=refs.graph, objects=objects,
            parallelism=self.parallelism, say=lambda m: self.say(f"{repo.id}: {m}"), trees=trees,
            contents=contents, sizes=sizes,
        )  # fmt: skip
        self.stats["identity_twins"] = guard.counts
        if guard.kept is None:
            return garbage
        return self._persist(keep_as(garbage, guard.kept, reasons.IDENTITY_TWIN))

    def _committed(
        self, metaranges: list[str], *, heads: dict[str, int] | None = None, retained: list[str]
    ) -> Committed:
        """Range ids (of both lists) and addresses of the metaranges, and apart the addresses
        of the ``retained`` ones (None: none); through the range cache when there is one (one
        update per mark: each update cleans what the newest record omits), else read from
        lakeFS, also with the contents of the ``heads`` metaranges' entries."""
        refs, repo = self.refs, self.repo
        if self.range_cache is None:
            read = committed_frames(
                self.spark, connection=refs.connection, repository=repo.id,
                storage_namespace=repo.storage_namespace, namespace=self.namespace, options=refs.storage,
                metarange_ids=metaranges, parallelism=self.parallelism, heads=heads,
            )  # fmt: skip
            if not retained:
                return read
            extra = self._committed(retained, retained=[])
            ids = read.range_ids.union(extra.range_ids).distinct()
            return replace(read, range_ids=ids, retained=extra.addresses)
        cached = committed_frames_cached(
            self.spark, self.range_cache, connection=refs.connection, repository=repo.id,
            storage_namespace=repo.storage_namespace, namespace=self.namespace, options=refs.storage,
            metarange_ids=metaranges, parallelism=self.parallelism, retained_ids=retained, heads=heads or (),
        )  # fmt: skip
        self.stats["range_cache"] = with_read_ahead(cached.stats, self.ranges_ahead)
        level, retained_only = cached.lookup, cached.retained
        return Committed(cached.range_ids, level.addresses, retained=retained_only, unique=True, lookup=level)

    def _uncommitted(self, dump: StagedExport) -> DataFrame:
        staged = dump_frame(self.spark, dump, options=self.refs.storage, parallelism=self.parallelism)
        self.stats.update(uncommitted_pages=dump.pages, uncommitted_files=staged.files,
                          uncommitted_location_source=dump.location_source)  # fmt: skip
        return staged.addresses

    def _tally(self, tallied: Tally, checked: CheckedCommits) -> tuple[dict[str, dict[str, int]], str]:
        """The tally's counts and first slice, with their stats (and the cross-check's) recorded."""
        counts = tallied.counts
        self.stats["num_listed_objects"] = sum(c["objects"] for c in counts.values())  # candidates considered
        self.stats["kept"] = {r: counts[r] for r in reasons.REASONS if r != reasons.GARBAGE}
        self.stats["retention_cross_check"] = {
            **checked.check.summary(),
            **counts[reasons.RETENTION_CROSS_CHECK],
            "commits_read": checked.commits_read,
            "now": checked.now.isoformat().replace("+00:00", "Z"),
        }
        return counts, tallied.first_slice

    def _persist(self, df: DataFrame) -> DataFrame:
        from pyspark import StorageLevel

        persisted = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.persisted.append(persisted)
        return persisted

    def _summary(self, success: bool, marked: int, extra: dict[str, Any]) -> MarkSummary:
        body: dict[str, Any] = {
            "tool": "lakefs-gc",
            "tool_version": __version__,
            "repository": self.repo.id,
            "storage_namespace": self.repo.storage_namespace,
            "min_age_seconds": int(self.cutoff.min_age.total_seconds()),
            "cutoff_reason": self.cutoff.reason,
            **extra,
            **self.stats,
            "finish_time": self.clock().isoformat().replace("+00:00", "Z"),
        }
        return MarkSummary(
            run_id=self.run_id,
            success=success,
            first_slice=self.first_slice,
            start_time_ns=epoch_ns(self.start),
            cutoff_time_ns=epoch_ns(self.cutoff.time),
            num_deleted_objects=marked,
            extra=body,
        )

    def fail(self, error: BaseException) -> None:
        """Record the mark as failed (``success=false``), so that no sweep can ever follow it."""
        summary = self._summary(False, 0, {"error": str(error) or type(error).__name__})
        try:
            write_summary(self.report, summary)
        except Exception as e:  # the original error matters more; say both
            _log.error("mark %s failed and its failure report could not be written: %s", self.run_id, e)
        else:
            self.say(f"{self.repo.id}: mark {self.run_id} FAILED; wrote success=false to {self.report}")

    def _result(self, summary: MarkSummary) -> MarkResult:
        return MarkResult(
            repository=self.repo.id,
            mark_id=self.run_id,
            success=summary.success,
            summary=json.loads(summary.to_json()),
            report_location=str(self.report),
            storage_namespace=self.repo.storage_namespace,
        )
