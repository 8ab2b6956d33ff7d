"""An I/O error while appending as leader takes the log directory offline at once,
whoever appended: a client's Produce, a coordinator writing its internal topic, a
transaction marker, a transactional offset commit, a share group's dead letter. Every
append goes through the replica manager, whose I/O errors go to the log directory
failure channel (EIO injected into the log's append: a real disk's failure cannot be
made on demand). The broker's only log directory fails, so it would halt: the halt is
recorded instead."""

from __future__ import annotations

import errno
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from inprocess import RawClient, run_broker
from kio.schema.errors import ErrorCode

from compat_tests.waiting import eventually_async
from kbroker.broker import Broker
from kbroker.coordinator.group import OffsetAndMetadata
from kbroker.coordinator.store import OFFSETS_TOPIC
from kbroker.coordinator_runtime.internal_topics import append_records
from kbroker.share.partition_state import DeadLetter
from kbroker.storage.log import PartitionLog

FAILING = "failing"


def _fail_appends_to(monkeypatch: pytest.MonkeyPatch, topic: str) -> None:
    """Every append to a log of `topic` fails as a disk's write does."""
    real = PartitionLog.append

    def append(self: PartitionLog, *args: Any, **kwargs: Any) -> Any:
        if self.topic == topic:
            raise OSError(errno.EIO, "Input/output error")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, "append", append)


def _offline_at_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    topic: str,
    prepare: Callable[[Broker, int], Awaitable[None]],
    append: Callable[[Broker], Awaitable[Any]],
    answered: Callable[[Any], bool],
) -> None:
    """Create `topic`, run `prepare`, make appends to `topic` fail, append once: the
    answer says so, and the log directory is offline when the append returns."""
    halts: list[int] = []
    data = str(tmp_path / "data")

    async def check(broker: Broker, port: int) -> None:
        await prepare(broker, port)
        if topic not in broker.controller.state.topics:
            await broker.controller.create_topic(topic, 1, 1, {})
        await eventually_async(lambda: _leads(broker, topic), timeout=10, what=f"leading {topic}-0")
        assert broker.logs.offline_dirs == {}
        _fail_appends_to(monkeypatch, topic)
        answer = await append(broker)
        monkeypatch.undo()
        assert answered(answer), answer
        assert list(broker.logs.offline_dirs) == [data]
        assert "Input/output error" in broker.logs.offline_dirs[data]
        assert broker.replicas.get(topic, 0) is None  # its replica left service
        assert halts == [1]

    run_broker(tmp_path, check, ["offsets.topic.num.partitions=1"], halts=halts)


async def _leads(broker: Broker, topic: str) -> bool:
    partition, _ = broker.replicas.leader(topic, 0)
    return partition is not None


async def _nothing(broker: Broker, port: int) -> None:
    return None


def _now() -> int:
    return int(time.time() * 1000)


def test_a_produce(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client: list[RawClient] = []

    async def connect(broker: Broker, port: int) -> None:
        client.append(await RawClient.connect(port))

    async def produce(broker: Broker) -> Any:
        answer = await client[0].produce(FAILING, b"x")
        client[0].close()
        return answer

    _offline_at_once(
        tmp_path,
        monkeypatch,
        FAILING,
        connect,
        produce,
        lambda p: p.error_code == ErrorCode.kafka_storage_error,
    )


def test_a_coordinator_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def append(broker: Broker) -> Any:
        return append_records(broker, FAILING, 0, [(b"key", b"value")], _now())

    _offline_at_once(
        tmp_path,
        monkeypatch,
        FAILING,
        _nothing,
        append,
        lambda answer: answer == (ErrorCode.kafka_storage_error, None),
    )


def test_a_transaction_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def append(broker: Broker) -> Any:
        markers = broker.txn_coordinator.markers
        return markers.write_one((FAILING, 0), 1000, 0, 0, True, _now())

    _offline_at_once(
        tmp_path,
        monkeypatch,
        FAILING,
        _nothing,
        append,
        lambda code: code == ErrorCode.kafka_storage_error,
    )


def test_a_transactional_offset_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group = "g"

    async def offsets_topic(broker: Broker, port: int) -> None:
        assert await broker.group_coordinator.ensure_topic() == ErrorCode.none

    async def append(broker: Broker) -> Any:
        offsets = {("in", 0): OffsetAndMetadata(5)}
        return broker.txn_coordinator.offsets.write(group, 1000, 0, offsets)

    _offline_at_once(
        tmp_path,
        monkeypatch,
        OFFSETS_TOPIC,
        offsets_topic,
        append,
        lambda answer: answer == (ErrorCode.not_coordinator, None),
    )


def test_a_dead_letter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def append(broker: Broker) -> Any:
        writer = broker.share_coordinator.dead_letters
        return await writer._copy(FAILING, "g", "in", 0, DeadLetter(0, 5, "rejected"), False)

    _offline_at_once(
        tmp_path, monkeypatch, FAILING, _nothing, append, lambda copied: copied is False
    )
