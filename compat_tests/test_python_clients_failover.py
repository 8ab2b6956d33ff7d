"""kafka-python and aiokafka on a 3-node cluster whose nodes are killed (kill -9) under
them, as a team running these clients meets a broker failure:

- an idempotent producer (acks=all) sending while its partition's leader is killed has
  every record acknowledged, and each is stored once, in the order sent;
- a group member committing as it reads goes on after its group coordinator is killed,
  and what it committed is where the group starts again.

The single-node modules (test_kafka_python.py, test_aiokafka.py) cover the clients'
features; this one covers their failover against kbroker's leader elections and
coordinator moves. The cluster is shared by the module; each test restarts what it
killed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from compat_tests.cluster import KafkaCluster
from compat_tests.confluent_helpers import produce_all, unique_topic, watermarks
from compat_tests.waiting import eventually

pytestmark = pytest.mark.timeout(240)

RECORDS = 400
KILL_AFTER = 200  # records acknowledged before the leader is killed
GROUP_RECORDS = 200
PARTITIONS = 2


@pytest.fixture
def healed(cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    try:
        yield cluster
    finally:
        cluster.heal()


def _topic_with_full_isr(cluster: KafkaCluster, prefix: str, partitions: int) -> str:
    topic = unique_topic(prefix)
    cluster.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})
    cluster.wait_for_full_isr(topic)
    return topic


def _filled_topic(cluster: KafkaCluster, prefix: str) -> str:
    """A topic of PARTITIONS partitions holding GROUP_RECORDS values b"0", b"1", ..."""
    topic = _topic_with_full_isr(cluster, prefix, PARTITIONS)
    produce_all(
        cluster.bootstrap,
        topic,
        ({"value": b"%d" % i, "partition": i % PARTITIONS} for i in range(GROUP_RECORDS)),
        acks="all",
    )
    return topic


def _assert_stored_once_in_order(cluster: KafkaCluster, topic: str) -> None:
    """The partition holds 0..RECORDS-1 once each, in the order sent."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []

        def read_all() -> bool:
            for batch in consumer.poll(timeout_ms=200).values():
                values.extend(r.value for r in batch)
            return len(values) >= RECORDS

        eventually(read_all, timeout=60, what=f"{RECORDS} records of {topic}")
    finally:
        consumer.close(autocommit=False)
    assert values == [b"%d" % i for i in range(RECORDS)]
    assert watermarks(cluster.bootstrap, topic)[1] == RECORDS  # nothing stored twice


def _assert_group_done(cluster: KafkaCluster, topic: str, group: str) -> None:
    """The group committed every partition's end: a new member has nothing left to read."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False
    )
    try:
        for partition in range(PARTITIONS):
            committed = eventually(
                lambda p=partition: consumer.committed(KafkaTopicPartition(topic, p)),
                timeout=30,
                what=f"{group}'s committed offset of {topic}-{partition}",
            )
            assert committed == watermarks(cluster.bootstrap, topic, partition)[1]
    finally:
        consumer.close(autocommit=False)


# -- kafka-python ---------------------------------------------------------------------


def test_kafka_python_idempotent_producer_loses_and_repeats_nothing_when_its_leader_is_killed(
    healed: KafkaCluster,
) -> None:
    cluster = healed
    topic = _topic_with_full_isr(cluster, "kp-leader-kill", 1)
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
        for i in range(RECORDS):
            futures.append(producer.send(topic, value=b"%d" % i, partition=0))
            if i == KILL_AFTER - 1:
                producer.flush(timeout=30)
                cluster.kill(leader)
        producer.flush(timeout=90)
        offsets = [f.get(timeout=1).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(RECORDS))
    assert cluster.partition(topic).leader not in (leader, -1)
    _assert_stored_once_in_order(cluster, topic)


def test_kafka_python_group_member_resumes_from_its_commits_when_its_coordinator_is_killed(
    healed: KafkaCluster,
) -> None:
    cluster = healed
    topic = _filled_topic(cluster, "kp-coord-kill")
    group = cluster.key_with_full_isr("kp-group")
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=20,
        request_timeout_ms=15000,
    )
    seen: list[bytes] = []
    killed = False
    try:

        def read_and_commit() -> bool:
            nonlocal killed
            batches = consumer.poll(timeout_ms=200)
            for batch in batches.values():
                seen.extend(r.value for r in batch)
            if batches:
                consumer.commit()  # retried by the client until a coordinator takes it
            if not killed and len(seen) >= GROUP_RECORDS // 2:
                cluster.kill_coordinator(group)
                killed = True
            return len(set(seen)) >= GROUP_RECORDS

        eventually(read_and_commit, timeout=120, what=f"{group} to read all of {topic}")
    finally:
        consumer.close(autocommit=False)
    assert killed
    assert set(seen) == {b"%d" % i for i in range(GROUP_RECORDS)}
    _assert_group_done(cluster, topic, group)


# -- aiokafka -------------------------------------------------------------------------


def test_aiokafka_idempotent_producer_loses_and_repeats_nothing_when_its_leader_is_killed(
    healed: KafkaCluster,
) -> None:
    cluster = healed
    topic = _topic_with_full_isr(cluster, "aio-leader-kill", 1)
    leader = cluster.partition(topic).leader

    async def produce() -> list[int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=10000,
        )
        await producer.start()
        try:
            futures = []
            for i in range(RECORDS):
                futures.append(await producer.send(topic, value=b"%d" % i, partition=0))
                if i == KILL_AFTER - 1:
                    await producer.flush()
                    cluster.kill(leader)
            sent = await asyncio.wait_for(asyncio.gather(*futures), timeout=90)
            return [m.offset for m in sent]
        finally:
            await producer.stop()

    assert asyncio.run(produce()) == list(range(RECORDS))
    assert cluster.partition(topic).leader not in (leader, -1)
    _assert_stored_once_in_order(cluster, topic)


def test_aiokafka_group_member_resumes_from_its_commits_when_its_coordinator_is_killed(
    healed: KafkaCluster,
) -> None:
    cluster = healed
    topic = _filled_topic(cluster, "aio-coord-kill")
    group = cluster.key_with_full_isr("aio-group")

    async def consume() -> tuple[list[bytes], bool]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=cluster.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=20,
            request_timeout_ms=15000,
        )
        await consumer.start()
        seen: list[bytes] = []
        killed = False
        try:

            async def read_and_commit() -> bool:
                nonlocal killed
                batches = await consumer.getmany(timeout_ms=200)
                for batch in batches.values():
                    seen.extend(r.value for r in batch)
                if batches:
                    await consumer.commit()
                if not killed and len(seen) >= GROUP_RECORDS // 2:
                    cluster.kill_coordinator(group)
                    killed = True
                return len(set(seen)) >= GROUP_RECORDS

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 120
            while not await read_and_commit():
                assert loop.time() < deadline, f"{group} read {len(set(seen))} of {topic}"
        finally:
            await consumer.stop()
        return seen, killed

    seen, killed = asyncio.run(consume())
    assert killed
    assert set(seen) == {b"%d" % i for i in range(GROUP_RECORDS)}
    _assert_group_done(cluster, topic, group)
