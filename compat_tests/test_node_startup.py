"""How a node's start ends when what it needs is missing: the quorum (voters started one at a
time, as a Kubernetes StatefulSet with OrderedReady starts its pods) or its HTTP listener.

As on Kafka, a controller-only node waits for its quorum for as long as it takes, and a
node with a broker part gives up when it has not registered within
initial.broker.registration.timeout.ms (60 s by default) of its start; /health and /ready
answer meanwhile and say what the start waits for.
"""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from compat_tests.broker_process import BrokerProcess, free_port
from compat_tests.cluster import KafkaCluster

GAP_S = 36.0  # past the 30 s a start used to wait for its quorum, within Kafka's 60 s


def _get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def _with_http(cluster: KafkaCluster) -> dict[int, int]:
    ports = {}
    for node in cluster.nodes:
        if not node.controller_only:
            ports[node.node_id] = free_port()
            node.overrides["http.listeners"] = f"http://127.0.0.1:{ports[node.node_id]}"
    return ports


def _waiting_for_quorum(port: int) -> str | None:
    status, health = _get(port, "/health")
    waiting = [u for u in health.get("unhealthy", []) if "waiting" in u and "quorum" in u]
    return waiting[0] if status == 503 and waiting else None


def test_voters_started_36_seconds_apart_form_the_cluster(tmp_path: Path) -> None:
    """The first voter of three waits GAP_S alone (its /health says for what, /ready is 503),
    then the second arrives and both serve; the third joins. A controller-only voter of a
    cluster whose other voters never come waits as long, its broker-only registration
    timeout not applying, and stops at once on SIGTERM."""
    cluster = KafkaCluster(tmp_path / "cluster", 3)
    ports = _with_http(cluster)
    lone = KafkaCluster(
        tmp_path / "lone",
        3,
        {"initial.broker.registration.timeout.ms": "5000"},
        controller_only=(1, 2, 3),
    )
    first, controller_only = cluster.node(1), lone.node(1)
    try:
        first.spawn()
        controller_only.spawn()
        began = time.monotonic()
        why = cluster.wait_until(
            lambda: _waiting_for_quorum(ports[1]), 30, "node 1's /health to say it waits"
        )
        assert "a Raft quorum of the voters" in why and "0 of 2 other voters connected" in why
        assert _get(ports[1], "/ready") == (503, {"ready": False, "node_id": 1})
        while time.monotonic() - began < GAP_S:
            assert first.running(), first.log_tail()
            assert controller_only.running(), controller_only.log_tail()
            time.sleep(0.5)
        assert _waiting_for_quorum(ports[1]), first.log_tail()
        assert "cannot start" not in first.log_text()
        assert "is waiting" in controller_only.log_text()

        cluster.node(2).spawn()
        for node_id in (1, 2):
            cluster.node(node_id).wait_ready()
            cluster.wait_until(
                lambda node_id=node_id: _get(ports[node_id], "/ready")[0] == 200,
                15,
                f"node {node_id}'s /ready",
            )
        cluster.node(3).start()
        brokers = cluster.wait_until(
            lambda: sorted(cluster.metadata().brokers) == [1, 2, 3], 15, "three brokers"
        )
        assert brokers

        assert controller_only.running(), controller_only.log_tail()
        controller_only.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        assert controller_only.proc.wait(timeout=15) == 0  # type: ignore[union-attr]
    finally:
        cluster.kill_all()
        lone.kill_all()


def test_a_voter_alone_gives_up_after_initial_broker_registration_timeout(
    tmp_path: Path,
) -> None:
    """A node with a broker part exits when no quorum lets it register within
    initial.broker.registration.timeout.ms, with one line naming the setting."""
    cluster = KafkaCluster(tmp_path, 3, {"initial.broker.registration.timeout.ms": "6000"})
    node = cluster.node(1)
    try:
        node.spawn()
        began = time.monotonic()
        assert node.proc is not None
        code = node.proc.wait(timeout=60)
        took = time.monotonic() - began
        assert code == 1
        assert 6 <= took < 40, took
        lines = [ln for ln in node.log_text().splitlines() if "cannot start" in ln]
        assert len(lines) == 1, node.log_tail()
        assert "could not register with the controller quorum within " in lines[0]
        assert "initial.broker.registration.timeout.ms (6000 ms)" in lines[0]
        assert "Traceback" not in node.log_text()
    finally:
        cluster.kill_all()


def test_an_http_listener_that_cannot_bind_stops_the_start(tmp_path: Path) -> None:
    """As a Kafka listener does: one line naming the listener, exit code 1, no Kafka
    listener left serving without /health and /ready."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = BrokerProcess(tmp_path, {"http.listeners": f"http://127.0.0.1:{port}"})
        node.spawn()
        assert node.proc is not None
        assert node.proc.wait(timeout=60) == 1
    lines = [ln for ln in node.log_text().splitlines() if "cannot start" in ln]
    assert lines == [
        f"kbroker: cannot start: cannot serve HTTP (http.listeners) on 127.0.0.1:{port}: "
        "Address already in use"
    ], node.log_tail()
    assert "Traceback" not in node.log_text()


def test_an_empty_http_listeners_turns_http_off(tmp_path: Path) -> None:
    node = BrokerProcess(tmp_path, {"http.listeners": ""})
    try:
        node.start()
        assert "serving /metrics" not in node.log_text()
    finally:
        node.kill()
