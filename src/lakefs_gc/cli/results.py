"""What the batch commands print on stdout: a short text block per repository and phase, or one
JSON line each (``--output json``, for scripts). Progress goes to stderr (:func:`.options.progress`)."""

from __future__ import annotations

import json
from typing import Any

from lakefs_gc.cli.options import human_bytes
from lakefs_gc.errors import ExitCode


class Printer:
    """Results on stdout: a short text block, or one JSON line per repository and phase."""

    def __init__(self, output: str) -> None:
        self.json = output == "json"
        self.exit_code = 0

    def mark(self, result: Any) -> None:
        if self.json:
            self._line(
                command="mark", repository=result.repository, mark_id=result.mark_id, success=result.success,
                report=result.report_location, summary=result.summary,
            )  # fmt: skip
            return
        s = result.summary
        kept = s.get("kept", {})
        print(f"repository {result.repository}: mark {result.mark_id}")
        print(f"  cutoff     {s.get('cutoff_time')} ({s.get('cutoff_reason')})")
        print(f"  listed     {s.get('num_listed_objects')} objects")
        for reason, counts in kept.items():
            print(f"  kept       {counts['objects']} objects ({human_bytes(counts['bytes'])}): {reason}")
        print(f"  marked     {result.marked} objects ({human_bytes(s.get('num_deleted_bytes', 0))})")
        print(f"  report     {result.report_location}")

    def sweep(self, result: Any) -> None:
        if result.dry_run:
            self._dry_run(result)
            return
        if result.failed:
            self.exit_code = ExitCode.PARTIAL
        if self.json:
            self._line(
                command="sweep", repository=result.repository, mark_id=result.mark_id, deleted=result.deleted,
                missing=result.missing, failed=result.failed, throttled=result.throttled,
                retries=result.retries, revalidated=result.revalidated, saved=result.saved,
                report=result.report_location,
            )  # fmt: skip
            return
        print(f"repository {result.repository}: sweep of mark {result.mark_id}")
        if result.revalidated:
            print(f"  revalidated: {result.saved} marked objects are referenced again and were kept")
        else:
            print("  not revalidated (--no-revalidate)")
        print(f"  deleted {result.deleted}, already missing {result.missing}, failed {result.failed}")
        if result.throttled or result.retries:
            print(f"  the store throttled {result.throttled} requests; {result.retries} retries")
        if result.failed:
            print(f"  failures are listed in {result.report_location.rstrip('/')}/swept/ (outcome=failed)")

    def _dry_run(self, result: Any) -> None:
        """What a sweep would delete; nothing was (exit 0: nothing failed, nothing happened)."""
        if self.json:
            self._line(
                command="sweep", dry_run=True, repository=result.repository, mark_id=result.mark_id,
                would_delete=result.deleted, refused=result.failed, revalidated=result.revalidated,
                saved=result.saved, report=result.report_location,
            )  # fmt: skip
            return
        print(f"repository {result.repository}: dry run of the sweep of mark {result.mark_id}")
        if result.revalidated:
            print(f"  revalidated: {result.saved} marked objects are referenced again and would be kept")
        print(f"  would delete {result.deleted}, refused {result.failed}; nothing was deleted")
        print(f"  the list is in {result.report_location.rstrip('/')}/dry-run/ (outcome=would_delete)")

    @staticmethod
    def _line(**fields: Any) -> None:
        print(json.dumps(fields, separators=(",", ":")), flush=True)
