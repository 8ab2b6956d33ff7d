"""Consumer groups against a real broker: stock clients split, rebalance, commit, resume;
raw requests check the error codes a misbehaving member gets."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from compat_tests.broker_process import FAST_GROUP_SETTINGS, BrokerProcess, running_broker
from compat_tests.confluent_helpers import (
    create_topic,
    exclusive_cover,
    owned,
    poll_until,
    produce_all,
    unique_group,
    unique_topic,
)
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("groups-broker"), FAST_GROUP_SETTINGS) as node:
        yield node


def topic_with_records(bootstrap: str, partitions: int, per_partition: int) -> str:
    topic = unique_topic()
    create_topic(bootstrap, topic, partitions)
    produce_all(
        bootstrap,
        topic,
        (
            {"value": f"{p}-{i}".encode(), "partition": p}
            for p in range(partitions)
            for i in range(per_partition)
        ),
    )
    return topic


# -- confluent-kafka -------------------------------------------------------------------------


def group_consumer(bootstrap: str, group: str, **conf: Any) -> Consumer:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
    }
    settings.update(conf)
    return Consumer(settings)


def test_three_consumers_own_each_of_six_partitions_exactly_once(group_broker: BrokerProcess):
    bootstrap = group_broker.bootstrap
    topic = topic_with_records(bootstrap, 6, 1)
    group = unique_group()
    consumers = [group_consumer(bootstrap, group) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic])
        poll_until(consumers, lambda: exclusive_cover(consumers, 6))
        assert all(len(owned(c)) == 2 for c in consumers)
        consumers.pop().close()  # LeaveGroup: the other two take its partitions over
        poll_until(consumers, lambda: exclusive_cover(consumers, 6))
    finally:
        for c in consumers:
            c.close()


def test_cooperative_sticky_consumers_split_partitions(group_broker: BrokerProcess):
    bootstrap = group_broker.bootstrap
    topic = topic_with_records(bootstrap, 4, 1)
    group = unique_group()
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    consumers = [group_consumer(bootstrap, group, **conf) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])
        poll_until(consumers, lambda: exclusive_cover(consumers, 4))
    finally:
        for c in consumers:
            c.close()


CRASHING_MEMBER = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "session.timeout.ms": 2000, "heartbeat.interval.ms": 300})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
    if c.assignment():
        print("assigned", flush=True)
"""


def test_partitions_of_a_crashed_member_move_after_its_session_expires(
    group_broker: BrokerProcess,
):
    bootstrap = group_broker.bootstrap
    topic = topic_with_records(bootstrap, 4, 1)
    group = unique_group()
    survivor = group_consumer(bootstrap, group, **{"session.timeout.ms": 2000})
    crasher = subprocess.Popen(
        [sys.executable, "-c", CRASHING_MEMBER, bootstrap, group, topic],
        stdout=subprocess.PIPE,
    )
    try:
        assert crasher.stdout is not None
        assert crasher.stdout.readline().strip() == b"assigned"
        survivor.subscribe([topic])
        poll_until([survivor], lambda: len(owned(survivor)) == 2)
        crasher.kill()  # no LeaveGroup: only the session timeout notices
        crasher.wait(10)
        poll_until([survivor], lambda: owned(survivor) == {0, 1, 2, 3})
    finally:
        if crasher.poll() is None:
            crasher.kill()
            crasher.wait(10)
        survivor.close()


def test_static_member_restarting_within_its_session_keeps_its_partitions(
    group_broker: BrokerProcess,
):
    bootstrap = group_broker.bootstrap
    topic = topic_with_records(bootstrap, 4, 1)
    group = unique_group()
    assigned: list[set[int]] = []

    def static(instance: str, **conf: Any) -> Consumer:
        return group_consumer(bootstrap, group, **{"group.instance.id": instance}, **conf)

    steady = static("steady")
    steady.subscribe(
        [topic], on_assign=lambda c, parts: assigned.append({p.partition for p in parts})
    )
    restarting = static("restarting")
    restarting.subscribe([topic])
    poll_until(
        [steady, restarting],
        lambda: owned(steady) and owned(restarting) and len(owned(steady) | owned(restarting)) == 4,
    )
    before = owned(restarting)
    rounds = len(assigned)
    restarting.close()  # a static member does not leave the group on close
    replacement = static("restarting")
    try:
        replacement.subscribe([topic])
        poll_until([steady, replacement], lambda: owned(replacement) == before)
        for _ in range(10):
            steady.poll(0.05)
        assert len(assigned) == rounds  # the steady member saw no rebalance
    finally:
        replacement.close()
        steady.close()


