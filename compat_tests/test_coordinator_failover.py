"""The transaction and group coordinators across a kill -9 of the broker hosting them.

Three nodes, `__transaction_state` and `__consumer_offsets` replicated three times with
two replicas required in sync. A coordinator lives on the leader of its key's partition
of the internal topic; killing that broker moves it to the new leader, which rebuilds
the state from the replicated log. What stock clients must see (Kafka's guarantees):
a transaction is never half visible to a read_committed consumer (each one wholly
visible or wholly absent once its markers are written), a transaction left open is
aborted by the new coordinator at its timeout so the last stable offset moves on, and a
consumer group resumes from the offsets it committed.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from compat_tests.cluster import KafkaCluster, running_cluster
from kbroker.coordinator.records import partition_for

GROUP, TRANSACTION = 0, 1
TXN_TIMEOUT_MS = 5000
# A transaction left open across a kill must outlast the failover it waits through (a new
# leader or coordinator: the tests wait up to 20 s for one, then commit): with 5 s, a
# loaded machine saw the new coordinator abort it at its timeout, as Kafka's does, and
# fence the producer before it could commit.
FAILOVER_TXN_TIMEOUT_MS = 60_000
SETTINGS = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "min.insync.replicas": "2",
    # Few partitions: each kill makes the new leader replay (and the ISR regrow) fewer.
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with running_cluster(tmp_path_factory.mktemp("coordinator-failover"), overrides=SETTINGS) as c:
        yield c


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def _coordinator_with_full_isr(cluster: KafkaCluster, key_type: int, key: str) -> int:
    """The coordinator of `key` once its internal partition has all three replicas in
    sync (a node healed by an earlier test may still be catching up)."""
    topic = "__transaction_state" if key_type == TRANSACTION else "__consumer_offsets"
    node = cluster.wait_until(
        lambda: cluster.coordinator(key, key_type), 20.0, f"a coordinator for {key}"
    )

    def full() -> bool:
        partitions = cluster.raw_metadata(topic).topics[0].partitions
        p = next(p for p in partitions if p.partition_index == partition_for(key, len(partitions)))
        return len(p.isr_nodes) == 3 and p.leader_id == node

    cluster.wait_until(full, 30.0, f"the {topic} partition of {key} to have a full ISR")
    return node


def _topic_with_full_isr(cluster: KafkaCluster, partitions: int = 3) -> str:
    topic = f"failover-{_uid()}"
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    cluster.wait_for_full_isr(topic)
    return topic


def _transactional_producer(
    cluster: KafkaCluster, txn_id: str, timeout_ms: int = TXN_TIMEOUT_MS
) -> Any:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": timeout_ms,
            "socket.connection.setup.timeout.ms": 3000,
        }
    )
    producer.init_transactions(30)
    return producer


def _produce_transaction(producer: Any, topic: str, tag: str, count: int = 30) -> None:
    """Records `tag:i` spread over partitions 0-2, flushed (written, not yet committed)."""
    for i in range(count):
        producer.produce(topic, value=f"{tag}:{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0


def _open_transaction(
    cluster: KafkaCluster, tag: str, timeout_ms: int = TXN_TIMEOUT_MS
) -> tuple[str, str, int, Any]:
    """A new topic with a full ISR and a transactional producer whose coordinator leads
    a fully in-sync partition, its transaction begun and `tag:i` records written to
    partitions 0-2, not committed: (topic, transactional id, coordinator, producer)."""
    topic = _topic_with_full_isr(cluster)
    txn_id = f"{tag}-{_uid()}"
    coordinator = _coordinator_with_full_isr(cluster, TRANSACTION, txn_id)
    producer = _transactional_producer(cluster, txn_id, timeout_ms)
    producer.begin_transaction()
    _produce_transaction(producer, topic, tag)
    return topic, txn_id, coordinator, producer


def _commit(producer: Any, timeout: float = 45.0) -> None:
    """commit_transaction as Kafka's client documents it: retry a retriable failure."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            producer.commit_transaction(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise


def _produce_plain(cluster: KafkaCluster, records: Iterable[tuple[str, int, bytes]]) -> None:
    """Each (topic, partition, value) written outside any transaction, acks=all."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for topic, partition, value in records:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def _read_committed_consumer(cluster: KafkaCluster) -> Any:
    """A read_committed consumer for assigned partitions, committing nothing."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"reader-{_uid()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )


