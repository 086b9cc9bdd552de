"""A real ``pyarrow`` filesystem seen through a handler that counts reads and can act on one.

For tests that must show how often code reads a file from the store (and what happens when the
object changes between two reads) against a real store: every call goes to the wrapped
filesystem; :class:`CountedReads` only counts the opens for reading and the reads of each opened
file (on an object store, a request each), and runs a hook before each open.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs


class CountedReads(pafs.FileSystemHandler):
    """Delegates to ``base``; ``opens[path]`` counts reads opened, ``reads[path]`` the reads of
    them; ``before_open(path, n)`` runs before the n-th (1-based) open of ``path``."""

    def __init__(self, base: pafs.FileSystem, before_open: Callable[[str, int], None] | None = None) -> None:
        self.base, self.before_open = base, before_open
        self.opens: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()

    def filesystem(self) -> pafs.FileSystem:
        return pafs.PyFileSystem(self)

    def _opened(self, path: str) -> None:
        self.opens[path] += 1
        if self.before_open is not None:
            self.before_open(path, self.opens[path])

    def open_input_stream(self, path: str) -> Any:
        self._opened(path)
        return pa.PythonFile(_Counted(self.base.open_input_stream(path, compression=None), self.reads, path))

    def open_input_file(self, path: str) -> Any:
        self._opened(path)
        return pa.PythonFile(_Counted(self.base.open_input_file(path), self.reads, path), mode="r")

    def get_type_name(self) -> str:
        return f"counted-{self.base.type_name}"

    def normalize_path(self, path: str) -> str:
        return str(self.base.normalize_path(path))

    def get_file_info(self, paths: list[str]) -> Any:
        return self.base.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> Any:
        return self.base.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.base.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.base.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.base.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise NotImplementedError("not for tests")

    def delete_file(self, path: str) -> None:
        self.base.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.base.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.base.copy_file(src, dest)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self.base.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.base.open_append_stream(path, metadata=metadata)


class _Counted(io.RawIOBase):
    """A file of the wrapped filesystem, each ``read`` counted under its path."""

    def __init__(self, f: Any, reads: Counter[str], path: str) -> None:
        super().__init__()
        self.f, self.counter, self.path = f, reads, path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return bool(self.f.seekable())

    def read(self, size: int = -1) -> bytes:
        self.counter[self.path] += 1
        data: bytes = self.f.read() if size is None or size < 0 else self.f.read(size)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.f.seek(offset, whence))

    def tell(self) -> int:
        return int(self.f.tell())

    def close(self) -> None:
        self.f.close()
        super().close()
