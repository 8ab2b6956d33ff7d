"""Replicated partitions on three kbroker processes: followers fetch from the leader,
acks=all waits for the ISR, min.insync.replicas guards writes, and nothing
acknowledged is lost when leaders are killed with kill -9."""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Any

from compat_tests.cluster import KafkaCluster
from compat_tests.history import NumberedProducer, check, read_partition


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def _read_all(cluster: KafkaCluster, topic: str, expected: int, timeout: float = 30) -> list[bytes]:
    """Every value of partition 0 from the start (read_committed off, as produced)."""
    return read_partition(
        ",".join(n.bootstrap for n in cluster.live_nodes), topic, expected, timeout
    )


def _new_leader(cluster: KafkaCluster, topic: str, gone: int, timeout: float = 10.0) -> int:
    def elected() -> int | None:
        node = cluster.live_nodes[0]
        leader = cluster.partition(topic, 0, node).leader
        return leader if leader not in (gone, -1) else None

    return cluster.wait_until(elected, timeout, f"a new leader of {topic} other than {gone}")


def _acked_more(producer: NumberedProducer, records: int, where: str) -> None:
    """Wait until the producer has `records` more acknowledged than now."""
    wanted = len(producer.history.acked) + records
    KafkaCluster.wait_until(
        lambda: len(producer.history.acked) >= wanted or producer.fatal,
        60.0,
        f"{records} more records acknowledged {where}",
    )
    assert producer.fatal is None, producer.fatal


