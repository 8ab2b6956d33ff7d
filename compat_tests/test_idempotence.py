"""Idempotent producers against a broker killed mid-stream: no loss, no duplicate, in order.

librdkafka with enable.idempotence=true retries every batch whose answer it never got
with the same producer id and sequence numbers. A broker that wrote the batch before
it died (fsync-before-ack, so an acknowledged batch is on disk) must recognise the
retry after its restart and answer with the original offsets instead of appending a
second copy: the producer state survives the kill through the snapshots and the
replay of batch headers on recovery.
"""

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

pytestmark = pytest.mark.timeout(150)

TOTAL = 200_000
PARTITIONS = 6
KILLS = 2


def test_idempotent_stream_survives_two_kills_exactly_once(broker_factory):
    broker = broker_factory.start_with({"log.flush.interval.messages": "1"})
    topic = unique_topic("idem")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    producer = make_producer(
        broker.bootstrap,
        enable_idempotence=True,
        linger_ms=5,
        batch_num_messages=2000,
        message_timeout_ms=60000,
        reconnect_backoff_ms=50,
        reconnect_backoff_max_ms=200,
    )
    acked: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked[int(msg.value())] = (msg.partition(), msg.offset())
        else:
            failures.append(err)

    kill_points = [TOTAL * (k + 1) // (KILLS + 1) for k in range(KILLS)]
    restarts: list[float] = []
    began = time.monotonic()
    for seq in range(TOTAL):
        while True:
            try:
                producer.produce(
                    topic, value=b"%d" % seq, partition=seq % PARTITIONS, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.005)
        if seq % 1000 == 0:
            producer.poll(0)
        if kill_points and len(acked) >= kill_points[0]:
            # Kill while batches are in flight, then come back on the same port and data.
            kill_points.pop(0)
            broker.kill()
            restarts.append(broker.start())
    while kill_points and time.monotonic() - began < 60:
        producer.poll(0.001)
        if len(acked) >= kill_points[0]:
            kill_points.pop(0)
            broker.kill()
            restarts.append(broker.start())
    assert not kill_points, f"only {len(acked)} records acknowledged within 60 s"
    assert producer.flush(90) == 0, "records still undelivered"
    elapsed = time.monotonic() - began
    assert not failures, f"{len(failures)} delivery failures, first: {failures[0]}"
    assert len(acked) == TOTAL

    by_partition: dict[int, list[int]] = {}
    for p in range(PARTITIONS):
        low, high = watermarks(broker.bootstrap, topic, p)
        records = consume(
            broker.bootstrap,
            topic,
            high - low,
            partitions=(p,),
            timeout=60,
            fetch_max_bytes=8 << 20,
        )
        assert [r.offset for r in records] == list(range(low, high))
        by_partition[p] = [int(r.value) for r in records]
    seen = [seq for values in by_partition.values() for seq in values]
    duplicates = len(seen) - len(set(seen))
    assert duplicates == 0, f"{duplicates} records written twice"
    assert set(seen) == set(acked), "acknowledged records missing from the log"
    for p, values in by_partition.items():
        assert values == sorted(values), f"partition {p} out of order"
        assert values == [s for s in range(p, TOTAL, PARTITIONS)]
    for seq, (p, offset) in acked.items():
        assert by_partition[p][offset] == seq, f"record {seq} acknowledged at another offset"
    print(
        f"{TOTAL} records to {PARTITIONS} partitions in {elapsed:.1f}s with {KILLS} kill -9; "
        f"restarts took {', '.join(f'{r:.2f}s' for r in restarts)}"
    )
