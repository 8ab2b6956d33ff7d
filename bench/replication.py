"""Replicated produce and failover, measured in one run on one machine.

    .venv/bin/python -m bench.replication [--records 300000] [--rounds 3] [--kills 10]
    .venv/bin/python -m bench.replication --failover-only --kills 10 [--shutdowns 5]

Two clusters run side by side for the whole run, both from compat_tests/cluster.py
(every node a KRaft voter and a broker, on loopback, each with its own data dir): one of
one node and one of three. Figures:
  batched     records/s of 100 B values, acks=all, linger.ms=5, batch.size=1000000,
              delivery reports only for errors, into a fresh one-partition topic: RF=1 on
              the single node against RF=3 with min.insync.replicas=2 on the three nodes,
              rounds interleaved; the issue asks RF=3 / single >= 0.5.
  one-at-a-time  acks=all latency of one 100 B record produced and flushed, RF=3: p50, p99.
  failover    kill -9 the leader of an RF=3 partition, then produce one record at a time
              (acks=all, the same producer throughout): seconds from the kill to the first
              acknowledgement, which only the new leader can give. The killed node is
              restarted and waited back into the ISR before the next kill.
  controlled shutdown  `--shutdowns` times SIGTERM the leader of one partition of a
              6-partition RF=3 (min.insync.replicas=2) topic while an idempotent acks=all
              producer writes steadily and a consumer reads; restart it and wait until it
              is back in every ISR. Failed deliveries (goal 0), fatal client errors,
              librdkafka's retries, seconds to exit, and whether every acknowledged record
              was read back once and in order. `--kills 0` skips the failover figure.
The clusters run with Kafka's default broker liveness settings
(`broker.heartbeat.interval.ms=2000`, `broker.session.timeout.ms=9000`; compat tests use
300 and 3000), which bound how soon a dead broker is noticed;
`--heartbeat-interval-ms` and `--session-timeout-ms` change them.
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

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from bench.kafka_load import PRODUCER_BULK, produce_rate
from bench.procs import tree_cpu_seconds
from compat_tests.cluster import KafkaCluster

VALUE = b"x" * 100


def new_topic(cluster: KafkaCluster, replication_factor: int) -> str:
    topic = f"replbench-{uuid.uuid4().hex[:8]}"
    config = {"min.insync.replicas": "2"} if replication_factor == 3 else {}
    admin = cluster.admin()
    futures = admin.create_topics(
        [NewTopic(topic, 1, replication_factor, config=config)], operation_timeout=10
    )
    futures[topic].result(30)
    cluster.wait_until(lambda: cluster.partition(topic).leader >= 0, 10.0, f"a leader of {topic}")
    return topic


def cluster_cpu_seconds(cluster: KafkaCluster) -> float:
    """The CPU time (user and system) of the cluster's running node processes."""
    return sum(tree_cpu_seconds(node.pid) for node in cluster.nodes if node.running())


def batched(cluster: KafkaCluster, replication_factor: int, records: int) -> tuple[float, float]:
    """Records per second produced and acknowledged by acks=all, and the microseconds
    of CPU the cluster's nodes spent a record meanwhile (every replica's work: on one
    core each the rate is the clients' and the scheduler's as much as the brokers', the
    CPU a record is the brokers' own)."""
    topic = new_topic(cluster, replication_factor)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **PRODUCER_BULK})
    before = cluster_cpu_seconds(cluster)
    rate = produce_rate(producer, topic, records, VALUE)
    return rate, (cluster_cpu_seconds(cluster) - before) / records * 1e6


def one_at_a_time(cluster: KafkaCluster, records: int) -> dict[str, float]:
    """acks=all latency of single records on RF=3, in milliseconds."""
    topic = new_topic(cluster, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    latencies = []
    for _ in range(records):
        started = time.perf_counter()
        producer.produce(topic, VALUE, partition=0)
        if producer.flush(30):
            raise RuntimeError("record left undelivered")
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return {
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


def failovers(cluster: KafkaCluster, kills: int) -> list[float]:
    """Seconds from kill -9 of the leader to the first acknowledged write, per kill."""
    topic = new_topic(cluster, 3)
    acked: list[float] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is None:
            acked.append(time.monotonic())

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 200,
            "topic.metadata.refresh.fast.interval.ms": 100,
        }
    )
    # A producer already running: it knows the leader and has its connections open.
    producer.produce(topic, VALUE, partition=0)
    if producer.flush(30):
        raise RuntimeError("record left undelivered")
    figures = []
    for _ in range(kills):
        leader = cluster.partition(topic).leader
        cluster.kill(leader)
        killed = time.monotonic()
        acked.clear()
        producer.produce(topic, VALUE, partition=0, on_delivery=delivered)
        while not acked and time.monotonic() - killed < 60:
            producer.poll(0.005)
        if not acked:
            raise RuntimeError(f"no write acknowledged within 60 s of killing {leader}")
        figures.append(acked[0] - killed)
        print(f"  killed leader {leader}: first acknowledged write after {figures[-1]:.2f} s")
        cluster.node(leader).start()
        cluster.wait_until(
            lambda: sorted(cluster.partition(topic).isrs) == [1, 2, 3],
            60.0,
            f"broker {leader} back in the ISR",
        )
    producer.flush(30)
    return figures


