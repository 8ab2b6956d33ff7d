"""A topic's compression.type, seen by stock clients: what librdkafka produces in one
codec is stored in the topic's codec, and both librdkafka and kafka-python read it back
(they decompress each codec themselves, so a wrong CRC or framing fails here)."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer

from compat_tests.broker_process import BrokerProcess, stored_batches
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_topic,
)
from kbroker.protocol.batch import COMPRESSION_MASK

CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COUNT = 200


def values() -> list[bytes]:
    return [b"record-%04d " % i * 8 for i in range(COUNT)]


@pytest.mark.parametrize(
    ("topic_codec", "producer_codec"),
    [
        ("uncompressed", "lz4"),
        ("gzip", "none"),
        ("snappy", "zstd"),
        ("lz4", "gzip"),
        ("zstd", "snappy"),
        ("producer", "lz4"),
    ],
)
def test_stock_clients_read_back_a_topic_in_its_codec(
    shared_broker: BrokerProcess, topic_codec: str, producer_codec: str
) -> None:
    topic = unique_topic(f"codec-{topic_codec}")
    create_topic(shared_broker.bootstrap, topic, config={"compression.type": topic_codec})
    sent = values()
    produce_all(
        shared_broker.bootstrap,
        topic,
        ({"key": b"k%d" % i, "value": v} for i, v in enumerate(sent)),
        **{"compression.type": producer_codec, "enable.idempotence": True},
    )

    wanted = CODEC_IDS.get(topic_codec, CODEC_IDS.get(producer_codec, 0))
    codecs = {h.attributes & COMPRESSION_MASK for h in stored_batches(shared_broker, topic)}
    assert codecs == {wanted}

    seen = consume_from_beginning(shared_broker.bootstrap, topic, COUNT)
    assert [r.value for r in seen] == sent
    assert [r.offset for r in seen] == list(range(COUNT))

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=shared_broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
        enable_auto_commit=False,
    )
    try:
        read = [m.value for _, m in zip(range(COUNT), consumer, strict=False)]
    finally:
        consumer.close()
    assert read == sent
