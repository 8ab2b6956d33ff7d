"""An fsync that fails with an I/O error (here EIO, injected: a real disk's fsync
failure cannot be made on demand) takes its log directory offline as Kafka does: the
Produce that waited for it answers KAFKA_STORAGE_ERROR rather than success or a dropped
connection, and so does every later one to a partition of that directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from disk_faults import eio
from inprocess import RawClient, run_broker

from kbroker.broker import Broker
from kbroker.storage import log as log_module

KAFKA_STORAGE_ERROR = 56


def test_a_failed_fsync_answers_kafka_storage_error_and_takes_the_partition_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    halts: list[int] = []  # its only log directory fails: it would halt

    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(port)
        await client.create_topic("synced", {"flush.messages": "1"})
        assert (await client.produce("synced", b"x")).error_code == 0
        monkeypatch.setattr(log_module, "_fdatasync", eio)
        failed = await client.produce("synced", b"x")
        assert failed.error_code == KAFKA_STORAGE_ERROR
        assert failed.error_message is not None and "Input/output error" in failed.error_message
        assert list(broker.logs.offline_dirs) == [str(tmp_path / "data")]
        assert halts == [1]
        monkeypatch.undo()  # the disk answers again; the directory stays offline
        assert (await client.produce("synced", b"x")).error_code == KAFKA_STORAGE_ERROR
        client.close()

    run_broker(tmp_path, check, halts=halts)
