"""An fsync that fails with an I/O error (here EIO, injected: a real disk's fsync
failure cannot be made on demand) takes its log directory offline as Kafka does: the
Produce that waited for it answers KAFKA_STORAGE_ERROR rather than success or a dropped
connection, and so does every later one to a partition of that directory."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest
from inprocess import RawClient, run_broker

from kbroker.admin.client import produce_fields
from kbroker.broker import Broker
from kbroker.protocol.batch import encode_batch
from kbroker.storage import log as log_module

PRODUCE = 0
KAFKA_STORAGE_ERROR = 56


def test_a_failed_fsync_answers_kafka_storage_error_and_takes_the_partition_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def check(broker: Broker, port: int) -> None:
        halts: list[int] = []
        broker.halt = halts.append  # its only log directory fails: it would halt
        client = await RawClient.connect(port)
        await client.create_topic("synced", {"flush.messages": "1"})

        async def produce() -> tuple[int, str | None]:
            batch = bytes(encode_batch([b"x"], int(time.time() * 1000)))
            answer = await client.call(PRODUCE, 9, produce_fields("synced", batch, acks=1))
            result = answer.responses[0].partition_responses[0]
            return int(result.error_code), result.error_message

        assert (await produce())[0] == 0

        def failing_fsync(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(log_module, "_fdatasync", failing_fsync)
        code, message = await produce()
        assert code == KAFKA_STORAGE_ERROR
        assert message is not None and "Input/output error" in message
        assert list(broker.logs.offline_dirs) == [str(tmp_path / "data")]
        assert halts == [1]
        monkeypatch.undo()  # the disk answers again; the directory stays offline
        assert (await produce())[0] == KAFKA_STORAGE_ERROR
        client.close()

    run_broker(tmp_path, check)
