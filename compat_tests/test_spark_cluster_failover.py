"""Spark Structured Streaming queries keep running while a broker of a 3-node cluster
is killed with kill -9, and their outputs hold every acknowledged record once.

Source and sink topics are replicated as production topics would be (RF=3,
min.insync.replicas=2); an idempotent acks=all producer writes to the source at a
steady rate while two queries read it (readStream.format("kafka"), a micro-batch a
second): one writes Parquet with a checkpoint, Spark's exactly-once sink; the other
writes a Kafka topic with an idempotent acks=all producer.
Mid-stream the broker leading a source partition, and a partition of the sink, is
killed; the cluster elects other leaders and the queries must neither fail nor lose or
repeat a record.

One client setting is not stock: the connector's driver resolves offsets with the Java
AdminClient, which keeps a ListOffsets call pinned to the leader its metadata named
until the call's timeout (default.api.timeout.ms, 60 s), even when that broker refuses
connections; until the broker is fenced every broker, as on Kafka, still names it. The
source's ``kafka.request.timeout.ms`` / ``kafka.default.api.timeout.ms`` bound that
wait the way an operator of a failover-sensitive pipeline would, so the next attempt
asks the new leader within seconds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.cluster import KafkaCluster
from compat_tests.confluent_helpers import produce_all, unique_topic, watermarks
from compat_tests.spark_support import offsets_of, read_topic, spark_session_or_skip

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 2
RECORDS = 3000
WARM_UP = 20  # records the queries' first batches read before the steady input starts
RATE_PER_S = 200  # about 15 s of input; the kill lands in its first half
KILL_AFTER = RECORDS // 3  # acknowledged records


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from spark_session_or_skip("test-cluster-failover")


class _Acked:
    """The keys an idempotent acks=all producer had acknowledged, and any it did not."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.failed: list[str] = []
        self.lock = threading.Lock()

    def delivered(self, err: Any, msg: Any) -> None:
        with self.lock:
            (self.failed if err is not None else self.keys).append(msg.key().decode())


def _produce_steadily(
    bootstrap: str, topic: str, acked: _Acked, go: threading.Event, done: threading.Event
) -> None:
    """The first WARM_UP records at once, the rest at RATE_PER_S once ``go`` is set."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
        }
    )
    try:
        for i in range(WARM_UP):
            producer.produce(topic, key=b"k%05d" % i, value=b"v%d" % i, on_delivery=acked.delivered)
        producer.flush(30)
        go.wait(120)
        began = time.monotonic()
        for i in range(WARM_UP, RECORDS):
            # Keys spread over both partitions by the default partitioner.
            producer.produce(topic, key=b"k%05d" % i, value=b"v%d" % i, on_delivery=acked.delivered)
            producer.poll(0)
            ahead = began + (i - WARM_UP + 1) / RATE_PER_S - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing: the producer's rate
        producer.flush(60)
    finally:
        done.set()


def _source_ends(bootstrap: str, topic: str) -> dict[str, int]:
    return {str(p): watermarks(bootstrap, topic, p)[1] for p in range(PARTITIONS)}


def _processed_up_to(query: Any, topic: str) -> dict[str, int]:
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return {}
    return offsets_of(progress["sources"][0]["endOffset"]).get(topic, {})


def _create(cluster: KafkaCluster, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = cluster.admin()
    created = admin.create_topics(
        [NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})],
        operation_timeout=10,
    )
    created[topic].result(timeout=15)


def _start_queries(
    spark: Any, cluster: KafkaCluster, source: str, sink: str, out: Path
) -> list[Any]:
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        # A ListOffsets call pinned to the killed leader gives up after 10 s, not 60 s.
        .option("kafka.request.timeout.ms", "5000")
        .option("kafka.default.api.timeout.ms", "10000")
        .load()
    )
    to_parquet = (
        stream.selectExpr("CAST(key AS STRING) AS key", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out / "parquet"))
        .option("checkpointLocation", str(out / "parquet-checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    to_kafka = (
        stream.selectExpr("key", "value")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", sink)
        .option("kafka.enable.idempotence", "true")
        .option("kafka.acks", "all")
        .option("checkpointLocation", str(out / "kafka-checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    return [to_parquet, to_kafka]


def _duplicates_and_missing(
    written: Counter[str], acked: list[str]
) -> tuple[dict[str, int], list[str]]:
    repeated = {k: n for k, n in written.items() if n > 1}
    return repeated, sorted(set(acked) - set(written))


def test_streaming_queries_survive_the_kill_of_a_leader_and_write_each_record_once(
    spark: Any, cluster: KafkaCluster, tmp_path: Path
) -> None:
    source, sink = unique_topic("failover-src"), unique_topic("failover-sink")
    _create(cluster, source, PARTITIONS)
    # One sink partition per broker: the assignment spreads their leaders over the nodes.
    _create(cluster, sink, 3)
    queries = _start_queries(spark, cluster, source, sink, tmp_path)
    acked = _Acked()
    go, done = threading.Event(), threading.Event()
    writer = threading.Thread(
        target=_produce_steadily, args=(cluster.bootstrap, source, acked, go, done), daemon=True
    )

    def failed() -> None:
        for query in queries:
            if query.exception() is not None:
                raise AssertionError(f"a query failed: {query.exception()}")

    try:
        writer.start()
        cluster.wait_until(
            lambda: all(sum(_processed_up_to(q, source).values()) > 0 for q in queries),
            60.0,
            "both queries to commit a batch with input",
        )
        go.set()
        cluster.wait_until(lambda: len(acked.keys) >= KILL_AFTER, 60.0, f"{KILL_AFTER} acks")
        victim = cluster.partition(source, 0).leader
        sink_leaders = {cluster.partition(sink, p).leader for p in range(3)}
        assert victim in sink_leaders, f"broker {victim} leads no sink partition"
        killed_at = len(acked.keys)
        cluster.kill(victim)
        killed = time.monotonic()
        cluster.wait_until(
            lambda: cluster.partition(source, 0).leader not in (victim, -1),
            15.0,
            f"a new leader of {source}-0 after broker {victim}",
        )
        failover_s = time.monotonic() - killed
        assert done.wait(90), "the producer did not finish"
        writer.join(5)
        ends = _source_ends(cluster.bootstrap, source)

        def caught_up() -> bool:
            failed()
            return all(_processed_up_to(q, source) == ends for q in queries)

        cluster.wait_until(caught_up, 60.0, f"the queries to process up to {ends}")
        failed()
        assert all(q.isActive for q in queries)
    finally:
        go.set()
        for query in queries:
            query.stop()
        writer.join(5)
        cluster.heal()
    print(f"failover {failover_s:.1f}s, killed after {killed_at} acks, offsets {ends}")
    assert acked.failed == [], f"{len(acked.failed)} records were not acknowledged"
    assert killed_at < RECORDS * 2 // 3, "the kill did not land while records were produced"

    rows = spark.read.parquet(str(tmp_path / "parquet")).select("key").collect()
    repeated, missing = _duplicates_and_missing(Counter(r["key"] for r in rows), acked.keys)
    assert repeated == {}, f"Parquet: {len(repeated)} records written more than once"
    assert missing == [], f"Parquet: {len(missing)} acknowledged records missing: {missing[:5]}"
    assert len(rows) == len(acked.keys)

    sunk = read_topic(cluster.bootstrap, sink, partitions=3)
    repeated, missing = _duplicates_and_missing(Counter(r.key.decode() for r in sunk), acked.keys)
    assert repeated == {}, f"Kafka sink: {len(repeated)} records written more than once"
    assert missing == [], f"Kafka sink: {len(missing)} acknowledged records missing: {missing[:5]}"
    assert len(sunk) == len(acked.keys)


def _read_all(spark: Any, cluster: KafkaCluster, topic: str) -> list[tuple[int, bytes]]:
    """A batch read of every record Spark's source finds in ``topic`` (earliest to latest)."""
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("kafka.request.timeout.ms", "5000")
        .option("kafka.default.api.timeout.ms", "10000")
        .load()
        .select("offset", "value")
        .collect()
    )
    return sorted((r.offset, bytes(r.value)) for r in rows)


