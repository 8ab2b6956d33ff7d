"""A clean SIGTERM restart of a broker holding many segments: quick, and nothing lost."""

from __future__ import annotations

import time

import pytest

from compat_tests.confluent_helpers import (
    consume,
    create_topic,
    per_partition,
    produce_all,
    unique_topic,
    watermarks,
)

pytestmark = pytest.mark.timeout(150)

PARTITIONS = 100
RECORDS_PER_PARTITION = 200
VALUE_BYTES = 1000
SEGMENT_BYTES = 16 * 1024
MIN_SEGMENTS = 10
MAX_RESTART_S = 5.0


def _value(partition: int, i: int) -> bytes:
    return f"{partition}:{i}:".encode().ljust(VALUE_BYTES, b".")


def _segment_counts(data_dir, topic: str) -> dict[int, int]:
    return {p: len(list((data_dir / f"{topic}-{p}").glob("*.log"))) for p in range(PARTITIONS)}


def test_clean_restart_with_many_segments_is_fast_and_keeps_all_data(broker):
    topic = unique_topic("restart")
    create_topic(
        broker.bootstrap,
        topic,
        partitions=PARTITIONS,
        config={"internal.segment.bytes": str(SEGMENT_BYTES)},
    )
    produce_all(
        broker.bootstrap,
        topic,
        (
            {"key": b"%d" % i, "value": _value(p, i), "partition": p}
            for i in range(RECORDS_PER_PARTITION)
            for p in range(PARTITIONS)
        ),
        timeout=90,
        compression_type="none",
        batch_size=4096,
        linger_ms=5,
    )
    counts = _segment_counts(broker.data_dir, topic)
    thin = {p: n for p, n in counts.items() if n < MIN_SEGMENTS}
    assert not thin, f"partitions with fewer than {MIN_SEGMENTS} segments: {thin}"

    stopping = time.monotonic()
    assert broker.stop() == 0, "SIGTERM did not end the broker with exit code 0"
    stop_seconds = time.monotonic() - stopping
    ready_seconds = broker.start()
    assert ready_seconds < MAX_RESTART_S, (
        f"restart took {ready_seconds:.2f}s (stop took {stop_seconds:.2f}s)"
    )

    assert watermarks(broker.bootstrap, topic, PARTITIONS - 1) == (0, RECORDS_PER_PARTITION)
    records = consume(
        broker.bootstrap,
        topic,
        PARTITIONS * RECORDS_PER_PARTITION,
        partitions=range(PARTITIONS),
        timeout=60,
    )
    got = per_partition(records)
    assert sorted(got) == list(range(PARTITIONS))
    for p, items in got.items():
        assert [r.offset for r in items] == list(range(RECORDS_PER_PARTITION)), p
        assert [r.value for r in items] == [_value(p, i) for i in range(RECORDS_PER_PARTITION)], p


def test_sigterm_stops_the_broker_with_exit_code_zero(broker):
    topic = unique_topic("stop")
    create_topic(broker.bootstrap, topic)
    produce_all(broker.bootstrap, topic, [{"value": b"before-stop", "partition": 0}])
    assert broker.stop(timeout=10) == 0
    broker.start()
    (record,) = consume(broker.bootstrap, topic, 1)
    assert record.value == b"before-stop"
