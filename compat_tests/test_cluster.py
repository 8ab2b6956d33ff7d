"""Three kbroker processes configured with KRaft's settings form one cluster."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from compat_tests.broker_process import api_versions_round_trip
from compat_tests.cluster import KafkaCluster
from compat_tests.confluent_helpers import watermarks
from kbroker.admin.client import ClientError


def test_three_nodes_form_one_quorum_with_one_controller(cluster: KafkaCluster) -> None:
    controller = cluster.wait_for_controller()
    for node in cluster.nodes:
        metadata = cluster.metadata(node)
        assert metadata.controller_id == controller
        assert metadata.cluster_id == cluster.metadata().cluster_id
        assert sorted(metadata.brokers) == [1, 2, 3]


def test_every_node_advertises_its_own_plaintext_listener(cluster: KafkaCluster) -> None:
    brokers = cluster.metadata().brokers
    for node in cluster.nodes:
        assert (brokers[node.node_id].host, brokers[node.node_id].port) == (node.host, node.port)


def test_the_controller_listener_does_not_serve_the_kafka_api(cluster: KafkaCluster) -> None:
    node = cluster.nodes[0]
    with pytest.raises(ClientError):
        api_versions_round_trip(node.host, node.controller_port, timeout=3)


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def test_a_replication_factor_3_topic_has_replicas_and_isr_on_every_broker(
    cluster: KafkaCluster,
) -> None:
    topic = f"rf3-{_uid()}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    leaders = set()
    for node in cluster.nodes:
        partitions = cluster.metadata(node, topic).topics[topic].partitions
        for p in partitions.values():
            assert sorted(p.replicas) == [1, 2, 3]
            assert sorted(p.isrs) == [1, 2, 3]
            leaders.add(p.leader)
    assert leaders == {1, 2, 3}  # three partitions, one led by each broker


def test_a_replication_factor_above_the_live_brokers_is_refused(cluster: KafkaCluster) -> None:
    from confluent_kafka import KafkaError, KafkaException

    with pytest.raises(KafkaException) as caught:
        cluster.create_topic(f"rf4-{_uid()}", partitions=1, replication_factor=4)
    assert caught.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_confluent_kafka_produces_and_consumes_through_the_cluster(
    cluster: KafkaCluster,
) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"pc-{_uid()}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(topic, key=str(i % 3).encode(), value=f"v{i}".encode())
    assert producer.flush(15) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{_uid()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < 30 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen.append(message.value())
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(30))


def _join_and_get_assignment(cluster: KafkaCluster, topic: str, group: str) -> list[int]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(n.bootstrap for n in cluster.live_nodes),
            "group.id": group,
            "session.timeout.ms": 6000,
        }
    )
    assigned: list[int] = []
    consumer.subscribe([topic], on_assign=lambda c, ps: assigned.extend(p.partition for p in ps))
    deadline = time.monotonic() + 30
    try:
        while not assigned and time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    return sorted(assigned)


def test_the_group_coordinator_moves_with_the_leadership_of_its_offsets_partition(
    cluster: KafkaCluster,
) -> None:
    # Placed before the other tests that kill nodes: each kill shrinks ISRs, which grow
    # back only as followers catch up.
    topic, group = f"coord-{_uid()}", cluster.key_with_full_isr("group")
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    assert _join_and_get_assignment(cluster, topic, group) == [0, 1]
    try:
        coordinator = cluster.kill_coordinator(group)
        survivor = cluster.live_nodes[0]

        def moved() -> int | None:
            node = cluster.coordinator(group, node=survivor)
            return node if node not in (0, coordinator) else None

        new_coordinator = cluster.wait_until(moved, 10.0, "FindCoordinator to name a survivor")
        assert new_coordinator in {n.node_id for n in cluster.live_nodes}
        assert _join_and_get_assignment(cluster, topic, group) == [0, 1]
    finally:
        cluster.heal()


def test_a_killed_broker_is_fenced_for_its_refused_port_and_its_leadership_moves_in_10_s(
    cluster: KafkaCluster,
) -> None:
    topic = f"fence-{_uid()}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    before = cluster.raw_metadata(topic).topics[0].partitions[0]
    victim = before.leader_id
    survivor = next(n for n in cluster.nodes if n.node_id != victim)
    # How the active controller says a broker's port refused it (earlier tests may have).
    reason = f"fenced broker {victim}: silent since its last heartbeat and its listener"

    survivors = [n for n in cluster.nodes if n.node_id != victim]

    def refused_fences() -> int:
        return sum(n.log_text().count(reason) for n in survivors)

    seen = refused_fences()
    try:
        cluster.kill(victim)
        killed_at = time.monotonic()

        def moved() -> Any:
            p = cluster.raw_metadata(topic, survivor).topics[0].partitions[0]
            return p if p.leader_id not in (victim, -1) else None

        after = cluster.wait_until(moved, 10.0, f"leadership of {topic} to leave {victim}")
        assert time.monotonic() - killed_at < 10.0
        assert after.leader_epoch > before.leader_epoch
        assert victim not in after.isr_nodes
        assert list(after.offline_replicas) == [victim]
        assert victim not in cluster.metadata(survivor).brokers
        # Fenced because nothing listens on its port any more, before its session ended.
        assert refused_fences() == seen + 1, cluster.log_tails()
    finally:
        cluster.heal()
    cluster.wait_until(
        lambda: victim in cluster.metadata(survivor).brokers, 15.0, "the broker to return"
    )


def test_killing_the_active_controller_elects_another_and_metadata_keeps_working(
    cluster: KafkaCluster,
) -> None:
    old = cluster.wait_for_controller()
    try:
        cluster.kill(old)
        new = cluster.wait_for_controller(exclude=(old,), timeout=15)
        assert new != old
        topic = f"after-{_uid()}"
        cluster.create_topic(topic, partitions=2, replication_factor=2)
        assert len(cluster.metadata(topic=topic).topics[topic].partitions) == 2
    finally:
        cluster.heal()


def test_a_config_change_sent_as_the_active_controller_dies_is_carried_to_the_next_one(
    cluster: KafkaCluster,
) -> None:
    """AlterConfigs v0, as Sarama and kafka-python send it, reaches a surviving broker
    the moment the active controller is killed: the broker carries it to the controller
    the quorum elects next, as Kafka's forwarding does, and answers success rather than
    NOT_CONTROLLER (which those clients do not retry)."""
    from kbroker.admin.client import BrokerConnection

    topic = f"cfg-{_uid()}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    old = cluster.wait_for_controller()
    survivor = next(n for n in cluster.nodes if n.node_id != old)
    resource = {"resource_type": 2, "resource_name": topic}
    change = {**resource, "configs": [{"name": "retention.ms", "value": "3600000"}]}
    try:
        with BrokerConnection(survivor.host, survivor.port, 30.0, "sarama") as conn:
            cluster.kill(old)
            answer = conn.request(33, 0, resources=[change], validate_only=False)
            described = conn.request(32, 1, resources=[resource], include_synonyms=False)
    finally:
        cluster.heal()
    (result,) = answer.responses
    assert (result.error_code, result.error_message) == (0, None)
    configs = {c.name: c.value for c in described.results[0].configs}
    assert configs["retention.ms"] == "3600000"


def test_a_topic_deleted_while_a_broker_is_down_does_not_come_back_when_its_name_is_reused(
    cluster: KafkaCluster,
) -> None:
    """The returning broker still holds the deleted topic's partition directories. It
    deletes them as strays at start (their partition.metadata names the deleted topic's
    id), so a new topic of the same name starts empty on every replica instead of
    serving, and replicating, the old topic's records."""
    from confluent_kafka import Producer

    from compat_tests.broker_process import stored_batches

    topic = f"reused-{_uid()}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_for_full_isr(topic)

    def produce(value: bytes) -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        producer.produce(topic, value, partition=0)
        assert producer.flush(15) == 0

    produce(b"old")
    victim = cluster.node(cluster.partition(topic).leader)
    try:
        victim.kill()
        cluster.wait_for_controller(exclude=(victim.node_id,))
        admin = cluster.admin(cluster.live_nodes[0])  # kept alive until the answer
        admin.delete_topics([topic])[topic].result(15)
        cluster.wait_until(
            lambda: topic not in cluster.metadata().topics, 10.0, f"{topic} to be deleted"
        )
    finally:
        cluster.heal()
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_for_full_isr(topic)
    produce(b"new")
    cluster.wait_for_full_isr(topic)
    assert sum(b.record_count for b in stored_batches(victim, topic)) == 1
    assert [b.base_offset for b in stored_batches(victim, topic)] == [0]


