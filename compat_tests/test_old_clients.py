"""The client generation Kafka 4 dropped (KIP-896) next to a current one, on one topic.

kafka-python pinned to api_version (0, 9) speaks Produce v1 and Fetch v1 with message
format v0, ListOffsets v0, Metadata v0 and OffsetFetch v1; pinned to (0, 10, 0) it
speaks Produce v2 and Fetch v2 with message format v1. What they produce is stored as
v2 batches that confluent-kafka reads; what confluent-kafka produces they read
down-converted; offsets committed by one are the other's in the same group.
"""

from __future__ import annotations

import struct
from contextlib import closing

import confluent_kafka
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from compat_tests.broker_process import BrokerProcess
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_topic,
)
from kbroker.admin.client import BrokerConnection

pytestmark = pytest.mark.timeout(90)

OLD = {"0.9": (0, 9), "0.10.0": (0, 10, 0)}
FETCH = 1
UNSUPPORTED_VERSION = 35
TIMEOUT_MS = 15000


def _old_produce(
    bootstrap: str, api: tuple[int, ...], topic: str, n: int, codec: str | None
) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, api_version=api, compression_type=codec, linger_ms=5
    )
    with closing(producer):
        futures = [
            producer.send(
                topic, key=f"k{i}".encode(), value=f"old-{i}".encode(), timestamp_ms=1000 + i
            )
            for i in range(n)
        ]
        for f in futures:
            f.get(timeout=15)


def _old_group_read(bootstrap: str, api: tuple[int, ...], topic: str, group: str, n: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        api_version=api,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_MS + 1000,
    )
    consumer.subscribe([topic])
    got: list = []
    try:
        for _ in range(300):
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(batch)
            if len(got) >= n:
                break
        consumer.commit()
    finally:
        consumer.close(autocommit=False)
    return got


@pytest.mark.parametrize("codec", [None, "gzip"])
@pytest.mark.parametrize("old", list(OLD))
def test_old_producer_is_read_by_a_current_consumer(
    shared_broker: BrokerProcess, old: str, codec: str | None
) -> None:
    topic = unique_topic("old-produce")
    create_topic(shared_broker.bootstrap, topic)
    _old_produce(shared_broker.bootstrap, OLD[old], topic, 6, codec)
    got = consume_from_beginning(shared_broker.bootstrap, topic, 6)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, f"k{i}".encode(), f"old-{i}".encode()) for i in range(6)
    ]
    if OLD[old] >= (0, 10):  # message format v1 carries the producer's timestamps
        assert [r.timestamp for r in got] == [1000 + i for i in range(6)]
    else:  # v0 has none: Kafka stores -1 (NO_TIMESTAMP)
        assert {r.timestamp for r in got} == {-1}


@pytest.mark.parametrize("old", list(OLD))
def test_old_group_consumer_reads_current_producers_records_and_shares_its_offsets(
    shared_broker: BrokerProcess, old: str
) -> None:
    bootstrap = shared_broker.bootstrap
    topic, group = unique_topic("old-consume"), unique_topic("old-group")
    create_topic(bootstrap, topic)
    produce_all(
        bootstrap,
        topic,
        [
            {"key": f"k{i}".encode(), "value": f"new-{i}".encode(), "headers": [("h", b"x")]}
            for i in range(8)
        ],
        compression_type="lz4",
    )
    _old_produce(bootstrap, OLD[old], topic, 2, None)
    got = _old_group_read(bootstrap, OLD[old], topic, group, 10)
    assert [(r.offset, r.value) for r in got] == [(i, f"new-{i}".encode()) for i in range(8)] + [
        (8, b"old-0"),
        (9, b"old-1"),
    ]
    # The old consumer's commit (OffsetCommit, group membership) is the group's offset
    # for a current consumer of the same group.
    current = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = current.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=15)
        assert tp.offset == 10
        current.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 4)], asynchronous=False)
    finally:
        current.close()
    # ... and a current consumer's commit is an old one's (OffsetFetch v1).
    old_consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=OLD[old], group_id=group)
    with closing(old_consumer):
        assert old_consumer.committed(TopicPartition(topic, 0)) == 4


def _fetch_v2(conn: BrokerConnection, topic: str, offset: int) -> tuple[int, int, bytes]:
    name = topic.encode()
    body = struct.pack(">iiii", -1, 100, 1, 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">iiqi", 1, 0, offset, 1 << 20)
    answer = conn.receive_raw(conn.send_raw(FETCH, 2, body))
    pos = 4 + 4  # throttle time, topic count
    (size,) = struct.unpack_from(">h", answer, pos)
    pos += 2 + size + 4  # name, partition count
    _partition, error, high_watermark, records_size = struct.unpack_from(">ihqi", answer, pos)
    pos += 18
    return error, high_watermark, answer[pos : pos + records_size]


def test_downconversion_can_be_turned_off_per_topic(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    allowed, refused = unique_topic("down-on"), unique_topic("down-off")
    create_topic(bootstrap, allowed)
    create_topic(bootstrap, refused, config={"message.downconversion.enable": "false"})
    for topic in (allowed, refused):
        produce_all(bootstrap, topic, [{"value": b"a"}, {"value": b"b"}])
    with BrokerConnection(shared_broker.host, shared_broker.port, 10.0, "old-fetch") as conn:
        error, high_watermark, records = _fetch_v2(conn, allowed, 1)
        assert (error, high_watermark) == (0, 2)
        # one v1 message at offset 1 (the first was below the fetch offset): its magic
        assert struct.unpack_from(">q", records, 0)[0] == 1 and records[16] == 1
        assert _fetch_v2(conn, refused, 0) == (UNSUPPORTED_VERSION, -1, b"")
