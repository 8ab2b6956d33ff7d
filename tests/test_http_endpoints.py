"""The HTTP side of a broker: /health, /ready and /metrics, served by a real Broker in-process."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from inprocess import RawClient, run_broker

from kbroker.broker import Broker

API_VERSIONS = 18


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def test_health_answers_ok(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        status, body = await _get(port, "/health")
        assert status == 200 and '"ok"' in body

    run_broker(tmp_path, check, http=True)


def test_ready_reports_a_started_broker(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        status, body = await _get(port, "/ready")
        assert status == 200 and '"ready": true' in body
        broker.ready = False
        status, _ = await _get(port, "/ready")
        assert status == 503

    run_broker(tmp_path, check, http=True)


def test_metrics_expose_partitions_of_created_topics(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        await broker.controller.create_topic("metered", 2, 1, {})
        status, body = await _get(port, "/metrics")
        assert status == 200
        assert "kbroker_partitions 2" in body
        assert 'kbroker_log_end_offset{partition="1",topic="metered"} 0.0' in body
        assert "process_resident_memory_bytes" in body

    run_broker(tmp_path, check, http=True)


def test_metrics_count_answers_followed_by_a_request_within_the_busy_poll_budget(
    tmp_path: Path,
) -> None:
    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(broker.listener.port)
        for _ in range(3):
            await client.call(
                API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
            )
        client.close()
        _, body = await _get(port, "/metrics")
        hits = re.search(r'kbroker_busy_poll_answers_total\{outcome="hit"\} ([\d.]+)', body)
        assert hits is not None and float(hits.group(1)) >= 2
        assert "kbroker_busy_poll_spins_total" in body

    run_broker(tmp_path, check, ["socket.busy.poll.us=10000"], http=True)


@pytest.mark.parametrize("path", ["/nope", "/metricsx"])
def test_unknown_paths_are_not_found(tmp_path: Path, path: str) -> None:
    async def check(broker: Broker, port: int) -> None:
        status, _ = await _get(port, path)
        assert status == 404

    run_broker(tmp_path, check, http=True)