def _describe_quorum(node: Any) -> Any:
    from kbroker.admin.client import BrokerConnection

    with BrokerConnection(node.host, node.port, 5.0, "quorum-test") as conn:
        return conn.request(
            55,
            2,
            topics=[{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}],
        )


def _quorum_partition(answer: Any) -> Any:
    assert answer.error_code == 0
    (topic,) = answer.topics
    (partition,) = topic.partitions
    assert (topic.topic_name, partition.error_code) == ("__cluster_metadata", 0)
    return partition


def test_describe_quorum_answers_the_active_controllers_view_on_every_node(
    cluster: KafkaCluster,
) -> None:
    controller = cluster.wait_for_controller()
    answers = [_describe_quorum(node) for node in cluster.live_nodes]
    now_ms = time.time() * 1000
    views = [_quorum_partition(answer) for answer in answers]
    for answer, view in zip(answers, views, strict=True):
        assert view.leader_id == controller
        assert [v.replica_id for v in view.current_voters] == [1, 2, 3]
        assert {(n.node_id, n.listeners[0].port) for n in answer.nodes} == {
            (n.node_id, n.controller_port) for n in cluster.nodes
        }
        for voter in view.current_voters:
            # What only the leader knows: every voter's progress, heard within a moment.
            assert voter.log_end_offset > 0 and view.high_watermark - 20 <= voter.log_end_offset
            assert now_ms - 5000 < voter.last_fetch_timestamp <= now_ms
            assert now_ms - 5000 < voter.last_caught_up_timestamp <= now_ms
    assert len({v.leader_epoch for v in views}) == 1


