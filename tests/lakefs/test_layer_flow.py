"""The access layer end to end: HTTP answers → locations → local storage → readers.

lakeFS with a local blockstore returns locations as ``local://<root>/<ns>/...``; the repository
namespace is ``local://repo1``. Both must resolve to the same files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.exports import read_commits_csv, read_uncommitted_addresses
from lakefs_gc.lakefs.ranges import committed_addresses, range_ids_of_metaranges
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from tests.lakefs.fake_lakefs import (
    FakeLakeFS,
    Reply,
    repository_json,
    task_status_json,
    uncommitted_page_json,
)
from tests.lakefs.test_ranges import FIXTURE_RANGE_ID


def test_mark_inputs_from_a_local_repository(
    tmp_path: Path, fake: FakeLakeFS, client: LakeFSClient, lakefs_sstables: Path
) -> None:
    root = tmp_path / "block"
    ns_dir = root / "repo1"
    gc_dir = ns_dir / "_lakefs" / "retention" / "gc"
    uncommitted_dir = gc_dir / "uncommitted" / "run-u" / "uncommitted"
    uncommitted_dir.mkdir(parents=True)
    pq.write_table(
        pa.table({"physical_address": ["data/s/staged"]}), uncommitted_dir / "cpb1x", compression="gzip"
    )
    (gc_dir / "commits" / "run_id=run-c").mkdir(parents=True)
    (gc_dir / "commits" / "run_id=run-c" / "commits.csv").write_text(
        "commit_id,expired,metarange_id\nc1,false,mr-fixture\nc0,false,\n"
    )
    shutil.copy(lakefs_sstables / "metarange.sst", ns_dir / "_lakefs" / "mr-fixture")
    shutil.copy(lakefs_sstables / "range.sst", ns_dir / "_lakefs" / FIXTURE_RANGE_ID)

    api_prefix = f"local://{root}/repo1/_lakefs/retention/gc"
    fake.on("GET", "/repositories/repo1", Reply(200, repository_json(namespace="local://repo1")))
    fake.on(
        "POST",
        "/repositories/repo1/gc/prepare_uncommited",
        Reply(201, uncommitted_page_json("run-u", f"{api_prefix}/uncommitted/run-u/uncommitted/", "t1")),
        Reply(201, uncommitted_page_json("run-u", "", None)),
    )
    result = {
        "run_id": "run-c",
        "gc_commits_location": f"{api_prefix}/commits/run_id=run-c/commits.csv",
        "gc_addresses_location": f"{api_prefix}/addresses/",
    }
    fake.on("POST", "/repositories/repo1/gc/prepare_commits/async", Reply(202, {"id": "GCPC1"}))
    fake.on(
        "GET",
        "/repositories/repo1/gc/prepare_commits/status",
        Reply(200, task_status_json("GCPC1", completed=True, result=result)),
    )

    options = StorageOptions(local_root=str(root))
    repo = client.get_repository("repo1")
    dump = client.prepare_uncommitted("repo1", storage_namespace=repo.storage_namespace)
    fs, path = filesystem_for(parse_location(dump.location, local_root=options.local_root), options)
    staged = read_uncommitted_addresses(fs, path, required=dump.data_expected)
    assert staged.column("physical_address").to_pylist() == ["data/s/staged"]

    export = client.prepare_commits("repo1")
    fs, path = filesystem_for(parse_location(export.location, local_root=options.local_root), options)
    active = read_commits_csv(fs, path)
    assert (active.metarange_ids, active.without_metarange) == (["mr-fixture"], 1)

    ns = parse_storage_namespace(repo.storage_namespace, local_root=options.local_root)
    fs, _ = filesystem_for(ns, options)
    range_ids = range_ids_of_metaranges(fs, ns, active.metarange_ids)
    assert committed_addresses(fs, ns, repo.storage_namespace, range_ids) == {
        "b0c968736d8f42a2b1c6284835f08226",
        "fdf87fcf9ec849f98514ddb7e041ad56",
    }
