"""What Spark's Kafka source and sink depend on, checked by driving Spark itself.

Spark 4.0's connector uses the Java client (kafka-clients 3.9): an AdminClient resolves
offsets (ListOffsets by timestamp, earliest/latest under the consumer's isolation level)
and partitions (describeTopics, which that client sends as DescribeTopicPartitions), and
consumers fetch assigned offset ranges, seeking into the middle of record batches. Each
test states one behaviour a pipeline relies on, in the terms of a Spark option.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from compat_tests.broker_process import BrokerProcess, free_port, running_broker, stored_batches
from compat_tests.confluent_helpers import (
    admin_client,
    create_topic,
    produce_all,
    unique_topic,
    watermarks,
)
from compat_tests.metrics_scrape import sample_key, scrape
from compat_tests.spark_support import read_topic, spark_session_or_skip
from compat_tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)

# Record timestamps in the recent past: older ones would fall to the 7-day retention
# that this module's broker checks every 300 ms.
T0 = (int(time.time()) // 60 - 60) * 60_000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from spark_session_or_skip("test-kafka-source")


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One node for the module, with /metrics, to see which APIs Spark's client sends."""
    settings = {
        "http.listeners": f"http://127.0.0.1:{free_port()}",
        "log.retention.check.interval.ms": "300",
    }
    with running_broker(tmp_path_factory.mktemp("spark-source-broker"), settings) as node:
        yield node


def requests_served(node: BrokerProcess, api: str) -> float:
    """How many requests of ``api`` the node has answered, from its /metrics."""
    http = node.overrides["http.listeners"].removeprefix("http://")
    served = sample_key("kafka_network_requestmetrics_requests_total", request=api)
    return scrape(http).get(served, 0.0)


def read_kafka(spark: Any, bootstrap: str, topic: str, **options: str) -> list[Any]:
    """A batch read of ``topic`` with Spark's Kafka source, rows in (partition, offset) order."""
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return sorted(reader.load().collect(), key=lambda r: (r.partition, r.offset))


def values(rows: list[Any]) -> list[str]:
    return [bytes(r.value).decode() for r in rows]


def test_starting_and_ending_offsets_by_timestamp_pick_the_first_record_at_or_after_each(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-ts")
    create_topic(shared_broker.bootstrap, topic)
    # Timestamps are not monotonic: the answer is the first offset whose timestamp is at or
    # after the target, not the offset of the nearest timestamp.
    stamps = [0, 1000, 3000, 2000, 5000, 4000, 6000, 7000]
    produce_all(
        shared_broker.bootstrap,
        topic,
        ({"value": f"r{i}".encode(), "timestamp": T0 + ts} for i, ts in enumerate(stamps)),
    )
    rows = read_kafka(
        spark,
        shared_broker.bootstrap,
        topic,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 2500}}}}}',
        endingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 4500}}}}}',
    )
    # From offset 2 (3000 >= 2500) up to, not including, offset 4 (5000 >= 4500).
    assert [r.offset for r in rows] == [2, 3]
    assert [int(r.timestamp.timestamp() * 1000) - T0 for r in rows] == [3000, 2000]


def test_starting_offsets_by_timestamp_after_every_record_read_nothing_with_strategy_latest(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-ts-none")
    create_topic(shared_broker.bootstrap, topic)
    produce_all(shared_broker.bootstrap, topic, [{"value": b"old", "timestamp": T0}])
    rows = read_kafka(
        spark,
        shared_broker.bootstrap,
        topic,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 60_000}}}}}',
        startingOffsetsByTimestampStrategy="latest",
    )
    assert rows == []


