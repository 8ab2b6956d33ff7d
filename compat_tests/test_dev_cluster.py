"""`kbroker dev`: one command starts a 3-node cluster on this host that a stock client
produces to and consumes from; SIGINT (Ctrl-C) stops every node cleanly and leaves no
process behind; the same directory brings the same cluster back; and the nodes die with
the command even when it is killed outright."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker_process import broker_environment
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    produce_all,
    unique_topic,
    wait_for_partitions,
)

pytestmark = pytest.mark.timeout(240)

START_TIMEOUT_S = 120.0


class DevCluster:
    """`kbroker dev` as a user runs it, its output read line by line."""

    def __init__(self, directory: Path, *args: str) -> None:
        self.out_path = directory.parent / f"{directory.name}.out"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kbroker", "dev", "--dir", str(directory), *args],
            stdout=self.out_path.open("wb"),
            stderr=subprocess.STDOUT,
            env=broker_environment(),
        )

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def bootstrap(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for line in self.output().splitlines():
                if line.startswith("bootstrap: "):
                    return line.split(" ", 1)[1]
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, "no bootstrap line\n" + self.output()
            time.sleep(0.1)

    def nodes(self) -> list[int]:
        """The node processes: children of the command."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return [int(pid) for pid in children.split()]

    def kill_everything(self) -> None:
        for pid in [*self.nodes(), self.proc.pid] if self.proc.poll() is None else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_dev_cluster_serves_a_stock_client_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    dev = DevCluster(directory, "--port", "0", "--nodes", "3")  # the default is one per core
    try:
        bootstrap = dev.bootstrap()
        assert len(bootstrap.split(",")) == 3
        nodes = dev.nodes()
        assert len(nodes) == 3

        topic = unique_topic("dev")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])
        futures[topic].result(timeout=30)
        wait_for_partitions(admin, topic, 3, timeout=30)
        produce_all(
            bootstrap,
            topic,
            ({"value": f"v{i}".encode(), "partition": i % 3} for i in range(30)),
            acks="all",
        )
        got = consume_from_beginning(bootstrap, topic, 30, partitions=(0, 1, 2))
        assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(30))

        dev.proc.send_signal(signal.SIGINT)
        assert dev.proc.wait(timeout=60) == 0, dev.output()
        assert "every node stopped cleanly" in dev.output()
        assert wait_gone(nodes, 5) == []
        for node in (1, 2, 3):
            log = (directory / f"node-{node}" / f"node-{node}.log").read_text()
            assert f"kbroker node {node} stopped cleanly" in log, log[-2000:]
    finally:
        dev.kill_everything()

    # The same directory: the same ports, secret and node ids, and the topic's records.
    again = DevCluster(directory)
    try:
        assert again.bootstrap() == bootstrap
        nodes = again.nodes()
        got = consume_from_beginning(bootstrap, topic, 30, partitions=(0, 1, 2))
        assert len(got) == 30
        # kill -9 of the command: its nodes go with it (parent-death signal), no orphans.
        again.proc.kill()
        again.proc.wait(timeout=10)
        assert wait_gone(nodes, 60) == []
    finally:
        again.kill_everything()


def test_dev_cluster_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kbroker", "dev", "--dir", str(tmp_path / "c"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=broker_environment(),
        )

    for args, says in [
        (("--nodes", "many"), "expected a number or 'cores'"),
        (("--nodes", "0"), "between 1 and 64 nodes"),
        (("--port", "x"), "expected a port number"),
        (("--override", "nonsense"), "--override expects NAME=VALUE"),
    ]:
        done = run(*args)
        assert done.returncode == 2, done
        assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
        assert done.stdout == ""

    # A directory made for 3 nodes is not started as 5.
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cluster.json").write_text(
        '{"nodes": 3, "ports": [1, 2, 3], "controller_ports": [4, 5, 6], '
        '"http_ports": [7, 8, 9], "secret": "s"}'
    )
    done = run("--nodes", "5")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "use --nodes 3" in done.stderr, done.stderr
