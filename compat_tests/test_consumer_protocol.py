"""The consumer group protocol (KIP-848) against a real broker, with librdkafka's
`group.protocol=consumer`: server-side assignment, incremental rebalances, fencing by
session timeout, topic changes, and groups, epochs and offsets across a restart."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from compat_tests.broker_process import BrokerProcess, running_broker
from compat_tests.confluent_helpers import (
    create_topic,
    exclusive_cover,
    owned,
    poll_until,
    produce_all,
    unique_group,
    unique_topic,
)

pytestmark = pytest.mark.timeout(120)

# Fast heartbeats and a short session keep rebalances and fencing to a few seconds.
SESSION_MS = 3000
CONSUMER_PROTOCOL_SETTINGS = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "1000",
}

# The same, as broker_factory.start takes them.
KWARG_SETTINGS = {k.replace(".", "_"): v for k, v in CONSUMER_PROTOCOL_SETTINGS.items()}


@pytest.fixture(scope="module")
def kip848_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(
        tmp_path_factory.mktemp("kip848-broker"), CONSUMER_PROTOCOL_SETTINGS
    ) as node:
        yield node


def member(bootstrap: str, group: str, **conf: Any) -> Consumer:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    settings.update(conf)
    return Consumer(settings)


@contextmanager
def covering_group(
    broker: BrokerProcess, partitions: int, members: int
) -> Iterator[tuple[str, str, list[Consumer]]]:
    """A new topic of `partitions` and a new group of `members` consumers (client ids
    reader-0, reader-1...) subscribed to it, given once each partition is owned by
    exactly one of them: (topic, group, consumers). Those still in the list are closed
    on leaving."""
    topic, group = unique_topic(), unique_group("cg")
    create_topic(broker.bootstrap, topic, partitions)
    consumers = [
        member(broker.bootstrap, group, **{"client.id": f"reader-{i}"}) for i in range(members)
    ]
    try:
        for c in consumers:
            c.subscribe([topic])
        poll_until(consumers, lambda: exclusive_cover(consumers, partitions))
        yield topic, group, consumers
    finally:
        for c in consumers:
            c.close()


def test_three_members_own_each_of_six_partitions_exactly_once(kip848_broker: BrokerProcess):
    with covering_group(kip848_broker, 6, 3) as (_, _, consumers):
        assert sorted(len(owned(c)) for c in consumers) == [2, 2, 2]


def test_closed_member_partitions_move_to_the_others(kip848_broker: BrokerProcess):
    with covering_group(kip848_broker, 6, 3) as (_, _, consumers):
        consumers.pop().close()  # a leave heartbeat: no session timeout to wait for
        took = poll_until(consumers, lambda: exclusive_cover(consumers, 6))
        assert took < SESSION_MS / 1000


KILLED_MEMBER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer", "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
told = False
while True:
    c.poll(0.05)
    if c.assignment() and not told:
        print("assigned", flush=True)
        told = True
"""


def test_killed_member_partitions_move_after_the_session_timeout(kip848_broker: BrokerProcess):
    bootstrap = kip848_broker.bootstrap
    topic = unique_topic()
    create_topic(bootstrap, topic, 6)
    group = unique_group("cg")
    survivor = member(bootstrap, group)
    doomed = subprocess.Popen(
        [sys.executable, "-c", KILLED_MEMBER, bootstrap, group, topic], stdout=subprocess.PIPE
    )
    try:
        assert doomed.stdout is not None
        assert doomed.stdout.readline().strip() == b"assigned"
        survivor.subscribe([topic])
        poll_until([survivor], lambda: len(owned(survivor)) == 3)
        doomed.kill()  # no leave heartbeat: only the session timeout tells
        doomed.wait(10)
        took = poll_until([survivor], lambda: owned(survivor) == set(range(6)))
        assert took >= SESSION_MS / 1000 - 1.0
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
        survivor.close()


def test_added_partitions_are_assigned_to_the_group(kip848_broker: BrokerProcess):
    with covering_group(kip848_broker, 2, 2) as (topic, _, consumers):
        admin = AdminClient({"bootstrap.servers": kip848_broker.bootstrap})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(15)
        poll_until(consumers, lambda: exclusive_cover(consumers, 4))


