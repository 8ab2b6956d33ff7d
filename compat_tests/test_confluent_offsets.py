"""Offsets as confluent-kafka sees them: watermarks, ListOffsets by time, DeleteRecords."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from confluent_kafka.admin import OffsetSpec

from compat_tests.confluent_helpers import (
    DeliveryLog,
    admin_client,
    consume,
    create_topic,
    make_consumer,
    make_producer,
    produce_all,
    unique_topic,
    watermarks,
)

pytestmark = pytest.mark.timeout(60)


def _topic_with_records(bootstrap: str, count: int, timestamps: list[int] | None = None) -> str:
    topic = unique_topic()
    create_topic(bootstrap, topic)
    produce_all(
        bootstrap,
        topic,
        (
            {
                "value": f"record-{i}".encode(),
                "partition": 0,
                **({"timestamp": timestamps[i]} if timestamps else {}),
            }
            for i in range(count)
        ),
    )
    return topic


def _timestamped_topic(bootstrap: str, one_batch: bool = False) -> tuple[str, int]:
    """Ten records one second apart, starting 100 s ago: one batch, or one batch each."""
    base = int(time.time() * 1000) - 100_000
    topic = unique_topic()
    create_topic(bootstrap, topic)
    producer = make_producer(bootstrap, linger_ms=200 if one_batch else 0)
    log = DeliveryLog()
    for i in range(10):
        producer.produce(
            topic,
            value=f"t{i}".encode(),
            partition=0,
            timestamp=base + i * 1000,
            on_delivery=log.callback,
        )
        if not one_batch:
            assert producer.flush(15) == 0
    assert producer.flush(15) == 0
    assert not log.failed, log.failed
    assert [offset for _, offset, _ in log.delivered] == list(range(10))
    return topic, base


def _offsets_for_time(bootstrap: str, topic: str, timestamp: int) -> int:
    consumer = make_consumer(bootstrap)
    try:
        (result,) = consumer.offsets_for_times([TopicPartition(topic, 0, timestamp)], timeout=10)
        assert result.error is None, result.error
        return int(result.offset)
    finally:
        consumer.close()


def test_watermarks_of_an_empty_partition_are_zero(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic)
    assert watermarks(shared_broker.bootstrap, topic) == (0, 0)


def test_watermarks_report_log_start_and_end_offsets(shared_broker):
    topic = _topic_with_records(shared_broker.bootstrap, 7)
    assert watermarks(shared_broker.bootstrap, topic) == (0, 7)


def test_record_timestamps_round_trip_as_create_time(shared_broker):
    stamps = [1_600_000_000_000 + i * 10 for i in range(5)]
    topic = _topic_with_records(shared_broker.bootstrap, 5, stamps)
    records = consume(shared_broker.bootstrap, topic, 5)
    assert [r.timestamp for r in records] == stamps


def test_offsets_for_times_finds_first_offset_at_or_after_timestamp(shared_broker):
    topic, base = _timestamped_topic(shared_broker.bootstrap)
    assert _offsets_for_time(shared_broker.bootstrap, topic, base + 3500) == 4
    assert _offsets_for_time(shared_broker.bootstrap, topic, base + 3000) == 3
    assert _offsets_for_time(shared_broker.bootstrap, topic, base - 50_000) == 0


def test_offsets_for_times_finds_the_record_inside_a_batch(shared_broker):
    """The answer is a record's offset, not the base offset of the batch holding it."""
    topic, base = _timestamped_topic(shared_broker.bootstrap, one_batch=True)
    assert _offsets_for_time(shared_broker.bootstrap, topic, base + 3500) == 4
    assert _offsets_for_time(shared_broker.bootstrap, topic, base + 9000) == 9


def test_offsets_for_times_after_last_timestamp_returns_end_marker(shared_broker):
    topic, base = _timestamped_topic(shared_broker.bootstrap)
    assert _offsets_for_time(shared_broker.bootstrap, topic, base + 60_000) == OFFSET_END


def test_admin_list_offsets_earliest_latest_and_max_timestamp(shared_broker):
    topic, base = _timestamped_topic(shared_broker.bootstrap)
    admin = admin_client(shared_broker.bootstrap)
    tp = TopicPartition(topic, 0)
    results = {}
    for name, spec in (
        ("earliest", OffsetSpec.earliest()),
        ("latest", OffsetSpec.latest()),
        ("max_timestamp", OffsetSpec.max_timestamp()),
    ):
        futures = admin.list_offsets({tp: spec}, request_timeout=10)
        results[name] = futures[tp].result(timeout=15)
    assert results["earliest"].offset == 0
    assert results["latest"].offset == 10
    assert results["max_timestamp"].offset == 9
    assert results["max_timestamp"].timestamp == base + 9000


def _delete_records(bootstrap: str, topic: str, before: int) -> int:
    admin = admin_client(bootstrap)
    tp = TopicPartition(topic, 0, before)
    futures = admin.delete_records([tp], request_timeout=10, operation_timeout=10)
    (future,) = futures.values()
    deleted = future.result(timeout=15)
    return int(deleted.low_watermark)


def test_delete_records_moves_the_low_watermark(shared_broker):
    topic = _topic_with_records(shared_broker.bootstrap, 10)
    assert _delete_records(shared_broker.bootstrap, topic, 4) == 4
    assert watermarks(shared_broker.bootstrap, topic) == (4, 10)


def test_delete_records_to_high_watermark_with_offset_minus_one_empties_partition(shared_broker):
    topic = _topic_with_records(shared_broker.bootstrap, 10)
    assert _delete_records(shared_broker.bootstrap, topic, -1) == 10
    assert watermarks(shared_broker.bootstrap, topic) == (10, 10)


def test_consumption_from_beginning_starts_at_new_low_watermark(shared_broker):
    topic = _topic_with_records(shared_broker.bootstrap, 10)
    _delete_records(shared_broker.bootstrap, topic, 4)
    records = consume(shared_broker.bootstrap, topic, 6, start_offset=OFFSET_BEGINNING)
    assert [r.offset for r in records] == list(range(4, 10))
    assert [r.value for r in records] == [f"record-{i}".encode() for i in range(4, 10)]


def test_fetch_below_low_watermark_resets_to_earliest(shared_broker):
    """Offset 0 is now out of range; auto.offset.reset=earliest lands on the low watermark."""
    topic = _topic_with_records(shared_broker.bootstrap, 10)
    _delete_records(shared_broker.bootstrap, topic, 7)
    records = consume(shared_broker.bootstrap, topic, 3, start_offset=0)
    assert [r.offset for r in records] == [7, 8, 9]


def test_produce_after_delete_records_continues_offsets(shared_broker):
    topic = _topic_with_records(shared_broker.bootstrap, 5)
    _delete_records(shared_broker.bootstrap, topic, 5)
    log = produce_all(shared_broker.bootstrap, topic, [{"value": b"next", "partition": 0}])
    assert [offset for _, offset, _ in log.delivered] == [5]
    (record,) = consume(shared_broker.bootstrap, topic, 1, start_offset=OFFSET_BEGINNING)
    assert (record.offset, record.value) == (5, b"next")
