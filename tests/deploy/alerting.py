"""The alert rules and the dashboard as the tests read them: names, expressions, metric names,
and the runbook's anchors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "dashboards" / "alerts.yaml"
ALERT_TESTS = ROOT / "dashboards" / "tests" / "alerts_test.yaml"
DASHBOARD = ROOT / "dashboards" / "lakefs-gc.json"
RUNBOOK = ROOT / "docs" / "runbook.md"
METRIC = re.compile(r"\blakefs_gc_\w+")


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool not found: tests/run installs Debian's prometheus package"
    return found


def rules() -> dict[str, dict[str, Any]]:
    """Every alerting rule of dashboards/alerts.yaml by name."""
    doc = yaml.safe_load(ALERTS.read_text())
    return {r["alert"]: r for group in doc["groups"] for r in group["rules"]}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the Grafana dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def runbook_anchors() -> set[str]:
    """GitHub's anchors of the runbook's headings (lower case, spaces to '-', punctuation dropped)."""
    headings = re.findall(r"^#{1,6} (.+)$", RUNBOOK.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


def exposed_names(exposition: str) -> set[str]:
    """The sample names a /metrics text offers (``# TYPE`` lines, with counters' ``_total`` and
    histograms' ``_bucket``, ``_count``, ``_sum``)."""
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)", exposition, re.M):
        names.add(name)
        if kind == "counter":
            names.add(f"{name}_total")
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names
