"""The follower side of replication, without sockets: which fetched bytes are appended
and where a follower truncates after a leader change."""

from __future__ import annotations

from pathlib import Path

from kbroker.protocol.batch import encode_batch
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.fetcher import FetchState, ReplicaFetcher, whole_batches
from kbroker.replica.partition import Partition
from kbroker.storage import LogConfig, PartitionLog

NOW = 1_700_000_000_000


def replica(tmp_path: Path, node_id: int) -> Partition:
    log = PartitionLog.open(tmp_path / f"n{node_id}" / "t-0", LogConfig(), NOW)
    return Partition("t", 0, log, node_id, DataWaiters())


def test_a_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    first = bytes(encode_batch([(None, b"a")], NOW))
    second = bytes(encode_batch([(None, b"b" * 100)], NOW))
    assert whole_batches(first + second) == len(first) + len(second)
    assert whole_batches(first + second[:-1]) == len(first)
    assert whole_batches(second[:30]) == 0


def test_a_follower_cuts_its_tail_where_its_epoch_ended_on_the_leader(tmp_path: Path) -> None:
    follower = replica(tmp_path, 2)
    follower.become_leader(1, 0, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"a"), (None, b"b")], NOW), NOW)
    follower.become_leader(2, 1, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"lone")], NOW), NOW)  # never replicated
    follower.become_follower(1, 3, 2, (1, 2), (1,))
    # The leader's answer to OffsetForLeaderEpoch(2): its epoch 1 ended at offset 2.
    ReplicaFetcher._truncate_to(FetchState(follower), 2, 1, 2)
    assert follower.log_end_offset == 2
    assert follower.log.leader_epoch_entries() == [(1, 0)]


def test_a_follower_keeps_its_log_when_the_leader_has_all_of_its_epoch(tmp_path: Path) -> None:
    follower = replica(tmp_path, 2)
    follower.become_leader(1, 0, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"a"), (None, b"b")], NOW), NOW)
    follower.become_follower(1, 2, 1, (1, 2), (1,))
    state = FetchState(follower)
    ReplicaFetcher._truncate_to(state, 1, 1, 5)  # the leader has more of epoch 1
    assert follower.log_end_offset == 2
    assert not state.truncating
