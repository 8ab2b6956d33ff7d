"""confluent-kafka (librdkafka) producing and consuming through kbroker."""

from __future__ import annotations

import os
import struct
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from compat_tests.confluent_helpers import (
    DeliveryLog,
    admin_client,
    consume,
    create_topic,
    make_consumer,
    make_producer,
    per_partition,
    produce_all,
    unique_topic,
    watermarks,
)

pytestmark = pytest.mark.timeout(90)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ONE_MIB = 1024 * 1024


def test_admin_created_topic_is_listed_with_its_partitions(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    metadata = admin_client(shared_broker.bootstrap).list_topics(topic=topic, timeout=10)
    described = metadata.topics[topic]
    assert described.error is None
    assert sorted(described.partitions) == [0, 1, 2]
    broker_ids = set(metadata.brokers)
    assert len(broker_ids) == 1
    for partition in described.partitions.values():
        assert partition.leader in broker_ids
        assert partition.replicas == [partition.leader]
        assert partition.isrs == [partition.leader]


def test_creating_an_existing_topic_fails_with_topic_already_exists(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic)
    from confluent_kafka.admin import NewTopic

    admin = admin_client(shared_broker.bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1)], request_timeout=10
    )
    with pytest.raises(KafkaException) as raised:
        futures[topic].result(timeout=15)
    assert raised.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_compression_codec(shared_broker, codec):
    topic = unique_topic(f"codec-{codec}")
    create_topic(shared_broker.bootstrap, topic)
    sent = [(f"key-{i}".encode(), (f"value-{i:06d} " * 20).encode()) for i in range(2000)]
    log = produce_all(
        shared_broker.bootstrap,
        topic,
        ({"key": k, "value": v, "partition": 0} for k, v in sent),
        compression_type=codec,
        linger_ms=20,
    )
    assert [offset for _, offset, _ in log.delivered] == list(range(len(sent)))
    records = consume(shared_broker.bootstrap, topic, len(sent))
    assert [(r.key, r.value) for r in records] == sent
    assert [r.offset for r in records] == list(range(len(sent)))
    assert watermarks(shared_broker.bootstrap, topic) == (0, len(sent))


def _stored_batch_codecs(partition_dir) -> list[int]:
    """Codec bits of every v2 batch in a partition's segment files (Kafka's on-disk layout)."""
    codecs: list[int] = []
    segments = sorted(partition_dir.glob("*.log"))
    assert segments, f"no segment files in {partition_dir}"
    for segment in segments:
        data = segment.read_bytes()
        position = 0
        while position + 61 <= len(data):
            batch_length = struct.unpack_from(">i", data, position + 8)[0]
            magic = data[position + 16]
            assert magic == 2, f"batch at byte {position} of {segment.name} has magic {magic}"
            codecs.append(struct.unpack_from(">h", data, position + 21)[0] & 0x7)
            position += 12 + batch_length
    return codecs


@pytest.mark.parametrize("codec", CODECS)
def test_batches_are_stored_with_the_codec_the_producer_used(shared_broker, codec):
    """compression.type=producer (Kafka's default) keeps the producer's codec on disk."""
    topic = unique_topic(f"stored-{codec}")
    create_topic(shared_broker.bootstrap, topic)
    produce_all(
        shared_broker.bootstrap,
        topic,
        ({"value": b"x" * 100, "partition": 0} for _ in range(300)),
        compression_type=codec,
    )
    codecs = _stored_batch_codecs(shared_broker.data_dir / f"{topic}-0")
    assert codecs, "no batches found on disk"
    assert set(codecs) == {CODEC_IDS[codec]}


def test_keys_round_trip_with_null_and_empty_keys_kept_distinct(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic)
    keys = [b"alpha", None, b"", b"\x00\xffbinary", "ünïcode".encode(), b"k" * 5000]
    produce_all(
        shared_broker.bootstrap,
        topic,
        ({"key": k, "value": b"v", "partition": 0} for k in keys),
    )
    records = consume(shared_broker.bootstrap, topic, len(keys))
    assert [r.key for r in records] == keys


def test_headers_round_trip_in_order_with_duplicates_and_null_values(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic)
    headers = [
        ("trace-id", b"abc123"),
        ("dup", b"first"),
        ("dup", b"second"),
        ("empty", b""),
        ("null", None),
        ("binary", bytes(range(256))),
    ]
    produce_all(
        shared_broker.bootstrap,
        topic,
        [
            {"value": b"with-headers", "headers": headers, "partition": 0},
            {"value": b"without-headers", "partition": 0},
        ],
    )
    first, second = consume(shared_broker.bootstrap, topic, 2)
    assert first.headers == headers
    assert not second.headers


