"""Rebalance time of a consumer group: 10 members, one topic of 100 partitions.

    .venv/bin/python -m bench.rebalance [--rounds 5] [--members 10] [--partitions 100]

Each round starts `members` confluent-kafka consumers (one thread each, as separate
applications would be) subscribing at once, and times
  formation  first subscribe -> every partition owned by exactly one member;
  leave      one member closes -> its partitions owned by the others again.
Peers: kbroker with the classic protocol (range and cooperative-sticky assignors) and
with the consumer protocol (KIP-848, server-side assignment), and the librdkafka mock
cluster (classic only) as the in-memory reference. Figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peers import KbrokerPeer, MockPeer, PeerUnavailable

# The broker's delay before a new classic group's first rebalance would dominate every
# formation figure; it measures nothing about the broker, so it is off.
KBROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "200",
}
TIMEOUT_S = 60.0
MOCK_TOPIC = "rebalance"


class Member(threading.Thread):
    """One consumer polling in its own thread; its assignment is read under a lock."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(conf)
        self.topic = topic
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.owned: set[int] = set()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stop.is_set():
            self.consumer.poll(0.05)
            owned = {tp.partition for tp in self.consumer.assignment()}
            with self.lock:
                self.owned = owned
        self.consumer.close()

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.owned)


def _split_exactly(members: list[Member], partitions: int) -> bool:
    seen: list[int] = []
    for member in members:
        seen.extend(member.partitions())
    return len(seen) == partitions and set(seen) == set(range(partitions))


def _wait_split(members: list[Member], partitions: int) -> None:
    deadline = time.perf_counter() + TIMEOUT_S
    while not _split_exactly(members, partitions):
        if time.perf_counter() > deadline:
            raise TimeoutError("group did not settle")
        time.sleep(0.005)


def one_round(bootstrap: str, topic: str, members: int, partitions: int, conf: dict) -> dict:
    group = f"rebalance-{uuid.uuid4().hex[:8]}"
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **conf,
    }
    crew = [Member(settings, topic) for _ in range(members)]
    started = time.perf_counter()
    for member in crew:
        member.start()
    _wait_split(crew, partitions)
    formation = time.perf_counter() - started
    leaver = crew.pop()
    leave_started = time.perf_counter()
    leaver.stop.set()
    leaver.join(TIMEOUT_S)
    _wait_split(crew, partitions)
    leave = time.perf_counter() - leave_started
    for member in crew:
        member.stop.set()
    for member in crew:
        member.join(TIMEOUT_S)
    return {"formation_s": formation, "leave_s": leave}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def measure(
    label: str, bootstrap: str, args: argparse.Namespace, conf: dict, topic: str | None = None
) -> dict:
    if topic is None:
        topic = f"rebalance-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, args.partitions)
    rounds = [
        one_round(bootstrap, topic, args.members, args.partitions, conf) for _ in range(args.rounds)
    ]
    row = {
        "peer": label,
        "formation_s": statistics.median(r["formation_s"] for r in rounds),
        "leave_s": statistics.median(r["leave_s"] for r in rounds),
        "rounds": rounds,
    }
    print(
        f"{label:34} formation {row['formation_s']:6.3f} s   one leaves {row['leave_s']:6.3f} s",
        flush=True,
    )
    return row


VARIANTS = {
    "classic range": {
        "partition.assignment.strategy": "range",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
    },
    "classic cooperative-sticky": {
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
    },
    "consumer (KIP-848)": {"group.protocol": "consumer"},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kbroker-rebalance-") as tmp:
        kbroker = KbrokerPeer("kbroker", Path(tmp), overrides=KBROKER_OVERRIDES)
        try:
            kbroker.start()
            for name, conf in VARIANTS.items():
                rows.append(measure(f"kbroker {name}", kbroker.bootstrap, args, conf))
        except PeerUnavailable as exc:
            print(f"kbroker skipped: {exc}")
        finally:
            kbroker.stop()
        # The mock cannot create topics over the wire: it starts with them.
        mock = MockPeer("mock", Path(tmp), topics=[f"{MOCK_TOPIC}:{args.partitions}"])
        try:
            mock.start()
            for name in ("classic range", "classic cooperative-sticky"):
                rows.append(
                    measure(f"mock {name}", mock.bootstrap, args, VARIANTS[name], MOCK_TOPIC)
                )
        except PeerUnavailable as exc:
            print(f"mock skipped: {exc}")
        finally:
            mock.stop()
    if args.json:
        args.json.write_text(
            json.dumps({"settings": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
