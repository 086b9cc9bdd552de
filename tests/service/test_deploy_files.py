"""The files users copy (deploy/, dashboards/) agree with the code they configure or query.

The Kubernetes overlays' settings, arguments and schemas are checked in tests/deploy/test_kubernetes.py,
the alert rules and the dashboard against a real Prometheus in tests/deploy/."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest

from lakefs_gc.service.metrics import Metrics
from lakefs_gc.service.settings import ServiceSettings
from lakefs_gc.settings import GcSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {"LAKEFS_GC_LAKEFS__SECRET_ACCESS_KEY": "secret", "LAKEFS_GC_LAKEFS__ACCESS_KEY_ID": "key"}


def test_example_config_is_valid_for_the_service_and_the_batch_commands() -> None:
    config = ROOT / "deploy" / "gc.yaml"
    settings = load_settings(
        environ=SECRETS, config_file=config, model=ServiceSettings, use_lakectl_defaults=False
    )
    assert settings.service.events["s3-notifications"].type == "sqs"
    schedules = {s.name: s for s in settings.schedules()}
    assert set(schedules) == {"analytics", "ml-features"}
    assert (
        schedules["ml-features"].interval is not None
        and schedules["ml-features"].interval.total_seconds() == 3600
    )
    assert (
        schedules["analytics"].sweep_delay is not None
        and schedules["analytics"].sweep_delay.total_seconds() == 3600
    )
    batch = load_settings(environ=SECRETS, config_file=config, use_lakectl_defaults=False)
    assert type(batch) is GcSettings  # the service section is ignored by mark/sweep/run


def test_dashboard_queries_only_metrics_that_exist() -> None:
    exposed = set(re.findall(r"^# TYPE (\S+) (\S+)", generate_latest(Metrics().registry).decode(), re.M))
    names = {n for n, _ in exposed}
    names |= {f"{n}_total" for n, t in exposed if t == "counter"}
    names |= {f"{n}_bucket" for n, t in exposed if t == "histogram"}
    dashboard = json.loads((ROOT / "dashboards" / "lakefs-gc.json").read_text())
    queried = {
        m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"lakefs_gc_\w+", t["expr"])
    }
    assert queried and queried <= names, queried - names