def test_describe_quorum_after_the_active_controller_is_killed_is_the_new_leaders_view(
    cluster: KafkaCluster,
) -> None:
    old = cluster.wait_for_controller()
    epoch_before = _quorum_partition(_describe_quorum(cluster.node(old))).leader_epoch
    try:
        cluster.kill(old)
        new = cluster.wait_for_controller(exclude=(old,), timeout=15)

        def new_leaders_view(node: Any) -> Any:
            view = _quorum_partition(_describe_quorum(node))
            live = [v for v in view.current_voters if v.replica_id != old]
            return view if all(v.last_fetch_timestamp > 0 for v in live) else None

        for node in cluster.live_nodes:
            view = cluster.wait_until(lambda n=node: new_leaders_view(n), 10.0, "a fetch")
            assert (view.leader_id, view.leader_epoch > epoch_before) == (new, True)
            # The killed voter has not fetched from the new leader: unknown, as in Kafka.
            (dead,) = [v for v in view.current_voters if v.replica_id == old]
            assert (dead.log_end_offset, dead.last_fetch_timestamp) == (-1, -1)
    finally:
        cluster.heal()


def test_a_broker_only_node_joins_through_the_quorum_and_is_fenced_when_killed(
    cluster: KafkaCluster,
) -> None:
    # Named the KIP-853 way: the controllers' addresses, without voter ids.
    controllers = ",".join(f"127.0.0.1:{n.controller_port}" for n in cluster.nodes)
    observer = cluster.add_broker(
        controller_quorum_voters="", controller_quorum_bootstrap_servers=controllers
    )
    try:
        assert observer.node_id in cluster.metadata(cluster.nodes[0]).brokers
        assert cluster.metadata(observer).controller_id == cluster.wait_for_controller()
        # Asked of the observer itself: the leader's view, which has it replicating.
        (listed,) = _quorum_partition(_describe_quorum(observer)).observers
        assert listed.replica_id == observer.node_id
        assert listed.log_end_offset > 0 and listed.last_fetch_timestamp > 0
        observer.kill()
        cluster.wait_until(
            lambda: observer.node_id not in cluster.metadata(cluster.nodes[0]).brokers,
            10.0,
            "the killed broker-only node to be fenced",
        )
    finally:
        observer.kill()
        cluster.nodes.remove(observer)


def test_sigterm_moves_leadership_away_before_the_broker_exits(cluster: KafkaCluster) -> None:
    topic = f"shutdown-{_uid()}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    leaving = cluster.nodes[-1]
    survivor = cluster.nodes[0]
    try:
        assert cluster.stop(leaving.node_id) == 0
        stopped_at = time.monotonic()
        partitions = cluster.raw_metadata(topic, survivor).topics[0].partitions
        # Fencing after a silent death would take the 3 s session timeout; a controlled
        # shutdown has moved every leadership before the process is gone.
        assert time.monotonic() - stopped_at < 3.0
        assert all(p.leader_id not in (leaving.node_id, -1) for p in partitions)
        assert all(leaving.node_id not in p.isr_nodes for p in partitions)
        assert "controlled shutdown: leadership moved away" in leaving.log_text()
    finally:
        cluster.heal()


