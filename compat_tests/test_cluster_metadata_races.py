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
CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 19, 20, 32
CREATE_ACLS, DELETE_ACLS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 30, 31, 37, 44
TOPIC_RESOURCE, LITERAL, ANY, READ, ALLOW, SET, APPEND = 2, 3, 1, 3, 3, 0, 2
LEADER_NOT_AVAILABLE = 5
UNKNOWN_TOPIC_OR_PARTITION = 3
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
ROUNDS = 8
LAG_S = 0.4


def _uid() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def lagging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, ClusterNode]]:
    """Three voters and node 4, a broker whose metadata lags by LAG_S."""
    with running_cluster(tmp_path_factory.mktemp("lagging"), overrides=AUTHORIZER) as cluster:
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
    controller answered, shows the topic, or LEADER_NOT_AVAILABLE or
    UNKNOWN_TOPIC_OR_PARTITION (both retriable; the latter while the follower has not
    seen the topic yet and its own creation is refused), as Kafka does, never
    TOPIC_ALREADY_EXISTS: librdkafka fails every queued message on that. Once shown, it
    is the topic created, not a default one made by the follower."""
    cluster, controller, follower = _controller_and_follower(lagging)
    admin = cluster.admin(controller)
    seen = []
    with BrokerConnection(follower.host, follower.port, 10.0, "race-probe") as conn:
        for _ in range(ROUNDS):
            name = f"race-md-{_uid()}"
            _create(admin, [name])
            topic = _auto_create_metadata(conn, name)
            seen.append(topic.error_code)
            assert topic.error_code in (0, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION), (
                name,
                topic,
            )
            cluster.wait_until(
                lambda name=name: len(_auto_create_metadata(conn, name).partitions) == 3,
                10,
                f"{name} with its 3 partitions",
            )
    assert seen


def test_a_producer_on_another_node_delivers_to_a_topic_as_it_is_created(
    lagging: tuple[KafkaCluster, ClusterNode],
) -> None:
    """confluent-kafka producing through the lagging node to topics created a moment before
    through the controller: every message is delivered, and no Metadata answer carried an
    error for a topic but a retriable one: LEADER_NOT_AVAILABLE, or
    UNKNOWN_TOPIC_OR_PARTITION while the node has not seen the topic yet, as Kafka 4
    answers (librdkafka versions differ in which topic errors fail the queued messages;
    2.x logs each one it got)."""
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
    retriable = ("Leader not available", "Unknown topic or partition")
    assert all(any(e in line for e in retriable) for line in topic_errors), topic_errors
    assert log.failed == [], [KafkaError.name(e) for e in log.failed]
    assert len(log.delivered) == sent


# -- the same race in every other handler that answers from the image -----------------------


def _create_raw(conn: BrokerConnection, name: str, partitions: int = 1) -> Any:
    topic = {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 3,
        "assignments": [],
        "configs": [],
    }
    answer = conn.request(CREATE_TOPICS, 7, topics=[topic], timeout=15000, validate_only=False)
    return answer.topics[0]


def _delete_raw(conn: BrokerConnection, name: str) -> Any:
    answer = conn.request(
        DELETE_TOPICS, 6, topics=[{"name": name, "topic_id": None}], timeout=15000
    )
    return answer.responses[0]


def _alter_raw(conn: BrokerConnection, name: str, op: int, key: str, value: str) -> Any:
    resource = {
        "resource_type": TOPIC_RESOURCE,
        "resource_name": name,
        "configs": [{"name": key, "config_operation": op, "value": value}],
    }
    answer = conn.request(INCREMENTAL_ALTER_CONFIGS, 1, resources=[resource], validate_only=False)
    return answer.responses[0]


def _describe_raw(conn: BrokerConnection, name: str, key: str) -> tuple[int, str | None]:
    resource = {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": [key]}
    answer = conn.request(
        DESCRIBE_CONFIGS,
        4,
        resources=[resource],
        include_synonyms=False,
        include_documentation=False,
    )
    result = answer.results[0]
    values = [c.value for c in result.configs if c.name == key]
    return result.error_code, values[0] if values else None


def _connections(lagging: tuple[KafkaCluster, ClusterNode]) -> tuple[Any, Any]:
    cluster, controller, follower = _controller_and_follower(lagging)
    return (
        BrokerConnection(controller.host, controller.port, 20.0, "race-controller"),
        BrokerConnection(follower.host, follower.port, 20.0, "race-lagging"),
    )


def test_a_topic_just_created_elsewhere_can_be_deleted_grown_and_described_at_once(
    lagging: tuple[KafkaCluster, ClusterNode],
) -> None:
    """DeleteTopics, CreatePartitions and DescribeConfigs sent to the lagging node right
    after CreateTopics through the controller act on the new topic, as Kafka's controller
    (which a Kafka broker forwards the first two to) would, instead of
    UNKNOWN_TOPIC_OR_PARTITION from the lagging image."""
    first, lagging_conn = _connections(lagging)
    with first, lagging_conn:
        described = f"race-describe-{_uid()}"
        assert _create_raw(first, described).error_code == 0
        assert _describe_raw(lagging_conn, described, "cleanup.policy") == (0, "delete")

        grown = f"race-grow-{_uid()}"
        assert _create_raw(first, grown).error_code == 0
        topics = [{"name": grown, "count": 3, "assignments": None}]
        answer = lagging_conn.request(
            CREATE_PARTITIONS, 3, topics=topics, timeout=15000, validate_only=False
        )
        assert answer.results[0].error_code == 0, answer

        deleted = f"race-delete-{_uid()}"
        assert _create_raw(first, deleted).error_code == 0
        assert _delete_raw(lagging_conn, deleted).error_code == 0


def test_a_topic_just_deleted_elsewhere_can_be_created_again_at_once(
    lagging: tuple[KafkaCluster, ClusterNode],
) -> None:
    """CreateTopics on the lagging node for a name deleted through the controller a
    moment before creates it, instead of TOPIC_ALREADY_EXISTS from the lagging image."""
    first, lagging_conn = _connections(lagging)
    cluster = lagging[0]
    with first, lagging_conn:
        name = f"race-recreate-{_uid()}"
        assert _create_raw(first, name).error_code == 0
        cluster.wait_until(
            lambda: _describe_raw(lagging_conn, name, "cleanup.policy")[0] == 0, 10, name
        )
        assert _delete_raw(first, name).error_code == 0
        created = _create_raw(lagging_conn, name, partitions=2)
        assert created.error_code == 0, created
        assert created.num_partitions == 2


def test_an_incremental_change_on_the_lagging_node_builds_on_the_one_just_made_elsewhere(
    lagging: tuple[KafkaCluster, ClusterNode],
) -> None:
    """APPEND to a list config through the lagging node right after a SET through the
    controller appends to the value just set, as Kafka's controller computes it, rather
    than to the lagging image's value (which would undo the SET)."""
    first, lagging_conn = _connections(lagging)
    cluster = lagging[0]
    with first, lagging_conn:
        name = f"race-configs-{_uid()}"
        assert _create_raw(first, name).error_code == 0
        cluster.wait_until(
            lambda: _describe_raw(lagging_conn, name, "cleanup.policy")[0] == 0, 10, name
        )
        assert _alter_raw(first, name, SET, "cleanup.policy", "compact").error_code == 0
        assert _alter_raw(lagging_conn, name, APPEND, "cleanup.policy", "delete").error_code == 0
        assert _describe_raw(first, name, "cleanup.policy") == (0, "compact,delete")


