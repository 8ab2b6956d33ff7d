"""The HTTP side of a broker: /health, /ready and /metrics, served by a real Broker in-process."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from kbroker.broker import Broker
from kbroker.config import load_broker_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def _run_with_broker(tmp_path: Path, check) -> None:  # type: ignore[no-untyped-def]
    http_port = _free_port()
    config = load_broker_config(
        None,
        [
            f"listeners=PLAINTEXT://127.0.0.1:{_free_port()}",
            f"log.dirs={tmp_path / 'data'}",
            f"http.listeners=http://127.0.0.1:{http_port}",
        ],
        {},
    )

    async def main() -> None:
        broker = Broker(config)
        await broker.start()
        try:
            await check(broker, http_port)
        finally:
            await broker.stop()

    asyncio.run(main())


def test_health_answers_ok(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        status, body = await _get(port, "/health")
        assert status == 200 and '"ok"' in body

    _run_with_broker(tmp_path, check)


def test_ready_reports_a_started_broker(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        status, body = await _get(port, "/ready")
        assert status == 200 and '"ready": true' in body
        broker.ready = False
        status, _ = await _get(port, "/ready")
        assert status == 503

    _run_with_broker(tmp_path, check)


def test_metrics_expose_partitions_of_created_topics(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        await broker.controller.create_topic("metered", 2, 1, {})
        status, body = await _get(port, "/metrics")
        assert status == 200
        assert "kbroker_partitions 2" in body
        assert 'kbroker_log_end_offset{topic="metered",partition="1"} 0' in body
        assert "process_resident_memory_bytes" in body

    _run_with_broker(tmp_path, check)


@pytest.mark.parametrize("path", ["/nope", "/metricsx"])
def test_unknown_paths_are_not_found(tmp_path: Path, path: str) -> None:
    async def check(broker: Broker, port: int) -> None:
        status, _ = await _get(port, path)
        assert status == 404

    _run_with_broker(tmp_path, check)
