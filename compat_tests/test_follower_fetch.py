"""Fetch from the closest replica (KIP-392) with a stock client: three brokers in three
racks with `replica.selector.class=...RackAwareReplicaSelector`; a confluent-kafka
consumer with `client.rack` naming a follower's rack reads from that follower (its
/metrics counts the bytes, the leader's and the other follower's do not), and still
gets every record when that follower dies."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition

from compat_tests.broker_process import free_port
from compat_tests.cluster import KafkaCluster, running_cluster
from compat_tests.confluent_helpers import make_consumer, produce_all, read_records, unique_topic
from compat_tests.metrics_scrape import sample_key, scrape
from kbroker.replica.selector import RACK_AWARE_SELECTOR

pytestmark = pytest.mark.timeout(180)

RECORDS = 300
VALUE = b"r" * 200


@pytest.fixture(scope="module")
def racks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, dict]]:
    """Node i in rack-i, each with its own /metrics address."""
    http = {i: f"127.0.0.1:{free_port()}" for i in (1, 2, 3)}
    per_node = {
        i: {"broker.rack": f"rack-{i}", "http.listeners": f"http://{address}"}
        for i, address in http.items()
    }
    with running_cluster(
        tmp_path_factory.mktemp("racks"),
        overrides={"replica.selector.class": RACK_AWARE_SELECTOR},
        node_overrides=per_node,
    ) as cluster:
        yield cluster, http


BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"


def bytes_out(address: str, topic: str) -> float:
    """What this broker sent consumers of `topic` (kafka_server_brokertopicmetrics_bytesout)."""
    return scrape(address).get(sample_key(BYTES_OUT, topic=topic), 0.0)


def test_a_consumer_reads_from_the_follower_in_its_rack_and_survives_its_death(racks):
    cluster, http = racks
    topic = unique_topic("rack")
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    leader = cluster.partition(topic).leader
    near, far = [n for n in (1, 2, 3) if n != leader]
    produce_all(cluster.bootstrap, topic, [{"value": VALUE, "partition": 0}] * RECORDS, acks="all")

    consumer = make_consumer(cluster.bootstrap, client_rack=f"rack-{near}")
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        first = read_records(consumer, topic, RECORDS, timeout=60)
        assert [r.offset for r in first] == list(range(RECORDS))
        served = {n: bytes_out(http[n], topic) for n in (1, 2, 3)}
        assert served[near] >= RECORDS * len(VALUE)
        assert served[leader] == 0 and served[far] == 0

        cluster.kill(near)
        try:
            produce_all(
                cluster.bootstrap, topic, [{"value": VALUE, "partition": 0}] * RECORDS, acks="all"
            )
            rest = read_records(consumer, topic, RECORDS, timeout=90)
            assert [r.offset for r in rest] == list(range(RECORDS, 2 * RECORDS))
        finally:
            cluster.heal()
    finally:
        consumer.close()
    assert bytes_out(http[leader], topic) >= RECORDS * len(VALUE)  # back on the leader