def test_regex_subscription_follows_topics_created_later(kip848_broker: BrokerProcess):
    bootstrap = kip848_broker.bootstrap
    prefix = f"rx{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, f"{prefix}-a", 1)
    consumer = member(bootstrap, unique_group("cg"))
    try:
        consumer.subscribe([f"^{prefix}-.*"])
        poll_until(
            [consumer], lambda: {tp.topic for tp in consumer.assignment()} == {f"{prefix}-a"}
        )
        create_topic(bootstrap, f"{prefix}-b", 2)
        poll_until(
            [consumer],
            lambda: (
                {(tp.topic, tp.partition) for tp in consumer.assignment()}
                == {(f"{prefix}-a", 0), (f"{prefix}-b", 0), (f"{prefix}-b", 1)}
            ),
        )
    finally:
        consumer.close()


def read(consumer: Consumer, count: int, timeout: float = 20.0) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    return values


def test_committed_offsets_and_the_group_survive_a_broker_restart(broker_factory: Any):
    node = broker_factory.start(**KWARG_SETTINGS)
    bootstrap = node.bootstrap
    topic = unique_topic()
    create_topic(bootstrap, topic, 2)
    produce_all(bootstrap, topic, ({"value": b"%d" % i, "partition": i % 2} for i in range(20)))
    group = unique_group("cg")
    first = member(bootstrap, group, **{"max.poll.interval.ms": 10_000})
    first.subscribe([topic])
    try:
        poll_until([first], lambda: owned(first) == {0, 1})
        consumed = read(first, 20)
        assert len(consumed) == 20
        first.commit(asynchronous=False)
        epoch = _group_epoch(bootstrap, group)
    finally:
        first.close()

    node.restart()
    produce_all(bootstrap, topic, ({"value": b"new-%d" % i, "partition": i % 2} for i in range(4)))
    assert _group_epoch(bootstrap, group) >= epoch  # the group came back from the log
    second = member(bootstrap, group)
    second.subscribe([topic])
    try:
        assert sorted(read(second, 4)) == [b"new-0", b"new-1", b"new-2", b"new-3"]
        assert second.poll(1.0) is None  # nothing before the committed offsets again
        committed = second.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        assert [tp.offset for tp in committed] == [10, 10]
    finally:
        second.close()


def test_member_keeps_its_epoch_across_a_broker_restart(broker_factory: Any):
    node = broker_factory.start(**KWARG_SETTINGS)
    bootstrap = node.bootstrap
    topic = unique_topic()
    create_topic(bootstrap, topic, 2)
    group = unique_group("cg")
    consumer = member(bootstrap, group)
    consumer.subscribe([topic])
    try:
        poll_until([consumer], lambda: owned(consumer) == {0, 1})
        (before,) = _members(bootstrap, group)
        node.restart(graceful=False)  # killed: only what reached the log is left
        produce_all(bootstrap, topic, ({"value": b"after", "partition": 1} for _ in range(3)))
        assert read(consumer, 3) == [b"after"] * 3
        (after,) = _members(bootstrap, group)
        assert after.member_id == before.member_id
        assert after.member_epoch == before.member_epoch
        restarted_log = node.log_text().split("===== start #2")[1]
        assert not re.search(rf"group {group}: member \S+ joins", restarted_log)
    finally:
        consumer.close()


def test_admin_client_lists_and_describes_the_group(kip848_broker: BrokerProcess):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    with covering_group(kip848_broker, 4, 2) as (_, group, _):
        admin = AdminClient({"bootstrap.servers": kip848_broker.bootstrap})
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(15).valid}
        assert listed[group].type == ConsumerGroupType.CONSUMER
        assert listed[group].state == ConsumerGroupState.STABLE
        description = admin.describe_consumer_groups([group])[group].result(15)
        assert description.type == ConsumerGroupType.CONSUMER
        assert description.partition_assignor == "uniform"
        assert sorted(m.client_id for m in description.members) == ["reader-0", "reader-1"]
        assigned = sorted(
            tp.partition for m in description.members for tp in m.assignment.topic_partitions
        )
        assert assigned == [0, 1, 2, 3]