def read_values(consumer: Consumer, count: int, timeout: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        assert message.error() is None, message.error()
        got.append(message)
    assert len(got) == count, f"read {len(got)} of {count}"
    return got


def test_committed_offsets_survive_a_restart(broker_factory: Any):
    node = broker_factory.start_with(dict(FAST_GROUP_SETTINGS))
    bootstrap = node.bootstrap
    topic = topic_with_records(bootstrap, 1, 20)
    group = unique_group()
    first = group_consumer(bootstrap, group)
    first.subscribe([topic])
    messages = read_values(first, 12)
    first.commit(message=messages[9], asynchronous=False)  # commits offset 10
    first.close()

    node.stop()
    node.start()

    second = group_consumer(bootstrap, group)
    try:
        committed = second.committed([TopicPartition(topic, 0)], timeout=15)
        assert committed[0].offset == 10
        second.subscribe([topic])
        resumed = read_values(second, 10)
        assert [m.offset() for m in resumed] == list(range(10, 20))
    finally:
        second.close()


def test_describe_and_list_show_a_stable_group(group_broker: BrokerProcess):
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    bootstrap = group_broker.bootstrap
    topic = topic_with_records(bootstrap, 2, 1)
    group = unique_group()
    consumer = group_consumer(bootstrap, group)
    try:
        consumer.subscribe([topic])
        poll_until([consumer], lambda: owned(consumer) == {0, 1})
        admin = AdminClient({"bootstrap.servers": bootstrap})
        listed = admin.list_consumer_groups().result(timeout=15)
        assert (group, ConsumerGroupState.STABLE) in {(g.group_id, g.state) for g in listed.valid}
        described = admin.describe_consumer_groups([group])[group].result(timeout=15)
        assert described.state == ConsumerGroupState.STABLE
        assert described.partition_assignor == "range"
        (member,) = described.members
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
    finally:
        consumer.close()


def test_delete_group_after_its_members_leave(group_broker: BrokerProcess):
    from confluent_kafka.admin import AdminClient

    bootstrap = group_broker.bootstrap
    topic = topic_with_records(bootstrap, 1, 3)
    group = unique_group()
    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic])
    read_values(consumer, 3)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
        admin.delete_consumer_groups([group])[group].result(timeout=15)
    consumer.close()
    admin.delete_consumer_groups([group])[group].result(timeout=15)
    listed = admin.list_consumer_groups().result(timeout=15)
    assert group not in {g.group_id for g in listed.valid}


# -- kafka-python ----------------------------------------------------------------------------

# group_consumer's settings in the names kafka-python and aiokafka share.
GROUP_MEMBER = {
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 300,
}


class KafkaPythonPoller(threading.Thread):
    """Drives one kafka-python consumer in its own thread, as an application would: a
    consumer blocked in a rebalance must not keep another from rejoining."""

    def __init__(self, consumer: Any) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer
        self.seen: dict[int, int] = {}
        self.stop = threading.Event()
        self.commit_wanted = threading.Event()
        self.committed = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                # A poll shorter than a rebalance can leave kafka-python 3.0's leader
                # half-joined (no heartbeats) when the join completes after the poll
                # returned; a poll long enough to span the join avoids that client race.
                for tp, records in self.consumer.poll(2000).items():
                    self.seen[tp.partition] = self.seen.get(tp.partition, 0) + len(records)
                if self.commit_wanted.is_set() and not self.committed.is_set():
                    self.consumer.commit()
                    self.committed.set()
        finally:
            self.consumer.close()

    def partitions(self) -> set[int]:
        return {tp.partition for tp in set(self.consumer.assignment())}


