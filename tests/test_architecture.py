"""The shape of the house, checked: import contracts, size rules, dependencies, references.

* the import-linter contracts of ``pyproject.toml`` (docs/architecture.md): a pure ``gc/``, the
  layers, no cycles; a broken one fails naming the offending import;
* no module in ``src/`` over 400 lines, no function over 60 (except the declarative tables of
  :data:`LONG_FUNCTIONS`, each with its reason);
* ``deptry``: every third-party import is a declared dependency and every declared dependency is used;
* every reference into ``docs/`` resolves (the file and the section exist), every "invariant N"
  names one of docs/invariants.md, and every test docs/invariants.md names exists;
* nothing cites documents outside the repository.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SRC = REPO_ROOT / "src"
DOCS = REPO_ROOT / "docs"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
#: functions allowed past MAX_FUNCTION_LINES: declarative tables, read top to bottom, one entry each
LONG_FUNCTIONS = {
    "lakefs_gc/service/metrics.py::Metrics.__init__": "the metric table: one declaration per metric",
    "lakefs_gc/sstable/addresses.py::block_addresses": "the mark's hot loop: one inline walk per block, "
    "since every call or generator per entry costs the speed it exists for (bench/sstable_read.py)",
    "lakefs_gc/testing/api/gc.py::register": "a route table: one short handler per lakeFS endpoint",
    "lakefs_gc/testing/api/objects.py::register": "a route table: one short handler per lakeFS endpoint",
    "lakefs_gc/testing/api/repositories.py::register": "a route table: one short handler per lakeFS endpoint",
}


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)


def _tool(name: str) -> str:
    """The console script of a test dependency, beside this interpreter when not on PATH."""
    found = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(found).exists():
        pytest.fail(f"{name} is not installed: it is in the [test] extra of pyproject.toml")
    return found


def test_import_contracts_are_kept() -> None:
    """`lint-imports` with the contracts of pyproject.toml; its report names the broken import."""
    result = _run(_tool("lint-imports"), "--no-cache")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout or "broken" not in result.stdout.split("Contracts:")[-1]


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            found.append((prefix + node.name, node.end_lineno - node.lineno + 1))
            found.extend(_functions(node, prefix + node.name + "."))
        elif isinstance(node, ast.ClassDef):
            found.extend(_functions(node, prefix + node.name + "."))
    return found


def test_modules_and_functions_stay_small() -> None:
    too_long: list[str] = []
    allowed_seen: set[str] = set()
    for path in sorted((SRC / "lakefs_gc").rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{relative}: {lines} lines (at most {MAX_MODULE_LINES})")
        for name, length in _functions(ast.parse(text)):
            key = f"{relative}::{name}"
            if length > MAX_FUNCTION_LINES:
                if key in LONG_FUNCTIONS:
                    allowed_seen.add(key)
                else:
                    too_long.append(f"{key}: {length} lines (at most {MAX_FUNCTION_LINES})")
    assert too_long == []
    assert allowed_seen == set(LONG_FUNCTIONS), "an allowed long function got short: drop it from the list"


def test_dependencies_are_declared_and_used() -> None:
    """`deptry`: no missing, unused or transitive dependency (configuration in pyproject.toml)."""
    result = _run(_tool("deptry"), ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


# ---- references ------------------------------------------------------------------------------

#: ``docs/formats/x.md, "Section"`` or ``x.md, "Section"``: a file of docs/ and one of its headings
_REFERENCE = re.compile(r"""((?:docs/)?(?:[\w.-]+/)*[\w.-]+\.md)(?:`)?,?\s+"([^"]+)\"""")
_INVARIANT = re.compile(r"[Ii]nvariants? (\d)(?:(?:,| and) (\d))?")


def _cited_files() -> list[Path]:
    roots = [SRC, REPO_ROOT / "tests", REPO_ROOT / "bench", DOCS]
    files = [p for root in roots for p in root.rglob("*") if p.suffix in (".py", ".md") and p.is_file()]
    return [*(p for p in files if p != Path(__file__)), REPO_ROOT / "README.md"]  # not this file's examples


def _doc(name: str) -> Path | None:
    """The file a reference names: a path from the repository's root (``docs/x.md``,
    ``bench/README.md``), else the one file of that name under docs/."""
    path = REPO_ROOT / name if "/" in name else None
    if path is not None and path.is_file():
        return path
    matches = [p for p in DOCS.rglob(Path(name).name) if p.is_file()]
    return matches[0] if len(matches) == 1 else None


def _headings(path: Path) -> set[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.lstrip("#").strip() for line in lines if line.startswith("#")}


def test_every_docs_reference_resolves() -> None:
    unresolved = []
    for path in _cited_files():
        text = " ".join(path.read_text(encoding="utf-8").split())  # references may wrap lines
        for name, section in _REFERENCE.findall(text):
            doc = _doc(name)
            if doc is None:
                if name.startswith("docs/") or "/" not in name:
                    unresolved.append(f"{path.relative_to(REPO_ROOT)}: {name} does not exist")
                continue
            if section not in _headings(doc):
                unresolved.append(f'{path.relative_to(REPO_ROOT)}: {name} has no section "{section}"')
    assert unresolved == [], "\n".join(unresolved)


def test_every_invariant_cited_exists() -> None:
    headings = _headings(DOCS / "invariants.md")
    numbers = {int(m.group(1)) for h in headings if (m := re.match(r"Invariant (\d):", h))}
    assert numbers == {1, 2, 3, 4, 5, 6}
    wrong = []
    for path in _cited_files():
        text = path.read_text(encoding="utf-8")
        for match in _INVARIANT.finditer(text):
            cited = {int(n) for n in match.groups() if n}
            if not cited <= numbers:
                wrong.append(f"{path.relative_to(REPO_ROOT)}: {match.group(0)}")
            if path.parent != DOCS and "invariants.md" not in " ".join(text.split()):
                wrong.append(
                    f"{path.relative_to(REPO_ROOT)}: cites {match.group(0)!r} but not docs/invariants.md"
                )
    assert wrong == [], "\n".join(wrong)


def test_every_test_the_invariants_name_exists() -> None:
    text = (DOCS / "invariants.md").read_text(encoding="utf-8")
    missing = []
    for path, names in re.findall(r"`(tests/[\w/]+\.py)((?:::[\w\[\]-]+)+)`", text):
        source = REPO_ROOT / path
        if not source.is_file():
            missing.append(path)
            continue
        defined = set(re.findall(r"(?:def|class) (\w+)", source.read_text(encoding="utf-8")))
        missing.extend(f"{path}{names}" for name in names.split("::")[1:] if name not in defined)
    assert missing == []


def test_nothing_cites_documents_outside_the_repository() -> None:
    outside = re.compile("|".join(["shared" + "/", "internals " + "§", "cloud" + "-formats"]))
    found = []
    for path in [*SRC.rglob("*.py"), *(REPO_ROOT / "tests").rglob("*.py"), REPO_ROOT / "README.md"]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if outside.search(line):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert found == []