def _members(bootstrap: str, group: str) -> list[Any]:
    """Members as ConsumerGroupDescribe reports them (id and epoch), via a raw request."""
    from kbroker.admin.client import cluster
    from kbroker.admin.groups import find_coordinator

    with cluster(bootstrap) as c:
        _, host, port = find_coordinator(c, group)
        response = c.connection(host, port).call(
            69, {"group_ids": [group], "include_authorized_operations": False}, (0, 1)
        )
    return list(response.groups[0].members)


def _group_epoch(bootstrap: str, group: str) -> int:
    from kbroker.admin.client import cluster
    from kbroker.admin.groups import describe_group

    with cluster(bootstrap) as c:
        description = describe_group(c, group)
    assert description.group_type == "consumer"
    return int(description.epoch or 0)


# -- KIP-848's online migration: classic consumers and consumer-protocol ones in one group


def classic_member(bootstrap: str, group: str, name: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "classic",
            "client.id": name,
            "heartbeat.interval.ms": 300,
            "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def _group_type(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(15).valid}
    return listed[group].type


def test_a_rolling_upgrade_from_classic_consumers_keeps_each_partition_owned_once(
    kip848_broker: BrokerProcess,
):
    """Classic consumers are replaced one at a time by consumer-protocol ones, as a
    deployment rolls: the first new member turns the group into a consumer group, the
    classic members still running follow the server-side assignment, and at every step
    each partition has exactly one owner."""
    from confluent_kafka import ConsumerGroupType

    bootstrap = kip848_broker.bootstrap
    topic, group = unique_topic(), unique_group("roll")
    create_topic(bootstrap, topic, 6)
    running = [classic_member(bootstrap, group, f"classic-{i}") for i in range(2)]
    try:
        for c in running:
            c.subscribe([topic])
        poll_until(running, lambda: exclusive_cover(running, 6))
        assert _group_type(bootstrap, group) == ConsumerGroupType.CLASSIC
        for step in range(2):
            newer = member(bootstrap, group, **{"client.id": f"consumer-{step}"})
            newer.subscribe([topic])
            running.append(newer)
            poll_until(running, lambda n=newer: exclusive_cover(running, 6) and bool(owned(n)))
            assert _group_type(bootstrap, group) == ConsumerGroupType.CONSUMER
            running.pop(0).close()  # the classic member it replaces leaves
            poll_until(running, lambda: exclusive_cover(running, 6))
        assert sorted(len(owned(c)) for c in running) == [3, 3]
        types = {m.client_id: m.member_type for m in _members(bootstrap, group)}
        assert types == {"consumer-0": 1, "consumer-1": 1}
    finally:
        for c in running:
            c.close()


def test_classic_members_of_a_consumer_group_commit_and_the_last_new_member_leaving_turns_it_classic(
    kip848_broker: BrokerProcess,
):
    """A classic member inside a consumer group commits its offsets with the generation
    it was given; when the only consumer-protocol member leaves, the group turns classic
    again and its classic members take every partition back."""
    from confluent_kafka import ConsumerGroupType

    bootstrap = kip848_broker.bootstrap
    topic, group = unique_topic(), unique_group("back")
    create_topic(bootstrap, topic, 4)
    classic = [classic_member(bootstrap, group, f"classic-{i}") for i in range(2)]
    newer = member(bootstrap, group, **{"client.id": "consumer-0"})
    try:
        for c in classic:
            c.subscribe([topic])
        poll_until(classic, lambda: exclusive_cover(classic, 4))
        newer.subscribe([topic])
        everyone = [*classic, newer]
        poll_until(everyone, lambda: exclusive_cover(everyone, 4) and bool(owned(newer)))
        types = {m.client_id: m.member_type for m in _members(bootstrap, group)}
        assert types == {"classic-0": 0, "classic-1": 0, "consumer-0": 1}
        mine = owned(classic[0])
        committed = classic[0].commit(
            offsets=[TopicPartition(topic, p, 1) for p in sorted(mine)], asynchronous=False
        )
        assert all(tp.error is None for tp in committed)
        newer.close()
        poll_until(
            classic,
            lambda: (
                exclusive_cover(classic, 4)
                and _group_type(bootstrap, group) == ConsumerGroupType.CLASSIC
            ),
        )
        stored = classic[1].committed([TopicPartition(topic, p) for p in sorted(mine)], timeout=10)
        assert [tp.offset for tp in stored] == [1] * len(mine)
    finally:
        for c in classic:
            c.close()
