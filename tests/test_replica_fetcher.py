"""The follower side of replication, without sockets: which fetched bytes are appended
and where a follower truncates after a leader change."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kio.schema.fetch.v15.response import EpochEndOffset, PartitionData
from kio.schema.types import BrokerId
from kio.static.primitive import i32, i64

from kbroker.controller.state import MetadataState
from kbroker.protocol.batch import encode_batch
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.fetcher import (
    FetcherSettings,
    FetchState,
    ReplicaFetcher,
    ReplicaFetchers,
    whole_batches,
)
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


def fetch_answer(leader: Partition, follower: Partition) -> PartitionData:
    """The leader's Fetch v15 answer to the follower's next fetch, as the fetcher decodes it."""
    read = leader.read(
        follower.log_end_offset,
        1 << 20,
        replica_id=follower.node_id,
        now_ms=NOW,
        last_fetched_epoch=follower.log.latest_epoch,
    )
    records = None
    if read.records is not None:
        with read.records as region:
            records = bytes(region.read())
    fields: dict = {}
    if read.diverging_epoch is not None:
        epoch, end = read.diverging_epoch
        fields["diverging_epoch"] = EpochEndOffset(epoch=i32(epoch), end_offset=i64(end))
    return PartitionData(
        partition_index=i32(0),
        error_code=read.error,
        high_watermark=i64(read.high_watermark),
        last_stable_offset=i64(read.last_stable_offset),
        log_start_offset=i64(read.log_start_offset),
        aborted_transactions=(),
        preferred_read_replica=BrokerId(-1),
        records=records,
        **fields,
    )


def test_a_follower_with_a_divergent_tail_truncates_from_the_fetch_answer(tmp_path: Path) -> None:
    leader, follower = replica(tmp_path, 1), replica(tmp_path, 2)
    leader.become_leader(1, 0, (1, 2), (1, 2), NOW)
    follower.become_follower(1, 1, 0, (1, 2), (1, 2))
    leader.append_as_leader(encode_batch([(None, b"a"), (None, b"b")], NOW), NOW)
    fetcher = ReplicaFetcher(2, 1, MetadataState, FetcherSettings())
    state = FetchState(follower)
    fetcher._apply(state, fetch_answer(leader, follower), NOW)
    assert follower.log_end_offset == 2
    # Broker 2 leads epoch 2 alone for a moment and writes a tail nobody else gets.
    follower.become_leader(2, 1, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"lost")], NOW), NOW)
    leader.become_leader(3, 2, (1, 2), (1,), NOW)
    leader.append_as_leader(encode_batch([(None, b"c")], NOW), NOW)
    follower.become_follower(1, 3, 2, (1, 2), (1,))
    state = FetchState(follower)
    assert not state.truncating  # no OffsetForLeaderEpoch first: the fetch answer says
    answer = fetch_answer(leader, follower)
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (1, 2)
    fetcher._apply(state, answer, NOW)
    assert follower.log_end_offset == 2
    assert follower.log.leader_epoch_entries() == [(1, 0)]
    fetcher._apply(state, fetch_answer(leader, follower), NOW)  # now it fetches on
    assert follower.log_end_offset == leader.log_end_offset == 3
    assert follower.log.leader_epoch_entries() == leader.log.leader_epoch_entries()


def test_an_epoch_begun_as_leader_and_never_written_goes_when_the_follower_truncates(
    tmp_path: Path,
) -> None:
    follower = replica(tmp_path, 2)
    follower.become_leader(1, 0, (1, 2), (2,), NOW)
    follower.append_as_leader(encode_batch([(None, b"a")], NOW), NOW)
    follower.become_leader(2, 1, (1, 2), (2,), NOW)  # begins epoch 2 at 1, writes nothing
    follower.become_follower(1, 3, 2, (1, 2), (1,))
    ReplicaFetcher._truncate_to(FetchState(follower), 2, 1, 5)
    assert follower.log_end_offset == 1
    assert follower.log.latest_epoch == 1


def test_a_role_change_applied_during_shutdown_starts_no_fetcher(tmp_path: Path) -> None:
    """The controller may commit a change to a followed partition (its ISR, after this
    broker's controlled shutdown) once the fetchers have stopped and before the logs
    close: no fetcher may start then, to fail on the closed log and outlive the broker."""
    follower = replica(tmp_path, 2)
    follower.become_follower(1, 1, 0, (1, 2), (1, 2))

    async def shut_down() -> None:
        fetchers = ReplicaFetchers(2, MetadataState)
        fetchers.follow(follower)
        assert fetchers.fetching(follower)
        await fetchers.stop()
        fetchers.follow(follower)
        assert fetchers.fetchers == {}
        assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    asyncio.run(shut_down())
