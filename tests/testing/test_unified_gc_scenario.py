"""lakeFS's own GC scenario (esti ``TestUnifiedGC``, internals §3) built through lakefs-sdk.

The commits CSV and the uncommitted dump must be exactly what lakeFS produces, and the expected
survivors table must follow from them.
"""

from __future__ import annotations

import time
from pathlib import Path

from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.gc_view import gc_view
from tests.testing.sdk import Lakefs

DAY = 86400

EXPECTED_SURVIVORS = {
    "file_1": True,
    "file_2": False,
    "file_3": True,
    "file_4": False,
    "file_5": False,
    "file_6": True,
    "file_7": False,
    "file_8": True,
    "file_9": False,
    "file_10": False,
}


def test_unified_gc_scenario(lakefs: Lakefs, server: LakeFSTestServer, storage_root: Path) -> None:
    repo, now = "unified-gc", int(time.time())
    lakefs.create_repo(repo, "local://unified-gc")
    lakefs.set_rules(repo, 7, {"main": 10, "dev": 7})
    lakefs.branch(repo, "dev", "main")
    lakefs.branch(repo, "dev2", "main")
    address: dict[str, str] = {}

    def put(branch: str, *names: str) -> None:
        for name in names:
            stats = lakefs.upload(repo, branch, name, name.encode())
            address[name] = stats.physical_address

    put("main", "file_1", "file_2")
    main_14 = lakefs.commit(repo, "main", "add 1,2", date=now - 14 * DAY)
    put("dev", "file_5", "file_6")
    lakefs.commit(repo, "dev", "add 5,6", date=now - 14 * DAY)
    put("dev2", "file_8", "file_9")
    lakefs.commit(repo, "dev2", "add 8,9", date=now - 14 * DAY)

    def delete_and_commit(branch: str, name: str, days_ago: int) -> str:
        lakefs.delete(repo, branch, name)
        return lakefs.commit(repo, branch, f"delete {name}", date=now - days_ago * DAY).id

    main_12 = delete_and_commit("main", "file_2", 12)
    main_8 = delete_and_commit("main", "file_1", 8)
    dev_8 = delete_and_commit("dev", "file_5", 8)
    dev_4 = delete_and_commit("dev", "file_6", 4)
    dev2_8 = delete_and_commit("dev2", "file_9", 8)
    dev2_6 = delete_and_commit("dev2", "file_8", 6)

    put("main", "file_3", "file_4")
    lakefs.delete(repo, "main", "file_4")
    put("dev", "file_7")
    put("dev2", "file_10")
    lakefs.branches.delete_branch(repo, "dev2")
    lakefs.reset(repo, "dev")

    view = gc_view(lakefs, repo, str(storage_root))

    # Retention (internals §3): main keeps its HEAD and the first commit before its 10-day
    # threshold; dev likewise for 7 days; the deleted dev2's HEAD is a dangling leaf judged by the
    # default 7 days through a synthetic child, which keeps it and its parent.
    assert view.active_commits == {main_8, main_12, dev_4, dev_8, dev2_6, dev2_8}
    assert main_14.id not in view.active_commits
    # Only file_3 is staged anywhere: file_4 was deleted, dev was reset, dev2 was deleted.
    assert view.uncommitted == {_relative(address["file_3"])}

    survivors = {name: _relative(addr) in view.referenced for name, addr in address.items()}
    assert survivors == EXPECTED_SURVIVORS


def _relative(physical_address: str) -> str:
    return physical_address[physical_address.index("/data/") + 1 :]