def test_acls_just_created_elsewhere_are_deleted_through_the_lagging_node(
    lagging: tuple[KafkaCluster, ClusterNode],
) -> None:
    """DeleteAcls matches in the fresh image, as Kafka's controller matches (DeleteAcls is
    forwarded to it), so bindings created a moment ago through another node are deleted."""
    first, lagging_conn = _connections(lagging)
    topic = f"race-acl-{_uid()}"
    binding = {
        "resource_type": TOPIC_RESOURCE,
        "resource_name": topic,
        "resource_pattern_type": LITERAL,
        "principal": "User:race",
        "host": "*",
        "operation": READ,
        "permission_type": ALLOW,
    }
    acl_filter = {
        "resource_type_filter": TOPIC_RESOURCE,
        "resource_name_filter": topic,
        "pattern_type_filter": LITERAL,
        "principal_filter": None,
        "host_filter": None,
        "operation": ANY,
        "permission_type": ANY,
    }
    with first, lagging_conn:
        created = first.request(CREATE_ACLS, 3, creations=[binding])
        assert created.results[0].error_code == 0, created
        deleted = lagging_conn.request(DELETE_ACLS, 3, filters=[acl_filter])
        result = deleted.filter_results[0]
        assert result.error_code == 0, deleted
        assert [m.resource_name for m in result.matching_acls] == [topic]
