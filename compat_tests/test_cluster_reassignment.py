"""Partition reassignment (KIP-455) on a real cluster, driven by kafka-python's admin client
(confluent-kafka 2.16 has no reassignment API) and `kbroker topics reassign`: a fourth
broker joins as a quorum observer and takes over replicas while idempotent acks=all
producers keep writing, and Kafka's answers for what cannot be reassigned or cancelled.

One cluster for the module: three voters, then broker 4 (``process.roles=broker``), added
while the producers run. The Java client's Admin (compat_tests/java's driver) starts and
lists a move too.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from compat_tests.broker_process import free_port, kbroker_command
from compat_tests.cluster import KafkaCluster
from compat_tests.history import NumberedProducer, check, read_partition
from compat_tests.java_driver import JavaDriver
from compat_tests.test_cluster_operations import gauge
from kbroker.admin.client import BrokerConnection

pytestmark = pytest.mark.timeout(180)

NEW_BROKER = 4
REASSIGNING = "kafka_server_replicamanager_reassigningpartitions"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three voters; broker 4 joins later (`added_broker`, or the load test under load)."""
    started = KafkaCluster(tmp_path_factory.mktemp("reassign-cluster"))
    for node in started.nodes:
        node.overrides["http.listeners"] = f"http://127.0.0.1:{free_port()}"
        # Replication throttles measured over two 1 s samples, so a throttled move of a
        # few MB shows its bound in seconds rather than in the ten the default pads to.
        node.overrides["replication.quota.window.num"] = "2"
    try:
        started.start()
        yield started
    finally:
        started.kill_all()


def add_broker(cluster: KafkaCluster) -> int:
    """Start one more broker (``process.roles=broker``); its id once it is registered."""
    node = cluster.add_broker(http_listeners=f"http://127.0.0.1:{free_port()}")
    cluster.wait_until(
        lambda: node.node_id in {b.id for b in cluster.metadata().brokers.values()},
        20.0,
        f"broker {node.node_id} to be registered",
    )
    return node.node_id


@pytest.fixture
def broker4(cluster: KafkaCluster) -> int:
    """Broker 4 in the cluster (added now unless an earlier test added it)."""
    if all(n.node_id != NEW_BROKER for n in cluster.nodes):
        assert add_broker(cluster) == NEW_BROKER
    return NEW_BROKER