def keep(into: dict[int, list[tuple[int, int]]], msg: Any) -> None:
    """Note a record's offset and the sequence number its value carries, by partition."""
    into[msg.partition()].append((msg.offset(), int(msg.value())))


def controlled_shutdowns(
    cluster: KafkaCluster, shutdowns: int, partitions: int = 6
) -> dict[str, Any]:
    """SIGTERM the leader of a partition under steady idempotent acks=all produce and a
    consumer, restart it, wait until it is back in every ISR; `shutdowns` times. Failed
    deliveries (the issue's failed requests, goal 0), the seconds each controlled shutdown
    took, librdkafka's retries, and whether every acknowledged record was read back once
    and in order."""
    topic = f"replbench-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    new = NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new], operation_timeout=10)[topic].result(30)
    cluster.wait_until(
        lambda: all(cluster.partition(topic, p).leader >= 0 for p in range(partitions)),
        10.0,
        f"a leader for every partition of {topic}",
    )
    acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    failures: list[str] = []
    client_errors: list[str] = []
    stats: dict[str, Any] = {}
    notices: dict[str, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(f"partition {msg.partition()}: {err}")
        else:
            keep(acked, msg)

    def on_error(err: Any) -> None:
        # librdkafka reports here what it recovers from itself (the stopped broker's
        # refused connection, _TRANSPORT); only a fatal error is the application's to handle.
        notices[err.name()] = notices.get(err.name(), 0) + 1
        if err.fatal():
            client_errors.append(str(err))

    def on_stats(raw: str) -> None:
        stats.update(json.loads(raw))

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "statistics.interval.ms": 500,
            "error_cb": on_error,
            "stats_cb": on_stats,
        }
    )
    stop = threading.Event()

    def produce() -> None:
        sequence = 0
        while not stop.is_set():
            for _ in range(20):
                partition = sequence % partitions
                producer.produce(
                    topic, str(sequence).encode(), partition=partition, on_delivery=delivered
                )
                sequence += 1
            producer.poll(0.01)

    consumed: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    consumer_errors: list[str] = []

    def consume() -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": f"{topic}-reader",
                "enable.auto.commit": False,
                "error_cb": on_error,
            }
        )
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while not stop.is_set() or sum(map(len, consumed.values())) < sum(map(len, acked.values())):
            for msg in consumer.consume(500, 0.2):
                if msg.error():
                    consumer_errors.append(str(msg.error()))
                else:
                    keep(consumed, msg)
            if stop.is_set() and time.monotonic() > deadline:
                break
        consumer.close()

    deadline = float("inf")
    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for thread in threads:
        thread.start()
    shutdown_s: list[float] = []
    try:
        time.sleep(2)
        for n in range(shutdowns):
            partition = n % partitions
            leader = cluster.partition(topic, partition).leader
            started = time.monotonic()
            code = cluster.stop(leader)
            shutdown_s.append(time.monotonic() - started)
            print(
                f"  stopped broker {leader} (leader of partition {partition}): exit {code} "
                f"after {shutdown_s[-1]:.2f} s; failed deliveries so far {len(failures)}",
                flush=True,
            )
            cluster.node(leader).start()
            cluster.wait_until(
                lambda: all(
                    sorted(cluster.partition(topic, p).isrs) == [1, 2, 3] for p in range(partitions)
                ),
                60.0,
                f"broker {leader} back in every ISR",
            )
            time.sleep(1)
    finally:
        stop.set()
        threads[0].join()
        producer.flush(120)
        deadline = time.monotonic() + 60
        threads[1].join()
    brokers = stats.get("brokers", {}).values()
    retries = sum(b.get("txretries", 0) for b in brokers)
    request_errors = sum(b.get("txerrs", 0) + b.get("rxerrs", 0) for b in brokers)
    in_order = all(
        [v for _, v in sorted(acked[p])] == [v for _, v in consumed[p]]
        and [v for _, v in consumed[p]] == sorted({v for _, v in consumed[p]})
        for p in range(partitions)
    )
    return {
        "shutdown_s": shutdown_s,
        "acknowledged": sum(map(len, acked.values())),
        "consumed": sum(map(len, consumed.values())),
        "failed_deliveries": len(failures),
        "failures": failures[:10],
        "client_errors": client_errors[:10],
        "consumer_errors": consumer_errors[:10],
        "producer_retries": retries,
        "producer_request_errors": request_errors,
        "error_cb_notices": notices,
        "read_back_once_in_order": in_order,
    }