def _read_committed(cluster: KafkaCluster, topic: str, *more: tuple[str, int]) -> list[str]:
    """Every value a read_committed consumer gets from partitions 0-2 of `topic` (and
    any `more` partitions), read until each has given its `end` record (written last,
    outside any transaction): it is delivered only once the partition's last stable
    offset has passed everything before it."""
    from confluent_kafka import TopicPartition

    partitions = [(topic, p) for p in range(3)] + list(more)
    _produce_plain(cluster, ((t, p, b"end") for t, p in partitions))
    consumer = _read_committed_consumer(cluster)
    consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
    seen: list[str] = []
    ended: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 30
    try:
        while len(ended) < len(partitions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            if message.value() == b"end":
                ended.add((message.topic(), message.partition()))
            else:
                seen.append(message.value().decode())
    finally:
        consumer.close()
    assert len(ended) == len(partitions), f"the last stable offset stayed behind on {ended}"
    return seen


def _by_transaction(values: list[str]) -> Counter[str]:
    return Counter(v.split(":")[0] for v in values)


def test_an_open_transaction_commits_whole_on_the_new_coordinator_after_a_kill(
    cluster: KafkaCluster,
) -> None:
    topic, txn_id, coordinator, producer = _open_transaction(
        cluster, "before", FAILOVER_TXN_TIMEOUT_MS
    )
    _commit(producer)
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=f"across:{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        cluster.kill(coordinator)
        # Partitions 1 and 2 join after the kill: AddPartitionsToTxn and EndTxn go to
        # the new coordinator, which knows the transaction from the replicated log.
        for i in range(10, 30):
            producer.produce(topic, value=f"across:{i}".encode(), partition=1 + i % 2)
        _commit(producer)
        assert cluster.coordinator(txn_id, TRANSACTION) not in (0, coordinator)
        producer.begin_transaction()
        _produce_transaction(producer, topic, "after")
        _commit(producer)
        seen = _read_committed(cluster, topic)
    finally:
        cluster.heal()
    assert _by_transaction(seen) == {"before": 30, "across": 30, "after": 30}
    assert len(set(seen)) == len(seen)


def test_a_transaction_left_open_is_aborted_by_the_new_coordinator_at_its_timeout(
    cluster: KafkaCluster,
) -> None:
    from confluent_kafka import KafkaException

    topic, _, coordinator, producer = _open_transaction(cluster, "abandoned")
    try:
        cluster.kill(coordinator)
        killed = time.monotonic()
        # The producer goes quiet; the new coordinator alone must end its transaction.
        seen = _read_committed(cluster, topic)
        waited = time.monotonic() - killed
        assert "abandoned" not in _by_transaction(seen)
        assert waited < TXN_TIMEOUT_MS / 1000 + 20, waited
        # Its epoch was bumped by the abort: the old instance cannot commit any more.
        with pytest.raises(KafkaException) as refused:
            producer.commit_transaction(20)
        error = refused.value.args[0]
        assert error.fatal() or error.txn_requires_abort(), error
    finally:
        cluster.heal()


def test_a_partition_leader_killed_in_an_open_transaction_is_replaced_by_one_holding_it_back(
    cluster: KafkaCluster,
) -> None:
    """The transaction's records reached the followers with their producer state: the
    new leader keeps the last stable offset before them until the abort marker, so
    read_committed sees neither them nor anything written after them before it."""
    from confluent_kafka import TopicPartition

    topic, _, coordinator, producer = _open_transaction(cluster, "open", FAILOVER_TXN_TIMEOUT_MS)
    partition = next(p for p in range(3) if cluster.partition(topic, p).leader != coordinator)
    victim = cluster.partition(topic, partition).leader
    try:
        cluster.kill(victim)
        cluster.wait_until(
            lambda: cluster.partition(topic, partition).leader not in (victim, -1),
            15.0,
            f"a new leader of {topic}-{partition}",
        )
        _produce_plain(cluster, [(topic, partition, b"later:0")])
        consumer = _read_committed_consumer(cluster)
        consumer.assign([TopicPartition(topic, partition, 0)])
        try:
            held_back = [m for m in consumer.consume(100, 3.0) if not m.error()]
        finally:
            consumer.close()
        producer.abort_transaction(30)
        seen = _read_committed(cluster, topic)
    finally:
        cluster.heal()
    assert held_back == []
    assert _by_transaction(seen) == {"later": 1}


def test_a_transaction_prepared_before_its_coordinator_dies_is_completed_by_the_new_one(
    cluster: KafkaCluster,
) -> None:
    """The window between EndTxn and the markers: one partition of the transaction lives
    on a fourth broker (not a voter) that is down, so the coordinator has written
    PrepareCommit and answered EndTxn but cannot write that marker. Then the coordinator
    is killed: its successor finds PrepareCommit in the log and writes every marker."""
    from confluent_kafka.admin import NewTopic

    txn_id = f"prepared-{_uid()}"
    coordinator = _coordinator_with_full_isr(cluster, TRANSACTION, txn_id)  # topic made
    topic = _topic_with_full_isr(cluster)
    # __consumer_offsets (created on the first group lookup) must exist over the three
    # voters before a fourth broker joins, or some of its partitions may be placed on
    # that broker and lose their full ISR when it leaves.
    _coordinator_with_full_isr(cluster, GROUP, txn_id)
    extra = cluster.add_broker()
    try:
        stuck = f"stuck-{_uid()}"  # one partition, on the fourth broker only
        admin = cluster.admin()
        futures = admin.create_topics(
            [
                NewTopic(
                    stuck,
                    1,
                    replica_assignment=[[extra.node_id]],
                    config={"min.insync.replicas": "1"},
                )
            ],
            operation_timeout=10,
        )
        futures[stuck].result(timeout=15)
        cluster.wait_until(
            lambda: cluster.partition(stuck).leader == extra.node_id, 15.0, f"{stuck} to be led"
        )
        producer = _transactional_producer(cluster, txn_id)
        producer.begin_transaction()
        for i in range(40):
            if i % 4 == 3:
                producer.produce(stuck, value=f"prepared:{i}".encode(), partition=0)
            else:
                producer.produce(topic, value=f"prepared:{i}".encode(), partition=i % 4)
        assert producer.flush(30) == 0
        extra.kill()
        _commit(producer)  # PrepareCommit is durable: EndTxn succeeds
        visible = _read_committed(cluster, topic)  # partitions 0-2 have their markers
        assert _by_transaction(visible) == {"prepared": 30}
        cluster.kill(coordinator)
        cluster.wait_until(
            lambda: cluster.coordinator(txn_id, TRANSACTION) not in (0, coordinator),
            15.0,
            "a new transaction coordinator",
        )
        extra.start()
        seen = _read_committed(cluster, topic, (stuck, 0))
    finally:
        extra.kill()
        cluster.nodes.remove(extra)
        cluster.heal()
    assert _by_transaction(seen) == {"prepared": 40}
    assert sorted(seen) == sorted(f"prepared:{i}" for i in range(40))


def test_transactions_ending_together_on_one_coordinator_are_each_completed_whole(
    cluster: KafkaCluster,
) -> None:
    """Four producers whose transactional ids share a coordinator commit at the same
    time, each transaction over partitions led by all three brokers: the coordinator
    sends their markers to each broker one request at a time, and every transaction
    becomes visible whole (none is left prepared with the last stable offset stuck)."""
    topic = _topic_with_full_isr(cluster)
    ids = [f"together-{_uid()}"]
    coordinator = _coordinator_with_full_isr(cluster, TRANSACTION, ids[0])
    while len(ids) < 4:
        candidate = f"together-{_uid()}"
        if cluster.coordinator(candidate, TRANSACTION) == coordinator:
            ids.append(candidate)
    producers = [_transactional_producer(cluster, t) for t in ids]
    failures: list[Exception] = []

    def run(k: int) -> None:
        try:
            for n in range(8):
                producers[k].begin_transaction()
                _produce_transaction(producers[k], topic, f"p{k}t{n}", 6)
                _commit(producers[k], timeout=30)
        except Exception as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not failures, failures
    seen = _by_transaction(_read_committed(cluster, topic))
    assert seen == {f"p{k}t{n}": 6 for k in range(4) for n in range(8)}


def _group_consumer(cluster: KafkaCluster, group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "socket.connection.setup.timeout.ms": 3000,
        }
    )


