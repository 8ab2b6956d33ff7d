"""What a producer was told and what the cluster kept: a Jepsen-style history checker.

A producer numbers its records 0, 1, 2... in the order it sends them to one partition.
``History`` records which numbers were acknowledged (and which deliveries failed);
``check`` compares that with the partition as read back from offset 0 and counts three
faults separately, because each points at a different bug:

- lost: an acknowledged record is not in the partition (acks=all broken, a truncation
  too deep, an unclean election);
- duplicated: a record, acknowledged or not, is stored more than once (an idempotent
  producer's retry appended twice);
- reordered: an acknowledged record is stored before one sent earlier (sequence checks
  or a leader change let a retry overtake).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class History:
    """Numbers acknowledged and deliveries failed, filled by the producer's callback."""

    acked: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, err: Any, msg: Any) -> None:
        with self.lock:
            (self.failed if err is not None else self.acked).append(int(msg.value()))


@dataclass(frozen=True)
class Verdict:
    acked: int
    read: int
    lost: list[int]
    duplicated: list[int]
    reordered: list[int]

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered)

    def __str__(self) -> str:
        return (
            f"acked {self.acked}, read {self.read}: lost {len(self.lost)} {self.lost[:10]}, "
            f"duplicated {len(self.duplicated)} {self.duplicated[:10]}, "
            f"reordered {len(self.reordered)} {self.reordered[:10]}"
        )


def check(acked: list[int], read: list[int]) -> Verdict:
    """Compare acknowledged numbers with the partition's values in offset order."""
    counts = Counter(read)
    duplicated = sorted(v for v, n in counts.items() if n > 1)
    first_position: dict[int, int] = {}
    for position, value in enumerate(read):
        first_position.setdefault(value, position)
    lost = sorted(v for v in set(acked) if v not in first_position)
    # Sent order is numeric order: an acknowledged record stored before an earlier one.
    reordered = []
    latest = -1
    for value in sorted(set(acked) - set(lost)):
        position = first_position[value]
        if position < latest:
            reordered.append(value)
        latest = max(latest, position)
    return Verdict(len(acked), len(read), lost, duplicated, reordered)


def read_partition(
    bootstrap: str, topic: str, expected: int, timeout: float = 30, partition: int = 0
) -> list[bytes]:
    """Every value of one partition from offset 0, until at least `expected` arrived and
    nothing more came for 2 s (or `timeout`)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    idle_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                if len(values) >= expected and time.monotonic() - idle_since > 2:
                    break
                continue
            idle_since = time.monotonic()
            values.append(message.value() or b"")
    finally:
        consumer.close()
    return values


class NumberedProducer:
    """An idempotent acks=all confluent-kafka producer sending 0, 1, 2... to one partition
    (0 unless told) of `topic` from its own thread until stopped, recording the outcome
    in `history`."""

    def __init__(self, bootstrap: str, topic: str, partition: int = 0, **settings: Any) -> None:
        self.history = History()
        self.sent = 0
        self._stop = threading.Event()
        self._config = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            **settings,
        }
        self._topic = topic
        self._partition = partition
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.fatal: str | None = None

    def start(self) -> NumberedProducer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 90) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal = str(err)

        producer = Producer({**self._config, "error_cb": on_error})
        i = 0
        while not self._stop.is_set() and self.fatal is None:
            try:
                producer.produce(
                    self._topic,
                    value=b"%d" % i,
                    partition=self._partition,
                    on_delivery=self.history.delivered,
                )
                i += 1
            except BufferError:
                producer.poll(0.05)
                continue
            except KafkaException as exc:  # fatal idempotence error: the history says so
                self.fatal = str(exc)
                break
            if i % 100 == 0:
                producer.poll(0)
                time.sleep(0.01)  # pacing: a hundred records at a time
        self.sent = i
        producer.flush(60)
