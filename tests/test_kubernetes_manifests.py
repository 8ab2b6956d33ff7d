"""deploy/kubernetes: every manifest valid against Kubernetes' schemas (kubernetes-validate,
strict), and the settings each pod of the StatefulSet would run with, rendered as Kubernetes
and the container's shell render them, form one valid kbroker cluster (parsed by kbroker's
own config loader)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kbroker.config.broker import BrokerConfig, load_broker_config

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
NAMESPACE = "streaming"
SECRET = "a-secret-for-the-test"
# The oldest Kubernetes the manifests are written for (policy/v1, StatefulSet features used)
# and a recent one.
VERSIONS = ("1.28.0", "1.33.0")


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        found.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def resource(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for _, d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def statefulset() -> dict[str, Any]:
    (found,) = [d for _, d in documents() if d["kind"] == "StatefulSet"]
    return found


def container() -> dict[str, Any]:
    (found,) = statefulset()["spec"]["template"]["spec"]["containers"]
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_kubernetes_schemas(version: str):
    docs = documents()
    assert {d["kind"] for _, d in docs} >= {"StatefulSet", "Service", "PodDisruptionBudget"}
    for name, doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} {doc['kind']}/{doc['metadata']['name']}: {exc.message}")


def image_environment() -> dict[str, str]:
    """The KBROKER_* defaults of the image's final stage (its ENV)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    final = text[text.rindex("\nFROM ") :]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            for pair in shlex.split(line[4:]):
                name, _, value = pair.partition("=")
                if name.startswith("KBROKER_"):
                    env[name] = value
    return env


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of an env value: a variable defined earlier in the
    list is replaced, anything else is left as written; $$ escapes a $."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, value)


def pod_environment(ordinal: int) -> dict[str, str]:
    """The container's environment in pod `ordinal`: the image's, then the manifest's."""
    pod = f"{statefulset()['metadata']['name']}-{ordinal}"
    fields = {"metadata.name": pod, "metadata.namespace": NAMESPACE}
    env = {**image_environment(), "HOSTNAME": pod}
    for entry in container()["env"]:
        if "value" in entry:
            env[entry["name"]] = expand(entry["value"], env)
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            env[entry["name"]] = fields[source["fieldRef"]["fieldPath"]]
        else:
            ref = source["secretKeyRef"]
            assert (ref["name"], ref["key"]) == ("kbroker-cluster", "cluster-secret")
            env[entry["name"]] = SECRET
    return env


def rendered(ordinal: int, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """(kbroker's arguments, its KBROKER_* environment) as the container's command runs
    it in pod `ordinal`: the command is run with a stand-in kbroker that records them."""
    command = container()["command"]
    assert command[0] == "sh"
    bin_dir = tmp_path / f"bin{ordinal}"
    bin_dir.mkdir()
    stand_in = bin_dir / "kbroker"
    stand_in.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "json.dump({'args': sys.argv[1:], 'env': {k: v for k, v in os.environ.items()"
        " if k.startswith('KBROKER_')}}, sys.stdout)\n"
    )
    stand_in.chmod(0o755)
    env = pod_environment(ordinal)
    result = subprocess.run(
        ["/bin/sh", *command[1:]],
        env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    return seen["args"], seen["env"]


def pod_config(ordinal: int, tmp_path: Path) -> BrokerConfig:
    args, env = rendered(ordinal, tmp_path)
    assert args[0] == "serve"
    overrides = [args[i + 1] for i, a in enumerate(args) if a == "--override"]
    return load_broker_config(None, overrides, env)


def test_each_pod_renders_a_valid_node_of_one_cluster(tmp_path: Path):
    replicas = statefulset()["spec"]["replicas"]
    assert replicas == 3
    configs = [pod_config(i, tmp_path) for i in range(replicas)]
    service = statefulset()["spec"]["serviceName"]

    assert [c.get("node.id") for c in configs] == [1, 2, 3]
    voters = {tuple(c.peers) for c in configs}
    assert len(voters) == 1, "the pods disagree on the voters"
    (peers,) = voters
    assert sorted(p.node_id for p in peers) == [1, 2, 3]
    for ordinal, config in enumerate(configs):
        pod_dns = f"{statefulset()['metadata']['name']}-{ordinal}.{service}.{NAMESPACE}.svc"
        assert config.quorum.is_cluster and config.quorum.is_voter
        assert config.get("cluster.secret") == SECRET
        own = next(p for p in peers if p.node_id == config.get("node.id"))
        assert own.host == pod_dns, "a voter entry names another pod"
        # Every advertised listener is the pod's own name on the headless Service.
        assert {e.host for e in config.advertised_endpoints} == {pod_dns}
        # The voter listens on every address and dials the other two by their names.
        assert config.quorum.self_address == f"{pod_dns}:{own.port}"
        assert config.quorum.bind_address == f"0.0.0.0:{own.port}"
        assert len(config.quorum.peer_addresses) == 2
        assert config.get("default.replication.factor") == 3
        assert config.get("min.insync.replicas") == 2


def test_ports_probes_and_volume_match_the_settings(tmp_path: Path):
    config = pod_config(0, tmp_path)
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    (kafka,) = [e for e in config.endpoints if e.name not in config.controller_listeners]
    (controller,) = [e for e in config.endpoints if e.name in config.controller_listeners]
    (http,) = config.http_endpoints
    assert (ports["kafka"], ports["controller"], ports["http"]) == (
        kafka.port,
        controller.port,
        http.port,
    )
    assert {p.port for p in config.peers} == {controller.port}
    # Probes: ready and started on /ready of the HTTP listener; liveness never asks /ready
    # or /health, which are 503 while a voter waits for its quorum.
    spec = container()
    for probe in ("readinessProbe", "startupProbe"):
        assert spec[probe]["httpGet"] == {"path": "/ready", "port": "http"}
    assert "httpGet" not in spec["livenessProbe"]
    started = spec["startupProbe"]
    assert started["periodSeconds"] * started["failureThreshold"] * 1000 > config.get(
        "initial.broker.registration.timeout.ms"
    )
    # The log directories are on the claimed volume.
    (claim,) = statefulset()["spec"]["volumeClaimTemplates"]
    (mount,) = [m for m in spec["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
    for directory in config.data_dirs:
        assert Path(mount["mountPath"]) in directory.parents


def test_services_and_budget_select_the_pods_and_keep_a_quorum():
    sts = statefulset()
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # Pods start together: a voter is not Ready before a majority of the voters runs.
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    headless = resource("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    for service in (d for _, d in documents() if d["kind"] == "Service"):
        assert service["spec"]["selector"].items() <= labels.items()
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports
    (budget,) = [d for _, d in documents() if d["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    replicas = sts["spec"]["replicas"]
    # A drain may take down only as many voters as leave a majority running.
    assert replicas - budget["spec"]["maxUnavailable"] > replicas // 2
    # The pods run as the image's unprivileged user, who owns the volume.
    security = sts["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsUser"] == security["fsGroup"] == 10001


def test_the_secret_the_pods_read_is_the_one_the_docs_create():
    doc = (ROOT / "docs" / "deployment.md").read_text()
    assert "kubectl create secret generic kbroker-cluster" in doc
    assert "--from-literal=cluster-secret=" in doc
