"""The HTTP side of a broker: /health, /ready and /metrics, served by a real Broker in-process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess import RawClient, run_broker

import kbroker
from kbroker.broker import Broker
from kbroker.metrics.health import PROBE_NAME, controller_check

API_VERSIONS = 18


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def test_health_answers_ok_with_each_check_it_made(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        status, body = await _get(port, "/health")
        report = json.loads(body)
        assert status == 200 and report["status"] == "ok"
        assert report["version"] == kbroker.__version__
        assert [c["name"] for c in report["checks"]] == [
            f"log_dir {tmp_path / 'data'}",
            "controller",
        ]

    run_broker(tmp_path, check, http=True)


def test_health_names_a_log_dir_that_is_gone(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        shutil.rmtree(tmp_path / "data")
        status, body = await _get(port, "/health")
        report = json.loads(body)
        assert status == 503 and report["status"] == "unhealthy"
        assert report["unhealthy"] == [f"log_dir {tmp_path / 'data'}: missing or not a directory"]

    run_broker(tmp_path, check, http=True)


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (mounting needs root, which the test machine's suite runs as)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_health_names_a_log_dir_that_is_full(tmp_path: Path, tiny_filesystem: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        status, _ = await _get(port, "/health")
        assert status == 200
        with contextlib.suppress(OSError), open(tiny_filesystem / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
        status, body = await _get(port, "/health")
        report = json.loads(body)
        assert status == 503
        assert report["unhealthy"] == [
            f"log_dir {tiny_filesystem}: cannot write: No space left on device"
        ]
        assert not (tiny_filesystem / PROBE_NAME).exists()
        (tiny_filesystem / "filler").unlink()
        status, _ = await _get(port, "/health")
        assert status == 200

    run_broker(tmp_path, check, [f"log.dirs={tmp_path / 'data'},{tiny_filesystem}"], http=True)


def test_controller_check_fails_once_heartbeats_go_unacknowledged_past_the_session() -> None:
    assert controller_check(False, None, 9.0, 100.0).ok
    assert controller_check(True, 95.0, 9.0, 100.0).ok
    late = controller_check(True, 80.0, 9.0, 100.0)
    assert not late.ok and "no heartbeat acknowledged for 20.0s" in late.detail
    assert not controller_check(True, None, 9.0, 100.0).ok


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
        # Twenty answers, of which two must be followed within the 10 ms budget: on a
        # loaded machine one pause of the test's own process can outlast the budget.
        for _ in range(20):
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


def test_a_log_dir_a_partition_could_not_be_made_in_is_offline_on_health_and_metrics(
    tmp_path: Path,
) -> None:
    halts: list[int] = []  # its only log directory fails: it would halt

    async def check(broker: Broker, port: int) -> None:
        (tmp_path / "data" / "blocked-0").write_bytes(b"not a directory")
        await broker.controller.create_topic("blocked", 1, 1, {})
        assert await broker.partitions_opened("blocked") == {0: broker.logs.failed[("blocked", 0)]}
        status, body = await _get(port, "/health")
        report = json.loads(body)
        assert status == 503
        assert any(
            line.startswith(f"log_dir {tmp_path / 'data'} offline: FileExistsError")
            for line in report["unhealthy"]
        ), report
        _, metrics = await _get(port, "/metrics")
        assert "kafka_log_logmanager_offlinelogdirectorycount 1.0" in metrics
        assert "kbroker_partition_logs_failed 1.0" in metrics

    run_broker(tmp_path, check, http=True, halts=halts)
    assert halts == [1]
