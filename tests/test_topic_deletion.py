"""Deleting a topic of many partitions (ReplicaManager.drop_topic, LogManager.delete_topic):
out of service in one loop step, since a topic of the same name may come back in the next;
its partitions stopped and its logs retired after, a slice at a time, so that deleting
10,000 partitions does not hold every other request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from kbroker.controller.state import PartitionInfo
from kbroker.protocol.batch import encode_batch
from kbroker.replica import manager as replica_manager
from kbroker.replica.delayed import DataWaiters, PendingAck
from kbroker.replica.manager import ReplicaManager
from kbroker.storage import LogConfig
from kbroker.storage import manager as storage_manager
from kbroker.storage.manager import DELETE_SUFFIX, LogManager

NOW = 1_700_000_000_000
PARTITIONS = 100  # more than the logs retire in one step (64); the stops are cut to 16


@pytest.fixture
def big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ReplicaManager, LogManager]:
    """Broker 1 leads `big`'s partitions, replicated to broker 2 (so acks=all waits)."""
    monkeypatch.setattr(replica_manager, "_STOP_SLICE", 16)
    logs = LogManager([tmp_path])
    manager = ReplicaManager(1, logs, DataWaiters())
    for p in range(PARTITIONS):
        manager.ensure("big", PartitionInfo(p, 1, (1, 2), (1, 2), 1), LogConfig())
    return manager, logs


def waiting_acks(manager: ReplicaManager) -> list[ErrorCode]:
    """An acks=all produce to every partition, waiting for broker 2; the list their
    answers will be put in."""
    answers: list[ErrorCode] = []
    for p in range(PARTITIONS):
        partition = manager.get("big", p)
        assert partition is not None
        partition.append_as_leader(encode_batch([(None, b"v")], NOW), NOW, required_acks=-1)
        assert isinstance(partition.await_replication(1, answers.append), PendingAck)
    return answers


async def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def deleted_dirs(root: Path) -> list[Path]:
    return [d for d in root.iterdir() if d.name.endswith(DELETE_SUFFIX)]


def test_a_deleted_topic_is_gone_at_once_and_its_waiting_requests_answered_after(
    big: tuple[ReplicaManager, LogManager], tmp_path: Path
) -> None:
    manager, logs = big

    async def scenario() -> None:
        answers = waiting_acks(manager)
        fetch = manager.waiters.new_waiter([("big", PARTITIONS - 1)])
        manager.drop_topic("big")
        for p in range(PARTITIONS):
            assert manager.get("big", p) is None
            assert logs.get("big", p) is None
        assert manager.leader("big", 0) == (None, ErrorCode.unknown_topic_or_partition)
        assert len(answers) < PARTITIONS  # not every stop in the deleting step
        await until(lambda: len(answers) == PARTITIONS, "every waiting produce answered")
        assert set(answers) == {ErrorCode.not_leader_or_follower}
        await asyncio.wait_for(fetch, 5)  # the parked fetch woken to find the topic gone
        await until(lambda: not any(tmp_path.glob("big-*[0-9]")), "the directories renamed")
        await until(lambda: not deleted_dirs(tmp_path), "the renamed directories removed")

    asyncio.run(scenario())


def test_a_topic_of_the_same_name_made_at_once_is_left_alone_by_the_old_ones_slices(
    big: tuple[ReplicaManager, LogManager], tmp_path: Path
) -> None:
    manager, logs = big

    async def scenario() -> None:
        answers = waiting_acks(manager)
        manager.drop_topic("big")
        again = [
            manager.ensure("big", PartitionInfo(p, 1, (1,), (1,), 1), LogConfig())
            for p in range(PARTITIONS)
        ]
        await until(lambda: len(answers) == PARTITIONS, "the old topic's produces answered")
        await until(lambda: not deleted_dirs(tmp_path), "the old directories removed")
        for p, partition in enumerate(again):
            assert manager.get("big", p) is partition
            assert partition.log is logs.get("big", p)
            assert partition.check_leader() == ErrorCode.none
            assert partition.log_end_offset == 0  # a fresh log, not the deleted one's
            partition.append_as_leader(encode_batch([(None, b"new")], NOW), NOW)
            assert partition.log_end_offset == 1
            assert (tmp_path / f"big-{p}").is_dir()

    asyncio.run(scenario())


def test_a_log_whose_rename_failed_is_not_removed_under_a_new_log_at_its_path(
    big: tuple[ReplicaManager, LogManager], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deleted log's directory that could not be renamed away keeps its path; the slices'
    removal must leave that path alone, where a topic of the same name may make a log."""
    manager, _logs = big
    removed: list[list[Path]] = []
    monkeypatch.setattr(storage_manager, "_remove_all", removed.append)
    real_rename = storage_manager.os.rename

    def rename(source: Path, target: Path) -> None:
        if Path(source).name == "big-7":
            raise FileNotFoundError(source)
        real_rename(source, target)

    monkeypatch.setattr(storage_manager.os, "rename", rename)

    async def scenario() -> None:
        manager.drop_topic("big")
        await until(lambda: bool(removed), "the deleted directories handed to the remover")

    asyncio.run(scenario())
    (paths,) = removed
    assert len(paths) == PARTITIONS - 1
    assert all(p.name.endswith(DELETE_SUFFIX) for p in paths)
    assert (tmp_path / "big-7").is_dir()
