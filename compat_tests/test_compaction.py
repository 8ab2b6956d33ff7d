"""Log compaction seen by confluent-kafka: a compacted topic read from the beginning
holds the latest value of every key at its original offset, tombstones disappear after
delete.retention.ms, and a record without key is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from compat_tests.broker_process import stored_batches
from compat_tests.confluent_helpers import (
    DeliveryLog,
    Record,
    create_topic,
    make_consumer,
    make_producer,
    produce_all,
    unique_topic,
    watermarks,
)
from compat_tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

KEYS = 50
UPDATES = 5_000
CLEANER = {"log.cleaner.backoff.ms": "200"}
COMPACTED = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": "16384",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
}


def compacted_topic(
    broker_factory: Any, prefix: str, config: dict[str, str] | None = None
) -> tuple[Any, str]:
    """A broker of its own whose cleaner runs often, and a new compacted topic on it
    (COMPACTED with `config` on top)."""
    broker = broker_factory.start_with(CLEANER)
    topic = unique_topic(prefix)
    create_topic(broker.bootstrap, topic, config={**COMPACTED, **(config or {})})
    return broker, topic


def updates() -> Iterator[dict[str, Any]]:
    """UPDATES values over KEYS keys: update i is value-i to key-(i % KEYS)."""
    return (
        {"key": b"key-%d" % (i % KEYS), "value": b"value-%d" % i, "partition": 0}
        for i in range(UPDATES)
    )


def roll_active_segment(bootstrap: str, topic: str) -> None:
    """segment.ms rolls on the next append: wait past it and write a sentinel record, so
    that every update before it sits in a sealed, cleanable segment."""
    time.sleep(0.3)  # segment.ms is the input: time past it is what rolls the segment
    produce_all(bootstrap, topic, [{"key": b"sentinel", "value": b"end", "partition": 0}])


def read_from_start(bootstrap: str, topic: str, timeout: float = 10.0) -> list[Record]:
    """Every record from offset 0 up to the high watermark (a compacted log has gaps, so
    this reads until the last offset rather than a count)."""
    low, high = watermarks(bootstrap, topic)
    assert low == 0  # compaction never moves the log start offset
    consumer = make_consumer(bootstrap)
    records: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (not records or records[-1].offset < high - 1):
            for msg in consumer.consume(num_messages=10_000, timeout=0.2):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, str(err)
                    continue
                records.append(
                    Record(0, msg.offset(), msg.key(), msg.value(), None, msg.timestamp()[1])
                )
    finally:
        consumer.close()
    return records


def wait_until(bootstrap: str, topic: str, done, timeout: float = 40.0) -> list[Record]:
    def compacted() -> list[Record] | None:
        records = read_from_start(bootstrap, topic)
        return records if done(records) else None

    return eventually(compacted, timeout=timeout, what=f"{topic} compacted", interval=0.5)


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_consumer_reads_latest_value_per_key_at_original_offsets(broker_factory, compression):
    broker, topic = compacted_topic(broker_factory, "compacted")
    produce_all(
        broker.bootstrap,
        topic,
        updates(),
        compression_type=compression,
        enable_idempotence=True,
        batch_num_messages=100,
    )
    roll_active_segment(broker.bootstrap, topic)

    records = wait_until(broker.bootstrap, topic, lambda rs: len(rs) == KEYS + 1)
    latest = {b"key-%d" % (i % KEYS): i for i in range(UPDATES - KEYS, UPDATES)}
    for r in records[:-1]:
        # Update i went to offset i (one idempotent producer): it still sits there.
        assert r.value == b"value-%d" % r.offset
        assert latest[r.key] == r.offset
    assert {r.key for r in records[:-1]} == set(latest)
    assert (records[-1].key, records[-1].offset) == (b"sentinel", UPDATES)
    assert watermarks(broker.bootstrap, topic) == (0, UPDATES + 1)


def test_tombstones_vanish_after_delete_retention(broker_factory):
    broker, topic = compacted_topic(broker_factory, "tombstones", {"delete.retention.ms": "2000"})
    produce_all(
        broker.bootstrap,
        topic,
        [{"key": b"key-%d" % k, "value": b"v%d" % k, "partition": 0} for k in range(20)]
        + [{"key": b"key-%d" % k, "value": None, "partition": 0} for k in range(10)],
    )
    roll_active_segment(broker.bootstrap, topic)

    # First the older values go while the tombstones stay for consumers to see...
    records = wait_until(broker.bootstrap, topic, lambda rs: len(rs) == 21)
    assert {r.key for r in records if r.value is None} == {b"key-%d" % k for k in range(10)}
    # ...then, delete.retention.ms later, the tombstones go too.
    records = wait_until(broker.bootstrap, topic, lambda rs: len(rs) == 11)
    assert {r.key: r.value for r in records} == {
        **{b"key-%d" % k: b"v%d" % k for k in range(10, 20)},
        b"sentinel": b"end",
    }


def test_compacted_log_is_intact_after_restart(broker_factory):
    broker, topic = compacted_topic(broker_factory, "compacted-restart")
    # Batches under the 16 KiB segments (a larger append is RECORD_LIST_TOO_LARGE).
    produce_all(broker.bootstrap, topic, updates(), batch_num_messages=100)
    roll_active_segment(broker.bootstrap, topic)
    before = wait_until(broker.bootstrap, topic, lambda rs: len(rs) == KEYS + 1)
    broker.kill()
    broker.start()
    after = read_from_start(broker.bootstrap, topic)
    assert [(r.offset, r.key, r.value) for r in after] == [
        (r.offset, r.key, r.value) for r in before
    ]


def test_record_without_key_is_refused_with_invalid_record(shared_broker):
    topic = unique_topic("compacted-keyless")
    create_topic(shared_broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    producer = make_producer(shared_broker.bootstrap, message_timeout_ms=5000)
    log = DeliveryLog()
    producer.produce(topic, value=b"no key", partition=0, on_delivery=log.callback)
    producer.produce(topic, key=b"k", value=b"keyed", partition=0, on_delivery=log.callback)
    producer.flush(15)
    codes = [e.code() for e in log.failed]
    assert KafkaError.INVALID_RECORD in codes
    assert watermarks(shared_broker.bootstrap, topic)[1] <= 1


def test_consumer_passes_empty_batch_kept_for_idempotent_producer(broker_factory):
    # The first producer's records are all superseded; its last batch stays as an empty
    # batch (so that its sequence numbers survive), which the consumer must step over.
    broker, topic = compacted_topic(broker_factory, "compacted-empty-batch")
    produce_all(
        broker.bootstrap,
        topic,
        ({"key": b"key-%d" % k, "value": b"first", "partition": 0} for k in range(KEYS)),
        enable_idempotence=True,
    )
    produce_all(
        broker.bootstrap,
        topic,
        ({"key": b"key-%d" % k, "value": b"second", "partition": 0} for k in range(KEYS)),
    )
    roll_active_segment(broker.bootstrap, topic)
    records = wait_until(broker.bootstrap, topic, lambda rs: len(rs) == KEYS + 1)
    assert [r.offset for r in records] == list(range(KEYS, 2 * KEYS + 1))
    assert {r.value for r in records[:-1]} == {b"second"}
    assert any(h.record_count == 0 and h.producer_id >= 0 for h in stored_batches(broker, topic))