def test_describe_cluster_lists_a_fenced_broker_only_when_asked(cluster: KafkaCluster) -> None:
    from kbroker.admin.client import BrokerConnection

    victim = cluster.nodes[1]
    survivor = cluster.nodes[0]

    def describe(include_fenced: bool) -> dict[int, bool]:
        with BrokerConnection(survivor.host, survivor.port, 5.0, "describe-test") as conn:
            answer = conn.request(
                60,
                2,
                include_cluster_authorized_operations=False,
                endpoint_type=1,
                include_fenced_brokers=include_fenced,
            )
        return {int(b.broker_id): bool(b.is_fenced) for b in answer.brokers}

    assert describe(False) == {1: False, 2: False, 3: False}
    try:
        victim.kill()
        cluster.wait_until(
            lambda: describe(True).get(victim.node_id), 10.0, "the killed broker to be fenced"
        )
        assert victim.node_id not in describe(False)
    finally:
        cluster.heal()


def test_sigterm_of_the_active_controller_hands_its_role_to_another_voter(
    cluster: KafkaCluster,
) -> None:
    controller = cluster.wait_for_controller()
    node = cluster.node(controller)
    try:
        assert cluster.stop(controller) == 0
        assert "the active controller role moved to another voter" in node.log_text()
        assert cluster.wait_for_controller(exclude=(controller,), timeout=5) != controller
    finally:
        cluster.heal()


def test_a_controller_only_node_votes_but_serves_no_kafka_api(cluster_factory: Any) -> None:
    cluster = cluster_factory.start(controller_only=(3,))
    one, two, controller_node = cluster.nodes
    metadata = cluster.metadata(one)
    assert sorted(metadata.brokers) == [1, 2]
    assert metadata.controller_id in (1, 2)  # clients are named a broker they can reach
    voters = _describe_quorum(one).topics[0].partitions[0].current_voters
    assert [v.replica_id for v in voters] == [1, 2, 3]
    try:
        # With node 1 gone, metadata still changes: node 3's vote makes the majority.
        cluster.kill(1)
        topic = f"after-{_uid()}"
        cluster.wait_until(
            lambda: _create(cluster, two, topic), 20.0, "a topic created without node 1"
        )
        assert sorted(cluster.metadata(two).brokers) in ([1, 2], [2])
        assert controller_node.running()
    finally:
        cluster.heal()


def test_a_lone_controller_only_voter_leads_brokers_that_observe_it(
    cluster_factory: Any,
) -> None:
    """kafkatest's isolated KRaft with one controller: node 1 is controller-only and the
    only voter, nodes 2-4 are brokers (process.roles=broker) reaching it through
    controller.quorum.voters. It used to open no Raft socket (a lone voter), so the
    brokers never joined."""
    cluster = cluster_factory.start(size=1, controller_only=(1,))
    brokers = [cluster.add_broker() for _ in range(3)]
    assert sorted(cluster.metadata(brokers[0]).brokers) == [2, 3, 4]
    topic = f"lone-{_uid()}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    cluster.wait_for_full_isr(topic, timeout=30)
    cluster.kill(4)  # the controller fences it, as any controller does
    cluster.wait_until(
        lambda: all(4 not in cluster.partition(topic, p).isrs for p in range(3)),
        20.0,
        "the killed broker out of every ISR",
    )
    brokers[2].start()
    cluster.wait_for_full_isr(topic, timeout=30)


def _create(cluster: KafkaCluster, node: Any, topic: str) -> bool:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    try:
        admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=5)[topic].result(10)
    except KafkaException as exc:  # an earlier attempt's creation got through after all
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return topic in cluster.metadata(node).topics


def test_kafka_python_produces_and_consumes_in_a_group_across_the_cluster(
    cluster: KafkaCluster,
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = f"kp-{_uid()}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(30):
        producer.send(topic, key=str(i % 3).encode(), value=f"v{i}".encode())
    producer.flush(timeout=15)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id=f"g-{_uid()}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
    )
    seen: list[bytes] = []
    try:
        for message in consumer:
            seen.append(message.value)
            if len(seen) == 30:
                break
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(30))


