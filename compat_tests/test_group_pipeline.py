"""At-least-once through churn: consumers of one group come and go at random while
they consume and commit; every record is processed, none past a commit is skipped."""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from compat_tests.broker_process import FAST_GROUP_SETTINGS, BrokerProcess, running_broker
from compat_tests.confluent_helpers import create_topic, produce_all, unique_topic

pytestmark = pytest.mark.timeout(150)

PARTITIONS = 6
RECORDS = 12_000
CHURN_SECONDS = 20


@pytest.fixture(scope="module")
def churn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("churn-broker"), FAST_GROUP_SETTINGS) as node:
        yield node


class Processed:
    """Every (partition, offset) any member processed, shared by the member threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: set[tuple[int, int]] = set()
        self.times = 0

    def add(self, partition: int, offset: int) -> None:
        with self.lock:
            self.seen.add((partition, offset))
            self.times += 1


def _member(
    bootstrap: str, group: str, topic: str, processed: Processed, lifetime: float, crash: bool
) -> None:
    """Consume and commit after each processed batch for `lifetime` seconds, then leave
    (close) or, if `crash`, vanish without leaving so the session timeout must act."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 2000,
            "heartbeat.interval.ms": 200,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + lifetime
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(200, 0.2)
            good = [m for m in batch if m.error() is None]
            for message in good:
                processed.add(message.partition(), message.offset())
            if good:
                # A rebalance may have taken the partitions; their records come again.
                with contextlib.suppress(KafkaException):
                    consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _drain(bootstrap: str, group: str, topic: str, processed: Processed) -> None:
    """One last member reads from the committed offsets until everything is seen."""
    want = {(p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS)}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and not want <= processed.seen:
            for message in consumer.consume(500, 0.5):
                if message.error() is None:
                    processed.add(message.partition(), message.offset())
    finally:
        consumer.close()


def test_records_are_processed_at_least_once_while_members_churn(
    churn_broker: BrokerProcess,
) -> None:
    bootstrap = churn_broker.bootstrap
    topic = unique_topic()
    create_topic(bootstrap, topic, PARTITIONS)
    per_partition = RECORDS // PARTITIONS
    produce_all(
        bootstrap,
        topic,
        (
            {"value": b"%d" % i, "partition": p}
            for p in range(PARTITIONS)
            for i in range(per_partition)
        ),
    )
    group = f"churn-{uuid.uuid4().hex[:8]}"
    processed = Processed()
    rng = random.Random(20261121)
    members: list[threading.Thread] = []
    started = time.monotonic()
    while time.monotonic() - started < CHURN_SECONDS:
        members = [t for t in members if t.is_alive()]
        if len(members) < 4:
            args: tuple[Any, ...] = (
                bootstrap,
                group,
                topic,
                processed,
                rng.uniform(1.0, 5.0),
                rng.random() < 0.2,
            )
            thread = threading.Thread(target=_member, args=args, daemon=True)
            thread.start()
            members.append(thread)
        time.sleep(rng.uniform(0.2, 1.0))  # the input: members join at random moments
    for thread in members:
        thread.join(15)
    _drain(bootstrap, group, topic, processed)

    missing = {(p, o) for p in range(PARTITIONS) for o in range(per_partition)} - processed.seen
    assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
    assert processed.times >= RECORDS
