"""kill -9 mid-stream with fsync-before-ack: every acknowledged record survives, in order."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError

from compat_tests.confluent_helpers import (
    consume,
    create_topic,
    make_producer,
    unique_topic,
    watermarks,
)

pytestmark = pytest.mark.timeout(120)

TOTAL = 200_000
MESSAGE_TIMEOUT_MS = 4000


def test_acknowledged_records_survive_kill_minus_nine(broker_factory):
    broker = broker_factory.start_with({"log.flush.interval.messages": "1"})
    topic = unique_topic("crash")
    create_topic(broker.bootstrap, topic)

    producer = make_producer(
        broker.bootstrap,
        acks="all",
        linger_ms=2,
        batch_num_messages=1000,
        message_timeout_ms=MESSAGE_TIMEOUT_MS,
        reconnect_backoff_max_ms=200,
    )
    acked: list[tuple[int, int]] = []  # (sequence number, offset) in delivery order
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked.append((int(msg.value()), msg.offset()))
        else:
            failures.append(err)

    killed = False
    sent = 0
    began = time.monotonic()
    for seq in range(TOTAL):
        while True:
            try:
                producer.produce(topic, value=b"%d" % seq, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        sent += 1
        if seq % 500 == 0:
            producer.poll(0)
        if len(acked) >= TOTAL // 2:
            broker.kill()
            killed = True
            break
    while not killed and time.monotonic() - began < 60:
        producer.poll(0.005)
        if len(acked) >= TOTAL // 2:
            broker.kill()
            killed = True
    assert killed, f"only {len(acked)} of {sent} records acknowledged within 60 s"
    acked_before_kill = len(acked)
    assert producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 10) == 0
    del producer
    assert acked_before_kill < sent, "kill landed after the stream had ended"
    assert len(acked) + len(failures) == sent

    broker.restart()
    low, high = watermarks(broker.bootstrap, topic)
    assert low == 0
    assert high >= len(acked), f"high watermark {high} below {len(acked)} acknowledged records"

    print(
        f"sent {sent}, acked {len(acked)} ({acked_before_kill} before the kill), "
        f"failed {len(failures)}, high watermark after restart {high}, "
        f"restart took {broker.ready_seconds:.2f}s"
    )
    records = consume(broker.bootstrap, topic, high, timeout=60, fetch_max_bytes=8 * 1024 * 1024)
    assert [r.offset for r in records] == list(range(high)), "offsets are not contiguous"
    read = [int(r.value) for r in records]

    acked_set = {seq for seq, _ in acked}
    missing = acked_set - set(read)
    assert not missing, (
        f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:10]} "
        f"(high watermark {high}, {len(acked)} acked, {sent} sent)"
    )
    acked_in_log_order = [seq for seq in read if seq in acked_set]
    out_of_order = [
        (a, b) for a, b in zip(acked_in_log_order, acked_in_log_order[1:], strict=False) if a >= b
    ]
    assert not out_of_order, f"acknowledged records duplicated or reordered: {out_of_order[:10]}"
    at = dict(enumerate(read))
    wrong_offset = [(seq, off, at.get(off)) for seq, off in acked if at.get(off) != seq]
    assert not wrong_offset, (
        f"acknowledged offsets now hold other records (seq, offset, found): {wrong_offset[:10]}"
    )
