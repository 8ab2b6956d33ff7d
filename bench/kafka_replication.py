"""RF=3 acks=all on a 3-node kbroker cluster against a 3-node Apache Kafka 4.3 cluster.

    PYTHONPATH=. .venv/bin/python -m bench.kafka_replication [--records 300000] [--rounds 3]

Each cluster runs alone (three JVMs and three kbroker processes at once would not fit two
cores): kbroker's three nodes (compat_tests/cluster.py, Kafka's default liveness timings),
then Kafka's three (compat_tests/kafka_reference.py, each node broker and voter, 512 MiB
heap, G1). On each: a warm-up round (a JVM compiles its hot paths in its first seconds;
both get one, neither is counted), then `--rounds` rounds of batched produce of 100 B
values, acks=all, linger.ms=5, batch.size=1000000, into a fresh one-partition topic with
RF=3 and min.insync.replicas=2; then `--latency-records` records one at a time (acks=all,
linger.ms=0), p50 and p99. Prints each figure and the kbroker/Kafka ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_load import PRODUCER_BULK, produce_rate
from compat_tests.cluster import KafkaCluster
from compat_tests.kafka_reference import BROKER_JVM, KafkaReference, kafka_unavailable

VALUE = b"x" * 100
TIMINGS = {"broker.heartbeat.interval.ms": "2000", "broker.session.timeout.ms": "9000"}


def rf3_topic(bootstrap: str) -> str:
    """A fresh one-partition RF=3 topic with min.insync.replicas=2, once all three replicas
    are in sync."""
    topic = f"rf3bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and not meta.error and 0 in meta.partitions:
            p = meta.partitions[0]
            if p.leader >= 0 and len(p.isrs) == 3:
                return topic
        time.sleep(0.2)
    raise RuntimeError(f"{topic} never had three replicas in sync")


def batched(bootstrap: str, records: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_BULK})
    return produce_rate(producer, rf3_topic(bootstrap), records, VALUE)


def one_at_a_time(bootstrap: str, records: int) -> dict[str, float]:
    topic = rf3_topic(bootstrap)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "socket.nagle.disable": True,
        }
    )
    latencies = []
    for _ in range(records):
        started = time.perf_counter()
        producer.produce(topic, VALUE, partition=0)
        if producer.flush(30):
            raise RuntimeError("record left undelivered")
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return {
        "p50_ms": round(latencies[len(latencies) // 2], 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)], 3),
    }


def measure(name: str, bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    warm = batched(bootstrap, args.records)
    print(f"{name:8} warm-up round {warm:>10,.0f} rec/s (not counted)", flush=True)
    rounds = []
    for _ in range(args.rounds):
        rounds.append(batched(bootstrap, args.records))
        print(f"{name:8} RF=3 acks=all {rounds[-1]:>10,.0f} rec/s", flush=True)
    latency = one_at_a_time(bootstrap, args.latency_records)
    print(f"{name:8} one-at-a-time p50 {latency['p50_ms']} ms, p99 {latency['p99_ms']} ms")
    return {"rounds_rec_s": rounds, "median_rec_s": statistics.median(rounds), **latency}


def on_kbroker(root: Path, run: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    cluster = KafkaCluster(root / "kbroker", 3, TIMINGS)
    try:
        cluster.start()
        return run(cluster.bootstrap)
    finally:
        cluster.kill_all()


def on_kafka(root: Path, run: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    cluster = KafkaReference(root / "kafka", 3)
    try:
        cluster.start(jvm=BROKER_JVM)
        return run(cluster.bootstrap)
    finally:
        cluster.kill_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-records", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    missing = kafka_unavailable()
    if missing:
        parser.error(missing)
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="kbroker-kafka-rf3-") as tmp:
        result["kbroker"] = on_kbroker(Path(tmp), lambda b: measure("kbroker", b, args))
        result["kafka"] = on_kafka(Path(tmp), lambda b: measure("kafka", b, args))
    k, a = result["kbroker"], result["kafka"]
    result["ratios"] = {
        "rf3_rec_s": round(k["median_rec_s"] / a["median_rec_s"], 3),
        "one_at_a_time_p50": round(k["p50_ms"] / a["p50_ms"], 3),
        "one_at_a_time_p99": round(k["p99_ms"] / a["p99_ms"], 3),
    }
    print(f"kbroker / Kafka: {result['ratios']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
