"""Time-based retention deletes old segments and moves the log start offset."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING

from compat_tests.confluent_helpers import (
    consume,
    create_topic,
    produce_all,
    unique_topic,
    watermarks,
)

pytestmark = pytest.mark.timeout(60)

RECORDS = 100


def test_retention_moves_low_watermark_after_check_interval(broker_factory):
    broker = broker_factory.start_with({"log.retention.check.interval.ms": "500"})
    topic = unique_topic("retention")
    create_topic(
        broker.bootstrap,
        topic,
        config={"retention.ms": "1000", "segment.bytes": "16384", "segment.ms": "100"},
    )
    produce_all(
        broker.bootstrap,
        topic,
        ({"value": b"%04d" % i + b"." * 996, "partition": 0} for i in range(RECORDS)),
        compression_type="none",
        batch_size=4096,
    )
    assert watermarks(broker.bootstrap, topic) == (0, RECORDS)

    deadline = time.monotonic() + 20
    low, high = 0, RECORDS
    while time.monotonic() < deadline:
        low, high = watermarks(broker.bootstrap, topic)
        if low > 0:
            break
        time.sleep(0.25)
    assert low > 0, "log start offset never moved: no expired segment was deleted"
    assert high == RECORDS
    assert low <= high
    if low < high:
        records = consume(broker.bootstrap, topic, high - low, start_offset=OFFSET_BEGINNING)
        assert records[0].offset == low
        assert records[0].value.startswith(b"%04d" % low)
