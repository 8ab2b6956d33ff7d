"""Transactions with stock clients: commit, abort, read_committed, consume-transform-produce,
zombie fencing, abandoned transactions timing out; kafka-python and aiokafka round trips."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from compat_tests.confluent_helpers import (
    consume,
    create_topic,
    make_consumer,
    produce_all,
    unique_topic,
)

pytestmark = pytest.mark.timeout(90)


def _txn_producer(bootstrap: str, txn_id: str, **conf: object) -> Producer:
    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "linger.ms": 5,
    }
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    producer = Producer(settings)
    producer.init_transactions(30)
    return producer


def _values(bootstrap: str, topic: str, isolation: str, expect: int, partition: int = 0) -> list:
    records = consume(
        bootstrap, topic, expect, partitions=(partition,), timeout=20, isolation_level=isolation
    )
    return [r.value for r in records]


def _drain(consumer: Consumer, seconds: float) -> list[bytes]:
    """Everything a consumer delivers within `seconds` (errors other than EOF fail)."""
    out: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            continue
        out.append(msg.value())
    return out


def test_committed_visible_aborted_hidden_from_read_committed(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("txn")
    create_topic(bootstrap, topic)
    producer = _txn_producer(bootstrap, f"{topic}-tx")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, b"commit-%d" % i, partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, b"abort-%d" % i, partition=0)
    producer.flush(30)  # written to the log, then aborted
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"after", partition=0)
    producer.commit_transaction(30)

    committed = _values(bootstrap, topic, "read_committed", 11)
    assert committed == [b"commit-%d" % i for i in range(10)] + [b"after"]
    uncommitted = _values(bootstrap, topic, "read_uncommitted", 21)
    assert uncommitted[10:20] == [b"abort-%d" % i for i in range(10)]


def test_open_transaction_holds_back_read_committed_until_commit(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("txn-lso")
    create_topic(bootstrap, topic)
    produce_all(bootstrap, topic, [{"value": b"before", "partition": 0}])
    producer = _txn_producer(bootstrap, f"{topic}-tx")
    producer.begin_transaction()
    producer.produce(topic, b"inside", partition=0)
    producer.flush(30)
    produce_all(bootstrap, topic, [{"value": b"plain", "partition": 0}])

    consumer = make_consumer(bootstrap, isolation_level="read_committed")
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert _drain(consumer, 2.0) == [b"before"]
        # ListOffsets latest under read_committed answers the last stable offset.
        _, stable = consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=False)
        assert stable == 1
        producer.commit_transaction(30)
        assert _drain(consumer, 3.0) == [b"inside", b"plain"]
    finally:
        consumer.close()


def test_consume_transform_produce_commits_offsets_atomically(shared_broker):
    bootstrap = shared_broker.bootstrap
    source, sink = unique_topic("ctp-in"), unique_topic("ctp-out")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    produce_all(bootstrap, source, [{"value": b"%d" % i, "partition": 0} for i in range(40)])
    group = f"{source}-group"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = _txn_producer(bootstrap, f"{source}-tx")
    try:
        consumer.subscribe([source])
        taken: list = []
        deadline = time.monotonic() + 30
        while len(taken) < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                taken.append(msg)
        taken = taken[:20]
        assert len(taken) == 20

        def transform(prefix: bytes) -> None:
            """One round: `taken` to the sink, and the offsets after it, in a transaction."""
            producer.begin_transaction()
            for msg in taken:
                producer.produce(sink, prefix + msg.value(), partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, taken[-1].offset() + 1)],
                consumer.consumer_group_metadata(),
                30,
            )

        # An aborted round: neither its output nor its offsets count.
        transform(b"x")
        producer.flush(30)
        producer.abort_transaction(30)
        committed = consumer.committed([TopicPartition(source, 0)], timeout=10)
        assert committed[0].offset < 0, "offsets of an aborted transaction became visible"
        # The committed round.
        transform(b"y")
        producer.commit_transaction(30)
        committed = consumer.committed([TopicPartition(source, 0)], timeout=10)
        assert committed[0].offset == 20
    finally:
        consumer.close()
    out = _values(bootstrap, sink, "read_committed", 20)
    assert out == [b"y%d" % i for i in range(20)]


def test_second_producer_with_same_transactional_id_fences_the_first(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("txn-fence")
    create_topic(bootstrap, topic)
    txn_id = f"{topic}-tx"
    zombie = _txn_producer(bootstrap, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(30)

    successor = _txn_producer(bootstrap, txn_id)  # bumps the epoch, aborts the open txn
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, b"late", partition=0)
        zombie.commit_transaction(15)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert _values(bootstrap, topic, "read_committed", 1) == [b"successor"]


_DYING_PRODUCER = textwrap.dedent(
    """
    import os, sys
    from confluent_kafka import Producer
    bootstrap, topic, txn_id = sys.argv[1:4]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"doomed-%d" % i, partition=0)
    p.flush(30)
    print("written", flush=True)
    os.kill(os.getpid(), 9)
    """
)


def test_abandoned_transaction_is_aborted_after_its_timeout(broker_factory):
    broker = broker_factory.start_with(
        {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    )
    bootstrap = broker.bootstrap
    topic = unique_topic("txn-timeout")
    create_topic(bootstrap, topic)
    dying = subprocess.run(
        [sys.executable, "-c", _DYING_PRODUCER, bootstrap, topic, f"{topic}-tx"],
        capture_output=True,
        timeout=60,
    )
    assert dying.stdout.strip() == b"written", dying.stderr.decode()[-2000:]
    assert dying.returncode == -signal.SIGKILL
    produce_all(bootstrap, topic, [{"value": b"later", "partition": 0}])

    consumer = make_consumer(bootstrap, isolation_level="read_committed")
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        began = time.monotonic()
        seen: list[bytes] = []
        while b"later" not in seen and time.monotonic() - began < 20:
            seen += _drain(consumer, 0.5)
        waited = time.monotonic() - began
    finally:
        consumer.close()
    assert seen == [b"later"], seen
    print(f"read_committed consumer moved past the abandoned transaction after {waited:.1f}s")
    uncommitted = _values(bootstrap, topic, "read_uncommitted", 6)
    assert uncommitted == [b"doomed-%d" % i for i in range(5)] + [b"later"]


def test_kafka_python_transactional_round_trip(shared_broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("kp-txn")
    create_topic(bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-tx")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, b"kp-%d" % i, partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"kp-aborted", partition=0)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values = [m.value for m in consumer]
    finally:
        consumer.close()
    assert values == [b"kp-%d" % i for i in range(5)]


def test_aiokafka_transactional_round_trip(shared_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("aio-txn")
    create_topic(bootstrap, topic)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-tx")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send_and_wait(topic, b"aio-%d" % i, partition=0)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"aio-aborted", partition=0)
                    raise RuntimeError("abort this one")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            batch = await consumer.getmany(timeout_ms=3000)
            values = [m.value for msgs in batch.values() for m in msgs]
            more = await consumer.getmany(timeout_ms=500)
            values += [m.value for msgs in more.values() for m in msgs]
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == [b"aio-%d" % i for i in range(5)]


def test_killed_broker_keeps_transactions_and_completes_them(broker_factory):
    """Commit, restart (kill -9), then a read_committed consumer still sees the commit and
    not the abort; a new producer instance picks up the same transactional id."""
    broker = broker_factory.start_with({"log.flush.interval.messages": "1"})
    bootstrap = broker.bootstrap
    topic = unique_topic("txn-restart")
    create_topic(bootstrap, topic)
    txn_id = f"{topic}-tx"
    producer = _txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    producer.produce(topic, b"kept", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"dropped", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    del producer
    broker.kill()
    broker.start()
    assert _values(bootstrap, topic, "read_committed", 1) == [b"kept"]
    again = _txn_producer(bootstrap, txn_id)
    again.begin_transaction()
    again.produce(topic, b"again", partition=0)
    again.commit_transaction(30)
    assert _values(bootstrap, topic, "read_committed", 2) == [b"kept", b"again"]
    assert os.path.isdir(broker.data_dir)