def test_acknowledged_records_survive_the_kill_of_their_leader(cluster: KafkaCluster) -> None:
    from confluent_kafka import Producer

    topic = f"survive-{_uid()}"
    cluster.create_topic(topic, 1, 3, config={"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(200):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(15) == 0
    victim = cluster.partition(topic).leader
    try:
        cluster.kill(victim)
        _new_leader(cluster, topic, victim)
        assert _read_all(cluster, topic, 200) == [b"v%d" % i for i in range(200)]
    finally:
        cluster.heal()


def test_acks_all_is_refused_when_the_isr_is_below_min_insync_replicas(
    cluster: KafkaCluster,
) -> None:
    topic = f"min-isr-{_uid()}"
    cluster.create_topic(topic, 1, 3, config={"min.insync.replicas": "3"})
    leader = cluster.partition(topic).leader
    follower = next(n.node_id for n in cluster.nodes if n.node_id != leader)
    try:
        cluster.kill(follower)
        cluster.wait_until(
            lambda: follower not in cluster.partition(topic, 0, cluster.node(leader)).isrs,
            15.0,
            f"broker {follower} to leave the ISR",
        )
        # A client retries NOT_ENOUGH_REPLICAS until its timeout: ask on the wire.
        assert _produce_error(cluster, leader, topic, acks=-1) == 19  # NOT_ENOUGH_REPLICAS
        assert _produce_error(cluster, leader, topic, acks=1) == 0  # acks=1 is not guarded
    finally:
        cluster.heal()


def _produce_error(
    cluster: KafkaCluster, node_id: int, topic: str, acks: int, timeout_ms: int = 5000
) -> int:
    from kbroker.admin.client import BrokerConnection, produce_fields
    from kbroker.protocol.batch import encode_batch

    node = cluster.node(node_id)
    records = bytes(encode_batch([(None, b"x")], int(time.time() * 1000)))
    with BrokerConnection(node.host, node.port, 10.0, "min-isr-test") as conn:
        response = conn.request(
            0, 9, **produce_fields(topic, records, acks=acks, timeout_ms=timeout_ms)
        )
    return int(response.responses[0].partition_responses[0].error_code)


def test_kill_the_leader_restart_it_kill_another_and_lose_nothing_acknowledged(
    cluster: KafkaCluster,
) -> None:
    """RF=3, min.insync.replicas=2, an idempotent acks=all producer at full speed: kill -9
    the leader, restart it, kill the next leader. Every acknowledged record is read back
    exactly once and in order."""
    topic = f"history-{_uid()}"
    cluster.create_topic(topic, 1, 3, config={"min.insync.replicas": "2"})
    producer = NumberedProducer(cluster.bootstrap, topic).start()
    failovers: list[float] = []
    try:
        _acked_more(producer, 200, "by the first leader")
        first = cluster.partition(topic).leader
        cluster.kill(first)
        killed = time.monotonic()
        _new_leader(cluster, topic, first)
        failovers.append(time.monotonic() - killed)
        _acked_more(producer, 200, f"after broker {first} was killed")
        cluster.node(first).start()
        cluster.wait_until(
            lambda: first in cluster.partition(topic).isrs, 30.0, f"broker {first} back in the ISR"
        )
        second = cluster.partition(topic).leader
        cluster.kill(second)
        killed = time.monotonic()
        _new_leader(cluster, topic, second)
        failovers.append(time.monotonic() - killed)
        _acked_more(producer, 200, f"after broker {second} was killed")
    finally:
        producer.stop()
        cluster.heal()
    acked = producer.history.acked
    assert producer.fatal is None, producer.fatal
    assert len(acked) > 500, f"only {len(acked)} acknowledged"
    assert producer.history.failed == []
    verdict = check(acked, [int(v) for v in _read_all(cluster, topic, len(acked), timeout=60)])
    assert verdict.clean, str(verdict)
    print(f"failover seconds: {[round(f, 2) for f in failovers]}, {verdict}")


def test_a_broker_off_the_replicas_names_the_current_leader_to_produce_and_fetch(
    cluster: KafkaCluster,
) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER from a broker that holds no replica carries the
    leader, its epoch and its endpoint (Produce v10+, Fetch v12+ and v16+ for the
    endpoint). A follower would serve the consumer's Fetch itself (KIP-392)."""
    from kbroker.admin.client import BrokerConnection, fetch_fields, produce_fields
    from kbroker.protocol.batch import encode_batch

    topic = f"kip951-{_uid()}"
    cluster.create_topic(topic, 1, 2)
    raw = cluster.raw_metadata(topic).topics[0]
    p = raw.partitions[0]
    leader = cluster.node(p.leader_id)
    follower = next(n for n in cluster.nodes if n.node_id not in p.replica_nodes)
    records = bytes(encode_batch([(None, b"x")], int(time.time() * 1000)))
    with BrokerConnection(follower.host, follower.port, 10.0, "kip951-test") as conn:
        produced = conn.request(0, 11, **produce_fields(topic, records, timeout_ms=5000))
        fetched = conn.request(
            1, 16, **fetch_fields(topic, topic_id=raw.topic_id, max_wait=0, min_bytes=1)
        )
    answer = produced.responses[0].partition_responses[0]
    assert answer.error_code == 6
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
        p.leader_id,
        p.leader_epoch,
    )
    assert [(n.node_id, n.port) for n in produced.node_endpoints] == [(p.leader_id, leader.port)]
    partition = fetched.responses[0].partitions[0]
    assert partition.error_code == 6
    assert partition.current_leader.leader_id == p.leader_id
    assert (p.leader_id, leader.port) in [(n.node_id, n.port) for n in fetched.node_endpoints]


def test_a_committed_transaction_on_partitions_of_every_broker_is_read_committed(
    cluster: KafkaCluster,
) -> None:
    """The transaction coordinator sends markers with WriteTxnMarkers to partitions led
    by other brokers: a transaction over partitions led by each of the three commits,
    and the aborted one after it stays invisible to read_committed."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"txn-{_uid()}"
    cluster.create_topic(topic, 3, 3, config={"min.insync.replicas": "2"})
    leaders = {cluster.partition(topic, p).leader for p in range(3)}
    assert leaders == {1, 2, 3}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"t-{_uid()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(60):
        producer.produce(topic, value=b"c%d" % i, partition=i % 3)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, value=b"aborted", partition=p)
    # Delivered first, so the aborted records are in the logs for read_committed to skip.
    # (Aborted at once, they may never be sent: librdkafka then sends an EndTxn only if
    # its AddPartitionsToTxn was still in flight, which may meet the previous commit's
    # markers not yet written, and Kafka's coordinator answers that EndTxn, as this one
    # does, INVALID_TXN_STATE.)
    assert producer.flush(30) == 0
    producer.abort_transaction(30)

    def read(isolation: str, count: int) -> tuple[list[bytes], Any]:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": f"rc-{_uid()}",
                "isolation.level": isolation,
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        try:
            while len(seen) < count and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and not message.error():
                    seen.append(message.value())
            return seen, consumer.poll(1.0)
        finally:
            consumer.close()

    committed = sorted(b"c%d" % i for i in range(60))
    everything, _ = read("read_uncommitted", 63)
    assert sorted(everything) == sorted(committed + [b"aborted"] * 3)
    seen, extra = read("read_committed", 60)
    assert sorted(seen) == committed
    assert extra is None or extra.error() is not None


def test_acks_all_times_out_while_an_isr_member_does_not_fetch(cluster: KafkaCluster) -> None:
    """The delayed produce answers REQUEST_TIMED_OUT at the request's timeout when the
    ISR has not reached the batch (a follower frozen with SIGSTOP, still in the ISR)."""
    topic = f"stalled-{_uid()}"
    cluster.create_topic(topic)
    leader = cluster.partition(topic).leader
    frozen = next(n for n in cluster.nodes if n.node_id != leader)
    assert frozen.proc is not None
    os.kill(frozen.proc.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        assert _produce_error(cluster, leader, topic, acks=-1, timeout_ms=1000) == 7
        assert 0.9 < time.monotonic() - began < 5
        assert _produce_error(cluster, leader, topic, acks=1) == 0
    finally:
        os.kill(frozen.proc.pid, signal.SIGCONT)
    cluster.wait_until(
        lambda: frozen.node_id in cluster.partition(topic, 0, cluster.node(leader)).isrs,
        30.0,
        f"broker {frozen.node_id} back in the ISR",
    )