def test_null_values_are_tombstones_distinct_from_empty_values(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic)
    values = [b"live", None, b"", None]
    produce_all(
        shared_broker.bootstrap,
        topic,
        ({"key": b"k", "value": v, "partition": 0} for v in values),
    )
    records = consume(shared_broker.bootstrap, topic, len(values))
    assert [r.value for r in records] == values
    assert all(r.key == b"k" for r in records)


def test_one_mib_record_round_trips_when_topic_max_message_bytes_allows(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, config={"max.message.bytes": str(2 * ONE_MIB)})
    big = os.urandom(ONE_MIB)
    produce_all(
        shared_broker.bootstrap,
        topic,
        [{"key": b"big", "value": big, "partition": 0}, {"value": b"after", "partition": 0}],
        message_max_bytes=3 * ONE_MIB,
        compression_type="none",
    )
    # max.partition.fetch.bytes below the batch size: Kafka still returns the first batch.
    records = consume(shared_broker.bootstrap, topic, 2, max_partition_fetch_bytes=ONE_MIB // 2)
    assert records[0].value == big
    assert records[1].value == b"after"


def test_record_over_topic_max_message_bytes_is_rejected_as_too_large(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, config={"max.message.bytes": "100000"})
    producer = make_producer(
        shared_broker.bootstrap, message_max_bytes=3 * ONE_MIB, compression_type="none"
    )
    log = DeliveryLog()
    producer.produce(topic, value=os.urandom(200_000), partition=0, on_delivery=log.callback)
    assert producer.flush(20) == 0
    assert not log.delivered
    assert [err.code() for err in log.failed] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert watermarks(shared_broker.bootstrap, topic) == (0, 0)


def test_hundred_partition_topic_round_trips_every_partition(shared_broker):
    topic = unique_topic()
    partitions = 100
    per = 20
    create_topic(shared_broker.bootstrap, topic, partitions=partitions)
    produce_all(
        shared_broker.bootstrap,
        topic,
        (
            {"key": f"{p}".encode(), "value": f"{p}:{i}".encode(), "partition": p}
            for i in range(per)
            for p in range(partitions)
        ),
    )
    records = consume(
        shared_broker.bootstrap, topic, partitions * per, partitions=range(partitions)
    )
    got = per_partition(records)
    assert sorted(got) == list(range(partitions))
    for p, items in got.items():
        assert [r.value for r in items] == [f"{p}:{i}".encode() for i in range(per)], p
        assert [r.offset for r in items] == list(range(per)), p


def test_idempotent_producer_delivers_in_order(shared_broker):
    """enable.idempotence (the Java client's default since Kafka 3.0) needs InitProducerId."""
    topic = unique_topic("idem")
    create_topic(shared_broker.bootstrap, topic)
    values = [b"idem-%d" % i for i in range(1000)]
    log = produce_all(
        shared_broker.bootstrap,
        topic,
        ({"value": v, "partition": 0} for v in values),
        enable_idempotence=True,
    )
    assert [offset for _, offset, _ in log.delivered] == list(range(len(values)))
    records = consume(shared_broker.bootstrap, topic, len(values))
    assert [r.value for r in records] == values


def test_fetch_waiting_at_the_end_of_a_partition_is_woken_by_new_data(shared_broker):
    """A consumer at the log end gets a new record well before fetch.wait.max.ms runs out."""
    topic = unique_topic("wake")
    create_topic(shared_broker.bootstrap, topic)
    consumer = make_consumer(shared_broker.bootstrap, fetch_wait_max_ms=5000)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        idle_until = time.monotonic() + 1.0
        while time.monotonic() < idle_until:
            msg = consumer.poll(0.1)
            assert msg is None or msg.error() is not None, "record from an empty topic"
        began = time.monotonic()
        produce_all(shared_broker.bootstrap, topic, [{"value": b"wake-up", "partition": 0}])
        msg = None
        while time.monotonic() - began < 10:
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                break
        latency = time.monotonic() - began
    finally:
        consumer.close()
    assert msg is not None and msg.error() is None and msg.value() == b"wake-up"
    assert latency < 2.5, f"record reached the waiting consumer only after {latency:.2f}s"
