"""The official Java client against a 3-node kbroker cluster, one broker killed midway:
its default producer (idempotent, acks=all) and a consumer in a group carry on through
the failover, and every record arrives once."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from compat_tests.cluster import KafkaCluster
from compat_tests.test_java_client import JavaDriver
from compat_tests.test_java_client import java_classpath as java_classpath  # noqa: F401

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def java_on_cluster(
    java_classpath: str,  # noqa: F811
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
    from confluent_kafka.admin import NewTopic

    java = java_on_cluster
    topic = f"java-cluster-{uuid.uuid4().hex[:8]}"
    group = f"java-group-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    futures = admin.create_topics(
        [NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})], operation_timeout=10
    )
    futures[topic].result(timeout=15)
    java.call("producer-open", name="p")
    java.call("produce", producer="p", topic=topic, count=90, value_prefix="before")
    java.call("consumer-open", name="c", group=group, consumer={"auto.offset.reset": "earliest"})
    java.call("subscribe", name="c", topics=topic)
    first = java.call("poll", name="c", expect=90, timeout_ms=30000)
    assert Counter(first.values()) == Counter(f"before{i}" for i in range(90))
    java.call("commit", name="c")
    victim = cluster.find_coordinator(group)[1]
    try:
        cluster.kill(victim)
        java.call("produce", producer="p", topic=topic, count=90, value_prefix="after", timeout=120)
        second = java.call("poll", name="c", expect=90, timeout_ms=60000, timeout=90)
        assert Counter(second.values()) == Counter(f"after{i}" for i in range(90))
        java.call("commit", name="c", timeout=90)
    finally:
        cluster.heal()
