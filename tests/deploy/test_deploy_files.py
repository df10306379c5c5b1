"""deploy/: the Kubernetes manifests validate against the Kubernetes JSON schemas (kubernetes-validate, which
bundles them: nothing is fetched), the compose file against the compose spec's schema (bundled by
check-jsonschema), the gateway configs in both against the gateway's own config model, the policies in the
ConfigMap are the quick start's and compile, and the Grafana dashboard asks only for series the gateway exports."""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.config.model import GatewayConfig, StoreSpec
from gateway.observe.metrics import Metrics
from gateway.policy.load import check_policies

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBE = DEPLOY / "kubernetes"
# The oldest Kubernetes release the manifests promise to fit (PodDisruptionBudget policy/v1 needs 1.21+).
KUBE_VERSION = "1.29.0"

Json = dict[str, Any]


def manifests() -> list[tuple[str, Json]]:
    """Every document in deploy/kubernetes/*.yaml but the kustomization."""
    found = []
    for path in sorted(KUBE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document:
                found.append((path.name, document))
    return found


def by_kind(kind: str, name: str | None = None) -> Json:
    [found] = [d for _, d in manifests() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def gateway_config(text: str) -> GatewayConfig:
    """The config model's verdict on a deploy config. `store.postgres` is checked only where the store's model
    has it (the PostgreSQL store is another change); everything else always."""
    data = yaml.safe_load(text)
    if "postgres" not in StoreSpec.model_fields:
        assert data["store"] == {"postgres": {"dsn": {"env": "DATABASE_URL"}}}
        data.pop("store")
    return GatewayConfig.model_validate(data)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_every_manifest_validates_against_the_kubernetes_schemas(strict):
    documents = manifests()
    assert {d["kind"] for _, d in documents} >= {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Secret"}
    for name, document in documents:
        try:
            kubernetes_validate.validate(document, KUBE_VERSION, strict=strict)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {document['kind']}: {exc}")


def test_the_validator_would_catch_a_broken_manifest():
    broken = json.loads(json.dumps(by_kind("Deployment")))
    broken["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)
    typo = json.loads(json.dumps(by_kind("Deployment")))
    typo["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBE_VERSION, strict=True)


def test_kustomization_lists_every_manifest():
    listed = yaml.safe_load((KUBE / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]
    assert sorted(listed) == sorted(p.name for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml")


def test_deployment_has_three_replicas_probes_configmap_policies_and_secret_keys():
    deployment = by_kind("Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    config = yaml.safe_load(by_kind("ConfigMap", "agent-gateway-config")["data"]["gateway.yaml"])
    # the probes' Host header is one the gateway serves (it answers 421 to others)
    for probe in ("readinessProbe", "livenessProbe"):
        [host] = [h["value"] for h in container[probe]["httpGet"]["httpHeaders"] if h["name"] == "Host"]
        assert host in config["http"]["allowed_hosts"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # policies: the whole ConfigMap as a directory (a subPath mount never sees the ..data symlink swap)
    assert "subPath" not in mounts["policies"]
    assert volumes["policies"]["configMap"]["name"] == "agent-gateway-policies"
    assert config["policies"] == [mounts["policies"]["mountPath"]]
    assert container["args"][2] == f"{mounts['config']['mountPath']}/gateway.yaml"
    # every secret the config reads from the environment comes from the Secret
    secret = by_kind("Secret")
    assert [e["secretRef"]["name"] for e in container["envFrom"]] == [secret["metadata"]["name"]]
    text = by_kind("ConfigMap", "agent-gateway-config")["data"]["gateway.yaml"]
    wanted = set(re.findall(r"\{env: ([A-Z_]+)\}", text))
    assert wanted == set(secret["stringData"]) and "DATABASE_URL" in wanted
    # the Service and the PodDisruptionBudget select these pods
    labels = spec["template"]["metadata"]["labels"]
    assert by_kind("Service")["spec"]["selector"].items() <= labels.items()
    pdb = by_kind("PodDisruptionBudget")["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items() and pdb["minAvailable"] < spec["replicas"]


def test_the_configmaps_gateway_config_is_valid_and_its_policies_are_the_quick_starts_and_compile(tmp_path):
    config = gateway_config(by_kind("ConfigMap", "agent-gateway-config")["data"]["gateway.yaml"])
    assert config.metrics.enabled and [k.metrics for k in config.auth.api_keys].count(True) == 1
    policies = by_kind("ConfigMap", "agent-gateway-policies")["data"]
    quick = REPO / "examples" / "quickstart" / "policies"
    assert policies == {p.name: p.read_text(encoding="utf-8") for p in quick.glob("*.yaml")
                        if not p.name.endswith("_test.yaml")}
    for name, text in policies.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    policy_set, diagnostics = check_policies([tmp_path])
    assert policy_set is not None, [d.format() for d in diagnostics]


def _compose_schema() -> Json:
    vendored = importlib.resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json")
    schema: Json = json.loads(vendored.read_text(encoding="utf-8"))
    return schema


def test_compose_file_validates_against_the_compose_spec():
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text(encoding="utf-8"))
    schema = _compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [e.message for e in validator.iter_errors(compose)] == []
    broken = {**compose, "services": {**compose["services"], "gateway-1": {"image": 7, "restart": "sometimes"}}}
    assert list(validator.iter_errors(broken))  # the schema is real: it refuses a broken service


def test_compose_runs_two_gateways_on_one_postgres_with_the_quick_starts_upstreams():
    root = DEPLOY / "compose"
    compose = yaml.safe_load((root / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    gateways = [name for name, s in services.items() if "gateway" in s.get("command", [])]
    assert gateways == ["gateway-1", "gateway-2"] and "postgres" in services
    for name in gateways:
        service = services[name]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "@postgres:5432/" in service["environment"]["DATABASE_URL"]
    for name, service in services.items():  # every file or folder mounted from the repository exists
        for volume in service.get("volumes", []):
            if volume.startswith("."):
                assert (root / volume.split(":")[0]).resolve().exists(), (name, volume)
    monitoring = {name for name, s in services.items() if "monitoring" in s.get("profiles", [])}
    assert monitoring == {"prometheus", "grafana"}  # optional: `--profile monitoring`
    scrape = yaml.safe_load((root / "prometheus.yml").read_text(encoding="utf-8"))["scrape_configs"][0]
    assert scrape["static_configs"][0]["targets"] == [f"{g}:8080" for g in gateways]
    assert scrape["authorization"]["credentials_file"] == "/run/secrets/metrics_key"
    assert compose["secrets"]["metrics_key"] == {"environment": "METRICS_KEY"}
    config = gateway_config((root / "gateway.yaml").read_text(encoding="utf-8"))
    quick = yaml.safe_load((REPO / "examples" / "quickstart" / "gateway.yaml").read_text(encoding="utf-8"))
    assert [u.name for u in config.upstreams] == [u["name"] for u in quick["upstreams"]]
    env_keys = set(re.findall(r"\$\{([A-Z_]+):", (root / "compose.yaml").read_text(encoding="utf-8")))
    example = {line.split("=")[0] for line in (root / ".env.example").read_text().splitlines()
               if line and not line.startswith("#")}
    assert env_keys == example


def test_the_dashboard_asks_only_for_series_the_gateway_exports():
    dashboard = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    asked = {name for e in exprs for name in re.findall(r"\b(gateway_[a-z_]+)\b", e)}
    metrics = Metrics()
    metrics.count_open_approvals(lambda: 0)
    exported = {s.name for family in metrics.registry.collect() for s in family.samples} | {
        f"{family.name}_{suffix}" for family in metrics.registry.collect() for suffix in ("total", "bucket")}
    assert asked and asked <= exported, asked - exported
    # every series the gateway exports is on the dashboard
    families = {family.name for family in metrics.registry.collect()}
    assert {f for f in families if not any(f in name for name in asked)} == set()
