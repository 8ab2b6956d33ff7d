"""Time to create (and delete) a topic of N partitions on a fresh kbroker, and what
another client sees meanwhile: one connection sends Metadata requests back to back
(5 ms apart) for the whole creation and deletion, and their latencies are reported,
with the worst "broker time" too: an answer's latency less the time the broker's threads
and the asking thread waited for a CPU meanwhile (compat_tests/cpu_wait.py), which is
what a loaded shared machine adds. Each line also gives the broker's CPU seconds
(process tree) for the creation or deletion.

With `--peers kbroker,kafka` Apache Kafka 4.3 (one KRaft node, bench.peers.KafkaPeer) is
measured the same way, each size on kbroker then on Kafka (the order alternating by
size), and the kbroker/Kafka ratios printed.

    .venv/bin/python -m bench.topic_creation 10000 50000 [--peers kbroker,kafka]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers import KafkaPeer, PeerUnavailable
from bench.procs import loadavg, tree_cpu_seconds
from compat_tests.broker_process import running_broker
from compat_tests.cpu_wait import CpuWait
from kbroker.admin.client import BrokerConnection

CREATE_TOPICS, DELETE_TOPICS, METADATA, CREATE_PARTITIONS = 19, 20, 3, 37
POLICY_VIOLATION = 44
# Kafka's controller refuses an operation of more than 10,000 metadata records
# (QuorumController's MAX_RECORDS_PER_USER_OP), and a topic of N partitions is N + 1:
# there the topic is made as an operator would, half in CreateTopics and the rest added
# by CreatePartitions, both in the timed step.


def probed(
    host: str, port: int, pid: int, action: Callable[[], Any]
) -> tuple[Any, float, list[tuple[float, float]], float]:
    """Run `action` while another connection times Metadata round trips; returns the
    outcome, its seconds, (latency, broker time) per answer, slowest last, and the
    broker's CPU seconds meanwhile."""
    latencies: list[tuple[float, float]] = []
    done = threading.Event()

    def probe() -> None:
        cpu = CpuWait(pid)
        with BrokerConnection(host, port, 600.0, "probe") as conn:
            while not done.is_set():
                cpu.start()
                began = time.perf_counter()
                conn.request(
                    METADATA,
                    12,
                    topics=[],
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
                latency = time.perf_counter() - began
                latencies.append((latency, latency - cpu.waited()))
                time.sleep(0.005)

    thread = threading.Thread(target=probe)
    thread.start()
    time.sleep(0.3)
    cpu = tree_cpu_seconds(pid)
    began = time.perf_counter()
    outcome = action()
    took = time.perf_counter() - began
    cpu = tree_cpu_seconds(pid) - cpu
    time.sleep(0.3)
    done.set()
    thread.join()
    return outcome, took, sorted(latencies), cpu


def summary(answers: list[tuple[float, float]]) -> str:
    latencies = [latency for latency, _ in answers]

    def ms(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(len(latencies) * q))] * 1000

    broker_time = max(own for _, own in answers)
    return (
        f"{len(latencies)} Metadata answers meanwhile: p50 {ms(0.5):.1f} ms, "
        f"p99 {ms(0.99):.1f} ms, worst {latencies[-1] * 1000:.1f} ms; "
        f"worst broker time {broker_time * 1000:.1f} ms"
    )


def measure(name: str, host: str, port: int, pid: int, partitions: int) -> dict[str, float]:
    """Create a topic of `partitions` partitions and delete it, probed; the figures."""
    with BrokerConnection(host, port, 900.0, "creator") as conn:
        topic = {
            "name": "wide",
            "num_partitions": partitions,
            "replication_factor": 1,
            "assignments": [],
            "configs": [],
        }
        load = loadavg()

        def create() -> Any:
            answer = conn.request(
                CREATE_TOPICS, 7, topics=[topic], timeout=900_000, validate_only=False
            )
            if int(answer.topics[0].error_code) != POLICY_VIOLATION:
                return answer
            print(f"{name} refused {partitions} partitions in one CreateTopics: "
                  f"{answer.topics[0].error_message}; half now, the rest by CreatePartitions")  # fmt: skip
            answer = conn.request(
                CREATE_TOPICS,
                7,
                topics=[topic | {"num_partitions": partitions // 2}],
                timeout=900_000,
                validate_only=False,
            )
            added = conn.request(
                CREATE_PARTITIONS,
                3,
                topics=[{"name": "wide", "count": partitions, "assignments": None}],
                timeout=900_000,
                validate_only=False,
            )
            if int(added.results[0].error_code):
                raise RuntimeError(f"CreatePartitions failed: {added.results[0]}")
            return answer

        answer, took, latencies, cpu = probed(host, port, pid, create)
        created = answer.topics[0]
        print(
            f"{name} create {partitions}: {took:.2f} s, broker CPU {cpu:.2f} s, error "
            f"{int(created.error_code)}"
            f"{' (' + created.error_message + ')' if created.error_message else ''}; "
            + summary(latencies)
            + f"; load average {load:.1f}",
            flush=True,
        )
        figures = {"create_s": took, "create_cpu_s": cpu, **_quantiles("create", latencies)}
        _, took, latencies, cpu = probed(
            host,
            port,
            pid,
            lambda: conn.request(
                DELETE_TOPICS, 6, topics=[{"name": "wide", "topic_id": None}], timeout=900_000
            ),
        )
        print(
            f"{name} delete {partitions}: {took:.2f} s, broker CPU {cpu:.2f} s; "
            + summary(latencies),
            flush=True,
        )
        figures |= {"delete_s": took, "delete_cpu_s": cpu, **_quantiles("delete", latencies)}
        return figures


def _quantiles(what: str, answers: list[tuple[float, float]]) -> dict[str, float]:
    latencies = [latency for latency, _ in answers]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return {
        f"{what}_metadata_p99_ms": p99 * 1000,
        f"{what}_metadata_worst_ms": latencies[-1] * 1000,
    }


def on_kbroker(partitions: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, running_broker(Path(tmp)) as broker:
        assert broker.proc is not None
        return measure("kbroker", broker.host, broker.port, broker.proc.pid, partitions)


def on_kafka(partitions: int) -> dict[str, float] | None:
    with tempfile.TemporaryDirectory() as tmp:
        peer = KafkaPeer("kafka", Path(tmp))
        try:
            peer.start()
        except PeerUnavailable as exc:
            print(f"kafka skipped: {exc}")
            return None
        try:
            return measure("kafka", peer.host, peer.port, peer.pid, partitions)
        finally:
            peer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("partitions", type=int, nargs="+")
    parser.add_argument("--peers", default="kbroker", help="kbroker, kafka, or both")
    args = parser.parse_args()
    wanted = args.peers.split(",")
    for i, partitions in enumerate(args.partitions):
        runs = [("kbroker", on_kbroker), ("kafka", on_kafka)]
        found: dict[str, dict[str, float]] = {}
        for name, run in runs if i % 2 == 0 else runs[::-1]:
            if name in wanted and (figures := run(partitions)) is not None:
                found[name] = figures
        if len(found) == 2:
            kb, ka = found["kbroker"], found["kafka"]
            print(f"kbroker/Kafka at {partitions} partitions:")
            print("| figure | kbroker | Kafka | kbroker/Kafka |")
            print("| --- | ---: | ---: | ---: |")
            for key in kb:
                print(
                    f"| {key} | {kb[key]:.2f} | {ka[key]:.2f} | {kb[key] / max(ka[key], 1e-9):.2f}x |"
                )


if __name__ == "__main__":
    main()
