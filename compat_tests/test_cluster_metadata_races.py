"""A change made through one node is answered right on every other node, before and after
that node applies it: a retriable error while it has not, never a refusal that a client
takes for final.

The active controller commits a change and answers at once; the other nodes apply it a
moment later. To make that moment long and certain, the module's cluster has a fourth,
broker-only node (node 4) whose links to the voters go through a proxy that delays every
byte by LAG_S: node 4 applies each change LAG_S or more after the controller answered it,
and a request it gets in between meets metadata without the change.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import NewTopic

from compat_tests.cluster import ClusterNode, KafkaCluster, running_cluster
from compat_tests.confluent_helpers import DeliveryLog, make_producer
from compat_tests.delay_proxy import DelayProxy
from kbroker.admin.client import BrokerConnection

METADATA = 3
LEADER_NOT_AVAILABLE = 5
ROUNDS = 8
LAG_S = 0.4


def _uid() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def lagging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, ClusterNode]]:
    """Three voters and node 4, a broker whose metadata lags by LAG_S."""
    with running_cluster(tmp_path_factory.mktemp("lagging")) as cluster:
        proxies = [DelayProxy((n.host, n.controller_port), LAG_S / 2) for n in cluster.nodes]
        try:
            voters = ",".join(
                f"{n.node_id}@{p.address}" for n, p in zip(cluster.nodes, proxies, strict=True)
            )
            observer = cluster.add_broker(controller_quorum_voters=voters)
            yield cluster, observer
        finally:
            for p in proxies:
                p.close()


def _controller_and_follower(
    lagging: tuple[KafkaCluster, ClusterNode],
) -> tuple[KafkaCluster, ClusterNode, ClusterNode]:
    cluster, observer = lagging
    return cluster, cluster.node(cluster.wait_for_controller()), observer


class _ClientLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _create(admin: Any, names: list[str], led_by: int | None = None) -> None:
    """Three partitions, three replicas each; with `led_by`, that node leads them all."""
    if led_by is None:
        topics = [NewTopic(n, 3, 3) for n in names]
    else:
        assignment = [[led_by, 1, 2], [led_by, 2, 3], [led_by, 3, 1]]
        topics = [NewTopic(n, 3, replica_assignment=assignment) for n in names]
    futures = admin.create_topics(topics, operation_timeout=10, request_timeout=15)
    for f in futures.values():
        f.result(timeout=15)


def _auto_create_metadata(conn: BrokerConnection, name: str) -> Any:
    response = conn.request(METADATA, 12, topics=[{"name": name}], allow_auto_topic_creation=True)
    return response.topics[0]


def test_a_topic_just_created_elsewhere_is_never_topic_already_exists_in_metadata(
    lagging: tuple[KafkaCluster, ClusterNode],
) -> None:
    """Metadata with auto-creation on, sent to a follower the moment CreateTopics on the
    controller answered, shows the topic or LEADER_NOT_AVAILABLE (retriable), as Kafka does,
    never TOPIC_ALREADY_EXISTS: librdkafka fails every queued message on that."""
    cluster, controller, follower = _controller_and_follower(lagging)
    admin = cluster.admin(controller)
    seen = []
    with BrokerConnection(follower.host, follower.port, 10.0, "race-probe") as conn:
        for _ in range(ROUNDS):
            name = f"race-md-{_uid()}"
            _create(admin, [name])
            topic = _auto_create_metadata(conn, name)
            seen.append(topic.error_code)
            assert topic.error_code in (0, LEADER_NOT_AVAILABLE), (name, topic)
            if topic.error_code == 0:
                assert len(topic.partitions) == 3, topic  # the created topic, not a default one
    assert seen


def test_a_producer_on_another_node_delivers_to_a_topic_as_it_is_created(
    lagging: tuple[KafkaCluster, ClusterNode],
) -> None:
    """confluent-kafka producing through the lagging node to topics created a moment before
    through the controller: every message is delivered, and no Metadata answer carried an
    error for a topic but a retriable one (librdkafka versions differ in which topic errors
    fail the queued messages; 2.x logs each one it got)."""
    cluster, controller, follower = _controller_and_follower(lagging)
    admin = cluster.admin(controller)
    log = DeliveryLog()
    client_log = _ClientLog()
    logger = logging.getLogger(f"rdkafka-{_uid()}")
    logger.addHandler(client_log)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    producer = make_producer(follower.bootstrap, acks="all", debug="metadata", logger=logger)
    sent = 0
    for _ in range(ROUNDS):
        name = f"race-produce-{_uid()}"
        _create(admin, [name], led_by=follower.node_id)
        for i in range(5):
            producer.produce(name, value=b"v%d" % i, on_delivery=log.callback)
            sent += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    topic_errors = [line for line in client_log.lines if "Error in metadata reply" in line]
    assert all("Leader not available" in line for line in topic_errors), topic_errors
    assert log.failed == [], [KafkaError.name(e) for e in log.failed]
    assert len(log.delivered) == sent