def test_kafka_python_group_splits_commits_and_resumes(group_broker: BrokerProcess):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    bootstrap = group_broker.bootstrap
    topic = topic_with_records(bootstrap, 2, 5)
    group = unique_group()

    def consumer() -> KafkaConsumer:
        return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_MEMBER)

    a, b = KafkaPythonPoller(consumer()), KafkaPythonPoller(consumer())
    a.start()
    b.start()
    try:
        eventually(
            lambda: a.partitions() and b.partitions() and a.partitions() | b.partitions() == {0, 1},
            timeout=30,
            what="a partition for each member",
        )
        eventually(
            lambda: sum(a.seen.values()) + sum(b.seen.values()) == 10,
            timeout=30,
            what="the 10 records read",
        )
        assert sorted([*a.seen, *b.seen]) == [0, 1]  # each partition read by one member
        for poller in (a, b):
            poller.commit_wanted.set()
        eventually(
            lambda: a.committed.is_set() and b.committed.is_set(), timeout=30, what="both commits"
        )
        b.stop.set()
        b.join(15)  # b leaves: a takes both partitions
        eventually(lambda: a.partitions() == {0, 1}, timeout=30, what="a to take both partitions")
    finally:
        for poller in (a, b):
            poller.stop.set()
            poller.join(15)

    resumed = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        assert resumed.committed(KTopicPartition(topic, 0)) == 5
        assert resumed.committed(KTopicPartition(topic, 1)) == 5
    finally:
        resumed.close()


# -- aiokafka --------------------------------------------------------------------------------


def test_aiokafka_group_consumes_commits_and_resumes(group_broker: BrokerProcess):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    bootstrap = group_broker.bootstrap
    topic = topic_with_records(bootstrap, 2, 4)
    group = unique_group()

    async def run() -> None:
        def make() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_MEMBER
            )

        first = make()
        await first.start()
        try:
            got = []
            async with asyncio.timeout(30):
                while len(got) < 8:
                    batch = await first.getmany(timeout_ms=500)
                    got.extend(m for ms in batch.values() for m in ms)
            await first.commit()
        finally:
            await first.stop()
        second = make()
        await second.start()
        try:
            for p in (0, 1):
                assert await second.committed(ATopicPartition(topic, p)) == 4
        finally:
            await second.stop()

    asyncio.run(run())


# -- raw requests: the error codes ----------------------------------------------------------

UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
INVALID_GROUP_ID = 24
MEMBER_ID_REQUIRED = 79
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27


def join(
    client: BrokerConnection, group: str, member_id: str = "", session_ms: int = 10_000
) -> Any:
    import datetime

    from kio.schema.join_group.v7.request import JoinGroupRequestProtocol

    return client.request(
        11,
        7,
        group_id=group,
        session_timeout=datetime.timedelta(milliseconds=session_ms),
        rebalance_timeout=datetime.timedelta(milliseconds=10_000),
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00"),),
    )


@pytest.fixture
def member(group_broker: BrokerProcess) -> Iterator[tuple[BrokerConnection, str, Any]]:
    """A raw client that joined a fresh group and holds its join answer."""
    client = BrokerConnection.to(group_broker.bootstrap, timeout=15)
    group = unique_group()
    client.request(10, 3, key=group, key_type=0)
    first = join(client, group)
    assert first.error_code == MEMBER_ID_REQUIRED
    joined = join(client, group, first.member_id)
    assert joined.error_code == 0
    try:
        yield client, group, joined
    finally:
        client.close()


def test_heartbeat_with_wrong_generation_is_illegal_generation(member):
    client, group, joined = member
    response = client.request(
        12, 4, group_id=group, generation_id=joined.generation_id + 5, member_id=joined.member_id
    )
    assert response.error_code == ILLEGAL_GENERATION


def test_heartbeat_from_unknown_member_is_unknown_member_id(member):
    client, group, joined = member
    response = client.request(
        12, 4, group_id=group, generation_id=joined.generation_id, member_id="stranger"
    )
    assert response.error_code == UNKNOWN_MEMBER_ID


