"""deploy/kubernetes: every overlay renders offline with `kubectl kustomize`, every rendered
resource validates (core kinds against Kubernetes' schemas with kubernetes-validate, the Spark
operator's kinds against its CRDs' openAPIV3Schema, both rejecting unknown fields), and what the
manifests say agrees with the code they run: the settings validate, the batch arguments parse,
the ports, probes and grace periods match the settings, pods run unprivileged on read-only root
file systems, and secrets are only referenced."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from lakefs_gc.cli.gc import gc_settings, validate_run_mode
from lakefs_gc.cli.main import build_parser
from lakefs_gc.service.settings import ServiceSettings
from lakefs_gc.settings import GcSettings, load_settings
from tests.deploy.kustomize import (
    ROOT,
    SPARK_KINDS,
    Doc,
    Pod,
    literal_env,
    one,
    overlay_names,
    pods,
    render,
    spark_spec,
)

CRDS = Path(__file__).parent / "crds"
#: the oldest Kubernetes the manifests are checked against (and the newest kubernetes-validate knows)
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.latest_version())
IMAGE = "registry.example.com/lakefs-gc:0.1.0"
CONFIG_MOUNT = "/etc/lakefs-gc"
#: stand-ins for what the Secret lakefs-gc-lakefs provides
SECRETS = {"LAKEFS_GC_LAKEFS__ACCESS_KEY_ID": "key", "LAKEFS_GC_LAKEFS__SECRET_ACCESS_KEY": "secret"}
OVERLAYS = overlay_names()


def test_every_shape_has_an_overlay() -> None:
    assert OVERLAYS == [
        "batch-mark-scheduled", "batch-once", "batch-scheduled", "batch-sweep-once",
        "service-cluster", "service-local",
    ]  # fmt: skip


# ---- schemas -------------------------------------------------------------------------------------


@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    """The CRD's openAPIV3Schema, strict: unknown fields are errors (as `kubectl apply
    --validate=strict` makes them), except where the schema preserves unknown fields."""
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
            schema: dict[str, Any] = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
            return schema
    raise AssertionError(f"no CRD for {kind} in {CRDS}")


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for item in schema:
            _strict(item)
    return schema


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_validates(overlay: str) -> None:
    docs = render(overlay)
    assert docs
    for doc in docs:
        where = f"{overlay}: {doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in SPARK_KINDS:
            assert doc["apiVersion"] == "sparkoperator.k8s.io/v1beta2", where
            errors = list(jsonschema.Draft7Validator(crd_schema(doc["kind"])).iter_errors(doc))
            assert not errors, f"{where}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                raise AssertionError(f"{where} (Kubernetes {version}): {e.message}") from e


def test_strict_schemas_catch_a_misspelt_field() -> None:
    doc = one(render("service-cluster"), "SparkApplication")
    doc["spec"]["driver"]["memoryOverhed"] = "1g"
    assert not jsonschema.Draft7Validator(crd_schema("SparkApplication")).is_valid(doc)
    deployment = one(render("service-local"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


# ---- references resolve --------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_names_resolve_and_everything_is_in_one_namespace(overlay: str) -> None:
    docs = render(overlay)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {d["metadata"].get("namespace") for d in docs} == {"lakefs-gc"}
    assert not [d for d in docs if d["kind"] == "Secret"], "secrets are referenced, never shipped"
    for pod in (p for d in docs for p in pods(d)):
        assert ("ServiceAccount", pod.service_account) in names, pod.owner
        for volume in pod.volumes.values():
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in names, pod.owner
            if "persistentVolumeClaim" in volume:
                assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in names
        mounted = {m["name"] for m in pod.container["volumeMounts"]}
        assert mounted <= set(pod.volumes), pod.owner
    images = {c["image"] for d in docs for c in _containers(d)} | {
        spark_spec(d)["image"] for d in docs if d["kind"] in SPARK_KINDS
    }
    assert images == {IMAGE}


def _containers(doc: Doc) -> list[dict[str, Any]]:
    if doc["kind"] == "Deployment":
        return list(doc["spec"]["template"]["spec"]["containers"])
    return []


# ---- pods: identity, privileges, secrets ---------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_are_unprivileged_and_take_secrets_by_reference(overlay: str) -> None:
    docs = render(overlay)
    account = one(docs, "ServiceAccount")["metadata"]["annotations"]
    assert account["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    assert account["azure.workload.identity/client-id"]
    found = list(p for d in docs for p in pods(d))
    assert found
    for pod in found:
        _check_unprivileged(pod)
        assert pod.labels.get("azure.workload.identity/use") == "true", pod.owner
        for env in pod.container["env"]:
            if any(w in env["name"] for w in ("SECRET", "KEY", "TOKEN", "PASSWORD")):
                assert "secretKeyRef" in env.get("valueFrom", {}), f"{pod.owner}: {env['name']}"
        assert all(set(e) <= {"secretRef"} for e in pod.container["envFrom"]), pod.owner


def _check_unprivileged(pod: Pod) -> None:
    assert pod.security["runAsNonRoot"] is True and pod.security["runAsUser"] == 10001, pod.owner
    assert pod.security["seccompProfile"] == {"type": "RuntimeDefault"}, pod.owner
    security = pod.container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True, pod.owner
    assert security["allowPrivilegeEscalation"] is False, pod.owner
    assert security["capabilities"] == {"drop": ["ALL"]}, pod.owner
    tmp = [m for m in pod.container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp and "emptyDir" in pod.volumes[tmp[0]["name"]], f"{pod.owner}: /tmp must be writable"


# ---- settings and arguments agree with the code --------------------------------------------------


def config_file(docs: list[Doc], tmp_path: Path) -> Path:
    path = tmp_path / "gc.yaml"
    path.write_text(one(docs, "ConfigMap")["data"]["gc.yaml"])
    return path


def _service_settings(docs: list[Doc], pod: Pod, tmp_path: Path) -> ServiceSettings:
    environ = {**literal_env(pod.container), **SECRETS}
    return load_settings(
        environ=environ, config_file=config_file(docs, tmp_path), model=ServiceSettings,
        use_lakectl_defaults=False,
    )  # fmt: skip


def test_local_service(tmp_path: Path) -> None:
    docs = render("service-local")
    deployment = one(docs, "Deployment")
    (pod,) = pods(deployment)
    settings = _service_settings(docs, pod, tmp_path)
    svc = settings.service
    assert settings.spark.master == "local[2]"
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = pod.container
    assert container["args"][:2] == ["lakefs-gc", "serve"]
    assert _mount_of(pod, str(svc.state)) == ("state", "persistentVolumeClaim")
    assert _mount_of(pod, CONFIG_MOUNT) == ("config", "configMap")
    (port,) = container["ports"]
    assert port["containerPort"] == svc.metrics_port == int(pod.annotations["prometheus.io/port"])
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod.grace_seconds is not None
    assert pod.grace_seconds >= svc.shutdown_timeout.total_seconds() + 30
    resources = container["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"]
    assert resources["requests"]["cpu"] == "2"  # = local[2]
    service = one(docs, "Service")
    assert service["spec"]["selector"].items() <= pod.labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def _mount_of(pod: Pod, path: str) -> tuple[str, str]:
    """(volume name, volume type) of the mount holding ``path``."""
    mounts = [m for m in pod.container["volumeMounts"] if (path + "/").startswith(m["mountPath"] + "/")]
    assert mounts, f"{pod.owner}: nothing mounted at {path}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume = pod.volumes[mount["name"]]
    return mount["name"], next(k for k in volume if k != "name")


def test_cluster_service_manifests(tmp_path: Path) -> None:
    docs = render("service-cluster")
    app = one(docs, "SparkApplication")
    spec = app["spec"]
    assert spec["restartPolicy"]["type"] == "Always"
    assert spec["mainApplicationFile"] == "local:///opt/lakefs-gc/streaming/serve.py"
    assert (ROOT / "streaming" / "serve.py").is_file()
    driver, executor = pods(app)
    settings = yaml.safe_load(one(docs, "ConfigMap")["data"]["gc.yaml"])
    port = settings["service"]["metrics_port"]
    assert [p["containerPort"] for p in driver.container["ports"]] == [port]
    assert driver.annotations["prometheus.io/scrape"] == "true"
    assert int(driver.annotations["prometheus.io/port"]) == port
    assert spec["executor"]["instances"] >= 1
    assert driver.grace_seconds is not None and driver.grace_seconds >= 300 + 30
    env = literal_env(driver.container)
    assert env["LAKEFS_GC_SERVICE__STATE"].startswith("s3://")  # the state on object storage
    assert _mount_of(driver, env["LAKEFS_GC_SERVICE__CHECKPOINTS"]) == (
        "checkpoints",
        "persistentVolumeClaim",
    )
    service = one(docs, "Service")
    assert service["spec"]["selector"].items() <= driver.labels.items()
    assert not service["spec"]["selector"].items() <= executor.labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == port
    rules = one(docs, "Role")["rules"]
    assert {r for rule in rules for r in rule["resources"]} >= {"pods", "configmaps", "services"}
    binding = one(docs, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "lakefs-gc", "namespace": "lakefs-gc"}]


def test_cluster_service_settings_validate(tmp_path: Path) -> None:
    docs = render("service-cluster")
    driver, _ = pods(one(docs, "SparkApplication"))
    settings = _service_settings(docs, driver, tmp_path)
    assert str(settings.service.state).startswith("s3://")
    checkpoints = literal_env(driver.container)["LAKEFS_GC_SERVICE__CHECKPOINTS"]
    assert settings.service.checkpoints == checkpoints  # on the driver's volume


BATCH = {  # overlay -> (kind, entry point)
    "batch-scheduled": ("ScheduledSparkApplication", "run"),
    "batch-mark-scheduled": ("ScheduledSparkApplication", "mark"),
    "batch-once": ("SparkApplication", "run"),
    "batch-sweep-once": ("SparkApplication", "sweep"),
}


@pytest.mark.parametrize("overlay", sorted(BATCH))
def test_batch_application_runs_its_entry_point_with_valid_arguments(overlay: str, tmp_path: Path) -> None:
    kind, command = BATCH[overlay]
    docs = render(overlay)
    app = one(docs, kind)
    spec = spark_spec(app)
    assert spec["mainApplicationFile"] == f"local:///opt/lakefs-gc/batch/{command}.py"
    assert (ROOT / "batch" / f"{command}.py").is_file()
    arguments = [str(config_file(docs, tmp_path)) if a == f"{CONFIG_MOUNT}/gc.yaml" else a
                 for a in spec["arguments"]]  # fmt: skip
    args = build_parser().parse_args([command, *arguments])
    driver, _ = pods(app)
    settings = gc_settings(args, {**literal_env(driver.container), **SECRETS})
    assert type(settings) is GcSettings
    validate_run_mode(command, list(settings.repositories), list(getattr(args, "mark_ids", None) or []))
    assert len(settings.repositories) >= 2  # over listed repositories
    if command == "run":
        assert args.yes, "a driver has no terminal to confirm on"
    if kind == "ScheduledSparkApplication":
        assert app["spec"]["concurrencyPolicy"] == "Forbid"


def test_run_once_is_the_scheduled_template() -> None:
    """batch-once repeats batch-scheduled's template (one file each, for readers): they must agree."""
    scheduled = one(render("batch-scheduled"), "ScheduledSparkApplication")["spec"]["template"]
    once = one(render("batch-once"), "SparkApplication")["spec"]
    assert once == scheduled