def throughput(
    single: KafkaCluster, three: KafkaCluster, args: argparse.Namespace, result: dict[str, Any]
) -> None:
    """The batched rounds (interleaved) and the one-at-a-time latency, into `result`."""
    for _ in range(args.rounds):
        single_rate, single_cpu = batched(single, 1, args.records)
        rf3_rate, rf3_cpu = batched(three, 3, args.records)
        row = {
            "single_rec_s": single_rate,
            "rf3_rec_s": rf3_rate,
            "rf3_over_single": rf3_rate / single_rate,
            "single_cpu_us_per_record": single_cpu,
            "rf3_cpu_us_per_record": rf3_cpu,
        }
        result["rounds"].append(row)
        print(
            f"single node {single_rate:>10,.0f} rec/s, {single_cpu:.2f} µs CPU/record   "
            f"RF=3 {rf3_rate:>10,.0f} rec/s, {rf3_cpu:.2f} µs CPU/record (3 nodes)   "
            f"ratio {row['rf3_over_single']:.2f}",
            flush=True,
        )
    result["one_at_a_time"] = one_at_a_time(three, args.latency_records)
    print(
        "RF=3 one-at-a-time acks=all: p50 {p50_ms:.2f} ms, p99 {p99_ms:.2f} ms".format(
            **result["one_at_a_time"]
        ),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-records", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--shutdowns", type=int, default=5)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=2000)
    parser.add_argument("--session-timeout-ms", type=int, default=9000)
    parser.add_argument(
        "--failover-only", action="store_true", help="measure failover only, on 3 nodes"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    timings = {
        "broker.heartbeat.interval.ms": str(args.heartbeat_interval_ms),
        "broker.session.timeout.ms": str(args.session_timeout_ms),
    }
    result: dict[str, Any] = {"args": vars(args) | {"json": str(args.json)}, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="kbroker-replbench-") as tmp:
        three = KafkaCluster(Path(tmp) / "three", 3, timings)
        single = None if args.failover_only else KafkaCluster(Path(tmp) / "single", 1, timings)
        try:
            three.start()
            if single is not None:
                single.start()
                throughput(single, three, args, result)
            result["failover_s"] = failovers(three, args.kills) if args.kills else []
            if args.shutdowns:
                result["controlled_shutdown"] = controlled_shutdowns(three, args.shutdowns)
        finally:
            three.kill_all()
            if single is not None:
                single.kill_all()
    seconds = result["failover_s"]
    summary = (
        f"failover median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s "
        f"over {len(seconds)} kills"
        if seconds
        else ""
    )
    if "controlled_shutdown" in result:
        shut = result["controlled_shutdown"]
        summary += "; " if summary else ""
        summary += (
            f"controlled shutdown x{len(shut['shutdown_s'])}: "
            f"{shut['failed_deliveries']} failed deliveries, "
            f"{len(shut['client_errors'])} fatal client errors, "
            f"{shut['producer_retries']} producer retries and "
            f"{shut['producer_request_errors']} request errors, "
            f"error_cb notices {shut['error_cb_notices']}, shutdown median "
            f"{statistics.median(shut['shutdown_s']):.2f} s max {max(shut['shutdown_s']):.2f} s, "
            f"{shut['acknowledged']} acknowledged, {shut['consumed']} read back, "
            f"once and in order: {shut['read_back_once_in_order']}"
        )
    if result["rounds"]:
        rounds = result["rounds"]
        result["median"] = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        median = result["median"]
        summary = (
            f"median: single node {median['single_rec_s']:,.0f} rec/s "
            f"({median['single_cpu_us_per_record']:.2f} µs CPU/record), RF=3 "
            f"{median['rf3_rec_s']:,.0f} rec/s ({median['rf3_cpu_us_per_record']:.2f} µs "
            f"CPU/record), ratio {median['rf3_over_single']:.2f}; " + summary
        )
    print(summary)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