def test_aiokafka_sees_every_partition_leader_and_reads_back_what_it_wrote(
    cluster: KafkaCluster,
) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = f"aio-{_uid()}"
    cluster.create_topic(topic, partitions=3, replication_factor=2)

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        await producer.start()
        try:
            for p in range(3):
                await producer.send_and_wait(topic, f"p{p}".encode(), partition=p)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
        await consumer.start()
        try:
            parts = [TopicPartition(topic, p) for p in range(3)]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            batches = await consumer.getmany(timeout_ms=10000)
            while sum(len(v) for v in batches.values()) < 3:
                more = await consumer.getmany(timeout_ms=5000)
                if not more:
                    break
                for tp, records in more.items():
                    batches.setdefault(tp, []).extend(records)
            return [r.value for records in batches.values() for r in records]
        finally:
            await consumer.stop()

    assert sorted(asyncio.run(main())) == [b"p0", b"p1", b"p2"]


def _topic_guarded_by_two_replicas(cluster: KafkaCluster, name: str) -> None:
    """Three partitions, three replicas, min.insync.replicas=2: a write survives a kill."""
    cluster.create_topic(name, 3, 3, config={"min.insync.replicas": "2"})
    cluster.wait_for_full_isr(name)


# A group member of kafka-python or aiokafka (they share these names) that commits
# only when told and notices its coordinator's death within seconds.
GROUP_CONSUMER = {
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
}


def test_kafka_python_producer_and_group_carry_on_when_the_coordinator_broker_is_killed(
    cluster: KafkaCluster,
) -> None:
    """kafka-python's idempotent acks=all producer retries through the failover of the
    partition the killed broker led; its group consumer finds the new coordinator, reads
    every acknowledged record and commits there."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic, group = f"kp-kill-{_uid()}", cluster.key_with_full_isr("group")
    _topic_guarded_by_two_replicas(cluster, topic)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, acks="all", request_timeout_ms=10000
    )
    consumer = KafkaConsumer(
        topic, bootstrap_servers=cluster.bootstrap, group_id=group, **GROUP_CONSUMER
    )
    seen: list[bytes] = []

    def read(count: int) -> None:
        deadline = time.monotonic() + 45
        while len(set(seen)) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(r.value for r in records)

    victim = 0
    try:
        acked = [producer.send(topic, b"%d" % i).get(timeout=30) for i in range(100)]
        read(100)
        consumer.commit()
        victim = cluster.kill_coordinator(group)
        futures = [producer.send(topic, b"%d" % i) for i in range(100, 200)]
        acked += [f.get(timeout=60) for f in futures]
        read(200)
        consumer.commit()
        committed = sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in range(3))
        coordinator = cluster.coordinator(group)
    finally:
        producer.close(timeout=10)
        consumer.close(autocommit=False)
        cluster.heal()
    assert len(acked) == 200
    assert set(seen) == {b"%d" % i for i in range(200)}
    assert committed == 200
    assert coordinator not in (0, victim)


def test_aiokafka_producer_and_group_carry_on_when_the_coordinator_broker_is_killed(
    cluster: KafkaCluster,
) -> None:
    """aiokafka's idempotent acks=all producer and a consumer in a group, the group
    coordinator's broker killed between two halves of the work: every acknowledged
    record is read, and the group commits on the new coordinator."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic, group = f"aio-kill-{_uid()}", cluster.key_with_full_isr("group")
    _topic_guarded_by_two_replicas(cluster, topic)

    async def main() -> tuple[int, set[bytes], int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True
        )
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=cluster.bootstrap, group_id=group, **GROUP_CONSUMER
        )
        await producer.start()
        await consumer.start()
        seen: set[bytes] = set()

        async def read(count: int) -> None:
            deadline = time.monotonic() + 45
            while len(seen) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                seen.update(r.value for records in batches.values() for r in records)

        try:
            acked = len(
                await asyncio.gather(
                    *[producer.send_and_wait(topic, b"%d" % i) for i in range(100)]
                )
            )
            await read(100)
            await consumer.commit()
            cluster.kill_coordinator(group)
            sends = [await producer.send(topic, b"%d" % i) for i in range(100, 200)]
            acked += len(await asyncio.gather(*sends))
            await read(200)
            await consumer.commit()
            committed = 0
            for p in range(3):
                committed += await consumer.committed(TopicPartition(topic, p)) or 0
            return acked, seen, committed
        finally:
            await producer.stop()
            await consumer.stop()

    try:
        acked, seen, committed = asyncio.run(asyncio.wait_for(main(), 120))
    finally:
        cluster.heal()
    assert acked == 200
    assert seen == {b"%d" % i for i in range(200)}
    assert committed == 200


