"""README.md's five-minute tour, run as written against a fresh broker: its shell
commands (the admin CLI pointed at the test's broker) and its confluent-kafka program.
Its pytest example runs in test_packaging.py, from a virtualenv holding only kbroker and
pytest; the cluster, Spark and compose steps are checked for what they name here and run
in test_dev_cluster.py, the Spark tests and the deployment tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.cli import _parser
from kbroker.testing import KafkaServer, kafka_broker

ROOT = Path(__file__).resolve().parent.parent
README_BOOTSTRAP = "127.0.0.1:9092"
ADMIN_COMMANDS = "topics|groups|configs|produce|consume|cluster|log-dirs"


def tour() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## A five-minute tour")
    return text[start : text.index("\n## ", start + 1)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", tour(), re.S)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    with kafka_broker(tmp_path_factory.mktemp("tour")) as server:
        yield server


def run_shell(script: str, bootstrap: str, cwd: Path) -> str:
    """The block in bash, `kbroker` being this checkout's CLI with the admin commands
    pointed at the test's broker instead of the README's 127.0.0.1:9092."""
    prelude = (
        "set -euo pipefail\n"
        'kbroker() { case "$1" in '
        f'{ADMIN_COMMANDS}) "$PY" -m kbroker "$@" --bootstrap "$BS";; '
        '*) "$PY" -m kbroker "$@";; esac; }\n'
    )
    done = subprocess.run(
        ["bash", "-c", prelude + script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PY": sys.executable, "BS": bootstrap},
    )
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_tour_from_the_cli_to_confluent_kafka(broker: KafkaServer, tmp_path: Path) -> None:
    cli, *_ = blocks("sh")
    out = run_shell(cli, broker.bootstrap, tmp_path)
    assert out.startswith("kbroker ")
    lines = out.splitlines()
    assert "k1\tfirst order" in lines and "k2\tsecond order" in lines  # keys on two partitions

    client, _ = blocks("python")
    program = tmp_path / "client.py"
    program.write_text(client.replace(README_BOOTSTRAP, broker.bootstrap))
    done = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[b'first order', b'second order', b'third order']\n"
    assert sorted(r.value for r in broker.read("orders")) == [
        b"first order",
        b"second order",
        b"third order",
    ]


def test_the_cluster_and_spark_steps_name_what_exists() -> None:
    _, cluster, spark = blocks("sh")
    for line in cluster.splitlines():
        argv = line.split("#")[0].split()
        assert argv[:2] == ["kbroker", "dev"], line
        _parser().parse_args(argv[1:])
    for module, flags in re.findall(r"-m (spark_examples\.\w+)([^\n]*)", spark):
        source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
        for flag in re.findall(r"--[\w-]+", flags):
            assert f'"{flag}"' in source, (module, flag)
    assert "docker compose up" in tour() and (ROOT / "docker-compose.yml").exists()
