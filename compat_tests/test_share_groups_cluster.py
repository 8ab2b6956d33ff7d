"""Share groups (KIP-932) on a 3-node cluster, as Kafka serves them: ShareGroupHeartbeat
to the group coordinator, ShareFetch/ShareAcknowledge to the data partition's leader
(NOT_LEADER_OR_FOLLOWER elsewhere), the share-partition's state stored by its share
coordinator in the replicated `__share_group_state`; and kill -9 of the data partition's
leader mid-run: nothing acknowledged comes back, nothing unacknowledged is lost."""

from __future__ import annotations

import base64
import json
import subprocess
import time

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from compat_tests.broker_process import free_port, kbroker_command
from compat_tests.cluster import KafkaCluster, running_cluster
from compat_tests.confluent_helpers import (
    admin_client,
    produce_all,
    read_until_quiet,
    unique_group,
    unique_topic,
    watermarks,
)
from compat_tests.metrics_scrape import scrape, value
from compat_tests.test_share_groups import DLQ_GROUP_ENABLE, SHORT_LOCKS, set_group_configs
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection

pytestmark = pytest.mark.timeout(180)

GROUP_KEY, SHARE_KEY = 0, 2
UNSTORED = "kbroker_share_partition_unstored_states"


@pytest.fixture(scope="module")
def share_cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    # A share session outlasts a broker's restart and its catching up. Each node serves
    # /metrics, where `kbroker groups` reads a share-partition leader's in-flight count.
    settings = {**SHORT_LOCKS, "group.share.session.timeout.ms": "30000"}
    http = {i: {"http.listeners": f"http://127.0.0.1:{free_port()}"} for i in (1, 2, 3)}
    with running_cluster(
        tmp_path_factory.mktemp("share-cluster"), overrides=settings, node_overrides=http
    ) as c:
        yield c


def _wire(node):  # type: ignore[no-untyped-def]
    return BrokerConnection(node.host, node.port, 10.0, "share-cluster").negotiate()


def _coordinator(cluster: KafkaCluster, key: str, key_type: int = GROUP_KEY) -> int:
    def found() -> int | None:
        code, node = cluster.find_coordinator(key, key_type, version=6)
        return node if code == 0 else None

    return cluster.wait_until(found, 20, f"a coordinator for {key}")


def _queue_away_from_its_coordinator(
    cluster: KafkaCluster, count: int
) -> tuple[str, str, int, int]:
    """An RF=3 topic holding `count` records and a share group reading it from the
    earliest offset, the group's coordinator another broker than the partition's leader:
    (topic, group, data leader, group coordinator)."""
    topic = unique_topic("share-cl")
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    leader = cluster.wait_until(
        lambda: cluster.partition(topic).leader if cluster.partition(topic).leader > 0 else None,
        15,
        "a leader",
    )
    while True:
        group = unique_group("share-cl")
        coordinator = _coordinator(cluster, group)
        if coordinator != leader:
            break
    set_group_configs(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    if count:
        produce_all(
            cluster.bootstrap, topic, ({"value": str(i).encode()} for i in range(count)), acks="all"
        )
    return topic, group, leader, coordinator


def _share_consumer(cluster: KafkaCluster, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe([topic])
    return consumer


def test_share_requests_go_to_the_group_coordinator_and_the_partition_leader(share_cluster):  # type: ignore[no-untyped-def]
    cluster = share_cluster
    topic, group, leader, coordinator = _queue_away_from_its_coordinator(cluster, 10)
    topic_id = cluster.raw_metadata(topic).topics[0].topic_id
    elsewhere = next(n for n in cluster.live_nodes if n.node_id not in (leader, coordinator))
    heartbeat = {
        "group_id": group,
        "member_id": "member-a",
        "member_epoch": 0,
        "rack_id": None,
        "subscribed_topic_names": [topic],
    }
    with _wire(elsewhere) as conn:
        assert int(conn.request(76, 1, **heartbeat).error_code) == 16  # NOT_COORDINATOR
        described = conn.request(77, 1, group_ids=[group], include_authorized_operations=False)
        assert int(described.groups[0].error_code) == 16
    with _wire(cluster.node(coordinator)) as conn:
        joined = conn.request(76, 1, **heartbeat)
        assert int(joined.error_code) == 0
        assert joined.assignment.topic_partitions[0].topic_id == topic_id
    fetch = {
        "group_id": group,
        "member_id": "member-a",
        "share_session_epoch": 0,
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": 100,
        "batch_size": 100,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0}]}],
        "forgotten_topics_data": [],
    }
    with _wire(cluster.node(coordinator)) as conn:
        refused = conn.request(78, 1, **fetch).responses[0].partitions[0]
        assert int(refused.error_code) == 6  # NOT_LEADER_OR_FOLLOWER, naming the leader
        assert int(refused.current_leader.leader_id) == leader
    with _wire(cluster.node(leader)) as conn:
        # The first fetch may end before the share coordinator (its partition of the new
        # `__share_group_state` just elected) answers: nothing acquired yet, no error.
        acquired = []
        for epoch in range(20):
            fetched = conn.request(78, 1, **{**fetch, "share_session_epoch": epoch})
            part = fetched.responses[0].partitions[0]
            assert int(fetched.error_code) == 0 and int(part.error_code) == 0
            acquired += [(r.first_offset, r.last_offset) for r in part.acquired_records]
            if acquired:
                break
        assert acquired == [(0, 9)]
    # The share coordinator of the share-partition, by Kafka's key "group:topicId:partition".
    key = f"{group}:{base64.urlsafe_b64encode(topic_id.bytes).rstrip(b'=').decode()}:0"
    assert _coordinator(cluster, key, SHARE_KEY) in {n.node_id for n in cluster.live_nodes}


