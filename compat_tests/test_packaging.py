"""kbroker as it ships: the wheel in a clean virtualenv started as the Docker image starts
it, and the single-file executable (`make pyz`), each serving a record round trip.

Docker cannot run here, so the image's recipe is exercised without it: the wheel is
built from the files the Dockerfile copies, installed into a fresh virtualenv as its
build stage does, started with the image's ENV, entry point and command, and its
HEALTHCHECK is run as written until the broker is ready.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compat_tests.broker_process import free_port

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and kbroker.pyz, built by the script `make pyz` runs."""
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts/build-dist.sh"), str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without this checkout on the import path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def image_steps() -> dict[str, str]:
    """The final stage's instructions, continuation lines joined (last one of each kind)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages = text.split("\nFROM ")
    steps = {}
    for line in stages[-1].splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            steps[keyword.upper()] = rest.strip()
    return steps


def image_env(steps: dict[str, str]) -> dict[str, str]:
    pairs = [p.split("=", 1) for p in shlex.split(steps["ENV"]) if "=" in p]
    return {k: v for k, v in pairs if k.startswith("KBROKER_")}


class Served:
    """A broker process, stopped with SIGTERM at the end of the block."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        # Run from the log's directory: nothing of this checkout is importable there.
        self.proc = subprocess.Popen(
            command, env=env, cwd=log.parent, stdout=subprocess.DEVNULL, stderr=log.open("wb")
        )

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def round_trip(kbroker: list[str], bootstrap: str, env: dict[str, str], cwd: Path) -> None:
    def run(*args: str, stdin: str = "") -> str:
        result = subprocess.run(
            [*kbroker, *args, "--bootstrap", bootstrap],
            input=stdin,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    run("topics", "create", "shipped", "--partitions", "1")
    run("produce", "shipped", "--key-separator", "=", stdin="k=hello from the package\n")
    out = run("consume", "shipped", "--from-beginning", "--max-messages", "1", "-o", "json")
    record = json.loads(out)
    assert (record["key"], record["value"], record["offset"]) == ("k", "hello from the package", 0)


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtualenv with the wheel installed (`pip install kbroker`) and nothing else."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    (wheel,) = dist.glob("kbroker-*.whl")
    install = subprocess.run(
        [str(venv / "bin/pip"), "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env=clean_env(),
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return venv


def installed(venv: Path) -> set[str]:
    listing = subprocess.run(
        [str(venv / "bin/pip"), "list", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    return {p["name"].lower() for p in json.loads(listing.stdout)}


def test_wheel_in_a_clean_venv_serves_as_the_image_does(venv: Path, tmp_path: Path) -> None:
    # The wheel brings what the broker needs and none of the test extra.
    packages = installed(venv)
    assert {"kbroker", "kio", "pysyncobj", "cryptography", "uvloop"} <= packages
    assert not packages & {"pytest", "confluent-kafka", "pyspark", "mypy", "ruff", "hypothesis"}
    done = subprocess.run(
        [str(venv / "bin/kbroker"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.startswith("kbroker ") and done.returncode == 0, done

    steps = image_steps()
    entry = json.loads(steps["ENTRYPOINT"]) + json.loads(steps["CMD"])
    assert entry == ["kbroker", "serve"]
    port, http_port = free_port(), free_port()
    settings = image_env(steps)
    # The image's settings, with this test's ports and directory in place of the image's.
    settings["KBROKER_LOG_DIRS"] = str(tmp_path / "data")
    settings["KBROKER_LISTENERS"] = settings["KBROKER_LISTENERS"].replace(
        "0.0.0.0:9092", f"127.0.0.1:{port}"
    )
    settings["KBROKER_ADVERTISED_LISTENERS"] = f"PLAINTEXT://127.0.0.1:{port}"
    settings["KBROKER_HTTP_LISTENERS"] = settings["KBROKER_HTTP_LISTENERS"].replace(
        "0.0.0.0:9644", f"127.0.0.1:{http_port}"
    )
    env = clean_env(PATH=f"{venv / 'bin'}:{os.environ['PATH']}", **settings)
    served = Served([str(venv / "bin" / entry[0]), *entry[1:]], env, tmp_path / "broker.log")
    try:
        # The check asks the port KBROKER_HTTP_LISTENERS names, this test's.
        healthcheck = json.loads(steps["HEALTHCHECK"].split(" CMD ", 1)[1])
        deadline = time.monotonic() + 60
        while subprocess.run(
            healthcheck, env=env, cwd=tmp_path, capture_output=True, timeout=30
        ).returncode:
            assert served.proc.poll() is None, served.tail()
            assert time.monotonic() < deadline, "the HEALTHCHECK never passed\n" + served.tail()
            time.sleep(0.3)
        round_trip([str(venv / "bin/kbroker")], f"127.0.0.1:{port}", env, tmp_path)
    finally:
        assert served.stop() == 0, served.tail()


def test_single_file_executable_serves_and_round_trips_a_record(dist: Path, tmp_path: Path) -> None:
    pyz = dist / "kbroker.pyz"
    assert pyz.stat().st_size > 1 << 20  # the dependencies are inside
    port = free_port()
    env = clean_env(SHIV_ROOT=str(tmp_path / "shiv"))
    command = [sys.executable, str(pyz)]
    served = Served(
        [
            *command,
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
            "--override",
            "http.listeners=",
        ],
        env,
        tmp_path / "broker.log",
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            probe = subprocess.run(
                [*command, "cluster", "status", "--bootstrap", f"127.0.0.1:{port}", "-o", "json"],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if probe.returncode == 0:
                break
            assert served.proc.poll() is None, served.tail()
            assert time.monotonic() < deadline, probe.stderr + served.tail()
            time.sleep(0.3)
        assert json.loads(probe.stdout)["brokers"][0]["port"] == port
        round_trip(command, f"127.0.0.1:{port}", env, tmp_path)
    finally:
        assert served.stop() == 0, served.tail()


PLUGIN_USER_TESTS = """
import json, os

from kbroker.testing import kafka_broker as broker_block


def test_a_broker_from_the_fixture(kafka_broker):
    topic = kafka_broker.create_topic(partitions=2)
    assert kafka_broker.produce(topic, "hello", key="k")[1] == 0
    assert [(r.key, r.value) for r in kafka_broker.read(topic)] == [(b"k", b"hello")]
    report("broker", kafka_broker)


def test_a_cluster_from_the_fixture(kafka_cluster):
    assert len(kafka_cluster.bootstrap.split(",")) == 3
    topic = kafka_cluster.create_topic(partitions=3, replication_factor=3)
    for i in range(6):
        kafka_cluster.produce(topic, f"v{i}", partition=i % 3)
    assert sorted(r.value for r in kafka_cluster.read(topic)) == [f"v{i}".encode() for i in range(6)]
    report("cluster", kafka_cluster)


def test_the_context_manager_for_other_runners(tmp_path):
    with broker_block(tmp_path / "kafka") as kafka:
        topic = kafka.create_topic("orders")
        kafka.produce(topic, b"1")
        assert [r.value for r in kafka.read(topic)] == [b"1"]
        assert kafka.stop() == {1: 0}


def report(name, server):
    with open(os.environ["MEASURED"], "a") as out:
        out.write(json.dumps({"name": name, "started_in": server.started_in,
                              "rss": server.rss_bytes()}) + "\\n")
"""


def readme_pytest_example() -> str:
    """The tour's pytest example in README.md: its last python block."""
    text = (ROOT / "README.md").read_text()
    tour = text[text.index("## A five-minute tour") :]
    example = re.findall(r"```python\n(.*?)```", tour, re.S)[1]
    assert "(kafka_broker)" in example
    return example


def kbroker_processes_of(python: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0] == str(python).encode() and b"serve" in argv:
                found.append(int(proc.name))
    return found


def test_pytest_plugin_from_a_venv_holding_only_kbroker_and_pytest(
    venv: Path, tmp_path: Path
) -> None:
    """Another project's tests: kbroker and pytest installed, the fixtures found through the
    pytest11 entry point, a node and a 3-node cluster started, used and stopped."""
    install = subprocess.run(
        [str(venv / "bin/pip"), "install", "--quiet", "pytest"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env=clean_env(),
    )
    assert install.returncode == 0, install.stderr[-3000:]
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_with_kafka.py").write_text(PLUGIN_USER_TESTS)
    (project / "test_readme_example.py").write_text(readme_pytest_example())
    measured = tmp_path / "measured.jsonl"
    done = subprocess.run(
        [str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=240,
        env=clean_env(MEASURED=str(measured)),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout, done.stdout
    assert kbroker_processes_of(venv / "bin/python") == []
    for line in measured.read_text().splitlines():
        figures = json.loads(line)
        print(
            f"{figures['name']}: first Metadata answered {figures['started_in']:.2f}s "
            f"after start, RSS {figures['rss'] / 2**20:.0f} MiB"
        )
