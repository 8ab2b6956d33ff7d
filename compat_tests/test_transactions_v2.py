"""Transactions version 2 (KIP-890 part 2) with stock clients on one broker: Kafka's
Java producer 4.3 (which speaks version 2 once the cluster finalizes it), the 3.9
producer (version 1) beside it on the same topic, and librdkafka (version 1: it sends
AddPartitionsToTxn and EndTxn below v5). Which version a client spoke shows in the
producer epoch: version 2 bumps it at every commit or abort, version 1 keeps it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer

from compat_tests.broker_process import BrokerProcess, running_broker
from compat_tests.java_driver import JavaDriver, Reply

pytestmark = pytest.mark.timeout(180)


def unique(prefix: str) -> str:
    return f"tv2-{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(
        tmp_path_factory.mktemp("tv2-broker"), {"group.initial.rebalance.delay.ms": "0"}
    ) as node:
        yield node


@pytest.fixture(scope="module")
def java4(
    java4_classpath: str, broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaDriver]:
    log = tmp_path_factory.mktemp("tv2-java4") / "driver.stderr.log"
    with JavaDriver(java4_classpath, broker.bootstrap, log) as driver:
        yield driver


@pytest.fixture(scope="module")
def java3(
    java_classpath: str, broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaDriver]:
    log = tmp_path_factory.mktemp("tv2-java3") / "driver.stderr.log"
    with JavaDriver(java_classpath, broker.bootstrap, log) as driver:
        yield driver


def _topic(java: JavaDriver, partitions: int = 2) -> str:
    topic = unique("t")
    java.call("create-topics", topics=topic, partitions=partitions)
    return topic


def _open(java: JavaDriver, name: str, txn_id: str) -> None:
    java.call("producer-open", name=name, producer={"transactional.id": txn_id})
    java.call("txn", name=name, action="init")


def _epoch(java: JavaDriver, txn_id: str) -> tuple[str, int, int]:
    described = java.call("describe-transactions", ids=txn_id)["transactions"][txn_id]
    return described["state"], described["producerId"], described["producerEpoch"]


def _read_committed(java: JavaDriver, topic: str) -> Reply:
    return java.call(
        "consume",
        topic=topic,
        from_="beginning",
        until_end=True,
        consumer={"isolation.level": "read_committed"},
    )


def test_java_4_3_commits_and_aborts_with_an_epoch_bump_per_transaction(
    java4: JavaDriver,
) -> None:
    topic = _topic(java4)
    txn_id = unique("java4")
    _open(java4, "p4", txn_id)
    try:
        _, pid, epoch = _epoch(java4, txn_id)
        for n, (prefix, action) in enumerate(
            [("c1-", "commit"), ("a-", "abort"), ("c2-", "commit")], start=1
        ):
            java4.call("txn", name="p4", action="begin")
            java4.call("produce", producer="p4", topic=topic, count=6, value_prefix=prefix)
            java4.call("txn", name="p4", action=action)
            state, now_pid, now_epoch = _epoch(java4, txn_id)
            expected_state = "COMPLETE_COMMIT" if action == "commit" else "COMPLETE_ABORT"
            assert (now_pid, now_epoch) == (pid, epoch + n)
            assert state in (expected_state, f"PREPARE_{action.upper()}")
        got = _read_committed(java4, topic).values()
        assert sorted(got) == sorted([f"c1-{i}" for i in range(6)] + [f"c2-{i}" for i in range(6)])
    finally:
        java4.call("close-all")


def test_java_4_3_sends_offsets_without_add_offsets_to_txn(java4: JavaDriver) -> None:
    """TxnOffsetCommit v5 adds the group's offsets partition to the transaction."""
    source, sink = _topic(java4, 1), _topic(java4, 1)
    group = unique("group")
    java4.call("produce", topic=source, count=8)
    try:
        java4.call(
            "consumer-open",
            name="c",
            group=group,
            consumer={"isolation.level": "read_committed"},
        )
        java4.call("subscribe", name="c", topics=source)
        assert len(java4.call("poll", name="c", until_end=True).records) == 8
        _open(java4, "p4", unique("offsets"))
        java4.call("txn", name="p4", action="begin")
        java4.call("produce", producer="p4", topic=sink, count=8, value_prefix="out")
        java4.call("txn", name="p4", action="send-offsets", consumer="c")
        java4.call("txn", name="p4", action="commit")
        offsets = java4.call("list-group-offsets", group=group)["offsets"]
        assert offsets[f"{source}:0"]["offset"] == 8
        assert _read_committed(java4, sink).values() == [f"out{i}" for i in range(8)]
    finally:
        java4.call("close-all")