def test_records_deleted_before_a_failover_stay_deleted_on_every_replica(
    spark: Any, cluster: KafkaCluster
) -> None:
    """DeleteRecords answers once every live replica has moved its log start, so the next
    leader does not serve the deleted records again; a replica that was down meanwhile,
    its log ending below the new log start, starts again there when it comes back."""
    from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

    topic = unique_topic("failover-deleted")
    _create(cluster, topic, 1)
    cluster.wait_for_full_isr(topic)
    # The preferred replica, which a preferred election makes leader again below.
    first = cluster.partition(topic).replicas[0]
    cluster.wait_until(lambda: cluster.partition(topic).leader == first, 15.0, "the leader")
    batches = {"linger_ms": 50}  # a few records a batch: a log start falls inside one
    produce_all(cluster.bootstrap, topic, ({"value": b"%d" % i} for i in range(20)), **batches)

    def delete_before(offset: int) -> None:
        # A new client each time: librdkafka's admin sends DeleteRecords to the leader its
        # cached metadata names, even a killed one. Right after a failover on a loaded
        # machine its look-up of the leader may time out; an operator asks again.
        for attempt in range(3):
            admin = cluster.admin()
            try:
                for deleted in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
                    deleted.result(15)
                return
            except KafkaException as exc:
                if attempt == 2 or exc.args[0].code() != KafkaError._TIMED_OUT:
                    raise

    try:
        delete_before(12)
        cluster.kill(first)
        cluster.wait_until(
            lambda: cluster.partition(topic).leader not in (first, -1), 15.0, "a new leader"
        )
        after_failover = _read_all(spark, cluster, topic)
        produce_all(
            cluster.bootstrap, topic, ({"value": b"%d" % i} for i in range(20, 30)), **batches
        )
        delete_before(25)  # past the end of the stopped replica's log
        cluster.heal()
        cluster.wait_for_full_isr(topic)

        def leads_again() -> bool:
            admin = cluster.admin()  # kept alive until the answer arrives
            elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
            elected.result(timeout=15)
            return bool(cluster.partition(topic).leader == first)

        cluster.wait_until(leads_again, 20.0, f"broker {first} to lead {topic} again")
        on_the_restarted = _read_all(spark, cluster, topic)
    finally:
        cluster.heal()
    assert after_failover == [(i, b"%d" % i) for i in range(12, 20)]
    assert on_the_restarted == [(i, b"%d" % i) for i in range(25, 30)]
