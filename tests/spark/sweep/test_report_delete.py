"""Deleting a sweep report file: a dropped connection is tried again, and a file an interrupted
try did delete counts as deleted (a CI run on Azurite once failed a finished sweep over one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lakefs_gc.errors import StorageError
from lakefs_gc.spark.sweep.resume import DELETE_ATTEMPTS, _delete

DROPPED = "Connection closed before getting full response or response is less than expected"


class FlakyStore:
    """A store whose first ``failures`` deletes drop the connection; ``done_anyway``: the delete
    happened before the connection dropped."""

    def __init__(self, failures: int, *, done_anyway: bool = False) -> None:
        self.failures, self.done_anyway, self.calls = failures, done_anyway, 0

    def delete_file(self, path: str) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            if self.done_anyway and os.path.exists(path):
                os.remove(path)
            raise OSError(DROPPED)
        os.remove(path)  # FileNotFoundError when it is not there


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _s: None)  # the tries' back-off


def report_file(tmp_path: Path) -> str:
    path = tmp_path / "_SUCCESS"
    path.write_bytes(b"")
    return str(path)


@pytest.mark.parametrize("done_anyway", [False, True])
def test_a_dropped_connection_is_tried_again(tmp_path: Path, done_anyway: bool) -> None:
    path = report_file(tmp_path)
    store = FlakyStore(1, done_anyway=done_anyway)
    _delete(store, path)
    assert not os.path.exists(path) and store.calls == 2


def test_a_store_that_keeps_failing_fails_the_run_naming_the_file(tmp_path: Path) -> None:
    path = report_file(tmp_path)
    store = FlakyStore(DELETE_ATTEMPTS)
    with pytest.raises(StorageError, match=f"cannot delete report file {path}: {DROPPED}"):
        _delete(store, path)
    assert store.calls == DELETE_ATTEMPTS and os.path.exists(path)


def test_a_file_missing_at_the_first_try_is_an_error_unless_allowed(tmp_path: Path) -> None:
    path = str(tmp_path / "absent")
    with pytest.raises(StorageError, match="not found"):
        _delete(FlakyStore(0), path)
    _delete(FlakyStore(0), path, missing_ok=True)
