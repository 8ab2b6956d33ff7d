"""Small wrappers round confluent-kafka so each test states only what it checks.

Consumers never join a group: they ``assign()`` explicit offsets with auto commit off
(librdkafka still wants a ``group.id``, so each gets a unique one). Every wait is bounded,
and anything the client reports as an error on the test's own partitions fails the test.
The group tests' members are the tests' own consumers; they share only the uuid-named
groups and the polling loop that waits for an assignment.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.waiting import eventually

Headers = list[tuple[str, bytes | None]]


def unique_topic(prefix: str = "compat") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def admin_client(bootstrap: str) -> AdminClient:
    """Keep the client in a variable while waiting on its futures: a collected handle
    fails them with _DESTROY."""
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    config: dict[str, str] | None = None,
    timeout: float = 15.0,
) -> None:
    """CreateTopics through the admin API, then wait until every partition has a leader."""
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    futures[topic].result(timeout=timeout)
    wait_for_partitions(admin, topic, partitions, timeout)


def wait_for_partitions(admin: AdminClient, topic: str, partitions: int, timeout: float) -> None:
    def led() -> bool:
        seen = admin.list_topics(topic=topic, timeout=max(timeout, 0.5)).topics.get(topic)
        return (
            seen is not None
            and seen.error is None
            and len(seen.partitions) == partitions
            and all(p.leader >= 0 for p in seen.partitions.values())
        )

    eventually(led, timeout=timeout, what=f"{topic} to show {partitions} led partitions")


@dataclass
class Record:
    """What a consumer saw, copied out of librdkafka's message."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp: int


@dataclass
class DeliveryLog:
    """Delivery reports in the order the producer's callback saw them."""

    delivered: list[tuple[int, int, bytes | None]] = field(default_factory=list)
    failed: list[KafkaError] = field(default_factory=list)

    def callback(self, err: KafkaError | None, msg: Any) -> None:
        # Only the error is kept on failure: after a fatal error librdkafka's message
        # accessors can raise from inside the callback.
        if err is None:
            self.delivered.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed.append(err)


def make_producer(bootstrap: str, **conf: Any) -> Producer:
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "message.timeout.ms": 20000,
        "socket.timeout.ms": 10000,
    }
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(settings)


def produce_all(
    bootstrap: str,
    topic: str,
    records: Iterable[dict[str, Any]],
    timeout: float = 30.0,
    **conf: Any,
) -> DeliveryLog:
    """Produce every record (kwargs of Producer.produce) and fail unless all are delivered."""
    producer = make_producer(bootstrap, **conf)
    log = DeliveryLog()
    count = 0
    for record in records:
        count += 1
        while True:
            try:
                producer.produce(topic, on_delivery=log.callback, **record)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    try:
        remaining = producer.flush(timeout)
    except (KafkaException, SystemError) as exc:
        # A fatal client error surfaces from flush (as a SystemError when it interrupts
        # a delivery callback); report the client's own error.
        raise AssertionError(f"producer failed: {exc.__cause__ or exc}") from exc
    assert remaining == 0, f"{remaining} records still undelivered after {timeout}s"
    assert not log.failed, f"{len(log.failed)} delivery failures, first: {log.failed[0]}"
    assert len(log.delivered) == count
    return log


def make_consumer(bootstrap: str, **conf: Any) -> Consumer:
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"compat-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "check.crcs": True,
        "socket.timeout.ms": 10000,
    }
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(settings)


def read_until_quiet(bootstrap: str, topic: str, first_wait: float, quiet: float) -> list[Any]:
    """Every record of ``topic``, read by a fresh group from the earliest: waits up to
    ``first_wait`` s for the first, then reads until ``quiet`` s pass without another
    (how a test sees that a dead-letter topic holds one copy and no more)."""
    reader = make_consumer(bootstrap)
    records: list[Any] = []
    try:
        reader.subscribe([topic])
        end = time.monotonic() + first_wait
        while time.monotonic() < end and not records:
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                records.append(message)
        while (message := reader.poll(quiet)) is not None:
            if message.error() is None:
                records.append(message)
    finally:
        reader.close()
    return records


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: Sequence[int] = (0,),
    start_offset: int = 0,
    timeout: float = 30.0,
    **conf: Any,
) -> list[Record]:
    """Assign the partitions at ``start_offset`` and read until ``count`` records arrive."""
    consumer = make_consumer(bootstrap, **conf)
    try:
        consumer.assign([TopicPartition(topic, p, start_offset) for p in partitions])
        return read_records(consumer, topic, count, timeout)
    finally:
        consumer.close()


def read_records(consumer: Consumer, topic: str, count: int, timeout: float) -> list[Record]:
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=min(count - len(records), 10000), timeout=0.2):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if msg.topic() == topic or err.fatal():
                    raise AssertionError(
                        f"consumer error on {msg.topic()}[{msg.partition()}]: {err}"
                    )
                continue
            records.append(
                Record(
                    partition=msg.partition(),
                    offset=msg.offset(),
                    key=msg.key(),
                    value=msg.value(),
                    headers=msg.headers(),
                    timestamp=msg.timestamp()[1],
                )
            )
    assert len(records) >= count, (
        f"read {len(records)} of {count} records from {topic} within {timeout}s"
    )
    return records


def consume_from_beginning(
    bootstrap: str, topic: str, count: int, partitions: Sequence[int] = (0,), **kw: Any
) -> list[Record]:
    return consume(bootstrap, topic, count, partitions, start_offset=OFFSET_BEGINNING, **kw)


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(log start offset, high watermark) asked of the broker, not librdkafka's cache."""
    consumer = make_consumer(bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=10, cached=False
        )
        return int(low), int(high)
    finally:
        consumer.close()


def error_code(exc: BaseException) -> int:
    """The Kafka error code inside a KafkaException raised by a future."""
    assert isinstance(exc, KafkaException), f"expected KafkaException, got {exc!r}"
    return exc.args[0].code()


def per_partition(records: Iterable[Record]) -> dict[int, list[Record]]:
    by_partition: dict[int, list[Record]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record)
    return by_partition


# -- group members ---------------------------------------------------------------------------


def unique_group(prefix: str = "group") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def owned(consumer: Consumer) -> set[int]:
    """The partitions the consumer's group assignment gives it now."""
    return {tp.partition for tp in consumer.assignment()}


def exclusive_cover(consumers: list[Consumer], partitions: int) -> bool:
    """Every consumer owns some partition and each of `partitions` is owned exactly once."""
    sets = [owned(c) for c in consumers]
    return all(sets) and sorted(p for s in sets for p in s) == list(range(partitions))


def poll_until(consumers: list[Consumer], done: Callable[[], bool], timeout: float = 30.0) -> float:
    """Poll every consumer until `done()`; returns the seconds it took.

    Group work (joins, heartbeats, revocations) only happens inside poll, so every member
    must keep polling while the condition is awaited.
    """
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        for c in consumers:
            c.poll(0.05)
        if done():
            return time.monotonic() - started
    raise AssertionError(f"not reached in {timeout}s: {[owned(c) for c in consumers]}")
