"""DeleteRecords whose segment deletion fails with an I/O error (EIO injected into the
segment removal: a real disk's failure cannot be made on demand) answers KAFKA_STORAGE_ERROR and
takes the log directory offline, as an append's I/O error does."""

from __future__ import annotations

from pathlib import Path

import pytest
from disk_faults import eio
from inprocess import RawClient, run_broker

from kbroker.broker import Broker
from kbroker.storage import segment as segment_module

DELETE_RECORDS = 21
KAFKA_STORAGE_ERROR = 56


def test_delete_records_failing_to_delete_a_segment_takes_the_log_directory_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    halts: list[int] = []  # its only log directory fails: it would halt

    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(port)
        await client.create_topic("trimmed", {"internal.segment.bytes": "1024"})
        for _ in range(5):
            assert (await client.produce("trimmed", b"x" * 600)).error_code == 0
        monkeypatch.setattr(segment_module, "remove_file", eio)
        answer = await client.call(
            DELETE_RECORDS,
            2,
            {
                "topics": [
                    {"name": "trimmed", "partitions": [{"partition_index": 0, "offset": 4}]}
                ],
                "timeout": 1000,
            },
        )
        monkeypatch.undo()
        assert answer.topics[0].partitions[0].error_code == KAFKA_STORAGE_ERROR
        assert list(broker.logs.offline_dirs) == [str(tmp_path / "data")]
        assert "Input/output error" in broker.logs.offline_dirs[str(tmp_path / "data")]
        assert halts == [1]
        client.close()

    run_broker(tmp_path, check, halts=halts)
