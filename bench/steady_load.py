"""Latency under a steady load: is a p99 stall the broker's?

    PYTHONPATH=$PWD .venv/bin/python -m bench.steady_load --rate 2000 --seconds 300
    PYTHONPATH=$PWD .venv/bin/python -m bench.steady_load --rate 500 --seconds 20 --window 10

A 3-node cluster (kbroker.testing.kafka_cluster, each node serving /metrics) takes
`--rate` records a second of 1 KiB into a topic of `--partitions` partitions, RF=3,
from one confluent-kafka producer (acks=all, enable.idempotence, linger.ms=5), paced
every 10 ms; a group of two consumers reads them. Each `--window` seconds it prints:

- the producer's acknowledgement latency (produce() to delivery report) p50/p99/p999;
- the end-to-end latency (produce() to a group member receiving it) p50/p99/p999: each
  member polls one record at a time (`poll(0.05)`), so a record's latency ends when it
  is handed to the application, not when a batch of records or a timeout completes;
- each node's RSS, its worst event loop lag in the window (kbroker_event_loop_lag_seconds
  buckets: how many 100 ms probes ran over 50 ms late), the last minute's max lag, and the
  steps that held its loop 50 ms or more in the window with the process's own CPU
  (kbroker_event_loop_slow_steps_total, kbroker.metrics.loop_stalls); at the end, the
  log lines that named those steps and the late ones that mostly waited.

A p99 stall that lines up with a node's loop lag is the broker's; one without is the
client's or the machine's. The load average is printed with every window.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer

from kbroker.metrics.loop_lag import LAG_BOUNDS_S
from kbroker.testing import KafkaServer, kafka_cluster

STAMP = struct.Struct(">d")  # time.time() at produce(), at the start of each value


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scrape(port: int) -> dict[str, float]:
    """The unlabelled event loop samples (lag, slow steps) of one node's /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("kbroker_event_loop_"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def late_probes(samples: dict[str, float], over: float = 0.05) -> float:
    """Probes that ran more than `over` seconds late (a bucket bound of LAG_BOUNDS_S)."""
    assert over in LAG_BOUNDS_S
    total = samples.get('kbroker_event_loop_lag_seconds_bucket{le="+Inf"}', 0.0)
    return total - samples.get(f'kbroker_event_loop_lag_seconds_bucket{{le="{over}"}}', 0.0)


class Latencies:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acks: list[float] = []
        self.e2e: list[float] = []
        self.errors = 0

    def take(self) -> tuple[list[float], list[float], int]:
        with self.lock:
            out = self.acks, self.e2e, self.errors
            self.acks, self.e2e, self.errors = [], [], 0
        return out


def produce(bootstrap: str, topic: str, rate: int, stop: threading.Event, lat: Latencies) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    padding = b"x" * (1024 - STAMP.size)

    def delivered(err: object, msg: object) -> None:
        now = time.time()
        with lat.lock:
            if err is not None:
                lat.errors += 1
            else:
                lat.acks.append(now - STAMP.unpack_from(msg.value())[0])  # type: ignore[attr-defined]

    tick, sent, start = 0.01, 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            producer.produce(topic, STAMP.pack(time.time()) + padding, on_delivery=delivered)
            sent += 1
        producer.poll(0)
        time.sleep(tick)  # pacing: the next 10 ms of records
    producer.flush(30)


def consume(bootstrap: str, topic: str, group: str, stop: threading.Event, lat: Latencies) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.subscribe([topic])
    while not stop.is_set():
        # One record a call, taken as soon as librdkafka has it: consume(n, timeout)
        # would return only once n records arrived or the timeout passed, and measure
        # its own wait.
        msg = consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            e2e = time.time() - STAMP.unpack_from(msg.value())[0]
            with lat.lock:
                lat.e2e.append(e2e)
    consumer.close()


def ms(values: list[float]) -> str:
    return "/".join(f"{1000 * percentile(values, q):.1f}" for q in (0.5, 0.99, 0.999))


def run(server: KafkaServer, args: argparse.Namespace) -> None:
    topic = server.create_topic(partitions=args.partitions, replication_factor=3)
    stop, lat = threading.Event(), Latencies()
    group = f"steady-{uuid.uuid4().hex[:8]}"
    threads = [
        threading.Thread(target=consume, args=(server.bootstrap, topic, group, stop, lat))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    time.sleep(3)  # pacing: the group forms before the first record, or it reads from latest
    producer = threading.Thread(
        target=produce, args=(server.bootstrap, topic, args.rate, stop, lat)
    )
    producer.start()
    ports = [node.http_port for node in server.nodes]
    previous = {port: late_probes(scrape(port)) for port in ports if port}
    slow = dict.fromkeys(ports, 0.0)
    print(
        f"{args.rate} records/s of 1 KiB, RF=3 acks=all idempotent linger 5 ms, "
        f"{args.partitions} partitions, a group of 2; windows of {args.window:.0f} s"
    )
    print(
        "window  acks  ack p50/p99/p999 ms  e2e p50/p99/p999 ms  "
        "per node: RSS MiB, probes >50 ms late, max lag ms, slow steps"
    )
    deadline = time.monotonic() + args.seconds
    window = 0
    while time.monotonic() < deadline:
        time.sleep(min(args.window, max(0.0, deadline - time.monotonic())))  # the window
        window += 1
        acks, e2e, errors = lat.take()
        nodes = []
        for node in server.nodes:
            port = node.http_port
            assert port is not None
            samples = scrape(port)
            late = late_probes(samples)
            steps = samples.get("kbroker_event_loop_slow_steps_total", 0.0)
            nodes.append(
                f"{node.rss_bytes() / 2**20:.0f} MiB, {late - previous[port]:.0f}, "
                f"{1000 * samples.get('kbroker_event_loop_lag_max_seconds', 0.0):.0f}, "
                f"{steps - slow[port]:.0f}"
            )
            previous[port], slow[port] = late, steps
        print(
            f"{window:6}  {len(acks):5}  {ms(acks):>19}  {ms(e2e):>19}  "
            + " | ".join(nodes)
            + (f"  ({errors} failed deliveries)" if errors else "")
            + f"  load {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
        )
    stop.set()
    producer.join()
    for t in threads:
        t.join()
    for node in server.nodes:
        lines = [
            line.strip()
            for line in node.log_path.read_text(errors="replace").splitlines()
            if "slow step:" in line or "late step," in line
        ]
        print(f"node {node.node_id}: {len(lines)} slow or late steps logged")
        for line in lines[-40:]:
            print("  " + line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=2000, help="records a second")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f} at the start")
    with kafka_cluster(3, http=True, settings={"min.insync.replicas": "2"}) as server:
        run(server, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