def _consume(consumer: Any, count: int, timeout: float = 30.0) -> list[Any]:
    """The next `count` records the consumer is given (fewer only at the timeout)."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(out), 0.5):
            if not message.error():
                out.append(message)
    return out


def _committed(cluster: KafkaCluster, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets in `topic` (partitions with none left out), as the
    coordinator FindCoordinator names answers OffsetFetch; retried while it moves.

    A raw OffsetFetch, not confluent-kafka's list_consumer_group_offsets: librdkafka
    aborts the process (assertion in rd_kafka_enq_once_del_source_return, librdkafka
    issue #4605, against Apache Kafka too) when a coordinator admin request times out
    while its coordinator is down and the client later reaches a coordinator."""
    from kbroker.admin.client import BrokerConnection
    from kbroker.admin.groups import fetch_committed

    def fetch() -> tuple[dict[int, int]] | None:
        node = cluster.coordinator(group, GROUP)
        if not node:
            return None
        coordinator = cluster.node(node)
        with BrokerConnection(coordinator.host, coordinator.port, 5.0, "failover-test") as conn:
            offsets = fetch_committed(conn.negotiate(), group)
        return ({p: o for (t, p), o in offsets.items() if t == topic},)

    return cluster.wait_until(fetch, 15.0, f"the committed offsets of {group}")[0]