# Idempotent producers whose partition leader is killed while their records are in
# flight: the first half acknowledged before the kill, the second sent through it.
PRODUCED, KILL_AFTER = 400, 200


def _stored_once_in_order(cluster: KafkaCluster, topic: str) -> list[bytes]:
    """Partition 0's values from its start; its log end must be PRODUCED, or some
    record was stored twice (or lost)."""
    from kafka import KafkaConsumer, TopicPartition

    assert watermarks(cluster.bootstrap, topic)[1] == PRODUCED  # nothing stored twice
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, group_id=None
    )
    values: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 45
        while len(values) < PRODUCED and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close(autocommit=False)
    return values


def _assert_failed_over_in_order(
    offsets: list[int], leader: int, new_leader: int, values: list[bytes]
) -> None:
    """Every record acknowledged at its place in the sequence, by a new leader, and read
    back once each in the order sent."""
    assert offsets == list(range(PRODUCED))
    assert new_leader not in (leader, -1)
    assert values == [b"%d" % i for i in range(PRODUCED)]


def test_kafka_python_idempotent_producer_stores_each_record_once_in_order_when_its_leader_is_killed(
    cluster: KafkaCluster,
) -> None:
    """kafka-python's idempotent acks=all producer, its partition's leader killed with
    records in flight: every record acknowledged, at the offset of its place in the
    sequence, none lost or written twice."""
    from kafka import KafkaProducer

    topic = f"kp-leader-kill-{_uid()}"
    _topic_guarded_by_two_replicas(cluster, topic)
    leader = cluster.partition(topic).leader
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=10000,
        delivery_timeout_ms=90000,
    )
    try:
        futures = []
        for i in range(PRODUCED):
            futures.append(producer.send(topic, b"%d" % i, partition=0))
            if i == KILL_AFTER - 1:
                producer.flush(timeout=30)
                cluster.kill(leader)
        producer.flush(timeout=90)
        offsets = [f.get(timeout=1).offset for f in futures]
        new_leader = cluster.partition(topic).leader
        values = _stored_once_in_order(cluster, topic)
    finally:
        producer.close(timeout=10)
        cluster.heal()
    _assert_failed_over_in_order(offsets, leader, new_leader, values)


def test_aiokafka_idempotent_producer_stores_each_record_once_in_order_when_its_leader_is_killed(
    cluster: KafkaCluster,
) -> None:
    """The same for aiokafka's idempotent acks=all producer."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    topic = f"aio-leader-kill-{_uid()}"
    _topic_guarded_by_two_replicas(cluster, topic)
    leader = cluster.partition(topic).leader

    async def produce() -> list[int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            # request_timeout_ms at its 40 s: aiokafka fails a batch that waits longer
            # than that for its partition's new leader.
        )
        await producer.start()
        try:
            futures = []
            for i in range(PRODUCED):
                futures.append(await producer.send(topic, b"%d" % i, partition=0))
                if i == KILL_AFTER - 1:
                    await producer.flush()
                    cluster.kill(leader)
            return [m.offset for m in await asyncio.gather(*futures)]
        finally:
            await producer.stop()

    try:
        offsets = asyncio.run(asyncio.wait_for(produce(), 120))
        new_leader = cluster.partition(topic).leader
        values = _stored_once_in_order(cluster, topic)
    finally:
        cluster.heal()
    _assert_failed_over_in_order(offsets, leader, new_leader, values)


def test_a_broker_killed_and_restarted_at_once_rejoins_every_isr_in_10_s(
    cluster: KafkaCluster,
) -> None:
    """The active controller, leader of a partition, is killed and restarted before the
    others elected another: its old incarnation's leadership and ISR memberships end as
    it registers again, and that metadata reaches it while it registers. It still
    fetches every partition it follows and is back in each ISR within seconds."""
    topic = f"rejoin-{_uid()}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    victim = cluster.wait_for_controller()
    survivor = next(n for n in cluster.nodes if n.node_id != victim)
    before = cluster.raw_metadata(topic, survivor).topics[0].partitions
    led = next(p.partition_index for p in before if p.leader_id == victim)
    try:
        cluster.kill(victim)
        cluster.node(victim).start()

        def rejoined() -> bool:
            partitions = cluster.raw_metadata(topic, survivor).topics[0].partitions
            return partitions[led].leader_epoch > before[led].leader_epoch and all(
                victim in p.isr_nodes for p in partitions
            )

        cluster.wait_until(rejoined, 10.0, f"broker {victim} to rejoin every ISR of {topic}")
    finally:
        cluster.heal()
