"""Workloads for the Kafka-wire peers, driven by confluent-kafka (librdkafka).

The same client settings are used for every Kafka peer so the broker is the only
variable. They are kept here as constants and printed into the JSON report.
"""

from __future__ import annotations

import os
import time
from time import perf_counter

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.metadata_probe import wait_for_metadata
from bench.results import Latency, Throughput

# Nagle off: one-at-a-time latency must not include a delayed-ACK stall on loopback.
CLIENT_COMMON = {"socket.nagle.disable": True, "client.id": "kbroker-bench"}

# Workload 1: large batches, one partition, full acknowledgement. Only failed deliveries
# are reported back, so the client pays no per-record callback on the happy path.
PRODUCER_BATCHED = {
    **CLIENT_COMMON,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "delivery.report.only.error": True,
    "message.timeout.ms": 120_000,
}

# The replication and transaction benchmarks (produce_rate): workload 1's batching, room
# for two million records in the client's queue so a tight loop of produce() seldom meets
# a full one, and librdkafka's own message.timeout.ms, which a transactional producer
# needs no larger than its transaction.timeout.ms.
PRODUCER_BULK = {
    **CLIENT_COMMON,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "delivery.report.only.error": True,
    "queue.buffering.max.messages": 2_000_000,
}

# Workload 3: nothing waits in the client; each record is its own Produce request.
PRODUCER_ONE_AT_A_TIME = {
    **CLIENT_COMMON,
    "acks": "all",
    "linger.ms": 0,
    "compression.type": "none",
    "message.timeout.ms": 10_000,
}

# Workload 2: fetch large responses and keep a deep local queue so the consumer is
# never waiting on a round trip it could have overlapped.
#   fetch.max.bytes            50 MiB per Fetch response (Kafka's default cap)
#   max.partition.fetch.bytes  8 MiB per partition per Fetch (default 1 MiB)
#   fetch.min.bytes            answer as soon as anything is there
#   fetch.wait.max.ms          1 ms: a Fetch parks only at the end of the log, which a run
#                              reading N stored records never reaches, except on the mock,
#                              whose retained window is re-read (see consume_all)
#   queued.min.messages        prefetch up to 1,000,000 records ahead of the application
#   queued.max.messages.kbytes ... or 256 MiB, whichever comes first
CONSUMER_FETCH = {
    **CLIENT_COMMON,
    "group.id": "kbroker-bench",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    # Never skip silently: an out-of-range offset must show up as an error.
    "auto.offset.reset": "error",
    "fetch.max.bytes": 50 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 1,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 256 * 1024,
}

CONSUME_BATCH = 10_000


def _warm(client, topic: str) -> None:
    """Connects and learns the partition leader before the clock starts."""
    client.list_topics(topic, timeout=15)


