"""A replica a reassignment takes off this broker: the ReplicaManager gives it up and
deletes its log, as Kafka deletes a removed replica's partition directory."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from compat_tests.waiting import eventually
from kbroker.controller.state import PartitionInfo
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.manager import ReplicaManager
from kbroker.storage import LogConfig
from kbroker.storage.manager import LogManager


def hosting(tmp_path: Path) -> tuple[ReplicaManager, LogManager]:
    logs = LogManager([tmp_path])
    manager = ReplicaManager(2, logs, DataWaiters())
    # Broker 2 follows broker 1 in partition t-0.
    manager.ensure("t", PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3)), LogConfig())
    return manager, logs


def test_a_removed_replica_is_no_longer_hosted_and_its_log_is_gone(tmp_path: Path) -> None:
    manager, logs = hosting(tmp_path)
    replica = manager.get("t", 0)
    assert replica is not None and (tmp_path / "t-0").is_dir()
    manager.remove("t", 0)
    assert manager.get("t", 0) is None
    assert logs.get("t", 0) is None
    assert not (tmp_path / "t-0").exists()  # renamed away at once, its files removed after
    eventually(lambda: not any(tmp_path.iterdir()), timeout=5, what="the renamed files removed")
    assert list(tmp_path.iterdir()) == []


def test_a_removed_replica_answers_reads_as_led_elsewhere(tmp_path: Path) -> None:
    manager, _ = hosting(tmp_path)
    replica = manager.get("t", 0)
    assert replica is not None
    manager.remove("t", 0)
    assert replica.check_leader() == ErrorCode.not_leader_or_follower
    assert manager.leader("t", 0) == (None, ErrorCode.unknown_topic_or_partition)


def test_a_replica_moved_back_later_starts_a_fresh_log(tmp_path: Path) -> None:
    manager, logs = hosting(tmp_path)
    manager.remove("t", 0)
    again = manager.ensure("t", PartitionInfo(0, 1, (1, 2), (1,), 3, 5), LogConfig())
    assert again.log is logs.get("t", 0)
    assert (tmp_path / "t-0").is_dir()
    assert again.log_end_offset == 0
