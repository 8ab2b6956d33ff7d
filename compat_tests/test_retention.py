"""Time-based retention deletes old segments and moves the log start offset."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING

from compat_tests.confluent_helpers import (
    consume,
    create_topic,
    produce_all,
    unique_topic,
    watermarks,
)
from compat_tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

RECORDS = 100


def test_retention_moves_low_watermark_after_check_interval(broker_factory):
    broker = broker_factory.start_with({"log.retention.check.interval.ms": "500"})
    topic = unique_topic("retention")
    create_topic(
        broker.bootstrap,
        topic,
        config={"retention.ms": "1000", "internal.segment.bytes": "16384", "segment.ms": "100"},
    )
    produce_all(
        broker.bootstrap,
        topic,
        ({"value": b"%04d" % i + b"." * 996, "partition": 0} for i in range(RECORDS)),
        compression_type="none",
        batch_size=4096,
    )
    assert watermarks(broker.bootstrap, topic) == (0, RECORDS)

    low, high = eventually(
        lambda: (marks := watermarks(broker.bootstrap, topic))[0] > 0 and marks,
        timeout=20,
        what="the log start offset to move (an expired segment deleted)",
        interval=0.25,
    )
    assert high == RECORDS
    assert low <= high
    if low < high:
        records = consume(broker.bootstrap, topic, high - low, start_offset=OFFSET_BEGINNING)
        assert records[0].offset == low
        assert records[0].value.startswith(b"%04d" % low)