def test_a_fenced_java_4_3_instance_cannot_write_or_commit(java4: JavaDriver) -> None:
    topic = _topic(java4, 1)
    txn_id = unique("zombie")
    try:
        _open(java4, "old", txn_id)
        java4.call("txn", name="old", action="begin")
        java4.call("produce", producer="old", topic=topic, count=3, value_prefix="done")
        java4.call("txn", name="old", action="commit")
        java4.call("txn", name="old", action="begin")
        java4.call("produce", producer="old", topic=topic, count=3, value_prefix="open")
        _open(java4, "new", txn_id)  # fences "old" and aborts its open transaction
        failure = java4.fails("produce", producer="old", topic=topic, count=1, value_prefix="late")
        assert failure.error in {"ProducerFencedException", "InvalidProducerEpochException"}
        java4.call("txn", name="new", action="begin")
        java4.call("produce", producer="new", topic=topic, count=2, value_prefix="new")
        java4.call("txn", name="new", action="commit")
        assert _read_committed(java4, topic).values() == ["done0", "done1", "done2", "new0", "new1"]
    finally:
        java4.call("close-all")


def test_a_version_1_java_3_9_producer_works_beside_a_version_2_one(
    java4: JavaDriver, java3: JavaDriver
) -> None:
    topic = _topic(java4, 1)
    v1_id, v2_id = unique("v1"), unique("v2")
    try:
        _open(java3, "p3", v1_id)
        _open(java4, "p4", v2_id)
        _, _, v1_epoch = _epoch(java4, v1_id)
        for round_ in range(2):
            java3.call("txn", name="p3", action="begin")
            java4.call("txn", name="p4", action="begin")
            java3.call("produce", producer="p3", topic=topic, count=2, value_prefix=f"v1-{round_}-")
            java4.call("produce", producer="p4", topic=topic, count=2, value_prefix=f"v2-{round_}-")
            java3.call("txn", name="p3", action="commit" if round_ == 0 else "abort")
            java4.call("txn", name="p4", action="abort" if round_ == 0 else "commit")
        assert _epoch(java4, v1_id)[2] == v1_epoch  # version 1: no bump
        got = _read_committed(java4, topic).values()
        assert sorted(got) == ["v1-0-0", "v1-0-1", "v2-1-0", "v2-1-1"]
    finally:
        java3.call("close-all")
        java4.call("close-all")


def test_librdkafka_transactions_beside_java_4_3(broker: BrokerProcess, java4: JavaDriver) -> None:
    topic = _topic(java4, 2)
    txn_id = unique("rdkafka")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    _, _, epoch = _epoch(java4, txn_id)
    for action, prefix in (("commit", "kept"), ("abort", "dropped"), ("commit", "also")):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"{prefix}{i}".encode(), partition=i % 2)
        if action == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    # librdkafka 2.x speaks version 1: its epoch stays where InitProducerId put it.
    assert _epoch(java4, txn_id)[2] == epoch
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("g"),
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.subscribe([topic])
        values: list[str] = []
        eof: set[int] = set()
        while len(eof) < 2:
            msg = consumer.poll(10)
            assert msg is not None, "no partition end within 10 s"
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            values.append(msg.value().decode())
    finally:
        consumer.close()
    assert sorted(values) == sorted([f"kept{i}" for i in range(5)] + [f"also{i}" for i in range(5)])
