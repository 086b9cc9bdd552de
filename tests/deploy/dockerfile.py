"""What deploy/docker/Dockerfile says, read from the file: the build stage's COPY sources and the
runtime stage's ENV, so the install test repeats exactly the image's steps."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    stage: int  # 0: the build stage, 1: the runtime stage
    keyword: str
    arguments: str


def instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """The Dockerfile's instructions (continuation lines joined, comments dropped)."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    out, stage = [], -1
    for line in text.splitlines():
        if not line.strip():
            continue
        keyword, _, arguments = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        out.append(Instruction(stage, keyword.upper(), arguments.strip()))
    return out


def build_copies() -> list[str]:
    """The repository paths the build stage copies."""
    sources: list[str] = []
    for i in instructions():
        if i.stage == 0 and i.keyword == "COPY":
            words = [w for w in shlex.split(i.arguments) if not w.startswith("--")]
            sources.extend(words[:-1])
    return sources


def build_install_command() -> list[str]:
    """The build stage's install command (the one RUN)."""
    runs = [i.arguments for i in instructions() if i.stage == 0 and i.keyword == "RUN"]
    assert len(runs) == 1, runs
    return shlex.split(runs[0])


def runtime_env() -> dict[str, str]:
    """The runtime stage's ENV, unexpanded."""
    env: dict[str, str] = {}
    for i in instructions():
        if i.stage == 1 and i.keyword == "ENV":
            for word in shlex.split(i.arguments):
                key, _, value = word.partition("=")
                env[key] = value
    return env


def arg_default(name: str) -> str:
    for i in instructions():
        if i.keyword == "ARG" and i.arguments.startswith(f"{name}="):
            return i.arguments.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}=... in {DOCKERFILE}")
