"""Reads and writes as lakeFS users do them, through ``lakefs-spec`` (fsspec, pandas) and ``lakefs``.

Both clients upload with ``Transfer-Encoding: chunked`` and read parquet footers with ``Range``
requests: the two things a server has to get right before any of their data is real.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pandas as pd
import pytest
import urllib3.connection
from lakefs.exceptions import ObjectExistsException

import lakefs
from tests.clients.conftest import Clients

REPO = "client-io"


@pytest.fixture
def repo(clients: Clients) -> Iterator[lakefs.Repository]:
    yield clients.repository(REPO)
    assert clients.server.unrouted_requests == []


@pytest.fixture
def sent_headers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every request header urllib3 (under both clients) puts on the wire."""
    sent: list[tuple[str, str]] = []
    original = urllib3.connection.HTTPConnection.putheader

    def spy(self: urllib3.connection.HTTPConnection, header: str, *values: str) -> None:
        sent.append((header.lower(), " ".join(str(v) for v in values)))
        original(self, header, *values)

    monkeypatch.setattr(urllib3.connection.HTTPConnection, "putheader", spy)
    return sent


def test_pipe_file_then_info_reports_the_size(clients: Clients, repo: lakefs.Repository) -> None:
    clients.fs.pipe_file(f"lakefs://{REPO}/main/hello.txt", b"hello")
    assert clients.fs.info(f"lakefs://{REPO}/main/hello.txt")["size"] == 5
    assert clients.fs.cat_file(f"lakefs://{REPO}/main/hello.txt") == b"hello"


def test_a_5_mb_chunked_upload_round_trips_byte_identical(
    clients: Clients, repo: lakefs.Repository, sent_headers: list[tuple[str, str]]
) -> None:
    data = os.urandom(5 * 1024 * 1024)
    url = f"lakefs://{REPO}/main/big.bin"
    clients.fs.pipe_file(url, data)
    assert ("transfer-encoding", "chunked") in sent_headers  # the client did send it chunked
    assert clients.fs.info(url)["size"] == len(data)
    assert clients.fs.cat_file(url) == data
    with repo.branch("main").object("big.bin").reader(mode="rb") as f:
        assert f.read() == data


def test_pandas_reads_parquet_and_csv_through_lakefs_paths(clients: Clients, repo: lakefs.Repository) -> None:
    frame = pd.DataFrame({"id": range(1000), "name": [f"user-{i}" for i in range(1000)]})
    options = clients.storage_options
    frame.to_parquet(f"lakefs://{REPO}/main/x.parquet", storage_options=options)
    frame.to_csv(f"lakefs://{REPO}/main/x.csv", index=False, storage_options=options)
    pd.testing.assert_frame_equal(
        pd.read_parquet(f"lakefs://{REPO}/main/x.parquet", storage_options=options), frame
    )
    pd.testing.assert_frame_equal(pd.read_csv(f"lakefs://{REPO}/main/x.csv", storage_options=options), frame)


def test_ranged_reads_return_exactly_the_range(clients: Clients, repo: lakefs.Repository) -> None:
    data = bytes(range(256)) * 40
    url = f"lakefs://{REPO}/main/ranged.bin"
    clients.fs.pipe_file(url, data)
    for start, end in [
        (3, 9),
        (0, 1),
        (100, 4000),
        (10_000, None),
        (len(data) - 1, len(data)),
        (len(data) - 5, None),
    ]:
        assert clients.fs.cat_file(url, start=start, end=end) == data[start:end], (start, end)
    with clients.fs.open(url, "rb") as f:
        f.seek(5000)
        assert f.read(17) == data[5000:5017]
    with repo.branch("main").object("ranged.bin").reader(mode="rb") as reader:
        reader.seek(250)
        assert reader.read(10) == data[250:260]
        reader.seek(len(data) - 3)
        assert reader.read() == data[-3:]
        assert reader.read(5) == b""  # past the end: lakeFS answers 416, the reader returns nothing


def test_metadata_and_content_types_round_trip(clients: Clients, repo: lakefs.Repository) -> None:
    obj = repo.branch("main").object("meta/table.csv")
    obj.upload(b"a,b\n", metadata={"Owner": "data-team", "source": "ingest"}, content_type="text/csv")
    stats = obj.stat()
    assert (stats.metadata, stats.content_type) == ({"owner": "data-team", "source": "ingest"}, "text/csv")
    info = clients.fs.info(f"lakefs://{REPO}/main/meta/table.csv")
    assert (info["metadata"], info["content-type"]) == (
        {"owner": "data-team", "source": "ingest"},
        "text/csv",
    )
    with clients.fs.open(f"lakefs://{REPO}/main/meta/spec.txt", "wb", metadata={"k": "v"}) as f:
        f.write(b"through fsspec")
    assert clients.fs.info(f"lakefs://{REPO}/main/meta/spec.txt")["metadata"] == {"k": "v"}


def test_exclusive_create_refuses_an_existing_path(clients: Clients, repo: lakefs.Repository) -> None:
    obj = repo.branch("main").object("once.txt")
    obj.upload(b"first", mode="xb")
    with pytest.raises(ObjectExistsException):
        obj.upload(b"second", mode="xb")
    assert obj.reader(mode="rb").read() == b"first"


def test_copies_keep_data_and_metadata_at_a_new_address(clients: Clients, repo: lakefs.Repository) -> None:
    main = repo.branch("main")
    main.object("src.txt").upload(b"source", metadata={"k": "v"})
    clients.fs.cp_file(f"lakefs://{REPO}/main/src.txt", f"lakefs://{REPO}/main/copy-staged.txt")
    main.commit("add source")
    copied = main.object("src.txt").copy("main", "copy-committed.txt")
    for name in ("copy-staged.txt", "copy-committed.txt"):
        stats = main.object(name).stat()
        assert stats.physical_address != main.object("src.txt").stat().physical_address
        assert (stats.metadata, main.object(name).reader(mode="rb").read()) == ({"k": "v"}, b"source")
    assert copied.stat().size_bytes == 6


def test_history_operations(clients: Clients, repo: lakefs.Repository) -> None:
    """Diffs, revert, cherry-pick, tags and repository metadata, all through ``lakefs``."""
    main = repo.branch("main")
    main.object("a").upload(b"1")
    assert [(c.type, c.path) for c in main.uncommitted()] == [("added", "a")]
    first = main.commit("first")
    dev = repo.branch("dev").create(main)
    dev.object("b").upload(b"2")
    picked = dev.commit("add b")
    assert [(c.type, c.path) for c in main.diff(dev)] == [("added", "b")]
    main.cherry_pick(picked)
    assert main.object("b").reader(mode="rb").read() == b"2"
    main.object("a").upload(b"changed")
    bad = main.commit("bad change")
    reverted = main.revert(bad, parent_number=0)
    assert reverted.parents == [bad.id]
    assert main.object("a").reader(mode="rb").read() == b"1"
    tag = repo.tag("v1").create(first)
    assert [t.id for t in repo.tags()] == ["v1"]
    tag.delete()
    assert list(repo.tags()) == []
    assert repo.metadata == {}
