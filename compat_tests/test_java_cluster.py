"""The official Java client against a 3-node kbroker cluster, one broker killed midway:
its default producer (idempotent, acks=all) and a consumer in a group carry on through
the failover, and every record arrives once."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from compat_tests.cluster import KafkaCluster
from compat_tests.java_driver import JavaDriver

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def java_on_cluster(
    java_classpath: str,
    cluster: KafkaCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[JavaDriver]:
    log = tmp_path_factory.mktemp("java-cluster") / "driver.stderr.log"
    with JavaDriver(java_classpath, cluster.bootstrap, log) as driver:
        try:
            yield driver
        finally:
            print(driver.log_since_mark())


def test_java_producer_and_group_consumer_carry_on_when_the_coordinator_is_killed(
    java_on_cluster: JavaDriver, cluster: KafkaCluster
) -> None:
    java = java_on_cluster
    topic = f"java-cluster-{uuid.uuid4().hex[:8]}"
    group = f"java-group-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 3, 3, config={"min.insync.replicas": "2"})
    java.call("producer-open", name="p")
    java.call("produce", producer="p", topic=topic, count=90, value_prefix="before")
    java.call("consumer-open", name="c", group=group, consumer={"auto.offset.reset": "earliest"})
    java.call("subscribe", name="c", topics=topic)
    first = java.call("poll", name="c", expect=90, timeout_ms=30000)
    assert Counter(first.values()) == Counter(f"before{i}" for i in range(90))
    java.call("commit", name="c")
    try:
        cluster.kill_coordinator(group)
        java.call("produce", producer="p", topic=topic, count=90, value_prefix="after", timeout=120)
        second = java.call("poll", name="c", expect=90, timeout_ms=60000, timeout=90)
        assert Counter(second.values()) == Counter(f"after{i}" for i in range(90))
        java.call("commit", name="c", timeout=90)
    finally:
        cluster.heal()


def test_java_transaction_open_when_its_coordinator_is_killed_commits_whole(
    java_on_cluster: JavaDriver, cluster: KafkaCluster
) -> None:
    """The Java producer finds the new transaction coordinator, adds the transaction's
    other partitions there and commits; read_committed sees all of it."""
    java = java_on_cluster
    topic = f"java-txn-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 3, 3, config={"min.insync.replicas": "2"})
    txn_id = cluster.key_with_full_isr("java-txn", key_type=1)
    java.call("producer-open", name="t", producer={"transactional.id": txn_id})
    java.call("txn", name="t", action="init")
    java.call("txn", name="t", action="begin")
    java.call("produce", producer="t", topic=topic, partition=0, count=10, value_prefix="a")
    try:
        victim = cluster.kill_coordinator(txn_id, key_type=1)
        for p in (1, 2):
            java.call(
                "produce",
                producer="t",
                topic=topic,
                partition=p,
                count=10,
                value_prefix=f"p{p}-",
                timeout=90,
            )
        java.call("txn", name="t", action="commit", timeout=90)
        assert cluster.coordinator(txn_id, key_type=1) not in (0, victim)
        committed = java.call(
            "consume",
            topic=topic,
            from_="beginning",
            until_end=True,
            consumer={"isolation.level": "read_committed"},
            timeout=90,
        )
    finally:
        cluster.heal()
    expected = [f"a{i}" for i in range(10)] + [f"p{p}-{i}" for p in (1, 2) for i in range(10)]
    assert Counter(committed.values()) == Counter(expected)
