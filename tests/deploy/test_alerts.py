"""dashboards/alerts.yaml: promtool accepts it and its unit tests pass (at least one firing case
per alert, dashboards/tests/alerts_test.yaml), every alert leads to its runbook entry, and every
metric it reads is one the service declares."""

from __future__ import annotations

import subprocess

import yaml
from prometheus_client import generate_latest

from lakefs_gc.service.metrics import Metrics
from tests.deploy.alerting import (
    ALERT_TESTS,
    ALERTS,
    METRIC,
    exposed_names,
    promtool,
    rules,
    runbook_anchors,
)


def test_promtool_check_rules() -> None:
    proc = subprocess.run(
        [promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules())} rules found" in proc.stdout


def test_promtool_unit_tests_pass() -> None:
    proc = subprocess.run(
        [promtool(), "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_fires_in_a_unit_test() -> None:
    doc = yaml.safe_load(ALERT_TESTS.read_text())
    firing = {
        check["alertname"]
        for t in doc["tests"]
        for check in t.get("alert_rule_test", [])
        if check["exp_alerts"]
    }
    quiet = {check["alertname"] for t in doc["tests"] for check in t.get("alert_rule_test", [])
             if not check["exp_alerts"]}  # fmt: skip
    assert firing == set(rules()), set(rules()) ^ firing
    assert len(quiet) >= len(rules()) - 1  # and nearly every one has a case where it must not fire


def test_every_alert_has_a_runbook_entry_and_says_what_happened() -> None:
    anchors = runbook_anchors()
    for name, rule in rules().items():
        annotations = rule["annotations"]
        url = annotations["runbook_url"]
        assert url.split("#")[0].endswith("/docs/runbook.md"), url
        assert url.split("#")[1] == name.lower() in anchors, f"{name}: no '## {name}' in docs/runbook.md"
        assert annotations["summary"] and annotations["description"], name
        assert rule["labels"]["severity"] in ("critical", "warning"), name


def test_alerts_read_only_metrics_the_service_declares() -> None:
    declared = exposed_names(generate_latest(Metrics().registry).decode())
    read = {m for rule in rules().values() for m in METRIC.findall(rule["expr"])}
    assert read and read <= declared, read - declared