class KilledMidRun:
    """What a worker consumed and acknowledged (and when) while brokers were killed, and
    what a second consumer held, never acknowledging it."""

    def __init__(self) -> None:
        self.consumed: list[tuple[float, int]] = []
        self.acknowledged: dict[int, float] = {}  # offset -> when its commit succeeded
        self.held: dict[int, int] = {}  # offset -> delivery count, as the holder got it
        self.redelivered: dict[int, int] = {}  # the held ones, as the worker got them
        self.kills = 0

    def check(self, total: int) -> None:
        assert self.kills, "no broker was killed"
        again = [o for t, o in self.consumed if o in self.acknowledged and t > self.acknowledged[o]]
        assert not again, f"acknowledged, then delivered again: {sorted(set(again))[:10]}"
        missing = set(range(total)) - set(self.acknowledged)
        assert not missing, sorted(missing)[:10]
        assert set(self.held) <= set(self.redelivered)
        assert all(count >= 2 for count in self.redelivered.values()), self.redelivered


def _consume_through_a_kill(
    cluster: KafkaCluster, topic: str, group: str, victim: int, total: int
) -> KilledMidRun:
    """Consume `total` records, acknowledging each; kill -9 the victim after a third."""
    run = KilledMidRun()
    holder = _share_consumer(cluster, group, topic)  # takes records, never acknowledges them
    worker = _share_consumer(cluster, group, topic)

    def work(until: float, stop: int) -> None:
        while len(run.acknowledged) < stop and time.monotonic() < until:
            batch = []
            for message in worker.poll(0.3):
                if message.error() is not None:
                    continue
                run.consumed.append((time.monotonic(), message.offset()))
                if message.offset() in run.held:
                    run.redelivered[message.offset()] = message.delivery_count()
                worker.acknowledge(message)
                batch.append(message.offset())
            if batch and all(e is None for e in worker.commit_sync(5).values()):
                run.acknowledged.update(dict.fromkeys(batch, time.monotonic()))

    try:
        deadline = time.monotonic() + 20
        while not run.held and time.monotonic() < deadline:
            run.held = {
                m.offset(): m.delivery_count() for m in holder.poll(0.5) if m.error() is None
            }
        assert run.held and set(run.held.values()) == {1}
        work(time.monotonic() + 20, total // 3)
        # The acquisitions of the last fetch are stored too before the kill: the victim's
        # /metrics counts the share-partitions it has not yet stored.
        http = cluster.node(victim).overrides["http.listeners"].removeprefix("http://")
        eventually(
            lambda: value(scrape(http), UNSTORED) == 0,
            timeout=20,
            what=f"node {victim} storing every share-partition's state",
        )
        cluster.kill(victim)
        run.kills += 1
        # The held records come back (with the old leader's lock gone, or their own lock
        # run out), their first delivery counted.
        work(time.monotonic() + 40, total)
    finally:
        worker.close()
        del holder  # never closed: as if it died holding its records
        cluster.heal()
    return run


def test_killing_the_partition_leader_loses_no_acknowledgement_and_no_record(share_cluster):  # type: ignore[no-untyped-def]
    total = 3000
    topic, group, leader, _ = _queue_away_from_its_coordinator(share_cluster, total)
    _consume_through_a_kill(share_cluster, topic, group, leader, total).check(total)


def test_killing_the_share_coordinator_loses_no_acknowledgement_and_no_record(share_cluster):  # type: ignore[no-untyped-def]
    """The leader of the share-partition's `__share_group_state` partition dies; the data
    partition's leader (another broker) stores its states at the new one."""
    cluster = share_cluster
    total = 3000
    topic, group, leader, coordinator = _queue_away_from_its_coordinator(cluster, total)
    topic_id = cluster.raw_metadata(topic).topics[0].topic_id
    encoded = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    for _ in range(60):  # a group whose share coordinator is not the partition's leader
        share = _coordinator(cluster, f"{group}:{encoded}:0", SHARE_KEY)
        if coordinator != leader and share != leader:
            break
        group = unique_group("share-cl")
        coordinator = _coordinator(cluster, group)
    else:
        pytest.fail("no group had its share coordinator apart from the partition's leader")
    set_group_configs(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    _consume_through_a_kill(cluster, topic, group, share, total).check(total)


def _start_offsets(conn, group: str) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    found = conn.request(90, 1, groups=[{"group_id": group, "topics": None}]).groups[0]
    assert int(found.error_code) == 0
    return {
        (t.topic_name, int(p.partition_index)): int(p.start_offset)
        for t in found.topics
        for p in t.partitions
        if int(p.start_offset) >= 0
    }


def _consume_and_acknowledge(
    cluster: KafkaCluster, group: str, topic: str, count: int
) -> list[int]:
    consumer = _share_consumer(cluster, group, topic)
    offsets: list[int] = []
    deadline = time.monotonic() + 20
    try:
        while len(offsets) < count and time.monotonic() < deadline:
            batch = [m for m in consumer.poll(0.5) if m.error() is None]
            for message in batch:
                consumer.acknowledge(message)
            if batch and all(e is None for e in consumer.commit_sync(5).values()):
                offsets += [m.offset() for m in batch]
    finally:
        consumer.close()
    return sorted(offsets)


def test_share_group_offsets_are_described_altered_and_deleted_at_share_coordinators_elsewhere(
    share_cluster,
):  # type: ignore[no-untyped-def]
    """The group's coordinator is neither the partition's leader nor the share-partition's
    share coordinator: the admin APIs reach the stored state, and the leader holding it
    reads it again once a new share session opens."""
    cluster = share_cluster
    topic, group, leader, coordinator = _queue_away_from_its_coordinator(cluster, 20)
    topic_id = cluster.raw_metadata(topic).topics[0].topic_id
    encoded = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    for _ in range(60):
        share = _coordinator(cluster, f"{group}:{encoded}:0", SHARE_KEY)
        if coordinator not in (leader, share):
            break
        group = unique_group("share-cl")
        coordinator = _coordinator(cluster, group)
    else:
        pytest.fail("no group had its coordinator apart from its states and partition")
    set_group_configs(cluster.bootstrap, group, share_auto_offset_reset="earliest")
    assert _consume_and_acknowledge(cluster, group, topic, 20) == list(range(20))
    alter = {
        "group_id": group,
        "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 5}]}
        ],
    }
    with _wire(cluster.node(coordinator)) as conn:
        assert _start_offsets(conn, group) == {(topic, 0): 20}

        def altered() -> bool:  # once the closed consumer has left the group
            response = conn.request(91, 0, **alter)
            return int(response.error_code) == 0

        cluster.wait_until(altered, 15, "the empty group's offsets altered")
        assert _start_offsets(conn, group) == {(topic, 0): 5}
    assert _consume_and_acknowledge(cluster, group, topic, 15) == list(range(5, 20))
    with _wire(cluster.node(coordinator)) as conn:
        cluster.wait_until(
            lambda: (
                int(
                    conn.request(92, 0, group_id=group, topics=[{"topic_name": topic}])
                    .responses[0]
                    .error_code
                )
                == 0
            ),
            15,
            "the empty group's offsets deleted",
        )
        assert _start_offsets(conn, group) == {}


def _dead_letter_topic_led_elsewhere(cluster: KafkaCluster, leader: int, **configs: str) -> str:
    """A one-replica topic taking dead letters (KIP-1191), led by a broker other than
    `leader`, which therefore holds no replica of it."""
    for _ in range(10):
        dlq = "dlq." + unique_topic("share-cl")
        # Every node knows it before any is asked who leads it.
        cluster.create_topic(
            dlq, partitions=1, replication_factor=1, config={DLQ_GROUP_ENABLE: "true", **configs}
        )

        def led_by(dlq: str = dlq) -> int | None:
            found: int = cluster.partition(dlq).leader
            return found if found > 0 else None

        if cluster.wait_until(led_by, 10, f"a leader of {dlq}") != leader:
            return dlq
    raise AssertionError(f"every dead-letter topic was led by broker {leader}")


def _reject_offset_one(consumer: ShareConsumer, total: int) -> list[int]:
    """Consume `total` records, rejecting offset 1 and accepting the others; the offsets
    delivered."""
    seen: list[int] = []
    deadline = time.monotonic() + 20
    while len(seen) < total and time.monotonic() < deadline:
        for message in consumer.poll(0.5):
            seen.append(message.offset())
            rejected = message.offset() == 1
            consumer.acknowledge(
                message, AcknowledgeType.REJECT if rejected else AcknowledgeType.ACCEPT
            )
        consumer.commit_sync(10)
    return sorted(seen)


def test_a_rejected_record_lands_once_in_a_dead_letter_topic_led_by_another_broker(share_cluster):  # type: ignore[no-untyped-def]
    cluster = share_cluster
    topic, group, leader, _ = _queue_away_from_its_coordinator(cluster, 3)
    dlq = _dead_letter_topic_led_elsewhere(cluster, leader)
    set_group_configs(
        cluster.bootstrap,
        group,
        errors_deadletterqueue_topic_name=dlq,
        errors_deadletterqueue_copy_record_enable="true",
    )
    consumer = _share_consumer(cluster, group, topic)
    try:
        assert _reject_offset_one(consumer, 3) == [0, 1, 2]
    finally:
        consumer.close()
    copies = read_until_quiet(cluster.bootstrap, dlq, first_wait=15, quiet=1.0)
    assert len(copies) == 1
    headers = {k: v.decode() for k, v in copies[0].headers()}
    assert copies[0].value() == b"1"
    assert headers["__dlq.errors.group.id"] == group
    assert headers["__dlq.errors.topic"] == topic
    assert headers["__dlq.errors.partition"] == "0"
    assert headers["__dlq.errors.offset"] == "1"
    assert headers["__dlq.errors.delivery.count"] == "1"
    assert headers["__dlq.errors.reason"] == "rejected"


def test_a_dead_letter_pending_when_the_partition_leader_dies_is_written_once_by_the_next(
    share_cluster,
):  # type: ignore[no-untyped-def]
    cluster = share_cluster
    topic, group, leader, _ = _queue_away_from_its_coordinator(cluster, 3)
    # One replica and min.insync.replicas=2: the copy (acks=all) is refused until the
    # topic's config changes, so the letter stays pending through the leader's death.
    dlq = _dead_letter_topic_led_elsewhere(cluster, leader, **{"min.insync.replicas": "2"})
    set_group_configs(cluster.bootstrap, group, errors_deadletterqueue_topic_name=dlq)
    consumer = _share_consumer(cluster, group, topic)
    try:
        assert _reject_offset_one(consumer, 3) == [0, 1, 2]
    finally:
        consumer.close()  # no consumer fetches at the next leader
    try:
        cluster.wait_until(
            lambda: (
                f"dead-letter copy to {dlq}-0 refused by broker" in cluster.node(leader).log_text()
            ),
            20,
            "the old leader's copy to be refused",
        )
        assert watermarks(cluster.bootstrap, dlq) == (0, 0)
        cluster.kill(leader)
        cluster.wait_until(
            lambda: cluster.partition(topic).leader not in (-1, leader) or None,
            20,
            "a new leader",
        )
        admin = admin_client(cluster.bootstrap)
        resource = ConfigResource(
            "TOPIC",
            dlq,
            incremental_configs=[
                ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=15)
        copies = read_until_quiet(cluster.bootstrap, dlq, first_wait=15, quiet=1.0)
    finally:
        cluster.heal()
    assert len(copies) == 1
    headers = {k: v.decode() for k, v in copies[0].headers()}
    assert headers["__dlq.errors.topic"] == topic
    assert headers["__dlq.errors.offset"] == "1"
    assert headers["__dlq.errors.reason"] == "rejected"


def _topic_led_by_every_broker(cluster: KafkaCluster) -> tuple[str, dict[int, int]]:
    """A 3-partition RF=3 topic whose partitions have three different leaders: (topic,
    partition -> leader)."""
    for _ in range(5):
        topic = unique_topic("share-lag")
        cluster.create_topic(topic, partitions=3, replication_factor=3)

        def leaders(topic: str = topic) -> dict[int, int] | None:
            found = {p: cluster.partition(topic, p).leader for p in range(3)}
            return found if min(found.values()) > 0 else None

        found = cluster.wait_until(leaders, 15, f"leaders of {topic}")
        if len(set(found.values())) == 3:
            return topic, found
    pytest.fail("no topic had its three partitions led by three brokers")


def _hold_records(
    cluster: KafkaCluster, group: str, topic: str, leaders: dict[int, int], held: dict[int, int]
) -> None:
    """At each partition's leader, acquire `held[p]` records (ShareFetch v2, record-limit
    mode) and accept the last of them out of order (ShareAcknowledge): the rest stay in
    flight, and the share-partition start offset stays before them."""
    topic_id = cluster.raw_metadata(topic).topics[0].topic_id
    member = "holder"
    with _wire(cluster.node(_coordinator(cluster, group))) as conn:
        joined = conn.request(
            76,
            1,
            group_id=group,
            member_id=member,
            member_epoch=0,
            rack_id=None,
            subscribed_topic_names=[topic],
        )
        assert int(joined.error_code) == 0
    for partition, count in held.items():
        with _wire(cluster.node(leaders[partition])) as conn:
            acquired: list[tuple[int, int]] = []
            epoch = 0
            deadline = time.monotonic() + 20
            while not acquired and time.monotonic() < deadline:
                fetched = conn.request(
                    78,
                    2,
                    group_id=group,
                    member_id=member,
                    share_session_epoch=epoch,
                    max_wait=500,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    max_records=count,
                    batch_size=count,
                    share_acquire_mode=1,
                    is_renew_ack=False,
                    topics=[{"topic_id": topic_id, "partitions": [{"partition_index": partition}]}],
                    forgotten_topics_data=[],
                )
                assert int(fetched.error_code) == 0
                part = fetched.responses[0].partitions[0]
                acquired = [(r.first_offset, r.last_offset) for r in part.acquired_records]
                epoch += 1
            assert sum(last - first + 1 for first, last in acquired) == count, acquired
            last = acquired[-1][1]
            acked = conn.request(
                79,
                1,
                group_id=group,
                member_id=member,
                share_session_epoch=epoch,
                topics=[
                    {
                        "topic_id": topic_id,
                        "partitions": [
                            {
                                "partition_index": partition,
                                "acknowledgement_batches": [
                                    {
                                        "first_offset": last,
                                        "last_offset": last,
                                        "acknowledge_types": [1],
                                    }
                                ],
                            }
                        ],
                    }
                ],
            )
            assert int(acked.error_code) == 0
            assert int(acked.responses[0].partitions[0].error_code) == 0


def test_groups_cli_shows_each_partitions_lag_and_in_flight_from_its_own_leader(share_cluster):  # type: ignore[no-untyped-def]
    """Three partitions led by three brokers: a ShareConsumer accepts the first ten records
    of each; then, of the next records, a member holds some at each leader and accepts
    the last it holds. Every partition's lag (KIP-1226: records not yet delivered to
    completion up to the high watermark) and in-flight count are its own."""
    cluster = share_cluster
    topic, leaders = _topic_led_by_every_broker(cluster)
    group = unique_group("share-lag")
    set_group_configs(
        cluster.bootstrap,
        group,
        share_auto_offset_reset="earliest",
        share_record_lock_duration_ms="60000",
    )
    first = 10

    def produce(counts: dict[int, int]) -> None:
        produce_all(
            cluster.bootstrap,
            topic,
            ({"value": b"v", "partition": p} for p, n in counts.items() for _ in range(n)),
            acks="all",
        )

    produce(dict.fromkeys(range(3), first))
    assert _consume_and_acknowledge(cluster, group, topic, 3 * first) == sorted(
        list(range(first)) * 3
    )
    more = {0: 6, 1: 9, 2: 12}
    held = {0: 2, 1: 3, 2: 4}
    produce(more)
    _hold_records(cluster, group, topic, leaders, held)
    described = subprocess.run(
        [
            *kbroker_command(),
            "groups",
            "describe",
            group,
            "--bootstrap",
            cluster.bootstrap,
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert described.returncode == 0, described.stderr
    rows = {
        p["partition"]: (p["committed_offset"], p["log_end_offset"], p["lag"], p["in_flight"])
        for p in json.loads(described.stdout)["partitions"]
    }
    # Start offset, log end offset, lag (the records produced after the first ten, less
    # the one accepted out of order) and in flight (held, less the one accepted).
    assert rows == {p: (first, first + more[p], more[p] - 1, held[p] - 1) for p in range(3)}


def _lag(conn, group: str) -> int:  # type: ignore[no-untyped-def]
    found = conn.request(90, 1, groups=[{"group_id": group, "topics": None}]).groups[0]
    assert int(found.error_code) == 0
    (partition,) = (p for t in found.topics for p in t.partitions)
    return int(partition.lag)


def test_a_lag_is_asked_again_of_a_partition_leader_restarted_since_it_was_last_asked(
    share_cluster,
):  # type: ignore[no-untyped-def]
    """The group coordinator keeps a connection to each partition leader it asks for a
    high watermark; once that leader has restarted, the connection kept is dead and the
    lag is asked again over a new one, not answered unknown."""
    from confluent_kafka import ElectionType, TopicPartition

    cluster = share_cluster
    topic, group, leader, coordinator = _queue_away_from_its_coordinator(cluster, 10)
    start = {
        "group_id": group,
        "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 4}]}
        ],
    }
    with _wire(cluster.node(coordinator)) as conn:
        assert int(conn.request(91, 0, **start).error_code) == 0
        assert _lag(conn, group) == 6
    try:
        cluster.restart(leader)
        cluster.wait_for_full_isr(topic, 30)

        def leads_again() -> bool:  # its preferred replica: the first, the leader at creation
            admin = cluster.admin()
            election = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
            election.result(timeout=15)
            return bool(cluster.partition(topic).leader == leader)

        cluster.wait_until(leads_again, 20, f"broker {leader} to lead {topic} again")
        produce_all(cluster.bootstrap, topic, ({"value": b"v"} for _ in range(3)), acks="all")
        with _wire(cluster.node(coordinator)) as conn:
            assert _lag(conn, group) == 9
    finally:
        cluster.heal()


def test_the_next_group_coordinator_knows_the_members_and_their_epochs(share_cluster):  # type: ignore[no-untyped-def]
    """kill -9 of a share group's coordinator: the broker that takes over its
    `__consumer_offsets` partition replays the group's records, so a member heartbeats
    on there at its epoch, with no assignment to take again."""
    cluster = share_cluster
    topic = unique_topic("share-fo")
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    group = unique_group("share-fo")
    coordinator = _coordinator(cluster, group)
    heartbeat = {"group_id": group, "rack_id": None, "subscribed_topic_names": [topic]}
    with _wire(cluster.node(coordinator)) as conn:
        a = conn.request(76, 1, member_id="member-a", member_epoch=0, **heartbeat)
        b = conn.request(76, 1, member_id="member-b", member_epoch=0, **heartbeat)
        assert (int(a.error_code), int(b.error_code), int(b.member_epoch)) == (0, 0, 2)
        a = conn.request(76, 1, member_id="member-a", member_epoch=1, **heartbeat)
        assert int(a.member_epoch) == 2
    cluster.kill(coordinator)
    try:
        successor = cluster.wait_until(
            lambda: found if (found := _coordinator(cluster, group)) != coordinator else None,
            30,
            "another coordinator",
        )

        def described():  # type: ignore[no-untyped-def]
            with _wire(cluster.node(successor)) as conn:
                answer = conn.request(77, 1, group_ids=[group], include_authorized_operations=False)
            return answer.groups[0] if int(answer.groups[0].error_code) == 0 else None

        found = cluster.wait_until(described, 30, "the group described by its new coordinator")
        assert (found.group_state, found.group_epoch) == ("Stable", 2)
        assert {m.member_id: int(m.member_epoch) for m in found.members} == {
            "member-a": 2,
            "member-b": 2,
        }
        with _wire(cluster.node(successor)) as conn:
            again = conn.request(76, 1, member_id="member-b", member_epoch=2, **heartbeat)
        assert (int(again.error_code), int(again.member_epoch)) == (0, 2)
        assert again.assignment is None
    finally:
        cluster.heal()


def test_a_readers_leader_epoch_fences_an_older_writer_after_the_share_coordinator_fails_over(
    share_cluster,
):  # type: ignore[no-untyped-def]
    """A data partition's new leader reads the share-partition's state (leader epoch 4)
    while its former leader (epoch 3) still has a write under way. Kafka's share
    coordinator stores the new epoch before answering the read, so the old write is
    refused even by the next share coordinator after this one dies: otherwise it would
    overwrite what the new leader read and holds, and records acknowledged through the
    old leader would be delivered again."""
    cluster = share_cluster
    topic = unique_topic("share-fence")
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    topic_id = cluster.raw_metadata(topic).topics[0].topic_id
    group = unique_group("share-fence")
    key = f"{group}:{base64.urlsafe_b64encode(topic_id.bytes).rstrip(b'=').decode()}:0"

    def state(**fields: object) -> dict[str, object]:
        return {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [fields]}]}

    def write(leader_epoch: int, start_offset: int) -> tuple[int] | None:
        """WriteShareGroupState at the share coordinator: (its error code,), or None
        while the coordinator is not there."""
        request = state(
            partition=0,
            state_epoch=0,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            state_batches=[],
        )
        with _wire(cluster.node(_coordinator(cluster, key, SHARE_KEY))) as conn:
            code = int(conn.request(85, 0, **request).results[0].partitions[0].error_code)
        return None if code in (14, 15, 16) else (code,)  # loading, not available, not here

    assert cluster.wait_until(lambda: write(3, 5), 20, "the first write") == (0,)
    coordinator = _coordinator(cluster, key, SHARE_KEY)
    with _wire(cluster.node(coordinator)) as conn:
        read = conn.request(84, 0, **state(partition=0, leader_epoch=4))
    assert (
        int(read.results[0].partitions[0].error_code),
        read.results[0].partitions[0].start_offset,
    ) == (0, 5)
    cluster.kill(coordinator)
    try:
        assert cluster.wait_until(lambda: write(3, 9), 30, "the next share coordinator") == (74,)
        assert cluster.wait_until(lambda: write(4, 9), 20, "a write of the new leader") == (0,)
    finally:
        cluster.heal()
