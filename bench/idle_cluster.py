"""What a 3-node cluster holding many RF=3 partitions spends with little to do: each
node's CPU and network traffic, idle and under a light acks=all load.

    PYTHONPATH=$PWD .venv/bin/python -m bench.idle_cluster --topics 6 --partitions 800 \\
        --rounds 3 --rate 5

A cluster of kbroker.testing.kafka_cluster (Kafka's heartbeat and session timings),
`--topics` topics of `--partitions` partitions and a 3-partition `load` topic, all at
RF=3; once every partition has three in-sync replicas, each round samples every node's
CPU (utime + stime from /proc/<pid>/stat) over `--window` seconds idle, then again while
one confluent-kafka producer sends 100 B records to `load` at `--rate` a second
(acks=all). Each sample prints the node's bytes received and sent a second and the
Fetch requests it answered a second (from its /metrics). What the followers' Fetches
cost a leader, and the fetch sessions (KIP-227) that keep them small, show here. With
`--profile DIR`, py-spy (`pip install py-spy`) then samples node 1 idle for a window
and the busiest frames of its event loop are printed (bench.request_cost's reduction).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.request_cost import cpu_split, load, summarize
from kbroker.testing import KafkaServer, kafka_cluster
from kbroker.testing.nodes import Node

TIMINGS = {"broker.heartbeat.interval.ms": "2000", "broker.session.timeout.ms": "9000"}
_SAMPLE = r"^{name}\{{{labels}\}} (\S+)$"


def traffic(node: Node) -> tuple[float, float, float]:
    """(bytes received, bytes sent, Fetch requests answered) so far, from /metrics."""
    url = f"http://127.0.0.1:{node.http_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()

    def value(name: str, labels: str) -> float:
        found = re.search(_SAMPLE.format(name=name, labels=labels), text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    return (
        value("kbroker_network_bytes_total", 'direction="in"'),
        value("kbroker_network_bytes_total", 'direction="out"'),
        value("kafka_network_requestmetrics_requests_total", 'request="Fetch"'),
    )


def sample(server: KafkaServer, seconds: float) -> list[float]:
    """Each node's CPU (% of one core) over `seconds`; prints its traffic a second."""
    pids = []
    for node in server.nodes:
        assert node.proc is not None
        pids.append(node.proc.pid)
    traffic_before = [traffic(node) for node in server.nodes]
    cpu_before = [sum(cpu_split(pid)) for pid in pids]
    started = time.monotonic()
    time.sleep(seconds)  # the input: the nodes' own work over the window
    cpu_after = [sum(cpu_split(pid)) for pid in pids]
    elapsed = time.monotonic() - started
    traffic_after = [traffic(node) for node in server.nodes]
    for node, before, after in zip(server.nodes, traffic_before, traffic_after, strict=True):
        received, sent, fetches = ((b - a) / elapsed for a, b in zip(before, after, strict=True))
        print(
            f"    node {node.node_id}: {received / 1000:8.2f} KB/s in, {sent / 1000:8.2f} KB/s "
            f"out, {fetches:5.1f} Fetch/s"
        )
    return [100 * (b - a) / elapsed for a, b in zip(cpu_before, cpu_after, strict=True)]


def profile_idle(node: Node, out: Path, seconds: float, top: int) -> None:
    """Sample an idle node with py-spy for `seconds`; print its event loop's busiest frames."""
    assert node.proc is not None
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"idle-node-{node.node_id}.txt"
    subprocess.run(
        [spy, "record", "--pid", str(node.proc.pid), "--native", "--rate", "500", "--format",
         "raw", "--output", str(raw), "--duration", str(int(seconds))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=seconds + 60,
    )  # fmt: skip
    print(f"profile of idle node {node.node_id} ({raw}):")
    for line in summarize(raw, top):
        print(f"    {line}")


def produce_at(bootstrap: str, rate: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    payload, sent, due = b"x" * 100, 0, time.monotonic()
    while not stop.is_set():
        producer.produce("load", payload, partition=sent % 3)
        producer.poll(0)
        sent += 1
        due += 1.0 / rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    producer.flush(30)


def in_sync(admin: AdminClient, topics: list[str], total: int) -> bool:
    listed = admin.list_topics(timeout=30).topics
    synced = sum(
        1
        for topic in topics
        if topic in listed
        for partition in listed[topic].partitions.values()
        if len(partition.isrs) == 3 and partition.leader >= 0
    )
    return synced == total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=6)
    parser.add_argument("--partitions", type=int, default=800)
    parser.add_argument("--window", type=float, default=20.0, help="seconds a sample")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5, help="records a second under load")
    parser.add_argument(
        "--profile", type=Path, help="directory for a py-spy profile of node 1 idle, at the end"
    )
    parser.add_argument("--top", type=int, default=30, help="frames shown of the profile")
    args = parser.parse_args(argv)
    with kafka_cluster(3, settings=TIMINGS, http=True) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        topics = [f"t{i}" for i in range(args.topics)]
        for topic in topics:
            new = NewTopic(topic, args.partitions, 3)
            admin.create_topics([new], operation_timeout=60)[topic].result(120)
        admin.create_topics([NewTopic("load", 3, 3)])["load"].result(60)
        total = args.topics * args.partitions + 3
        deadline = time.monotonic() + 600
        while not in_sync(admin, [*topics, "load"], total):
            if time.monotonic() > deadline:
                raise SystemExit("the partitions did not all reach three in-sync replicas")
            time.sleep(2)
        print(f"{total} partitions at RF=3 in sync; load {load()}")
        idle: list[list[float]] = []
        loaded: list[list[float]] = []
        for round_ in range(args.rounds):
            print(f"round {round_ + 1} idle:")
            idle.append(sample(server, args.window))
            print(f"  CPU % of a core by node: {' '.join(f'{x:.1f}' for x in idle[-1])}")
            stop = threading.Event()
            writer = threading.Thread(target=produce_at, args=(server.bootstrap, args.rate, stop))
            writer.start()
            time.sleep(3)  # the producer's connections made and its rate reached
            print(f"round {round_ + 1} at {args.rate} records/s:")
            loaded.append(sample(server, args.window))
            stop.set()
            writer.join()
            print(f"  CPU % of a core by node: {' '.join(f'{x:.1f}' for x in loaded[-1])}")
        for label, rows in (("idle", idle), (f"{args.rate} records/s", loaded)):
            means = [statistics.mean(row[i] for row in rows) for i in range(3)]
            print(f"{label}: CPU % of a core, mean by node {' '.join(f'{m:.1f}' for m in means)}")
        if args.profile is not None:
            profile_idle(server.nodes[0], args.profile, args.window, args.top)
        print(f"load {load()}")


if __name__ == "__main__":
    main()
