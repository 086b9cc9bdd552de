"""lakeFS's own GC scenario (esti ``TestUnifiedGC``), built through lakefs-sdk
(docs/formats/lakefs-retention.md, "The TestUnifiedGC scenario").

Shared by the test server's export tests and the end-to-end GC tests on every storage backend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.testing.sdk import Lakefs

DAY = 86400

#: file name → survives a GC run (esti's table)
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


@dataclass(frozen=True)
class UnifiedGcScenario:
    address: dict[str, str]  # file name → physical address as lakeFS reports it
    active_commits: frozenset[str]
    dropped_commit: str  # main's first commit, which retention expires

    def relative(self, name: str) -> str:
        """The namespace-relative key of a file (``data/<slice>/<xid>``)."""
        physical = self.address[name]
        return physical[physical.index("/data/") + 1 :] if "/data/" in physical else physical


def build_unified_gc(lakefs: Lakefs, repo: str, namespace: str) -> UnifiedGcScenario:
    now = int(time.time())
    lakefs.create_repo(repo, namespace)
    lakefs.set_rules(repo, 7, {"main": 10, "dev": 7})
    lakefs.branch(repo, "dev", "main")
    lakefs.branch(repo, "dev2", "main")
    address: dict[str, str] = {}

    def put(branch: str, *names: str) -> None:
        for name in names:
            address[name] = lakefs.upload(repo, branch, name, name.encode()).physical_address

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
    active = frozenset({main_8, main_12, dev_4, dev_8, dev2_6, dev2_8})
    return UnifiedGcScenario(address, active, main_14.id)
