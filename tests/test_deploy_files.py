"""The Dockerfile, docker-compose.yml and the monitoring files, checked where docker cannot
run: hadolint on the Dockerfile, the image's promises read from it, and a compose client
validating the compose file offline (`config` needs no daemon)."""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCS = ROOT / "docs" / "deployment.md"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions(DOCKERFILE.read_text())
    last_from = max(i for i, (k, _) in enumerate(steps) if k == "FROM")
    return steps[last_from:]


def test_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_is_built_in_one_stage_and_run_from_another():
    steps = instructions(DOCKERFILE.read_text())
    froms = [args for keyword, args in steps if keyword == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build")
    copies = [args for keyword, args in final_stage() if keyword == "COPY"]
    assert copies and all(c.startswith("--from=build ") for c in copies)
    assert not any(k == "RUN" and "pip install" in a for k, a in final_stage())


def test_image_runs_as_a_user_other_than_root():
    users = [args for keyword, args in final_stage() if keyword == "USER"]
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")


def test_image_entry_point_is_kbroker_and_serves_by_default():
    steps = dict(final_stage())
    assert json.loads(steps["ENTRYPOINT"]) == ["kbroker"]
    assert json.loads(steps["CMD"]) == ["serve"]


def test_image_healthcheck_asks_ready_on_the_http_listener_it_configures():
    steps = dict(final_stage())
    env = dict(shlex.split(pair)[0].split("=", 1) for pair in _env_pairs(steps["ENV"]))
    assert env["KBROKER_HTTP_LISTENERS"] == "http://0.0.0.0:9644"
    command = json.loads(steps["HEALTHCHECK"].split(" CMD ", 1)[1])
    assert command[0] == "python"
    # Run against a listener on another port, as a compose file or a pod configures it:
    # healthy while /ready answers 200, unhealthy on its 503.
    assert run_health_check(command[1:], 200) == (0, ["/ready"])
    code, asked = run_health_check(command[1:], 503)
    assert code != 0 and asked == ["/ready"]


def run_health_check(args: list[str], status: int) -> tuple[int, list[str]]:
    """(exit code, paths asked) of the check run against a server answering `status`."""
    asked: list[str] = []

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http.server.HTTPServer(("127.0.0.1", 0), Ready) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        listeners = f"http://0.0.0.0:{server.server_address[1]},http://0.0.0.0:1"
        result = subprocess.run(
            [sys.executable, *args],
            env={**os.environ, "KBROKER_HTTP_LISTENERS": listeners},
            capture_output=True,
            timeout=30,
        )
        server.shutdown()
    return result.returncode, asked


def _env_pairs(text: str) -> list[str]:
    return [p for p in shlex.split(text) if "=" in p]


def test_build_context_holds_only_what_the_image_copies():
    ignored = (ROOT / ".dockerignore").read_text().split()
    allowed = ignored[ignored.index("*") :][:6]
    assert allowed == ["*", "!pyproject.toml", "!setup.py", "!README.md", "!LICENSE", "!kbroker/"]


# -- docker-compose.yml -------------------------------------------------------------------


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    pytest.skip("no compose client (make test installs docker-compose with apt-get as root)")


def compose_config(*args: str) -> dict:
    result = subprocess.run(
        [
            *compose_command(),
            "--project-directory",
            str(ROOT),
            "-f",
            str(ROOT / "docker-compose.yml"),
            *args,
            "config",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def binds(service: dict) -> dict[str, Path]:
    """Bind mounts of a service, {container path: host path}, in either client's output
    (compose v2 writes long-form volumes, v1 `source:target:mode` strings)."""
    found = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume["type"] == "bind":
                found[volume["target"]] = Path(volume["source"])
        else:
            source, target = volume.split(":")[:2]
            if source.startswith("/"):
                found[target] = Path(source)
    return found


MONITORING = {"prometheus", "grafana"}


def test_compose_runs_the_brokers_alone_unless_monitoring_is_asked_for():
    services = compose_config("--profile", "monitoring")["services"]
    profiled = {n for n, s in services.items() if "monitoring" in s.get("profiles", [])}
    assert profiled == MONITORING
    others = [s for n, s in services.items() if n not in MONITORING]
    assert others and all("profiles" not in s for s in others)
    brokers = [s for s in others if s.get("entrypoint") is None]
    assert brokers and all(Path(s["build"]["context"]) == ROOT for s in brokers)


def test_compose_monitoring_services_mount_files_that_exist():
    services = compose_config("--profile", "monitoring")["services"]
    for name in ("prometheus", "grafana"):
        mounted = binds(services[name])
        assert mounted
        for source in mounted.values():
            assert source.exists(), source


def test_prometheus_scrapes_every_brokers_http_listener():
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    targets = job["static_configs"][0]["targets"]
    services = compose_config("--profile", "monitoring")["services"]
    http_ports = {
        s["environment"]["KBROKER_HTTP_LISTENERS"].rsplit(":", 1)[1]
        for s in services.values()
        if "KBROKER_HTTP_LISTENERS" in s.get("environment", {})
    }
    assert {t.rsplit(":", 1)[1] for t in targets} == http_ports
    hosts = {t.rsplit(":", 1)[0] for t in targets}
    brokers = {n for n, s in services.items() if "KBROKER_NODE_ID" in s.get("environment", {})}
    assert hosts == brokers, "the scrape targets are not the compose file's brokers"
    prometheus = services["prometheus"]
    config_path = binds(prometheus)["/etc/prometheus/prometheus.yml"]
    assert config_path == ROOT / "deploy/prometheus/prometheus.yml"


def test_grafana_is_provisioned_with_the_dashboard_and_the_prometheus_source():
    provisioning = ROOT / "deploy/grafana/provisioning"
    sources = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    boards = yaml.safe_load((provisioning / "dashboards/kbroker.yml").read_text())
    path = boards["providers"][0]["options"]["path"]
    grafana = compose_config("--profile", "monitoring")["services"]["grafana"]
    mounted = binds(grafana)
    assert mounted["/etc/grafana/provisioning"] == provisioning
    assert mounted[f"{path}/kbroker.json"] == ROOT / "deploy/grafana/kbroker.json"


# -- alert rules ------------------------------------------------------------------------

PROMETHEUS = ROOT / "deploy/prometheus"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("no promtool (make test installs Debian's prometheus package as root)")
    return found


def test_prometheus_loads_the_alert_rules_compose_mounts():
    scrape = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert scrape["rule_files"] == ["/etc/prometheus/alerts.yml"]
    prometheus = compose_config("--profile", "monitoring")["services"]["prometheus"]
    assert binds(prometheus)["/etc/prometheus/alerts.yml"] == PROMETHEUS / "alerts.yml"


def test_alert_rules_pass_promtool_check():
    result = subprocess.run(
        [promtool(), "check", "rules", str(PROMETHEUS / "alerts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_fire_as_their_unit_tests_expect():
    result = subprocess.run(
        [promtool(), "test", "rules", "alerts.test.yml"],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not():
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    tests = yaml.safe_load((PROMETHEUS / "alerts.test.yml").read_text())["tests"]
    checks = [c for t in tests for c in t.get("alert_rule_test", [])]
    assert {c["alertname"] for c in checks if c.get("exp_alerts")} == alerts
    assert {c["alertname"] for c in checks if not c.get("exp_alerts")} == alerts
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_docs_list_every_alert_rule():
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    documented = set(re.findall(r"^\| `(Kbroker\w+)` \|", DOCS.read_text(), re.M))
    assert documented == alerts


# -- scripts/docker-test-setup.sh: what it says where it cannot build ---------------------

SETUP = ROOT / "scripts" / "docker-test-setup.sh"


def run_setup(tmp_path: Path, docker: str, uid: int) -> subprocess.CompletedProcess[str]:
    """The setup script with stand-ins for `docker` (a shell script body) and `id`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("docker", docker), ("id", f"echo {uid}")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return subprocess.run(
        ["bash", str(SETUP)],
        env={
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "KBROKER_DOCKER_CACHE": str(tmp_path / "cache"),
            "PYTHON": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_setup_without_a_daemon_it_may_start_says_so_in_one_line(tmp_path: Path):
    result = run_setup(tmp_path, docker="exit 1", uid=1000)
    assert result.returncode == 3  # the compose test skips on 3, with this line
    assert result.stderr.count("\n") == 1, result.stderr
    assert "no Docker daemon answers" in result.stderr and "root" in result.stderr


def test_setup_with_an_unreachable_base_image_says_what_to_do_in_one_line(tmp_path: Path):
    # A daemon that answers but has no image and reaches no registry.
    docker = 'case "$1" in info) exit 0 ;; *) echo "no such host" >&2; exit 1 ;; esac'
    result = run_setup(tmp_path, docker=docker, uid=1000)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "python:3.11.11-slim-bookworm cannot be pulled" in result.stderr
    assert "KBROKER_BASE_IMAGE" in result.stderr