@pytest.fixture
def admin(cluster: KafkaCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(
        bootstrap_servers=[n.bootstrap for n in cluster.live_nodes], request_timeout_ms=15000
    )
    # kafka-python looks the controller up on first use by asking any broker and gives
    # up if that one is down: learn it now, while every node runs.
    client.list_partition_reassignments()
    try:
        yield client
    finally:
        client.close()


def create_topic(cluster: KafkaCluster, name: str, assignment: list[list[int]]) -> None:
    """A topic on brokers 1-3 only (placement would put replicas on broker 4 too)."""
    topic = NewTopic(
        name,
        num_partitions=len(assignment),
        replica_assignment=assignment,
        config={"min.insync.replicas": "2"},
    )
    client = cluster.admin()  # kept alive until the answer arrives
    client.create_topics([topic], operation_timeout=10)[name].result(timeout=15)
    cluster.wait_until(
        lambda: all(
            len(cluster.raw_metadata(name, node).topics[0].partitions) == len(assignment)
            for node in cluster.live_nodes
        ),
        10.0,
        f"every live node to know {name}",
    )


def replicas_and_isr(cluster: KafkaCluster, topic: str, partition: int) -> tuple[list, list]:
    p = cluster.partition(topic, partition)
    return list(p.replicas), sorted(p.isrs)


def replicas_and_isr_on(cluster: KafkaCluster, topic: str, node: Any) -> tuple[list, list]:
    """Partition 0's replicas and ISR as one node's Metadata answers."""
    p = cluster.partition(topic, 0, node)
    return list(p.replicas), sorted(p.isrs)


def test_partitions_move_onto_a_fourth_broker_under_load_with_nothing_acknowledged_lost(
    cluster: KafkaCluster, admin: KafkaAdminClient
) -> None:
    topic = "moving"
    create_topic(cluster, topic, [[1, 2, 3], [2, 3, 1]])
    producers = [NumberedProducer(cluster.bootstrap, topic, p).start() for p in (0, 1)]
    try:
        cluster.wait_until(
            lambda: all(len(p.history.acked) > 200 for p in producers), 20.0, "writes to flow"
        )
        new = add_broker(cluster)  # the fourth broker (unless another test added one)
        # Partition 0 loses its leader (1) to the new broker; partition 1 keeps its leader
        # (2) and trades follower 1 for the new broker.
        targets = {0: [new, 2, 3], 1: [2, 3, new]}
        answers = admin.alter_partition_reassignments(
            {TopicPartition(topic, p): r for p, r in targets.items()}
        )
        assert answers == {TopicPartition(topic, p): None for p in targets}

        def moved() -> bool:
            if admin.list_partition_reassignments({topic: list(targets)}):
                return False
            return all(
                replicas_and_isr(cluster, topic, p) == (r, sorted(r)) for p, r in targets.items()
            )

        began = time.monotonic()
        cluster.wait_until(moved, 30.0, "both partitions to complete their move")
        print(f"moved under load in {time.monotonic() - began:.2f} s")
        acked_at_move = [len(p.history.acked) for p in producers]
        cluster.wait_until(
            lambda: all(
                len(p.history.acked) > n + 200
                for p, n in zip(producers, acked_at_move, strict=True)
            ),
            20.0,
            "writes to go on after the move",
        )
    finally:
        for producer in producers:
            producer.stop()

    assert cluster.partition(topic, 0).leader == new
    for partition, producer in enumerate(producers):
        assert producer.fatal is None
        assert producer.history.failed == [], "only retriable errors, all retried"
        read = [int(v) for v in read_partition(
            cluster.bootstrap, topic, len(producer.history.acked), partition=partition
        )]  # fmt: skip
        verdict = check(producer.history.acked, read)
        print(f"partition {partition}: {verdict}")
        assert verdict.clean, f"partition {partition}: {verdict}"
    # The removed replicas deleted their logs; the new broker holds both partitions.
    assert not (cluster.node(1).data_dir / f"{topic}-0").exists()
    assert not (cluster.node(1).data_dir / f"{topic}-1").exists()
    new_dir = cluster.node(new).data_dir
    assert (new_dir / f"{topic}-0").is_dir() and (new_dir / f"{topic}-1").is_dir()


def test_a_reassignment_in_flight_is_listed_and_shown_in_metadata_until_cancelled(
    cluster: KafkaCluster, broker4: int, admin: KafkaAdminClient
) -> None:
    topic = "stuck"
    create_topic(cluster, topic, [[1, 2, 3]])
    tp = TopicPartition(topic, 0)
    cluster.kill(NEW_BROKER)  # registered but silent: its new replica cannot catch up
    try:
        assert admin.alter_partition_reassignments({tp: [1, 2, 4]}) == {tp: None}
        listed = admin.list_partition_reassignments()
        assert listed == {
            tp: {"replicas": [1, 2, 4, 3], "adding_replicas": [4], "removing_replicas": [3]}
        }
        # Every node applies the change a moment after the controller (as on Kafka).
        cluster.wait_until(
            lambda: all(
                replicas_and_isr_on(cluster, topic, node) == ([1, 2, 4, 3], [1, 2, 3])
                for node in cluster.live_nodes
            ),
            10.0,
            "Metadata to list the full replica set while the move is in flight",
        )

        leader = cluster.node(cluster.partition(topic, 0).leader)
        cluster.wait_until(lambda: gauge(leader, REASSIGNING) == 1, 10.0, "the gauge to count it")

        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
        assert admin.list_partition_reassignments() == {}
        cluster.wait_until(lambda: gauge(leader, REASSIGNING) == 0, 10.0, "the gauge to drop")
        cluster.wait_until(
            lambda: replicas_and_isr(cluster, topic, 0) == ([1, 2, 3], [1, 2, 3]),
            10.0,
            "the cancelled reassignment to be reverted",
        )
        answer = admin.alter_partition_reassignments({tp: None})
        assert answer == {tp: NoReassignmentInProgressError}
    finally:
        cluster.heal()


def test_what_cannot_be_reassigned_gets_kafkas_error_per_partition(
    cluster: KafkaCluster, admin: KafkaAdminClient
) -> None:
    topic = "fixed"
    create_topic(cluster, topic, [[1, 2, 3]])
    answers = admin.alter_partition_reassignments(
        {
            TopicPartition("no-such-topic", 0): [1, 2, 3],
            TopicPartition(topic, 7): [1, 2, 3],
            TopicPartition(topic, 0): [1, 1, 2],
        }
    )
    assert answers == {
        TopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError,
        TopicPartition(topic, 7): UnknownTopicOrPartitionError,
        TopicPartition(topic, 0): InvalidReplicationAssignmentError,
    }
    answers = admin.alter_partition_reassignments({TopicPartition(topic, 0): [1, 2, 99]})
    assert answers == {TopicPartition(topic, 0): InvalidReplicationAssignmentError}
    assert replicas_and_isr(cluster, topic, 0) == ([1, 2, 3], [1, 2, 3])


def test_an_empty_replica_list_is_invalid_replica_assignment(cluster: KafkaCluster) -> None:
    # kafka-python refuses an empty list itself; the wire request goes out as the Java
    # client would send it.
    topic = "fixed-empty"
    create_topic(cluster, topic, [[1, 2, 3]])
    node = cluster.node(cluster.wait_for_controller())
    with BrokerConnection(node.host, node.port, 10.0, "reassign-test") as conn:
        response: Any = conn.request(
            45,
            1,
            timeout=10000,
            topics=[{"name": topic, "partitions": [{"partition_index": 0, "replicas": []}]}],
        )
    assert response.error_code == 0
    (partition,) = response.responses[0].partitions
    assert partition.error_code == InvalidReplicationAssignmentError.errno
    assert partition.error_message


def kbroker_topics(cluster: KafkaCluster, *args: str) -> Any:
    return kbroker_cli(cluster, "topics", *args)


def kbroker_cli(cluster: KafkaCluster, *args: str) -> Any:
    live = ",".join(n.bootstrap for n in cluster.live_nodes)
    result = subprocess.run(
        [*kbroker_command(), *args, "--bootstrap", live, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_admin_cli_starts_lists_and_cancels_a_reassignment(
    cluster: KafkaCluster, broker4: int
) -> None:
    topic = "cli-moving"
    create_topic(cluster, topic, [[1, 2, 3]])
    cluster.kill(NEW_BROKER)  # the move stays in flight while broker 4 is silent
    try:
        kbroker_topics(cluster, "reassign", topic, "0=1,2,4")
        assert kbroker_topics(cluster, "reassignments", topic) == [
            {
                "topic": topic,
                "partition": 0,
                "replicas": [1, 2, 4, 3],
                "adding": [4],
                "removing": [3],
            }
        ]
        (described,) = kbroker_topics(cluster, "describe", topic)
        (p,) = described["partitions"]
        assert (p["replicas"], p["adding_replicas"], p["removing_replicas"]) == (
            [1, 2, 4, 3],
            [4],
            [3],
        )
        # As kafka-topics counts it: in sync against the three replicas it started with.
        (described,) = kbroker_topics(cluster, "describe", topic, "--under-replicated-partitions")
        assert described["partitions"] == []
        status = kbroker_cli(cluster, "cluster", "status")
        assert [
            (a["topic"], a["problem"]) for a in status["attention"] if a["topic"] == topic
        ] == []
        assert kbroker_topics(cluster, "reassign", topic, "--cancel", "0")["cancelled"] == [0]
        assert kbroker_topics(cluster, "reassignments") == []
    finally:
        cluster.heal()


def test_a_replica_removed_while_its_broker_was_down_is_deleted_when_it_returns(
    cluster: KafkaCluster, broker4: int, admin: KafkaAdminClient
) -> None:
    topic = "left-behind"
    # The broker that goes down is not the active controller, which kafka-python asks.
    controller = cluster.wait_for_controller()
    down = max(n for n in (1, 2, 3) if n != controller)
    kept = [n for n in (1, 2, 3) if n != down]
    create_topic(cluster, topic, [[*kept, down]])
    tp = TopicPartition(topic, 0)
    stray = cluster.node(down).data_dir / f"{topic}-0"
    assert stray.is_dir()
    cluster.kill(down)
    target = [*kept, NEW_BROKER]
    try:
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        cluster.wait_until(
            lambda: (
                not admin.list_partition_reassignments()
                and replicas_and_isr(cluster, topic, 0) == (target, sorted(target))
            ),
            30.0,
            f"the move to complete without broker {down}",
        )
        assert stray.is_dir()  # nobody could tell the broker that was down
    finally:
        cluster.heal()
    assert not stray.exists()
    assert (cluster.node(NEW_BROKER).data_dir / f"{topic}-0").is_dir()


def test_the_java_admin_client_starts_a_move_that_completes_when_the_new_broker_returns(
    cluster: KafkaCluster,
    broker4: int,
    java_classpath: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    topic = "java-moving"
    create_topic(cluster, topic, [[1, 2, 3]])
    log = tmp_path_factory.mktemp("java") / "driver.log"
    with JavaDriver(java_classpath, cluster.bootstrap, log) as java:
        cluster.kill(NEW_BROKER)
        try:
            java.call("reassign", topic=topic, partition=0, replicas="1,2,4")
            listed = java.call("list-reassignments")["reassignments"]
            assert listed == {
                f"{topic}-0": {"replicas": [1, 2, 4, 3], "adding": [4], "removing": [3]}
            }
        finally:
            cluster.heal()
            try:
                # Broker 4 is back: it catches up, joins the ISR and broker 3 is removed.
                cluster.wait_until(
                    lambda: (
                        java.call("list-reassignments")["count"] == 0
                        and replicas_and_isr(cluster, topic, 0) == ([1, 2, 4], [1, 2, 4])
                    ),
                    30.0,
                    "the move to complete once broker 4 is back",
                )
            finally:
                print(java.log_since_mark())


def _set_configs(
    cluster: KafkaCluster, kind: str, name: str, configs: dict[str, str | None]
) -> None:
    """IncrementalAlterConfigs: set each value, or delete it (None)."""
    entries = [
        ConfigEntry(
            key,
            value or "",
            incremental_operation=AlterConfigOpType.DELETE
            if value is None
            else AlterConfigOpType.SET,
        )
        for key, value in configs.items()
    ]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    client = cluster.admin()  # kept alive until the answer arrives
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=15)


def _dynamic_value(cluster: KafkaCluster, broker: str, name: str) -> str | None:
    """A broker's config as DescribeConfigs gives it."""
    resource = ConfigResource(ConfigResource.Type.BROKER, broker)
    client = cluster.admin()  # kept alive until the answer arrives
    (described,) = client.describe_configs([resource]).values()
    entry = described.result(timeout=15).get(name)
    return None if entry is None else entry.value


def _timed_move(
    cluster: KafkaCluster, admin: KafkaAdminClient, topic: str, config: dict[str, str]
) -> float:
    """Fill partition 0 of a new topic (these configs) on broker 1 with 3 MB, add a
    replica on broker 2, and return the seconds until that replica is in sync."""
    client = cluster.admin()
    new = NewTopic(topic, num_partitions=1, replica_assignment=[[1]], config=config)
    client.create_topics([new], operation_timeout=10)[topic].result(timeout=15)
    cluster.wait_until(
        lambda: cluster.partition(topic, 0).leader == 1, 10.0, f"{topic} led by broker 1"
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 5})
    for _ in range(300):
        producer.produce(topic, b"x" * 10_000)
    assert producer.flush(30) == 0
    tp = TopicPartition(topic, 0)
    started = time.monotonic()
    assert admin.alter_partition_reassignments({tp: [1, 2]}) == {tp: None}
    cluster.wait_until(
        lambda: replicas_and_isr(cluster, topic, 0) == ([1, 2], [1, 2]),
        60.0,
        f"broker 2's new replica of {topic} in sync",
    )
    return time.monotonic() - started


def test_replication_throttles_bound_a_move_on_the_leader_and_on_the_follower(
    cluster: KafkaCluster, admin: KafkaAdminClient
) -> None:
    """KIP-73, as `kafka-reassign-partitions --throttle` sets it: a broker's
    leader.replication.throttled.rate bounds what it sends for the replicas a topic lists
    in leader.replication.throttled.replicas, follower.replication.throttled.rate what a
    broker fetches for those in follower.replication.throttled.replicas. At 100 KB/s, 3 MB
    that a fetch of up to 1 MB moves unthrottled in well under a second takes at least
    four: each 1 MB answer holds the next back until it leaves the 2 s window."""
    assert _throttled_move(cluster, admin, "leader", "1", "throttled-by-leader") >= 3.0
    assert _throttled_move(cluster, admin, "follower", "2", "throttled-by-follower") >= 3.0
    # The same move with the replicas listed but no rate set is quick: the bound is what
    # slowed the two above.
    listed = {"leader.replication.throttled.replicas": "*"}
    assert _timed_move(cluster, admin, "not-throttled", listed) < 3.0


def _throttled_move(
    cluster: KafkaCluster, admin: KafkaAdminClient, side: str, node: str, topic: str
) -> float:
    """`_timed_move` with `side`.replication.throttled.rate at 100 KB/s on broker `node`
    and the topic listing that broker's replica in `side`.replication.throttled.replicas."""
    rate_name, rate = f"{side}.replication.throttled.rate", str(100_000)
    broker = ConfigResource.Type.BROKER
    _set_configs(cluster, broker, node, {rate_name: rate})
    try:
        cluster.wait_until(
            lambda: _dynamic_value(cluster, node, rate_name) == rate,
            10.0,
            f"broker {node} to describe its {side} throttle",
        )
        listed = {f"{side}.replication.throttled.replicas": f"0:{node}"}
        return _timed_move(cluster, admin, topic, listed)
    finally:
        _set_configs(cluster, broker, node, {rate_name: None})


def test_a_default_client_quota_does_not_slow_replication(cluster: KafkaCluster) -> None:
    """Followers fetch with client ids of their own (replica-N), which a default
    client-id quota matches; as on Kafka their fetches are exempt from client quotas,
    so a 1 kB/s consumer_byte_rate for every client does not starve acks=all producers
    or shrink the ISR (the replication throttles are what bounds replication)."""
    node = cluster.live_nodes[0]
    default_client = [{"entity_type": "client-id", "entity_name": None}]

    def set_default(remove: bool) -> None:
        with BrokerConnection.to(node.bootstrap) as conn:
            op = {"key": "consumer_byte_rate", "value": 1000.0, "remove": remove}
            answer = conn.request(
                49, 1, entries=[{"entity": default_client, "ops": [op]}], validate_only=False
            )
        assert int(answer.entries[0].error_code) == 0

    set_default(remove=False)
    try:
        topic = "replicated-under-a-client-quota"
        create_topic(cluster, topic, [[1, 2, 3]])
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for _ in range(5):
            for _ in range(20):
                producer.produce(topic, b"x" * 10_000)
            assert producer.flush(15) == 0
        assert replicas_and_isr(cluster, topic, 0) == ([1, 2, 3], [1, 2, 3])
    finally:
        set_default(remove=True)
