"""The replica manager's append path (kbroker/replica/append.py): answers per partition
with Kafka error codes, and a delayed produce that waits for the ISR (acks=all) and for
the fsync of logs that flush every append, completed by plain callbacks."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from kbroker.controller.state import PartitionInfo
from kbroker.protocol.batch import encode_batch
from kbroker.replica.append import DelayedProduce
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.manager import ReplicaManager
from kbroker.storage import LogConfig, PartitionLog
from kbroker.storage.manager import LogManager

NOW = 1_700_000_000_000


def leading(tmp_path: Path, isr: tuple[int, ...] = (1,), config: LogConfig | None = None):  # type: ignore[no-untyped-def]
    """Broker 1 leads t-0 (replicas 1 and 2, the ISR given) with min.insync.replicas 1."""
    logs = LogManager([tmp_path])
    manager = ReplicaManager(1, logs, DataWaiters())
    manager.ensure("t", PartitionInfo(0, 1, (1, 2), isr, 1), config or LogConfig())
    return manager, logs


def batch(value: bytes = b"v") -> bytearray:
    return encode_batch([(None, value)], NOW)


def follower_fetches(manager: ReplicaManager, offset: int) -> None:
    partition = manager.get("t", 0)
    assert partition is not None
    partition.read(offset, 1 << 20, replica_id=2, now_ms=NOW)


def test_each_partition_answers_with_an_error_code_in_the_entries_order(tmp_path: Path) -> None:
    manager, _ = leading(tmp_path)
    delayed = manager.append_records(
        [("t", 0, batch()), ("t", 7, batch()), ("t", 0, None), ("t", 0, bytearray(b"junk"))],
        1,
        1000,
        now_ms=NOW,
    )
    assert delayed.done
    codes = [ErrorCode(r.error_code) for r in delayed.results]
    assert codes == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.corrupt_message,
        ErrorCode.corrupt_message,
    ]
    assert [r.index for r in delayed.results] == [0, 7, 0, 0]
    assert delayed.results[0].base_offset == 0


def test_acks_all_waits_for_the_isr_and_completes_from_a_follower_fetch(tmp_path: Path) -> None:
    async def run() -> None:
        manager, _ = leading(tmp_path, isr=(1, 2))
        follower_fetches(manager, 0)
        delayed = manager.append_records([("t", 0, batch())], -1, 30_000, now_ms=NOW)
        assert not delayed.done and delayed.waits_for_replication
        completed: list[DelayedProduce] = []
        delayed.on_complete(completed.append)
        follower_fetches(manager, 1)  # the follower now holds the batch
        assert completed == [delayed]
        assert delayed.results[0].error_code == ErrorCode.none

    asyncio.run(run())


def test_acks_all_answers_request_timed_out_at_the_timeout(tmp_path: Path) -> None:
    async def run() -> None:
        manager, _ = leading(tmp_path, isr=(1, 2))
        follower_fetches(manager, 0)
        delayed = manager.append_records([("t", 0, batch())], -1, 10, now_ms=NOW)
        assert not delayed.done
        await asyncio.wait_for(delayed.wait(), 10)
        assert delayed.results[0].error_code == ErrorCode.request_timed_out

    asyncio.run(run())


def test_acks_all_under_min_insync_replicas_appends_nothing(tmp_path: Path) -> None:
    manager, logs = leading(tmp_path, isr=(1,))
    partition = manager.get("t", 0)
    assert partition is not None
    partition.min_insync_replicas = 2
    delayed = manager.append_records([("t", 0, batch())], -1, 1000, now_ms=NOW)
    assert delayed.done
    assert delayed.results[0].error_code == ErrorCode.not_enough_replicas
    assert partition.log_end_offset == 0


def test_acks_zero_and_acks_one_do_not_wait_for_followers(tmp_path: Path) -> None:
    manager, _ = leading(tmp_path, isr=(1, 2))
    for acks in (0, 1):
        delayed = manager.append_records([("t", 0, batch())], acks, 1000, now_ms=NOW)
        assert delayed.done and delayed.results[0].error_code == ErrorCode.none


def test_a_log_that_fsyncs_every_append_answers_after_the_group_commit(tmp_path: Path) -> None:
    async def run() -> None:
        manager, _ = leading(tmp_path, config=LogConfig(flush_interval_messages=1))
        partition = manager.get("t", 0)
        assert partition is not None
        delayed = manager.append_records([("t", 0, batch())], 1, 1000, now_ms=NOW)
        assert not delayed.done and not delayed.waits_for_replication
        await asyncio.wait_for(delayed.wait(), 10)
        assert partition.log.flushed_offset >= 1
        assert delayed.results[0].error_code == ErrorCode.none

    asyncio.run(run())


def test_an_io_error_answers_kafka_storage_error_and_takes_the_directory_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, logs = leading(tmp_path)

    def failing(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PartitionLog, "append", failing)
    delayed = manager.append_records([("t", 0, batch())], 1, 1000, now_ms=NOW)
    result = delayed.results[0]
    assert result.error_code == ErrorCode.kafka_storage_error
    assert result.error_message is not None and "No space left" in result.error_message
    assert list(logs.offline_dirs) == [str(tmp_path)]
    assert manager.get("t", 0) is None


def test_running_out_of_descriptors_fails_the_append_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, logs = leading(tmp_path)

    def failing(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(PartitionLog, "append", failing)
    delayed = manager.append_records([("t", 0, batch())], 1, 1000, now_ms=NOW)
    assert delayed.results[0].error_code == ErrorCode.kafka_storage_error
    assert logs.offline_dirs == {}
    assert manager.get("t", 0) is not None


def test_only_a_client_produce_passes_the_produce_path_policies(tmp_path: Path) -> None:
    manager, _ = leading(tmp_path)
    refused: list[str] = []

    class RefuseAll:
        def refuse(self, topic: str, records: object) -> tuple[str, list[tuple[int, str]]]:
            refused.append(topic)
            return "no schema id", [(0, "no schema id")]

    manager.record_validation = RefuseAll()
    internal = manager.append_records([("t", 0, batch())], 1, 1000, now_ms=NOW)
    assert internal.results[0].error_code == ErrorCode.none and refused == []
    client = manager.append_records([("t", 0, batch())], 1, 1000, now_ms=NOW, request_version=9)
    result = client.results[0]
    assert result.error_code == ErrorCode.invalid_record
    assert result.record_errors == ((0, "no schema id"),)
    assert refused == ["t"]
    empty = manager.append_records([("t", 0, bytearray())], 1, 1000, request_version=9)
    assert empty.results[0].error_code == ErrorCode.invalid_record
