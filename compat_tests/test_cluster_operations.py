"""Operating a 3-node cluster: `kbroker cluster status`, the partition-health metrics and
/health, while nodes are killed and come back (compat_tests/cluster.py's harness)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.broker_process import free_port, kbroker_command
from compat_tests.cluster import KafkaCluster
from compat_tests.metrics_scrape import scrape, value
from kbroker.cli import main

pytestmark = pytest.mark.timeout(240)

TOPIC = "ops-replicated"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three voters and brokers, each with its own HTTP endpoints; a 3-partition topic
    replicated to all three."""
    started = KafkaCluster(tmp_path_factory.mktemp("ops-cluster"))
    for node in started.nodes:
        node.overrides["http.listeners"] = f"http://127.0.0.1:{free_port()}"
    try:
        started.start()
        started.create_topic(TOPIC, partitions=3, replication_factor=3)
        yield started
    finally:
        started.kill_all()


def http_address(node) -> str:  # type: ignore[no-untyped-def]
    return node.overrides["http.listeners"].removeprefix("http://")


def get(node, path: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    try:
        with urllib.request.urlopen(f"http://{http_address(node)}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def gauge(node, name: str) -> float:  # type: ignore[no-untyped-def]
    """An unlabelled metric of `node`; KeyError when it does not export it."""
    return value(scrape(http_address(node)), name)


def status(cluster: KafkaCluster, *extra: str) -> str:
    live = ",".join(n.bootstrap for n in cluster.live_nodes)
    result = subprocess.run(
        [*kbroker_command(), "cluster", "status", "--bootstrap", live, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def status_json(cluster: KafkaCluster) -> dict:
    return json.loads(status(cluster, "-o", "json"))


def test_cluster_status_lists_every_broker_and_the_active_controller(cluster):
    doc = status_json(cluster)
    assert [b["node_id"] for b in doc["brokers"]] == [1, 2, 3]
    assert doc["controller_id"] in (1, 2, 3)
    assert doc["under_replicated_partitions"] == 0 and doc["offline_partitions"] == 0
    assert doc["attention"] == []


def test_a_killed_broker_makes_its_partitions_under_replicated_on_metrics_and_status(cluster):
    cluster.wait_for_controller()
    victim = cluster.node(3)
    try:
        cluster.kill(3)
        survivors = [n for n in cluster.nodes if n is not victim]
        cluster.wait_until(
            lambda: (
                sum(
                    gauge(n, "kafka_server_replicamanager_underreplicatedpartitions")
                    for n in survivors
                )
                == 3
            ),
            30,
            "the surviving leaders to report all 3 partitions under-replicated",
        )
        doc = status_json(cluster)
        assert doc["under_replicated_partitions"] == 3
        assert [b["node_id"] for b in doc["brokers"]] == [1, 2]
        assert sorted(a["partition"] for a in doc["attention"]) == [0, 1, 2]
        assert all(
            a["topic"] == TOPIC and a["problem"] == "under-replicated" and 3 not in a["isr"]
            for a in doc["attention"]
        )
        rows = [line.split() for line in status(cluster).splitlines()]
        assert ["TOPIC", "PARTITION", "PROBLEM", "LEADER", "REPLICAS", "ISR"] in rows
        assert [r[:3] for r in rows if r[:1] == [TOPIC]] == [
            [TOPIC, str(p), "under-replicated"] for p in range(3)
        ]
        assert all(
            gauge(n, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
            for n in survivors
        )
    finally:
        cluster.heal()
    # Back in the cluster (rejoining the ISRs is the replication tests' business).
    cluster.wait_until(
        lambda: len(status_json(cluster)["brokers"]) == 3, 60, "the restarted broker to register"
    )


def counter(node, name: str) -> float:  # type: ignore[no-untyped-def]
    return gauge(node, name + "_total")


def isr_changes(nodes, kind: str) -> float:  # type: ignore[no-untyped-def]
    return sum(counter(n, f"kafka_server_replicamanager_isr{kind}") for n in nodes)


def test_a_killed_follower_counts_as_isr_shrinks_and_its_return_as_expands(cluster):
    cluster.wait_for_controller()
    survivors = [cluster.node(1), cluster.node(2)]
    led_with_3 = [
        p
        for p in range(3)
        if (meta := cluster.partition(TOPIC, p)).leader in (1, 2) and 3 in meta.isrs
    ]
    assert led_with_3, "no partition led by 1 or 2 has broker 3 in its ISR"
    shrinks, expands = isr_changes(survivors, "shrinks"), isr_changes(survivors, "expands")
    try:
        cluster.kill(3)
        cluster.wait_until(
            lambda: isr_changes(survivors, "shrinks") - shrinks == len(led_with_3),
            30,
            f"{len(led_with_3)} ISR shrinks on the leaders",
        )
        assert isr_changes(survivors, "expands") == expands
    finally:
        cluster.heal()
    cluster.wait_until(
        lambda: all(sorted(cluster.partition(TOPIC, p).isrs) == [1, 2, 3] for p in range(3)),
        60,
        "broker 3 back in every ISR",
    )
    # Every partition is led by 1 or 2 now, and each took broker 3 back once.
    cluster.wait_until(
        lambda: isr_changes(survivors, "expands") - expands == 3, 10, "3 ISR expansions"
    )
    assert isr_changes(survivors, "shrinks") - shrinks == len(led_with_3)


def test_health_names_the_controller_once_the_quorum_is_lost(cluster):
    survivor = cluster.node(1)
    code, body = get(survivor, "/health")
    assert code == 200, body
    try:
        cluster.kill(2)
        cluster.kill(3)

        def unhealthy() -> dict | None:
            code, body = get(survivor, "/health")
            return json.loads(body) if code == 503 else None

        report = cluster.wait_until(unhealthy, 30, "/health to report the lost controller")
        (problem,) = report["unhealthy"]
        assert problem.startswith("controller: no heartbeat acknowledged for ")
    finally:
        cluster.heal()
    cluster.wait_until(lambda: get(survivor, "/health")[0] == 200, 60, "/health to recover")


def test_dashboard_queries_name_metrics_every_cluster_node_exports(cluster):
    from compat_tests.test_metrics import METRIC_NAME, dashboard_queries

    asked = {name for expr in dashboard_queries() for name in METRIC_NAME.findall(expr)}
    for node in cluster.nodes:
        _, text = get(node, "/metrics")
        exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
        missing = asked - exported
        # Consumer lag appears only on the node coordinating a group with offsets.
        assert missing <= {"kafka_consumergroup_lag"}, (node.node_id, missing)


def quorum(cluster: KafkaCluster, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    """`kbroker cluster quorum` run in this process, asking one node."""
    (asked, *_) = cluster.live_nodes
    code = main(["cluster", "quorum", "--bootstrap", asked.bootstrap, *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_cluster_quorum_shows_every_voters_replication_as_the_leader_sees_it(cluster, capsys):
    controller = cluster.wait_for_controller()
    doc = json.loads(quorum(cluster, capsys, "-o", "json"))
    now_ms = time.time() * 1000
    assert doc["leader_id"] == controller
    assert [(r["node_id"], r["status"]) for r in doc["replicas"]] == [
        (n, "Leader" if n == controller else "Follower") for n in (1, 2, 3)
    ]
    for replica in doc["replicas"]:
        assert 0 <= replica["lag"] <= 20 and replica["log_end_offset"] > 0
        assert now_ms - 5000 < replica["last_fetch_timestamp"] <= now_ms
    assert 0 <= doc["max_follower_lag"] <= 20
    lines = quorum(cluster, capsys).splitlines()
    assert f"LeaderId:              {controller}" in lines
    assert "CurrentVoters:         [1, 2, 3]" in lines
    assert [line.split()[:2] for line in lines if line.split()[:1] == ["1"]] == [
        ["1", "Leader" if controller == 1 else "Follower"]
    ]