def _next_offsets(messages: list[Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for m in messages:
        out[m.partition()] = max(out.get(m.partition(), 0), m.offset() + 1)
    return out


def test_a_group_resumes_from_its_committed_offsets_after_its_coordinator_is_killed(
    cluster: KafkaCluster,
) -> None:
    from confluent_kafka import KafkaException

    topic = _topic_with_full_isr(cluster)
    group = f"failover-group-{_uid()}"
    coordinator = _coordinator_with_full_isr(cluster, GROUP, group)
    _produce_plain(cluster, ((topic, i % 3, b"%d" % i) for i in range(300)))

    first = _group_consumer(cluster, group)
    first.subscribe([topic])
    try:
        committed_work = _consume(first, 120)
        assert len(committed_work) == 120
        first.commit(asynchronous=False)
        before_kill = _committed(cluster, group, topic)
        uncommitted = _consume(first, 60)
        assert len(uncommitted) == 60
        cluster.kill(coordinator)
        # The offsets committed before the kill are what the new coordinator serves.
        assert cluster.wait_until(
            lambda: _committed(cluster, group, topic) == before_kill,
            20.0,
            "the new coordinator to serve the committed offsets",
        )
        assert cluster.coordinator(group, GROUP) not in (0, coordinator)
        # The member carries on: its next records and commit go to the new coordinator.
        more = _consume(first, 60)
        assert len(more) == 60

        def commit() -> bool:
            try:
                first.commit(asynchronous=False)
                return True
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                return False

        cluster.wait_until(commit, 20.0, "a commit on the new coordinator")
        after_commit = _next_offsets(committed_work + uncommitted + more)
        assert _committed(cluster, group, topic) == after_commit
        lost_work = _consume(first, 30)  # read, never committed: read again below
        assert len(lost_work) == 30
    finally:
        first.close()
        cluster.heal()

    second = _group_consumer(cluster, group)
    second.subscribe([topic])
    try:
        rest = _consume(second, 300 - 240)
    finally:
        second.close()
    first_values = [m.value() for m in committed_work + uncommitted + more + lost_work]
    second_values = [m.value() for m in rest]
    assert Counter(first_values + second_values) - Counter(b"%d" % i for i in range(300)) == (
        Counter(m.value() for m in lost_work)
    )
    assert set(first_values + second_values) == {b"%d" % i for i in range(300)}


def test_transactional_offsets_pending_at_a_group_coordinator_kill_commit_with_the_transaction(
    cluster: KafkaCluster,
) -> None:
    """Consume-transform-produce: offsets sent to an open transaction are held on the
    group's offsets partition until the commit marker. The group coordinator's broker is
    killed while they wait; the commit marker reaches the new leader, whose coordinator
    rebuilt them from the log, and the offsets are committed with the output."""

    source, sink = _topic_with_full_isr(cluster), _topic_with_full_isr(cluster)
    group = f"eos-{_uid()}"
    group_coordinator = _coordinator_with_full_isr(cluster, GROUP, group)
    txn_id = next(
        t
        for t in (f"eos-{_uid()}" for _ in range(1000))
        if cluster.coordinator(t, TRANSACTION) not in (0, group_coordinator)
    )
    _coordinator_with_full_isr(cluster, TRANSACTION, txn_id)
    _produce_plain(cluster, ((source, i % 3, b"%d" % i) for i in range(60)))
    producer = _transactional_producer(cluster, txn_id, FAILOVER_TXN_TIMEOUT_MS)
    consumer = _group_consumer(cluster, group)
    consumer.subscribe([source])

    def transform(count: int, tag: str) -> dict[int, int]:
        """Consume `count` records, write them to the sink and their next offsets to
        the transaction; returns those offsets."""
        records = _consume(consumer, count)
        assert len(records) == count
        producer.begin_transaction()
        for m in records:
            producer.produce(sink, value=f"{tag}:{m.value().decode()}".encode(), partition=0)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        return {tp.partition: tp.offset for tp in positions if tp.offset >= 0}

    def committed() -> dict[int, int]:
        return _committed(cluster, group, source)

    try:
        first = transform(30, "first")
        _commit(producer)
        # Kafka writes the markers after answering EndTxn: the offsets follow shortly.
        cluster.wait_until(lambda: committed() == first, 10.0, "the first offsets")
        second = transform(30, "second")
        assert sum(second.values()) == 60
        cluster.kill(group_coordinator)
        # The new coordinator serves the offsets committed before, not the pending ones.
        cluster.wait_until(
            lambda: committed() == first, 20.0, "the new group coordinator to serve offsets"
        )
        _commit(producer)
        # The second half's offsets are the group's once its transaction is committed.
        cluster.wait_until(
            lambda: committed() == second,
            20.0,
            "the transaction's offsets to be committed on the new group coordinator",
        )
        output = _read_committed(cluster, sink)
    finally:
        consumer.close()
        cluster.heal()
    assert _by_transaction(output) == {"first": 30, "second": 30}


def test_a_consumer_protocol_group_carries_on_from_its_offsets_after_its_coordinator_is_killed(
    cluster: KafkaCluster,
) -> None:
    """KIP-848 (group.protocol=consumer): two members' assignment and offsets live in
    the group's offsets partition; after the coordinator's broker is killed the new
    coordinator takes their heartbeats, every partition is consumed to its end, and
    the commits land there."""
    from confluent_kafka import Consumer, KafkaError, KafkaException

    topic = _topic_with_full_isr(cluster)
    group = f"kip848-{_uid()}"
    coordinator = _coordinator_with_full_isr(cluster, GROUP, group)
    _produce_plain(cluster, ((topic, i % 3, b"%d" % i) for i in range(300)))
    settings = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    members = [Consumer(settings), Consumer(settings)]
    for member in members:
        member.subscribe([topic])
    seen: list[bytes] = []

    def consume_until(count: int) -> None:
        deadline = time.monotonic() + 30
        while len(set(seen)) < count and time.monotonic() < deadline:
            for member in members:
                seen.extend(m.value() for m in member.consume(20, 0.2) if not m.error())

    def commit_all() -> bool:
        for member in members:
            try:
                member.commit(asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._NO_OFFSET:
                    continue  # nothing consumed by this member since its last commit
                if not exc.args[0].retriable():
                    raise
                return False
        return True

    try:
        consume_until(100)
        assert commit_all()
        before = _committed(cluster, group, topic)
        cluster.kill(coordinator)
        assert cluster.wait_until(
            lambda: _committed(cluster, group, topic) == before,
            20.0,
            "the new coordinator to serve the group's offsets",
        )
        consume_until(300)
        cluster.wait_until(commit_all, 20.0, "the members' commits on the new coordinator")
        after = _committed(cluster, group, topic)

        def assigned() -> list[int]:
            # KIP-848 moves a partition in two heartbeats (revoked, then assigned), so
            # one snapshot may fall between them: poll until the members settle.
            for member in members:
                member.consume(20, 0.2)
            return sorted(tp.partition for member in members for tp in member.assignment())

        cluster.wait_until(lambda: assigned() == [0, 1, 2], 20.0, "every partition assigned")
    finally:
        for member in members:
            member.close()
        cluster.heal()
    assert set(seen) == {b"%d" % i for i in range(300)}
    assert after == {0: 100, 1: 100, 2: 100}
