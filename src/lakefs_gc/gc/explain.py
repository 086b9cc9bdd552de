"""Why one object is kept or collected: the verdict of ``lakefs-gc explain``, from gathered facts.

A mark classifies millions of objects at once (:mod:`lakefs_gc.gc.algebra`); ``explain`` answers
the same question for a few objects, with the evidence a person needs to trust the answer: which
active commits reference the object (id, the branch that keeps the commit, its date), which
branch stages it, its age against the cutoff, which guard saved it, and what the last mark and
sweep did with it. The verdict uses the mark's vocabulary and precedence (:mod:`.reasons`), so an
``explain`` run against the same inputs as a mark gives the mark's reason for every object.

Pure: the adapters gather :class:`ObjectFacts` (``lakefs_gc.lakefs.referrers``, the report
readers) and this module decides and words it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from lakefs_gc.gc import reasons
from lakefs_gc.gc.addresses import deletable_key
from lakefs_gc.gc.cutoff import Cutoff

#: verdict of an object no GC may ever delete (docs/invariants.md, invariant 3)
OUT_OF_SCOPE = "out_of_scope"


@dataclass(frozen=True)
class CommitRef:
    """An active commit whose tree holds the object at ``path``.

    ``kept_by``: ``lakefs`` (lakeFS's commits export lists it; the cross-check may agree) or
    ``cross_check`` (only the documented rule keeps it); ``why``: the branch and rule that keep it.
    """

    commit_id: str
    date: datetime | None
    path: str
    kept_by: str
    why: str


@dataclass(frozen=True)
class TwinFinding:
    """The identity-twin guard's word on the object: ``live``, ``kept`` or ``garbage`` (released)."""

    verdict: str
    reason: str


@dataclass(frozen=True)
class MarkRecord:
    """What the newest successful mark (and its sweep) did with the object.

    ``swept``: the effective outcome in ``swept/`` (``deleted``, ``missing``, ``failed``) or None;
    ``sweep_finished``: ``swept/_SUCCESS`` exists, so a listed object without an outcome was kept
    by the sweep's revalidation.
    """

    mark_id: str
    start_time: datetime | None
    cutoff_time: datetime | None
    listed: bool
    swept: str | None = None
    sweep_finished: bool = False

    @property
    def saved_by_revalidation(self) -> bool:
        return self.listed and self.sweep_finished and self.swept is None


@dataclass(frozen=True)
class ObjectFacts:
    """Everything gathered about one namespace-relative address."""

    address: str
    exists: bool
    last_modified: datetime | None = None
    size: int | None = None
    #: lakeFS path and ref the object was looked up by (``--path``), if any
    looked_up: str | None = None
    committed: tuple[CommitRef, ...] = ()
    #: the uncommitted dump lists the address
    staged: bool = False
    #: branches found serving the address from their staging area
    staged_on: tuple[str, ...] = ()
    twin: TwinFinding | None = None
    last_mark: MarkRecord | None = None
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Explanation:
    address: str
    verdict: str
    why: list[str]
    facts: ObjectFacts

    def to_json(self) -> dict[str, Any]:
        facts = asdict(self.facts)
        return {"address": self.address, "verdict": self.verdict, "why": self.why, **_jsonable(facts)}


def verdict(facts: ObjectFacts, cutoff: Cutoff) -> str:
    """The mark's reason for the object now (:data:`.reasons.REASONS`, in their precedence)."""
    if not deletable_key(facts.address):
        return OUT_OF_SCOPE
    if any(c.kept_by == "lakefs" for c in facts.committed):
        return reasons.COMMITTED
    if facts.staged:
        return reasons.UNCOMMITTED
    if facts.committed:
        return reasons.RETENTION_CROSS_CHECK
    # the twin guard only looks at what would be marked: too young wins, as in the mark
    if facts.last_modified is not None and not cutoff.admits(facts.last_modified):
        return reasons.TOO_YOUNG
    if facts.twin is not None and facts.twin.verdict != "garbage":
        return reasons.IDENTITY_TWIN
    return reasons.GARBAGE


def explain(facts: ObjectFacts, cutoff: Cutoff) -> Explanation:
    """The verdict and the sentences behind it, most decisive first."""
    result = verdict(facts, cutoff)
    why = [_headline(result)]
    why += [_commit_line(c) for c in facts.committed]
    if facts.staged:
        where = ", ".join(facts.staged_on) if facts.staged_on else "a branch the API does not show"
        why.append(f"staged (uncommitted) on {where}: lakeFS's uncommitted dump lists it")
    elif facts.staged_on:
        why.append(f"served from the staging area of {', '.join(facts.staged_on)}")
    if not facts.committed and not facts.staged:
        why.append("no active commit and no branch's staging area references it")
    if facts.twin is not None:
        why.append(f"identity-twin guard: {facts.twin.verdict} ({facts.twin.reason})")
    why.append(_age_line(facts, cutoff))
    why += _mark_lines(facts.last_mark)
    why += list(facts.notes)
    return Explanation(facts.address, result, why, facts)


_HEADLINES = {
    reasons.COMMITTED: "kept: referenced by an active commit",
    reasons.UNCOMMITTED: "kept: staged on a branch",
    reasons.RETENTION_CROSS_CHECK: "kept by the retention cross-check: only commits lakeFS's export "
    "expired but its documented retention keeps reference it",
    reasons.IDENTITY_TWIN: "kept by the identity-twin guard: it may be a staged identical re-upload",
    reasons.TOO_YOUNG: "kept: modified at or after the cutoff",
    reasons.GARBAGE: "garbage: a mark lists it for deletion",
    OUT_OF_SCOPE: "never collected: outside what a GC may delete (_lakefs/ or not an object key)",
}


def _headline(result: str) -> str:
    return _HEADLINES[result]


def _commit_line(ref: CommitRef) -> str:
    date = ref.date.isoformat() if ref.date else "?"
    by = "lakeFS's export" if ref.kept_by == "lakefs" else "the retention cross-check only"
    return f"commit {ref.commit_id} ({date}) holds it at {ref.path!r}; kept by {by}: {ref.why}"


def _age_line(facts: ObjectFacts, cutoff: Cutoff) -> str:
    if not facts.exists:
        return f"not in storage now; cutoff {cutoff.time.isoformat()} ({cutoff.reason})"
    if facts.last_modified is None:
        return f"last modified unknown; cutoff {cutoff.time.isoformat()}"
    side = "before" if cutoff.admits(facts.last_modified) else "at or after"
    return (
        f"last modified {facts.last_modified.isoformat()}, {side} the cutoff "
        f"{cutoff.time.isoformat()} ({cutoff.reason})"
    )


def _mark_lines(mark: MarkRecord | None) -> list[str]:
    if mark is None:
        return ["no successful mark of this repository was found"]
    lines = [f"last mark {mark.mark_id}: {'listed' if mark.listed else 'did not list'} it"]
    if mark.swept is not None:
        lines.append(f"its sweep: {mark.swept}")
    elif mark.saved_by_revalidation:
        lines.append("its sweep kept it: referenced again when the sweep revalidated (revalidation guard)")
    elif mark.listed:
        lines.append("not swept yet")
    return lines


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def render_text(explanation: Explanation) -> str:
    """A short text block: the address, its verdict, and the reasons, one per line."""
    lines = [f"{explanation.address}: {explanation.verdict}"]
    if explanation.facts.looked_up:
        lines[0] += f" ({explanation.facts.looked_up})"
    lines += [f"  {line}" for line in explanation.why]
    return "\n".join(lines)
