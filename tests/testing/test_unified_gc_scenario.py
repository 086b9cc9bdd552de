"""lakeFS's own GC scenario (esti ``TestUnifiedGC``) built through lakefs-sdk
(docs/formats/lakefs-retention.md, "The TestUnifiedGC scenario").

The commits CSV and the uncommitted dump must be exactly what lakeFS produces, and the expected
survivors table must follow from them.
"""

from __future__ import annotations

from pathlib import Path

from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.gc_view import gc_view
from tests.testing.sdk import Lakefs
from tests.testing.unified_gc import EXPECTED_SURVIVORS, build_unified_gc


def test_unified_gc_scenario(lakefs: Lakefs, server: LakeFSTestServer, storage_root: Path) -> None:
    scenario = build_unified_gc(lakefs, "unified-gc", "local://unified-gc")
    view = gc_view(lakefs, "unified-gc", str(storage_root))

    # Retention (lakefs-retention.md, "The walk"): main keeps its HEAD and the first commit before its 10-day
    # threshold; dev likewise for 7 days; the deleted dev2's HEAD is a dangling leaf judged by the
    # default 7 days through a synthetic child, which keeps it and its parent.
    assert view.active_commits == scenario.active_commits
    assert scenario.dropped_commit not in view.active_commits
    # Only file_3 is staged anywhere: file_4 was deleted, dev was reset, dev2 was deleted.
    assert view.uncommitted == {scenario.relative("file_3")}

    survivors = {name: scenario.relative(name) in view.referenced for name in scenario.address}
    assert survivors == EXPECTED_SURVIVORS