def create_topics(bootstrap: str, topics: dict[str, int], timeout: float = 60.0) -> None:
    """Creates topics with CreateTopics and waits until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_COMMON})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items()],
        operation_timeout=timeout,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise RuntimeError(f"creating topic {name} failed: {exc}") from exc
    host, port = bootstrap.rsplit(":", 1)
    for name, n in topics.items():
        _, full = wait_for_metadata(host, int(port), perf_counter() + timeout, name, n)
        if full is None:
            raise RuntimeError(f"topic {name} did not get {n} led partitions in {timeout} s")


def produce_rate(
    producer: Producer, topic: str, records: int, value: bytes, partitions: int = 1
) -> float:
    """Records per second from the first produce() to flush()'s return, record i into
    partition i % partitions; a full client queue is waited out, never dropped."""
    started = perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records left undelivered")
    return records / (perf_counter() - started)


def produce_batched(
    bootstrap: str,
    topic: str,
    count: int,
    size: int,
    time_limit: float,
    security: dict | None = None,
    value: bytes | None = None,
) -> Throughput:
    """Tight produce loop into partition 0, timed from the first produce to flush()'s return.

    ``security`` adds client settings (security.protocol, sasl.*, ssl.*) to the rest;
    ``value`` replaces the random value of ``size`` bytes."""
    failures = [0]

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures[0] += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_BATCHED,
            **(security or {}),
            "on_delivery": on_delivery,
        }
    )
    _warm(producer, topic)
    if value is None:
        value = os.urandom(size)
    produce, poll = producer.produce, producer.poll
    sent = 0
    truncated = False
    start = perf_counter()
    deadline = start + time_limit
    while sent < count:
        try:
            produce(topic, value, partition=0)
        except BufferError:
            poll(0.01)
            continue
        poll(0)
        sent += 1
        if not sent & 0xFFF and perf_counter() > deadline:
            truncated = True
            break
    unsent = producer.flush(max(deadline - perf_counter(), 0) + 60)
    seconds = perf_counter() - start
    delivered = sent - failures[0] - unsent
    return Throughput(
        records=delivered,
        nbytes=delivered * size,
        seconds=seconds,
        errors=failures[0] + unsent,
        truncated=truncated,
    )


def consume_all(
    bootstrap: str,
    topic: str,
    count: int,
    time_limit: float,
    rewind: bool = False,
    stall_seconds: float = 10.0,
    security: dict | None = None,
) -> Throughput:
    """Reads partition 0 from offset 0 until `count` records arrived (or the time limit).

    With `rewind`, reading starts at the log start offset and seeks back there each time
    the end is reached, until `count` records were read: for a broker that keeps only a
    window of the partition (librdkafka's mock keeps the last 5 MiB), this measures
    serving that window over and over.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_FETCH, **(security or {})})
    try:
        _warm(consumer, topic)
        low, high = 0, -1
        if rewind:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        got = nbytes = errors = 0
        start = perf_counter()
        deadline = start + time_limit
        last_data = start
        consumer.assign([TopicPartition(topic, 0, low)])
        consume = consumer.consume
        position = low
        while got < count:
            now = perf_counter()
            if now > deadline or now - last_data > stall_seconds:
                break
            # consume() returns early only once it has num_messages: never ask for more
            # than can arrive, or the last call of a run would sit out its timeout.
            want = min(CONSUME_BATCH, count - got)
            if rewind:
                want = min(want, high - position)
            batch = consume(num_messages=want, timeout=1.0)
            if not batch:
                continue
            last_data = perf_counter()
            bad = sum(1 for m in batch if m.error() is not None)
            if bad and not errors:
                first = next(m for m in batch if m.error() is not None)
                print(f"    consume error: {first.error()}", flush=True)
            errors += bad
            got += len(batch) - bad
            nbytes += sum(map(len, batch))
            position = max(position, batch[-1].offset() + 1)
            if rewind and position >= high:
                consumer.seek(TopicPartition(topic, 0, low))
                position = low
        seconds = perf_counter() - start
    finally:
        consumer.close()
    return Throughput(
        records=got, nbytes=nbytes, seconds=seconds, errors=errors, truncated=got < count
    )


def produce_one_at_a_time(
    bootstrap: str, topic: str, count: int, size: int, time_limit: float
) -> Latency:
    """Produce one record, wait for its acknowledgement, repeat; per-record latency."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_ONE_AT_A_TIME})
    _warm(producer, topic)
    value = os.urandom(size)
    state: list = [False, None]  # delivered?, error

    def on_delivery(err, _msg) -> None:
        state[0] = True
        state[1] = err

    samples: list[float] = []
    errors = 0
    start = perf_counter()
    deadline = start + time_limit
    while len(samples) < count and perf_counter() < deadline:
        state[0] = False
        t0 = perf_counter()
        producer.produce(topic, value, partition=0, on_delivery=on_delivery)
        while not state[0]:
            producer.poll(1.0)
            if perf_counter() > deadline + 15:
                raise RuntimeError("no acknowledgement 15 s past the time limit")
        if state[1] is not None:
            errors += 1
            if errors > 3:
                raise RuntimeError(f"one-at-a-time produce keeps failing: {state[1]}")
            time.sleep(0.05)
            continue
        samples.append(perf_counter() - t0)
    seconds = perf_counter() - start
    producer.flush(10)
    return Latency(samples=samples, seconds=seconds, errors=errors)


def produce_spread(
    bootstrap: str, topic: str, partitions: int, per_partition: int, size: int
) -> int:
    """Writes a few records to every partition (data for the many-partitions figures)."""
    failures = [0]

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures[0] += 1

    producer = Producer(
        {"bootstrap.servers": bootstrap, **PRODUCER_BATCHED, "on_delivery": on_delivery}
    )
    value = os.urandom(size)
    for p in range(partitions):
        for _ in range(per_partition):
            while True:
                try:
                    producer.produce(topic, value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.poll(0)
    unsent = producer.flush(120)
    return partitions * per_partition - failures[0] - unsent
