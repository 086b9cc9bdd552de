"""RocksDB's own ``sst_dump`` as an independent reader of the tables we write (a fixture)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

_SCAN_LINE = re.compile(rb"^'([0-9A-F]*)' seq:(\d+), type:(\d+) => ([0-9A-F]*)$")

SstDump = Callable[[Path], list[tuple[bytes, bytes]]]


@pytest.fixture(scope="session")
def sst_dump() -> SstDump:
    """Scan a table with RocksDB's sst_dump; returns ``(user_key, value)`` pairs.

    Required, not optional: a third-party reader agreeing with ours is part of the contract
    (``tests/run`` installs Debian's rocksdb-tools).
    """
    binary = shutil.which("sst_dump")
    if binary is None:
        pytest.fail("sst_dump not found: install Debian's rocksdb-tools (tests/run does)")

    def scan(path: Path) -> list[tuple[bytes, bytes]]:
        with tempfile.TemporaryDirectory() as tmp:
            link = Path(tmp) / "table.sst"  # sst_dump only opens files named *.sst
            link.symlink_to(path.resolve())
            proc = subprocess.run(
                [binary, f"--file={link}", "--command=scan", "--output_hex"],
                capture_output=True,
                timeout=120,
            )
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        assert b"Corruption" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
        assert b"not a valid SST" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
        out = []
        for line in proc.stdout.splitlines():
            m = _SCAN_LINE.match(line)
            if m:
                assert (m.group(2), m.group(3)) == (b"0", b"1"), line  # seqnum 0, kind SET
                out.append((bytes.fromhex(m.group(1).decode()), bytes.fromhex(m.group(4).decode())))
        return out

    return scan