def _transactional(bootstrap: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"spark-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(15)
    return producer


def _transaction(producer: Producer, topic: str, values_: list[str], commit: bool | None) -> None:
    producer.begin_transaction()
    for value in values_:
        producer.produce(topic, value=value.encode())
    producer.flush(15)
    if commit is True:
        producer.commit_transaction(15)
    elif commit is False:
        producer.abort_transaction(15)


def test_read_committed_stops_at_an_open_transaction_and_never_shows_aborted_records(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-txn")
    create_topic(shared_broker.bootstrap, topic)
    producer = _transactional(shared_broker.bootstrap)
    _transaction(producer, topic, ["c1", "c2"], commit=True)
    _transaction(producer, topic, ["a1", "a2"], commit=False)
    _transaction(producer, topic, ["o1"], commit=None)  # still open

    committed = {"kafka.isolation.level": "read_committed"}
    # Latest under read_committed is the last stable offset: the open transaction's start.
    assert values(read_kafka(spark, shared_broker.bootstrap, topic, **committed)) == ["c1", "c2"]
    uncommitted = values(read_kafka(spark, shared_broker.bootstrap, topic))
    assert uncommitted == ["c1", "c2", "a1", "a2", "o1"]

    producer.commit_transaction(15)
    after = values(read_kafka(spark, shared_broker.bootstrap, topic, **committed))
    assert after == ["c1", "c2", "o1"]


def test_a_streaming_query_finds_partitions_added_while_it_runs(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-grow")
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    produce_all(shared_broker.bootstrap, topic, ({"value": b"x", "partition": p} for p in range(2)))
    name = f"grow_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        _wait_rows(spark, query, name, 2)
        described = requests_served(shared_broker, "DescribeTopicPartitions")
        admin = admin_client(shared_broker.bootstrap)
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(15)
        produce_all(
            shared_broker.bootstrap, topic, ({"value": b"y", "partition": p} for p in range(4))
        )
        rows = _wait_rows(spark, query, name, 6)
    finally:
        query.stop()
    assert sorted(r.partition for r in rows) == [0, 0, 1, 1, 2, 3]
    # Spark's admin client learns the partitions with DescribeTopicPartitions each trigger.
    assert requests_served(shared_broker, "DescribeTopicPartitions") > described


def _wait_rows(spark: Any, query: Any, name: str, count: int, timeout: float = 90) -> list[Any]:
    failed: list[Any] = []

    def enough() -> list[Any] | None:
        if query.exception() is not None:
            failed.append(query.exception())
            return [None]  # stops the wait: the failure is raised below
        rows = spark.sql(f"select * from {name}").collect()
        assert len(rows) >= count, f"{len(rows)} of {count} rows"
        return rows

    rows = eventually(enough, timeout=timeout, what=f"{count} rows in {name}", interval=0.3)
    if failed:
        raise AssertionError(f"streaming query failed: {failed[0]}")
    return rows


def test_reading_from_an_offset_inside_a_compressed_batch_starts_at_that_offset(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-mid")
    create_topic(shared_broker.bootstrap, topic)
    produce_all(
        shared_broker.bootstrap,
        topic,
        ({"value": f"v{i}".encode() + b"." * 200} for i in range(10)),
        linger_ms=1000,
        compression_type="lz4",
    )
    # The producer batches as it likes (and compresses only what shrinks, hence the
    # padding); read from the middle of its largest batch.
    batch = max(stored_batches(shared_broker, topic), key=lambda b: b.record_count)
    assert batch.record_count >= 4 and batch.attributes & 0x7 == 3, batch
    start, end = batch.base_offset + 2, batch.base_offset + batch.record_count - 1
    rows = read_kafka(
        spark,
        shared_broker.bootstrap,
        topic,
        startingOffsets=f'{{"{topic}": {{"0": {start}}}}}',
        endingOffsets=f'{{"{topic}": {{"0": {end}}}}}',
    )
    assert [(r.offset, bytes(r.value)) for r in rows] == [
        (offset, f"v{offset}".encode() + b"." * 200) for offset in range(start, end)
    ]


def test_min_partitions_splits_one_kafka_partition_and_reads_each_record_once(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-split")
    create_topic(shared_broker.bootstrap, topic)
    produce_all(shared_broker.bootstrap, topic, ({"value": str(i).encode()} for i in range(300)))
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", shared_broker.bootstrap)
        .option("subscribe", topic)
        .option("minPartitions", "4")
        .load()
    )
    assert frame.rdd.getNumPartitions() == 4
    offsets = sorted(r.offset for r in frame.select("offset").collect())
    assert offsets == list(range(300))


def test_include_headers_gives_every_header_in_order_with_duplicates_and_nulls(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-headers")
    create_topic(shared_broker.bootstrap, topic)
    headers = [("trace", b"\x00\x01"), ("tag", b"a"), ("tag", b"b"), ("empty", None)]
    produce_all(
        shared_broker.bootstrap,
        topic,
        [{"value": b"with", "headers": headers}, {"value": b"without"}],
    )
    rows = read_kafka(spark, shared_broker.bootstrap, topic, includeHeaders="true")
    got = [
        [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []]
        for r in rows
    ]
    assert got == [headers, []]


def test_kafka_sink_writes_keys_values_headers_and_partitions_with_the_idempotent_producer(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-sink")
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    rows = [
        (f"k{i}".encode(), f"v{i}".encode(), i % 3, [("n", str(i).encode())]) for i in range(30)
    ]
    frame = spark.createDataFrame(
        rows,
        "key binary, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    (
        frame.write.format("kafka")
        .option("kafka.bootstrap.servers", shared_broker.bootstrap)
        .option("topic", topic)
        .save()
    )
    written = read_topic(shared_broker.bootstrap, topic, partitions=3)
    assert sorted((r.partition, r.key, r.value, tuple(r.headers or [])) for r in written) == sorted(
        (p, k, v, tuple(h)) for k, v, p, h in rows
    )
    for partition in range(3):
        batches = stored_batches(shared_broker, topic, partition)
        assert batches and all(b.producer_id >= 0 for b in batches), batches
        # Sequences continue from batch to batch per producer: no gap, no repeat.
        by_producer: dict[int, int] = {}
        for b in batches:
            expected = by_producer.get(b.producer_id, 0)
            assert b.base_sequence == expected, batches
            by_producer[b.producer_id] = expected + b.record_count


def _drain_records(
    spark: Any, bootstrap: str, topic: str, checkpoint: Path, **options: str
) -> list[tuple[int, bytes]]:
    """Run a query over everything available now, resuming from ``checkpoint``; return
    the (offset, value) pairs this run read."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    seen: list[tuple[int, bytes]] = []

    def collect(batch: Any, _batch_id: int) -> None:
        seen.extend((r.offset, bytes(r.value)) for r in batch.select("offset", "value").collect())

    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    except Exception as exc:  # StreamingQueryException: what stopped the query
        raise RuntimeError(str(exc)) from exc
    finally:
        query.stop()
    return sorted(seen)


def _drain(spark: Any, bootstrap: str, topic: str, checkpoint: Path, **options: str) -> list[int]:
    """The offsets a run over everything available now read."""
    return [offset for offset, _ in _drain_records(spark, bootstrap, topic, checkpoint, **options)]


def test_a_read_committed_stream_delivers_exactly_the_committed_records_batch_after_batch(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique_topic("spark-txn-stream")
    create_topic(shared_broker.bootstrap, topic)
    producer = _transactional(shared_broker.bootstrap)
    committed: list[bytes] = []
    for n in range(6):
        batch = [f"t{n}-{i}" for i in range(3)]
        _transaction(producer, topic, batch, commit=n % 2 == 0)
        if n % 2 == 0:
            committed += [v.encode() for v in batch]
    # Five offsets per micro-batch: batch bounds fall on aborted records and markers.
    got = _drain_records(
        spark,
        shared_broker.bootstrap,
        topic,
        tmp_path / "cp",
        **{"kafka.isolation.level": "read_committed", "maxOffsetsPerTrigger": "5"},
    )
    assert [value for _, value in got] == committed


def test_fail_on_data_loss_stops_a_query_whose_next_offsets_were_deleted(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique_topic("spark-loss")
    create_topic(shared_broker.bootstrap, topic)
    produce_all(shared_broker.bootstrap, topic, ({"value": b"a"} for _ in range(10)))
    assert _drain(spark, shared_broker.bootstrap, topic, tmp_path / "strict") == list(range(10))
    assert _drain(spark, shared_broker.bootstrap, topic, tmp_path / "lenient") == list(range(10))

    produce_all(shared_broker.bootstrap, topic, ({"value": b"b"} for _ in range(10)))
    admin = admin_client(shared_broker.bootstrap)
    deleted = admin.delete_records([TopicPartition(topic, 0, 15)])
    for future in deleted.values():
        future.result(15)
    assert watermarks(shared_broker.bootstrap, topic)[0] == 15

    with pytest.raises(
        RuntimeError, match="(?i)data (may have been|was) lost|not available|out of range"
    ):
        _drain(spark, shared_broker.bootstrap, topic, tmp_path / "strict")
    resumed = _drain(
        spark, shared_broker.bootstrap, topic, tmp_path / "lenient", failOnDataLoss="false"
    )
    assert resumed == list(range(15, 20))


def test_fail_on_data_loss_stops_a_query_whose_next_offsets_retention_deleted(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique_topic("spark-retained")
    create_topic(shared_broker.bootstrap, topic, config={"internal.segment.bytes": "4096"})
    day_ago = int(time.time() * 1000) - 86_400_000
    old = [{"value": b"%04d" % i + b"." * 996, "timestamp": day_ago} for i in range(10)]
    produce_all(shared_broker.bootstrap, topic, old, batch_size=2048)
    for checkpoint in ("strict", "lenient"):
        assert _drain(spark, shared_broker.bootstrap, topic, tmp_path / checkpoint) == list(
            range(10)
        )
    produce_all(shared_broker.bootstrap, topic, old * 4, batch_size=2048)
    # Retention of an hour now covers none of these day-old segments but the active one.
    admin = admin_client(shared_broker.bootstrap)
    entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(15)
    low = eventually(
        lambda: (start := watermarks(shared_broker.bootstrap, topic)[0]) > 10 and start,
        timeout=30,
        what="retention to delete a segment",
        interval=0.2,
    )

    with pytest.raises(RuntimeError, match="(?i)data may have been lost"):
        _drain(spark, shared_broker.bootstrap, topic, tmp_path / "strict")
    resumed = _drain(
        spark, shared_broker.bootstrap, topic, tmp_path / "lenient", failOnDataLoss="false"
    )
    assert resumed == list(range(low, 50))


def test_a_batch_larger_than_the_fetch_size_limits_is_still_delivered(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    topic = unique_topic("spark-big-batch")
    create_topic(shared_broker.bootstrap, topic)
    produce_all(
        shared_broker.bootstrap,
        topic,
        ({"value": bytes([65 + i % 26]) * 2000} for i in range(20)),
        linger_ms=100,
    )
    # As Kafka does (KIP-74), the first batch comes whole even when it exceeds both limits.
    rows = read_kafka(
        spark,
        shared_broker.bootstrap,
        topic,
        **{"kafka.max.partition.fetch.bytes": "500", "kafka.fetch.max.bytes": "600"},
    )
    assert [r.offset for r in rows] == list(range(20))
    assert all(len(r.value) == 2000 for r in rows)


def test_latest_offsets_never_move_back_across_a_broker_restart(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique_topic("spark-restart")
    create_topic(broker.bootstrap, topic)
    produce_all(broker.bootstrap, topic, ({"value": b"before"} for _ in range(20)))
    assert _drain(spark, broker.bootstrap, topic, tmp_path / "cp") == list(range(20))
    broker.restart(graceful=False)
    produce_all(broker.bootstrap, topic, ({"value": b"after"} for _ in range(5)))
    # failOnDataLoss (the default) fails the query if the latest offset went below 20.
    assert _drain(spark, broker.bootstrap, topic, tmp_path / "cp") == list(range(20, 25))
