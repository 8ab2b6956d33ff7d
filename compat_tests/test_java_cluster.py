"""The official Java client against a 3-node kbroker cluster, one broker killed midway:
its default producer (idempotent, acks=all) and a consumer in a group carry on through
the failover, and every record arrives once. kafka-clients 3.9 and, for the consumer
group protocol (KIP-848) as Kafka 4 ships it, kafka-clients 4.x."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from compat_tests.cluster import KafkaCluster
from compat_tests.java_driver import JavaDriver, Reply

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
    _transaction_through_coordinator_kill(java_on_cluster, cluster)


def test_kafka_clients_4_transaction_v2_open_when_its_coordinator_is_killed_commits_whole(
    java4_classpath: str, cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """kafka-clients 4.x speaks transactions version 2: the leaders of the partitions
    it writes after the kill add them at the new coordinator (AddPartitionsToTxn v5
    between brokers), and its commit bumps the epoch there."""
    log = tmp_path_factory.mktemp("java4-txn-cluster") / "driver.stderr.log"
    with JavaDriver(java4_classpath, cluster.bootstrap, log) as java:
        try:
            txn_id = _transaction_through_coordinator_kill(java, cluster)
            described = java.call("describe-transactions", ids=txn_id)["transactions"][txn_id]
            # A new id starts at epoch 0; the commit bumped it (version 1 would keep it).
            assert (described["state"], described["producerEpoch"]) == ("COMPLETE_COMMIT", 1)
        finally:
            print(java.log_since_mark())


def _transaction_through_coordinator_kill(java: JavaDriver, cluster: KafkaCluster) -> str:
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
    return txn_id


def test_kafka_clients_4_producer_and_kip848_consumer_carry_on_through_coordinator_and_leader_kills(
    java4_classpath: str, cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """kafka-clients 4.x: the idempotent producer and a `group.protocol=consumer` member
    carry on when the group coordinator's broker is killed, then when a partition
    leader's is; every record arrives once and the group's committed offsets end at
    each partition's end."""
    topic = f"java4-cluster-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 6, 3, config={"min.insync.replicas": "2"})
    group = cluster.key_with_full_isr("java4-group")
    log = tmp_path_factory.mktemp("java4-cluster") / "driver.stderr.log"
    settings = {"group.protocol": "consumer", "auto.offset.reset": "earliest"}
    received: Counter[str | None] = Counter()

    def produce_and_receive(java: JavaDriver, prefix: str) -> Reply:
        java.call("produce", producer="p", topic=topic, count=60, value_prefix=prefix, timeout=90)
        got = java.call("poll", name="c", expect=60, timeout_ms=60000, timeout=90)
        java.call("commit", name="c", timeout=90)
        received.update(got.values())
        return got

    with JavaDriver(java4_classpath, cluster.bootstrap, log) as java:
        try:
            java.call("producer-open", name="p")
            java.call("consumer-open", name="c", group=group, consumer=settings)
            java.call("subscribe", name="c", topics=topic)
            produce_and_receive(java, "before")
            cluster.kill_coordinator(group)
            produce_and_receive(java, "coordinator-down")
            cluster.heal()
            cluster.wait_for_full_isr(topic, timeout=30)
            cluster.kill(cluster.partition(topic, 0).leader)
            produce_and_receive(java, "leader-down")
            ends = java.call("list-offsets", topic=topic, spec="latest")["offsets"]
            committed = java.call("list-group-offsets", group=group)["offsets"]
        finally:
            cluster.heal()
            print(java.log_since_mark())
    expected = [f"{p}{i}" for p in ("before", "coordinator-down", "leader-down") for i in range(60)]
    assert received == Counter(expected)
    assert {tp: c["offset"] for tp, c in committed.items()} == {
        tp: e["offset"] for tp, e in ends.items()
    }


def test_java_admin_describes_the_metadata_quorum_as_its_leader_sees_it(
    java_on_cluster: JavaDriver, cluster: KafkaCluster
) -> None:
    """Admin.describeMetadataQuorum (what kafka-metadata-quorum.sh describe --status and
    --replication print): whichever broker it asks, the active controller's view."""
    controller = cluster.wait_for_controller()
    quorum = java_on_cluster.call("describe-quorum")
    now_ms = time.time() * 1000
    assert quorum["leaderId"] == controller
    assert [v["replicaId"] for v in quorum["voters"]] == [1, 2, 3]
    for voter in quorum["voters"]:
        assert voter["logEndOffset"] > 0 and quorum["highWatermark"] - 20 <= voter["logEndOffset"]
        assert now_ms - 5000 < voter["lastFetchTimestamp"] <= now_ms
        assert now_ms - 5000 < voter["lastCaughtUpTimestamp"] <= now_ms
    assert quorum["nodes"] == {
        str(n.node_id): [{"name": "CONTROLLER", "host": n.host, "port": n.controller_port}]
        for n in cluster.nodes
    }
