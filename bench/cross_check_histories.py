"""One-off count: what the retention cross-check keeps that lakeFS's commits export would let go.

Builds random repository histories with the differential test's generator (``tests/gc/test_differential.py``:
branches from any ref, a hidden branch, uploads, deletes, past-dated commits, merges incl. squash,
resets, branch deletions, tags, client writes, random rules) on one test server, and for each one:

* reads the server's commits export (lakeFS's retention walk, commit-id-order dependent);
* runs the cross-check as the mark does (``cross_check_export``: the commit graph through the API,
  the documented rule, the union);
* reads the ranges of lakeFS's active metaranges and of the metaranges only the cross-check adds,
  and lakeFS's uncommitted dump;
* counts the commits the cross-check keeps beyond lakeFS's export, and the objects (and bytes) in
  the namespace that only those commits reference: a GC driven by lakeFS's exports deletes them
  once they are older than the cutoff (``old``: the history backdated them past the differential
  test's 1 h cutoff).

Numbers, not a test. ``python bench/cross_check_histories.py --histories 300 [--json out.json]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import lakefs_sdk
import pyarrow.fs as pafs
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from tests.gc.reference_gc import namespace_files
from tests.gc.test_differential import MIN_AGE_SECONDS, OLD, SETTINGS, Built, Env, random_history
from tests.gc.test_hazards_api import build_fork
from tests.testing.sdk import Lakefs
from tests.testing.test_retention_property import NOW, Clock, History, Rules, Shared, server_csv
from tests.testing.test_retention_property import OPERATIONS as RETENTION_OPERATIONS

from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.commit_graph import LakeFSCommitGraph, cross_check_export
from lakefs_gc.lakefs.exports import ActiveCommit, ActiveCommits, read_uncommitted_addresses
from lakefs_gc.lakefs.ranges import committed_addresses, range_ids_of_metaranges
from lakefs_gc.lakefs.settings import LakeFSConnection
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from lakefs_gc.testing.server import LakeFSTestServer


def retention_history(env: Env, data: st.DataObject) -> Built:
    """The retention property's generator (more commits and forks, fewer objects); every object old."""
    history = History(env.shared, data)
    history.op_rules()
    for _ in range(data.draw(st.integers(min_value=8, max_value=25), label="operations")):
        getattr(history, f"op_{data.draw(st.sampled_from(RETENTION_OPERATIONS), label='operation')}")()
    return Built(history.repo, env.storage_root / history.repo, history.created, history.rules)


GENERATORS = {"differential": random_history, "retention": retention_history}


def measure(
    env: Env, client: LakeFSClient, graph: LakeFSCommitGraph, data: st.DataObject, generator: str
) -> dict[str, Any]:
    """One random history: the commits and objects only the cross-check keeps."""
    return count(env, client, graph, GENERATORS[generator](env, data))


def calibrate(env: Env, client: LakeFSClient, graph: LakeFSCommitGraph) -> dict[str, Any]:
    """The fork of issue 19 in the commit-id order lakeFS gets wrong: must count 1 commit, 1 object."""
    fork = build_fork(env, a_first=True)  # type: ignore[arg-type]  # only env.shared is used
    rules = Rules(7, {"A": 21, "B": 7})
    built = Built(fork.repo, env.storage_root / fork.repo, [fork.p, fork.a, fork.b], rules)
    return count(env, client, graph, built)


def count(env: Env, client: LakeFSClient, graph: LakeFSCommitGraph, built: Built) -> dict[str, Any]:
    """What only the cross-check keeps in one built repository."""
    root, repo = env.storage_root, built.repo
    rows = server_csv(env.lakefs, repo, root)
    exported = ActiveCommits(
        [ActiveCommit(r["commit_id"], r["metarange_id"]) for r in rows if r["metarange_id"]]
    )
    checked = cross_check_export(graph, repo, exported, export_run_id="", start=NOW)
    raw = f"local://{repo}"
    namespace = parse_storage_namespace(raw, local_root=str(root))
    fs = pafs.LocalFileSystem()

    def addresses(metaranges: list[str]) -> set[str]:
        return committed_addresses(fs, namespace, raw, range_ids_of_metaranges(fs, namespace, metaranges))

    lakefs_kept = addresses(exported.metarange_ids)
    extra = addresses(list(checked.extra_metaranges))
    dump = client.prepare_uncommitted(repo, storage_namespace=raw)
    location = parse_location(dump.location, local_root=str(root))
    staged = set(
        read_uncommitted_addresses(fs, location.fs_path, required=dump.data_expected).column(0).to_pylist()
    )
    present = set(namespace_files(built.root))
    only_ours = (extra - lakefs_kept - staged) & present
    old = {k for k in only_ours if built.ages.get(k, OLD) > MIN_AGE_SECONDS}
    return {
        "repo": repo,
        "commits_created": len(built.created),
        "commits_exported": len(exported.commits),
        "commits_kept_beyond_lakefs": len(checked.check.kept_beyond_lakefs),
        "commits_lakefs_only": len(checked.check.lakefs_only),
        "objects_only_cross_check": len(only_ours),
        "objects_only_cross_check_old": len(old),
        "bytes_only_cross_check_old": sum((built.root / k).stat().st_size for k in old),
    }


def run(histories: int, generator: str, out: Path | None, random_seed: int) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        with (
            LakeFSTestServer(storage_root=root, clock=clock, settings=SETTINGS) as server,
            lakefs_sdk.ApiClient(server.sdk_configuration()) as sdk,
        ):
            info = server.connection_info()
            connection = LakeFSConnection(
                endpoint=info["endpoint"],
                access_key_id=info["access_key_id"],
                secret_access_key=SecretStr(info["secret_access_key"]),
            )
            env = Env(Shared(Lakefs(sdk), root, clock, itertools.count()), server)
            with LakeFSClient(connection) as client:
                graph = LakeFSCommitGraph(client)

                @settings(
                    max_examples=histories, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )  # fmt: skip
                @seed(random_seed)
                @given(data=st.data())
                def one(data: st.DataObject) -> None:
                    results.append(measure(env, client, graph, data, generator))
                    if len(results) % 25 == 0:
                        print(
                            f"{len(results)} histories, {time.monotonic() - started:.0f} s", file=sys.stderr
                        )
                        if out:
                            out.write_text(json.dumps(totals(results, started), indent=2))

                print(f"calibration (the fork of issue 19): {calibrate(env, client, graph)}", file=sys.stderr)
                one()
    summary = totals(results, started)
    if out:
        out.write_text(json.dumps(summary, indent=2))
    return summary


def totals(results: list[dict[str, Any]], started: float) -> dict[str, Any]:
    keys = [k for k in results[0] if k != "repo"] if results else []
    summed = Counter({k: sum(r[k] for r in results) for k in keys})
    return {
        "histories": len(results),
        "seconds": round(time.monotonic() - started, 1),
        "histories_with_commits_kept_beyond_lakefs": sum(
            1 for r in results if r["commits_kept_beyond_lakefs"]
        ),
        "histories_with_objects_saved": sum(1 for r in results if r["objects_only_cross_check_old"]),
        **dict(summed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--histories", type=int, default=300)
    parser.add_argument("--seed", type=int, default=19, help="hypothesis seed")
    parser.add_argument("--generator", choices=sorted(GENERATORS), default="differential")
    parser.add_argument("--json", type=Path, help="also write the totals here (updated every 25 histories)")
    args = parser.parse_args()
    summary = run(args.histories, args.generator, args.json, args.seed)
    for key, value in summary.items():
        print(f"{key:45} {value}")


if __name__ == "__main__":
    main()
