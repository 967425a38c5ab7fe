"""deploy/kubernetes/: every manifest parses and validates, and the manifests agree with each other.

Built-in kinds are validated strictly (unknown fields refused) with ``kubernetes-validate``, which ships the
Kubernetes OpenAPI schemas offline, against the oldest and the newest Kubernetes versions named below.
Custom resources (KEDA's ScaledObject and TriggerAuthentication, prometheus-operator's PodMonitor and
PrometheusRule) are validated against the ``openAPIV3Schema`` of their CRDs, vendored in
``deploy/kubernetes/schemas/`` (source and versions in its README), made strict the way the API server
prunes: an object schema with ``properties`` accepts no other field unless it says
``x-kubernetes-preserve-unknown-fields``. CEL rules (``x-kubernetes-validations``) are not evaluated.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import re
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from monitor.worker.settings import ENV, SettingsError, WorkerSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
SCHEMAS = K8S / "schemas"
#: The oldest Kubernetes minor version the manifests must work on, and the newest the validator knows.
KUBERNETES_VERSIONS = ("1.29.0", latest_version())
NOT_APPLIED = {"secret.example.yaml"}  # an example; applying it would overwrite the real Secret
#: Trigger metadata the Kafka scaler of KEDA v2.21.0 reads (pkg/scalers/kafka_scaler.go, kafkaMetadata;
#: ``<name>FromEnv`` for the names it resolves from the container's environment).
KAFKA_TRIGGER_METADATA = {
    "bootstrapServers", "bootstrapServersFromEnv", "consumerGroup", "consumerGroupFromEnv", "topic", "topicFromEnv",
    "partitionLimitation", "lagThreshold", "activationLagThreshold", "offsetResetPolicy", "allowIdleConsumers",
    "excludePersistentLag", "scaleToZeroOnInvalidOffset", "limitToPartitionsWithLag",
    "ensureEvenDistributionOfPartitions", "version", "tls", "unsafeSsl", "sasl", "saslTokenProvider", "awsRegion",
}
WORKER_PORT = 9464
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# ---------------------------------------------------------------- loading


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


@cache
def documents(path: Path) -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None)


def objects() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in manifest_files() for doc in documents(path)]


def the(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [doc for file, doc in objects() if doc["kind"] == kind and file not in NOT_APPLIED
             and (name is None or doc["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


# ---------------------------------------------------------------- CRD schemas


@cache
def crd_schemas() -> dict[tuple[str, str, str], dict[str, Any]]:
    """(group, version, kind) → the CRD's openAPIV3Schema, for every vendored CRD."""
    out = {}
    for path in sorted(SCHEMAS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert crd["kind"] == "CustomResourceDefinition", path.name
        for version in crd["spec"]["versions"]:
            key = (crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"])
            out[key] = version["schema"]["openAPIV3Schema"]
    return out


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The structural schema as JSON Schema (draft 4) that refuses what the API server would prune."""
    out = dict(schema)
    if out.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = strict(out["items"])
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in out:
            out[combinator] = [strict(s) for s in out[combinator]]
    return out


def validate_custom(doc: dict[str, Any]) -> None:
    """Raise :class:`jsonschema.ValidationError` unless ``doc`` fits its vendored CRD."""
    group, _, version = doc["apiVersion"].rpartition("/")
    schema = crd_schemas().get((group, version, doc["kind"]))
    if schema is None:
        pytest.fail(f"no vendored CRD for {doc['apiVersion']} {doc['kind']} in {SCHEMAS}", pytrace=False)
    jsonschema.Draft4Validator(strict(schema)).validate(doc)


def is_custom(doc: dict[str, Any]) -> bool:
    group = doc["apiVersion"].rpartition("/")[0]
    return group.endswith("keda.sh") or group == "monitoring.coreos.com"


def validate(doc: dict[str, Any], version: str) -> None:
    if is_custom(doc):
        validate_custom(doc)
    else:
        kubernetes_validate.validate(doc, version, strict=True)


# ---------------------------------------------------------------- every manifest


@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_parses_and_names_its_object(path: Path) -> None:
    docs = documents(path)
    assert docs, f"{path.name}: no objects"
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), path.name
        assert NAME.match(doc["metadata"]["name"]), doc["metadata"]["name"]
        assert "namespace" not in doc["metadata"], "kustomization.yaml sets the namespace"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_validates_against_its_schema(path: Path, version: str) -> None:
    for doc in documents(path):
        try:
            validate(doc, version)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            pytest.fail(f"{path.name}: {doc['kind']} at {where}: {error.message} (Kubernetes {error.version})",
                        pytrace=False)
        except jsonschema.ValidationError as error:
            where = ".".join(str(part) for part in error.absolute_path)
            pytest.fail(f"{path.name}: {doc['kind']} at {where}: {error.message}", pytrace=False)
        except kubernetes_validate.SchemaNotFoundError as error:
            pytest.fail(f"{path.name}: {error.message}", pytrace=False)


def test_the_validators_refuse_what_they_should() -> None:
    deployment = copy.deepcopy(the("Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessprobe"):
        validate(deployment, KUBERNETES_VERSIONS[0])
    scaled = copy.deepcopy(the("ScaledObject"))
    scaled["spec"]["maxReplicas"] = 4
    with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
        validate(scaled, KUBERNETES_VERSIONS[0])
    scaled = copy.deepcopy(the("ScaledObject"))
    scaled["spec"]["minReplicaCount"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled, KUBERNETES_VERSIONS[0])
    monitor = copy.deepcopy(the("PodMonitor"))
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "fifteen seconds"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor, KUBERNETES_VERSIONS[0])
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate({"apiVersion": "example.com/v1", "kind": "Nothing", "metadata": {}},
                                     KUBERNETES_VERSIONS[0], strict=True)


def test_kustomization_lists_every_manifest_but_the_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in manifest_files() if p.name not in NOT_APPLIED)
    assert kustomization["namespace"] == the("Namespace")["metadata"]["name"]
    assert [image["name"] for image in kustomization["images"]] == [
        the("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"].split(":")[0]]


# ---------------------------------------------------------------- generated and vendored files


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_manifests", K8S / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_manifests_are_up_to_date() -> None:
    for name, content in _generator().generated().items():
        assert (K8S / name).read_text(encoding="utf-8") == content, (
            f"deploy/kubernetes/{name} is out of date: run python deploy/kubernetes/generate.py")


def test_prometheus_rule_holds_every_rule_file_and_alertmanager_secret_the_shipped_config() -> None:
    rules = the("PrometheusRule")["spec"]["groups"]
    expected = []
    for path in sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml")):
        expected += (yaml.safe_load(path.read_text()) or {}).get("groups", [])
    assert rules == expected
    secret = the("Secret", "alertmanager-search-relevance-monitor")
    shipped = (ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text()
    assert secret["stringData"]["alertmanager.yaml"] == shipped


def test_vendored_crds_are_the_recorded_files() -> None:
    readme = (SCHEMAS / "README.md").read_text()
    for path in sorted(SCHEMAS.glob("*.yaml")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert f"{digest}  {path.name}" in readme, f"{path.name}: sha256 not recorded in schemas/README.md"
    kinds = {(group, kind) for group, _, kind in crd_schemas()}
    assert {("keda.sh", "ScaledObject"), ("keda.sh", "TriggerAuthentication"),
            ("monitoring.coreos.com", "PodMonitor"), ("monitoring.coreos.com", "PrometheusRule")} <= kinds


# ---------------------------------------------------------------- the manifests agree


def pod_labels() -> dict[str, str]:
    return the("Deployment")["spec"]["template"]["metadata"]["labels"]


def selects_the_worker(selector: dict[str, str]) -> bool:
    return bool(selector) and all(pod_labels().get(k) == v for k, v in selector.items())


def config() -> dict[str, str]:
    return the("ConfigMap")["data"]


def test_worker_container_runs_as_non_root_with_probes_and_resources() -> None:
    deployment = the("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["monitor", "worker"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "/tmp" in {mount["mountPath"] for mount in container["volumeMounts"]}  # Faust's data directory
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    (port,) = container["ports"]
    assert port["containerPort"] == WORKER_PORT == int(config()["MONITOR_HTTP_PORT"])
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == port["name"]
    assert selects_the_worker(deployment["spec"]["selector"]["matchLabels"])


def test_worker_environment_comes_from_the_configmap_and_the_secret() -> None:
    (container,) = the("Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["envFrom"] == [{"configMapRef": {"name": the("ConfigMap")["metadata"]["name"]}}]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert set(secrets) == {"MONITOR_REDIS_URL", "MONITOR_DEPLOY_TOKEN", "MONITOR_KAFKA_SASL_USERNAME",
                            "MONITOR_KAFKA_SASL_PASSWORD"}
    example = the_example_secret()
    for ref in secrets.values():
        assert ref["name"] == example["metadata"]["name"] and ref["key"] in example["stringData"]
    assert not set(secrets) & set(config()), "a secret must not also be in the ConfigMap"
    variables = {name for name, _ in ENV.values()}
    assert set(config()) | set(secrets) <= variables, f"not worker settings: {set(config()) - variables}"
    example = the_example_secret()["stringData"]
    env = {**config(), **{name: example[ref["key"]] for name, ref in secrets.items()}}
    try:
        settings = load_settings(env)
    except SettingsError as error:
        pytest.fail(f"the worker would refuse the ConfigMap and Secret: {error}", pytrace=False)
    defaults = WorkerSettings()
    assert settings.topics == defaults.topics and settings.app_id == defaults.app_id
    assert (settings.http_host, settings.http_port) == ("0.0.0.0", WORKER_PORT)


def the_example_secret() -> dict[str, Any]:
    (doc,) = documents(K8S / "secret.example.yaml")
    return doc


def test_service_pdb_and_podmonitor_select_the_worker_pods() -> None:
    service = the("Service")
    assert selects_the_worker(service["spec"]["selector"])
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(WORKER_PORT, "http")]
    assert selects_the_worker(the("PodDisruptionBudget")["spec"]["selector"]["matchLabels"])
    monitor = the("PodMonitor")["spec"]
    assert selects_the_worker(monitor["selector"]["matchLabels"])
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    # The job label the dashboards' pipeline panels and the compose/local Prometheus use.
    assert pod_labels()[monitor["jobLabel"]] == "search-relevance-monitor"
    annotations = the("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(WORKER_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"


def test_keda_scales_the_worker_on_the_impressions_lag_of_its_consumer_group() -> None:
    spec = the("ScaledObject")["spec"]
    deployment = the("Deployment")
    target = spec["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert target["envSourceContainerName"] == deployment["spec"]["template"]["spec"]["containers"][0]["name"]
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= int(config()["MONITOR_PARTITIONS"])
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    metadata = trigger["metadata"]
    assert set(metadata) <= KAFKA_TRIGGER_METADATA, set(metadata) - KAFKA_TRIGGER_METADATA
    resolved = {key.removesuffix("FromEnv"): config()[value] for key, value in metadata.items()
                if key.endswith("FromEnv")}
    resolved |= {key: value for key, value in metadata.items() if not key.endswith("FromEnv")}
    assert resolved["topic"] == config()["MONITOR_TOPIC_IMPRESSIONS"]
    assert resolved["consumerGroup"] == config()["MONITOR_APP_ID"]
    assert resolved["bootstrapServers"] == config()["MONITOR_KAFKA_BOOTSTRAP"]
    assert int(resolved["lagThreshold"]) > 0
    assert all(isinstance(value, str) for value in metadata.values()), "trigger metadata values are strings"
    auth = the("TriggerAuthentication", trigger["authenticationRef"]["name"])
    example = the_example_secret()
    for ref in auth["spec"]["secretTargetRef"]:
        assert ref["name"] == example["metadata"]["name"] and ref["key"] in example["stringData"]
