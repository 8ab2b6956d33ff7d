"""Four nodes on two hosts (two nodes each, `broker.rack` naming the host): CreateTopics
puts each partition's replicas on both hosts and spreads preferred leaders (each
partition's first replica) evenly over the nodes, the two nodes of one host included;
after a node is killed and restarted, auto.leader.rebalance.enable hands leadership
back so every preferred leader leads again."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests.cluster import KafkaCluster, running_cluster
from compat_tests.confluent_helpers import unique_topic

HOSTS = {1: "host-a", 2: "host-a", 3: "host-b", 4: "host-b"}


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("racks"),
        size=4,
        overrides={
            "leader.imbalance.check.interval.seconds": "1",
            "offsets.topic.replication.factor": "2",
            "transaction.state.log.replication.factor": "2",
        },
        node_overrides={n: {"broker.rack": rack} for n, rack in HOSTS.items()},
    ) as started:
        yield started


def _partitions(cluster: KafkaCluster, topic: str) -> list[Any]:
    return [p for _, p in sorted(cluster.metadata(topic=topic).topics[topic].partitions.items())]


def _spread(counts: Counter[int]) -> int:
    return max(counts[n] for n in HOSTS) - min(counts[n] for n in HOSTS)


@pytest.mark.parametrize("partitions,replication", [(6, 2), (8, 2), (12, 3)])
def test_replicas_span_the_hosts_and_preferred_leaders_spread_over_every_node(
    two_hosts: KafkaCluster, partitions: int, replication: int
) -> None:
    topic = unique_topic("racks")
    two_hosts.create_topic(topic, partitions, replication)
    placed = _partitions(two_hosts, topic)
    assert len(placed) == partitions
    for p in placed:
        assert len(set(p.replicas)) == replication
        assert {HOSTS[r] for r in p.replicas} == {"host-a", "host-b"}, p.replicas
        assert p.leader == p.replicas[0]
    preferred = Counter(p.replicas[0] for p in placed)
    assert _spread(preferred) <= 1, preferred


def test_preferred_leaders_lead_again_after_a_node_restarts(two_hosts: KafkaCluster) -> None:
    topic = unique_topic("rebalance")
    two_hosts.create_topic(topic, 8, 2)
    two_hosts.wait_for_full_isr(topic)
    two_hosts.kill(2)
    try:
        two_hosts.wait_until(
            lambda: all(p.leader not in (2, -1) for p in _partitions(two_hosts, topic)),
            30.0,
            "node 2's partitions to be led by the other host's replicas",
            seen=lambda: [(p.leader, p.replicas) for p in _partitions(two_hosts, topic)],
        )
    finally:
        two_hosts.heal()

    def balanced() -> bool:
        placed = _partitions(two_hosts, topic)
        return all(p.leader == p.replicas[0] for p in placed)

    two_hosts.wait_until(
        balanced,
        45.0,
        "every partition led by its preferred replica after the restart",
        seen=lambda: [(p.leader, p.replicas, p.isrs) for p in _partitions(two_hosts, topic)],
    )
    leaders = Counter(p.leader for p in _partitions(two_hosts, topic))
    assert _spread(leaders) <= 1, leaders
