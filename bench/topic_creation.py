"""Time to create (and delete) a topic of N partitions on a fresh kbroker, and what
another client sees meanwhile: one connection sends Metadata requests back to back
(5 ms apart) for the whole creation and deletion, and their latencies are reported,
with the worst "broker time" too: an answer's latency less the time the broker's threads
and the asking thread waited for a CPU meanwhile (compat_tests/cpu_wait.py), which is
what a loaded shared machine adds.

    .venv/bin/python -m bench.topic_creation 10000 50000
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compat_tests.broker_process import BrokerProcess, running_broker
from compat_tests.cpu_wait import CpuWait
from kbroker.admin.client import BrokerConnection

CREATE_TOPICS, DELETE_TOPICS, METADATA = 19, 20, 3


def probed(
    broker: BrokerProcess, action: Callable[[], Any]
) -> tuple[Any, float, list[tuple[float, float]]]:
    """Run `action` while another connection times Metadata round trips; returns the
    outcome, its seconds, and (latency, broker time) per answer, slowest last."""
    latencies: list[tuple[float, float]] = []
    done = threading.Event()
    assert broker.proc is not None
    pid = broker.proc.pid

    def probe() -> None:
        cpu = CpuWait(pid)
        with BrokerConnection(broker.host, broker.port, 600.0, "probe") as conn:
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
    began = time.perf_counter()
    outcome = action()
    took = time.perf_counter() - began
    time.sleep(0.3)
    done.set()
    thread.join()
    return outcome, took, sorted(latencies)


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


def measure(partitions: int) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_broker(Path(tmp)) as broker,
        BrokerConnection(broker.host, broker.port, 900.0, "creator") as conn,
    ):
        topic = {
            "name": "wide",
            "num_partitions": partitions,
            "replication_factor": 1,
            "assignments": [],
            "configs": [],
        }
        answer, took, latencies = probed(
            broker,
            lambda: conn.request(
                CREATE_TOPICS, 7, topics=[topic], timeout=900_000, validate_only=False
            ),
        )
        created = answer.topics[0]
        print(
            f"create {partitions}: {took:.2f} s, error {int(created.error_code)}"
            f"{' (' + created.error_message + ')' if created.error_message else ''}; "
            + summary(latencies)
        )
        _, took, latencies = probed(
            broker,
            lambda: conn.request(
                DELETE_TOPICS, 6, topics=[{"name": "wide", "topic_id": None}], timeout=900_000
            ),
        )
        print(f"delete {partitions}: {took:.2f} s; " + summary(latencies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("partitions", type=int, nargs="+")
    for partitions in parser.parse_args().partitions:
        measure(partitions)


if __name__ == "__main__":
    main()