def test_offset_commit_with_wrong_generation_is_illegal_generation(member, group_broker):
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )

    client, group, joined = member
    topic = unique_topic()
    create_topic(group_broker.bootstrap, topic)
    response = client.request(
        8,
        8,
        group_id=group,
        generation_id_or_member_epoch=joined.generation_id + 1,
        member_id=joined.member_id,
        group_instance_id=None,
        topics=(
            OffsetCommitRequestTopic(
                name=topic,
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=1,
                        committed_leader_epoch=-1,
                        committed_metadata=None,
                    ),
                ),
            ),
        ),
    )
    assert response.topics[0].partitions[0].error_code == ILLEGAL_GENERATION


def test_sync_with_wrong_generation_is_illegal_generation(member):
    client, group, joined = member
    response = client.request(
        14,
        5,
        group_id=group,
        generation_id=joined.generation_id - 1,
        member_id=joined.member_id,
        group_instance_id=None,
        # v5 requires both (Kafka answers INCONSISTENT_GROUP_PROTOCOL without them)
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )
    assert response.error_code == ILLEGAL_GENERATION


def test_huge_group_id_is_invalid_group_id(group_broker: BrokerProcess):
    client = BrokerConnection.to(group_broker.bootstrap, timeout=15)
    try:
        assert join(client, "g" * 40_000).error_code == INVALID_GROUP_ID
    finally:
        client.close()


def test_empty_group_id_is_invalid_group_id(group_broker: BrokerProcess):
    client = BrokerConnection.to(group_broker.bootstrap, timeout=15)
    try:
        assert join(client, "").error_code == INVALID_GROUP_ID
    finally:
        client.close()


def test_session_timeout_below_the_minimum_is_invalid(group_broker: BrokerProcess):
    client = BrokerConnection.to(group_broker.bootstrap, timeout=15)
    try:
        assert join(client, unique_group(), session_ms=10).error_code == INVALID_SESSION_TIMEOUT
    finally:
        client.close()


def test_find_coordinator_names_this_broker_for_a_batch_of_groups(group_broker: BrokerProcess):
    client = BrokerConnection.to(group_broker.bootstrap, timeout=15)
    try:
        response = client.request(10, 4, key_type=0, coordinator_keys=("a", "b"))
        assert [(c.key, c.error_code, c.port) for c in response.coordinators] == [
            ("a", 0, group_broker.port),
            ("b", 0, group_broker.port),
        ]
    finally:
        client.close()


def test_heartbeat_for_a_group_that_does_not_exist_is_unknown_member_id(
    group_broker: BrokerProcess,
):
    client = BrokerConnection.to(group_broker.bootstrap, timeout=15)
    try:
        group = unique_group()
        client.request(10, 3, key=group, key_type=0)
        response = client.request(12, 4, group_id=group, generation_id=1, member_id="nobody")
        assert response.error_code == UNKNOWN_MEMBER_ID
    finally:
        client.close()


def test_join_with_a_megabyte_of_protocol_metadata_is_served_and_the_group_still_works(
    group_broker: BrokerProcess,
):
    import datetime

    from kio.schema.join_group.v7.request import JoinGroupRequestProtocol

    client = BrokerConnection.to(group_broker.bootstrap, timeout=15)
    try:
        group = unique_group()
        client.request(10, 3, key=group, key_type=0)
        fields = {
            "group_id": group,
            "session_timeout": datetime.timedelta(milliseconds=10_000),
            "rebalance_timeout": datetime.timedelta(milliseconds=10_000),
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": (JoinGroupRequestProtocol(name="range", metadata=b"\x00" * (1 << 20)),),
        }
        first = client.request(11, 7, member_id="", **fields)
        assert first.error_code == MEMBER_ID_REQUIRED
        joined = client.request(11, 7, member_id=first.member_id, **fields)
        assert joined.error_code == 0
        assert len(joined.members[0].metadata) == 1 << 20  # the leader gets it back whole
        beat = client.request(
            12, 4, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id
        )
        assert beat.error_code in (0, REBALANCE_IN_PROGRESS)
    finally:
        client.close()
