"""aiokafka (asyncio client) against kbroker: produce, assign + seek, every codec it supports."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import codec as aio_codec

from compat_tests.confluent_helpers import create_topic, unique_topic

pytestmark = pytest.mark.timeout(60)

CODEC_AVAILABLE = {
    None: True,
    "gzip": aio_codec.has_gzip(),
    "snappy": aio_codec.has_snappy(),
    "lz4": aio_codec.has_lz4(),
    "zstd": aio_codec.has_zstd(),
}


async def _produce(bootstrap: str, topic: str, records: list, codec: str | None) -> list[int]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, compression_type=codec, linger_ms=10, request_timeout_ms=15000
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, key=k, value=v, headers=h, partition=0)
            for k, v, h in records
        ]
        metadata = await asyncio.wait_for(asyncio.gather(*futures), timeout=20)
        return [m.offset for m in metadata]
    finally:
        await producer.stop()


async def _consume(bootstrap: str, topic: str, count: int) -> list:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=15000,
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        records: list = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while len(records) < count and loop.time() < deadline:
            batches = await consumer.getmany(tp, timeout_ms=200)
            records.extend(batches.get(tp, []))
        assert len(records) == count, f"read {len(records)} of {count} records"
        return records
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", list(CODEC_AVAILABLE), ids=lambda c: c or "none")
def test_round_trip_with_compression_codec(shared_broker, codec):
    if not CODEC_AVAILABLE[codec]:
        pytest.skip(f"aiokafka has no {codec} library installed")
    topic = unique_topic("aio")
    create_topic(shared_broker.bootstrap, topic)
    sent = [
        (f"k{i}".encode(), (f"aiokafka-{i} " * 10).encode(), [("seq", str(i).encode())])
        for i in range(500)
    ]
    offsets = asyncio.run(_produce(shared_broker.bootstrap, topic, sent, codec))
    assert offsets == list(range(len(sent)))
    records = asyncio.run(_consume(shared_broker.bootstrap, topic, len(sent)))
    assert [(r.key, r.value, list(r.headers)) for r in records] == sent
    assert [r.offset for r in records] == list(range(len(sent)))


def test_tombstone_round_trips_as_none(shared_broker):
    topic = unique_topic("aio")
    create_topic(shared_broker.bootstrap, topic)
    offsets = asyncio.run(
        _produce(shared_broker.bootstrap, topic, [(b"k", b"v", []), (b"k", None, [])], None)
    )
    assert offsets == [0, 1]
    records = asyncio.run(_consume(shared_broker.bootstrap, topic, 2))
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (b"k", None)]
