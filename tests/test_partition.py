"""The Partition: roles, leader epochs, the ISR, the high watermark and acks=all.

Two in-process replicas of one partition (brokers 1 and 2) stand for a leader and its
follower: the follower's fetches are what the leader learns its log end offset from.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from kbroker.protocol.batch import encode_batch, read_header
from kbroker.replica.delayed import DataWaiters, PendingAck, PendingDeletion
from kbroker.replica.partition import UNCHANGED, Partition, PartitionError
from kbroker.storage import LogConfig, PartitionLog

NOW = 1_700_000_000_000
LAG_MS = 30_000


def replica(tmp_path: Path, node_id: int) -> Partition:
    log = PartitionLog.open(tmp_path / f"n{node_id}" / "t-0", LogConfig(), NOW)
    return Partition("t", 0, log, node_id, DataWaiters())


def batch(*values: bytes, producer_id: int = -1, sequence: int = -1) -> bytearray:
    return encode_batch(
        [(None, v) for v in values],
        NOW,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
    )


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Partition, Partition]:
    """Broker 1 leads at epoch 1 with ISR {1, 2}; broker 2 follows it."""
    leader, follower = replica(tmp_path, 1), replica(tmp_path, 2)
    leader.become_leader(1, 0, (1, 2), (1, 2), NOW)
    follower.become_follower(1, 1, 0, (1, 2), (1, 2))
    return leader, follower


def replicate(leader: Partition, follower: Partition, now: int = NOW) -> None:
    """One follower fetch: read from the follower's log end, append, take the HW."""
    read = leader.read(follower.log_end_offset, 1 << 20, replica_id=follower.node_id, now_ms=now)
    assert read.error == ErrorCode.none
    if read.records is not None:
        with read.records as region:
            follower.append_as_follower(bytearray(region.read()), now)
    follower.update_follower_high_watermark(read.high_watermark)


def test_alone_in_its_isr_a_leader_commits_each_append_at_once(tmp_path):
    alone = replica(tmp_path, 1)
    alone.become_leader(0, 0, (1,), (1,), NOW)
    alone.append_as_leader(batch(b"a", b"b"), NOW, required_acks=-1)
    assert alone.high_watermark == alone.log_end_offset == 2
    assert alone.replication_outcome(2) == ErrorCode.none


def test_a_follower_refuses_leader_requests(pair):
    _, follower = pair
    assert follower.check_leader() == ErrorCode.not_leader_or_follower
    with pytest.raises(PartitionError) as refused:
        follower.append_as_leader(batch(b"a"), NOW)
    assert refused.value.code == ErrorCode.not_leader_or_follower
    assert follower.read(0, 1024).error == ErrorCode.not_leader_or_follower


def test_leader_epoch_of_the_client_is_checked(pair):
    leader, _ = pair
    assert leader.check_leader(1) == ErrorCode.none
    assert leader.check_leader(-1) == ErrorCode.none
    assert leader.check_leader(0) == ErrorCode.fenced_leader_epoch
    assert leader.check_leader(2) == ErrorCode.unknown_leader_epoch


def test_high_watermark_waits_for_every_isr_member(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b", b"c"), NOW)
    assert (leader.log_end_offset, leader.high_watermark) == (3, 0)
    replicate(leader, follower)  # the follower now holds 0..2 but has not said so
    assert leader.high_watermark == 0
    replicate(leader, follower)  # its next fetch, from 3, tells the leader
    assert leader.high_watermark == 3


def test_a_consumer_reads_below_the_high_watermark_a_follower_up_to_the_log_end(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a"), NOW)
    assert leader.read(0, 1024).records is None
    read = leader.read(0, 1024, replica_id=2, now_ms=NOW)
    assert read.records is not None and read.records.length > 0


def test_follower_keeps_the_leaders_offsets_and_epochs(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b"), NOW)
    leader.append_as_leader(batch(b"c"), NOW)
    replicate(leader, follower)
    assert follower.log_end_offset == 3
    assert follower.log.leader_epoch_entries() == leader.log.leader_epoch_entries() == [(1, 0)]
    with follower.log.read(2, 1024) as region:
        header = read_header(region.read(), 0)
    assert (header.base_offset, header.partition_leader_epoch) == (2, 1)


def test_follower_rebuilds_idempotent_producer_state_from_the_log(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b", producer_id=7, sequence=0), NOW)
    replicate(leader, follower)
    entry = follower.log.producer_state.producers[7]
    assert entry.last_sequence == 1
    # After a failover the duplicate is recognised by the new leader.
    follower.become_leader(2, 1, (1, 2), (2,), NOW)
    again = follower.append_as_leader(batch(b"a", b"b", producer_id=7, sequence=0), NOW)
    assert (again.base_offset, follower.log_end_offset) == (0, 2)


def test_acks_all_completes_when_the_isr_has_the_batch(pair):
    leader, follower = pair
    codes: list[ErrorCode] = []
    appended = leader.append_as_leader(batch(b"a"), NOW, required_acks=-1)
    pending = leader.await_replication(appended.last_offset + 1, codes.append)
    assert isinstance(pending, PendingAck) and codes == []
    replicate(leader, follower)
    replicate(leader, follower)
    assert codes == [ErrorCode.none]


def test_delete_records_completes_once_each_live_follower_has_the_new_log_start(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b", b"c"), NOW)
    replicate(leader, follower)
    replicate(leader, follower)
    leader.log.delete_records_before(2)
    outcomes: list[tuple[ErrorCode, int]] = []

    def answered(code: ErrorCode, low_watermark: int) -> None:
        outcomes.append((code, low_watermark))

    assert leader.await_log_start(2, lambda node: node != 2, answered) == 2  # 2 is down
    pending = leader.await_log_start(2, lambda node: True, answered)
    assert isinstance(pending, PendingDeletion)

    def fetch() -> None:
        read = leader.read(
            follower.log_end_offset,
            1 << 20,
            replica_id=2,
            now_ms=NOW,
            follower_log_start=follower.log.log_start_offset,
        )
        follower.update_follower_high_watermark(read.high_watermark)
        follower.follow_log_start(read.log_start_offset)

    fetch()  # the follower learns the leader's log start from this answer...
    assert follower.log.log_start_offset == 2 and outcomes == []
    fetch()  # ...and says it has it in its next fetch
    assert outcomes == [(ErrorCode.none, 2)]


def test_acks_all_is_refused_when_the_isr_is_below_min_insync(pair):
    leader, _ = pair
    leader.min_insync_replicas = 2
    leader.update_isr((1,), 1)
    with pytest.raises(PartitionError) as refused:
        leader.append_as_leader(batch(b"a"), NOW, required_acks=-1)
    assert refused.value.code == ErrorCode.not_enough_replicas
    assert leader.log_end_offset == 0
    leader.append_as_leader(batch(b"a"), NOW, required_acks=1)  # acks=1 is not guarded
    assert leader.log_end_offset == 1


def test_isr_shrinking_below_min_insync_after_the_append_fails_the_ack(pair):
    leader, _ = pair
    leader.min_insync_replicas = 2
    codes: list[ErrorCode] = []
    appended = leader.append_as_leader(batch(b"a"), NOW, required_acks=-1)
    leader.await_replication(appended.last_offset + 1, codes.append)
    leader.update_isr((1,), 1)  # the follower was dropped: the leader alone has it
    assert codes == [ErrorCode.not_enough_replicas_after_append]


def test_losing_leadership_fails_waiting_acks(pair):
    leader, _ = pair
    codes: list[ErrorCode] = []
    appended = leader.append_as_leader(batch(b"a"), NOW, required_acks=-1)
    leader.await_replication(appended.last_offset + 1, codes.append)
    assert leader.become_follower(2, 2, 1, (1, 2), (2,))
    assert codes == [ErrorCode.not_leader_or_follower]


def test_a_stale_leader_epoch_changes_nothing(pair):
    leader, _ = pair
    assert not leader.become_follower(2, 0, 0, (1, 2), (2,))
    assert leader.is_leader and leader.leader_epoch == 1


def test_a_new_leader_starts_its_epoch_at_its_log_end(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b"), NOW)
    replicate(leader, follower)
    follower.become_leader(2, 1, (1, 2), (1, 2), NOW)
    assert follower.end_offset_for_epoch(1) == (1, 2)
    assert follower.end_offset_for_epoch(2) == (2, 2)


def test_a_follower_that_stops_fetching_is_proposed_out_of_the_isr(pair):
    leader, follower = pair
    proposals: list[tuple[int, ...]] = []
    leader.isr_proposer = lambda partition, isr: proposals.append(isr)
    leader.append_as_leader(batch(b"a"), NOW)
    assert leader.maybe_shrink_isr(NOW + LAG_MS, LAG_MS) is None
    assert leader.maybe_shrink_isr(NOW + LAG_MS + 1, LAG_MS) == (1,)
    assert proposals == [(1,)]
    # While the proposal is in flight the larger ISR still holds the high watermark.
    assert leader.high_watermark == 0
    leader.update_isr((1,), 1)
    assert leader.high_watermark == 1


def test_a_follower_that_catches_up_is_proposed_back_into_the_isr(pair):
    leader, follower = pair
    proposals: list[tuple[int, ...]] = []
    leader.isr_proposer = lambda partition, isr: proposals.append(isr)
    leader.update_isr((1,), 1)
    leader.append_as_leader(batch(b"a"), NOW)
    assert leader.high_watermark == 1
    replicate(leader, follower)  # fetched from 0: behind the high watermark
    assert proposals == []
    replicate(leader, follower)  # fetched from 1: caught up
    assert proposals == [(1, 2)]


def test_truncation_drops_a_divergent_tail(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a"), NOW)
    replicate(leader, follower)
    follower.become_leader(2, 1, (1, 2), (2,), NOW)
    follower.append_as_leader(batch(b"x", b"y"), NOW)  # written by a deposed leader
    leader.become_leader(3, 2, (1, 2), (1,), NOW)  # elected again, without that tail
    follower.become_follower(1, 3, 2, (1, 2), (1,))
    epoch, end = leader.end_offset_for_epoch(follower.log.latest_epoch)
    assert (epoch, end) == (1, 1)
    follower.truncate_to(end)
    assert follower.log_end_offset == 1
    assert follower.log.leader_epoch_entries() == [(1, 0)]


def test_a_follower_serves_a_consumer_up_to_its_high_watermark(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a"), NOW)
    replicate(leader, follower)  # the follower has the batch, not yet a HW past it
    assert follower.read(0, 1024, from_follower_ok=True).records is None
    replicate(leader, follower)  # the leader's HW moved; the follower learns it
    read = follower.read(0, 1024, from_follower_ok=True)
    assert read.error == ErrorCode.none and read.high_watermark == 1
    assert read.records is not None and read.records.length > 0


def test_a_follower_refuses_a_consumer_fetch_before_v11(pair):
    _, follower = pair
    assert follower.read(0, 1024).error == ErrorCode.not_leader_or_follower


def test_a_follower_answers_a_consumer_past_its_high_watermark_but_within_its_log_with_nothing(
    pair,
):
    """As Kafka's log read: only an offset beyond the log end is out of range; one the
    follower holds but may not serve yet (above its high watermark) gets an empty
    answer, without error, that the consumer retries."""
    leader, follower = pair
    leader.append_as_leader(batch(b"a"), NOW)
    replicate(leader, follower)
    replicate(leader, follower)  # high watermark 1 on both
    leader.append_as_leader(batch(b"b", b"c"), NOW)
    replicate(leader, follower)  # the follower holds offsets 1-2, its high watermark is 1
    assert (follower.high_watermark, follower.log_end_offset) == (1, 3)
    for offset in (2, 3):
        read = follower.read(offset, 1024, from_follower_ok=True)
        assert read.error == ErrorCode.none and read.records is None
        assert read.high_watermark == 1


def test_a_follower_answers_offset_out_of_range_past_its_log(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a"), NOW)
    replicate(leader, follower)
    replicate(leader, follower)
    assert follower.read(5, 1024, from_follower_ok=True).error == ErrorCode.offset_out_of_range


def deposed_leader_tail(pair) -> tuple[Partition, Partition]:
    """Broker 2 led epoch 2 alone and wrote offsets 1-2; broker 1 leads epoch 3 without
    them (its epoch 1 ends at offset 1)."""
    leader, follower = pair
    leader.append_as_leader(batch(b"a"), NOW)
    replicate(leader, follower)
    follower.become_leader(2, 1, (1, 2), (2,), NOW)
    follower.append_as_leader(batch(b"x", b"y"), NOW)
    leader.become_leader(3, 2, (1, 2), (1,), NOW)
    follower.become_follower(1, 3, 2, (1, 2), (1,))
    return leader, follower


def test_a_fetch_naming_an_epoch_the_leader_never_had_gets_its_diverging_epoch(pair):
    leader, follower = deposed_leader_tail(pair)
    read = leader.read(
        follower.log_end_offset,
        1 << 20,
        replica_id=2,
        now_ms=NOW,
        last_fetched_epoch=follower.log.latest_epoch,
    )
    assert read.error == ErrorCode.none
    assert read.diverging_epoch == (1, 1)
    assert read.records is None
    # The diverged fetch offset does not count as the follower's log end.
    assert leader.followers[2].log_end_offset == -1


def test_a_fetch_past_the_end_of_its_epoch_on_the_leader_gets_its_diverging_epoch(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b"), NOW)
    leader.become_leader(2, 1, (1, 2), (1, 2), NOW)  # epoch 1 ended at offset 2
    read = leader.read(5, 1 << 20, replica_id=2, now_ms=NOW, last_fetched_epoch=1)
    assert read.diverging_epoch == (1, 2)


def test_a_fetch_whose_epoch_matches_the_leaders_log_reads_on(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b"), NOW)
    replicate(leader, follower)
    leader.append_as_leader(batch(b"c"), NOW)
    read = leader.read(2, 1 << 20, replica_id=2, now_ms=NOW, last_fetched_epoch=1)
    assert read.diverging_epoch is None
    assert read.records is not None
    assert leader.followers[2].log_end_offset == 2


def test_a_fetch_at_the_latest_epoch_but_past_the_log_end_gets_its_diverging_epoch(pair):
    leader, _ = pair
    leader.append_as_leader(batch(b"a", b"b"), NOW)  # epoch 1, the latest, ends at 2
    read = leader.read(5, 1 << 20, replica_id=2, now_ms=NOW, last_fetched_epoch=1)
    assert read.diverging_epoch == (1, 2)
    assert leader.followers[2].log_end_offset == -1


def test_only_a_fetchs_first_read_moves_the_followers_state(pair):
    """A parked fetch reading again (woken, or at its deadline) does not count as the
    follower fetching again, as Kafka's DelayedFetch reads without updating it."""
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b"), NOW)
    replicate(leader, follower)
    leader.read(2, 1 << 20, replica_id=2, now_ms=NOW + 100, last_fetched_epoch=1, record=False)
    state = leader.followers[2]
    assert (state.log_end_offset, state.last_fetch_ms, leader.high_watermark) == (0, NOW, 0)
    leader.read(2, 1 << 20, replica_id=2, now_ms=NOW + 200, last_fetched_epoch=1)
    assert (state.log_end_offset, state.last_fetch_ms, leader.high_watermark) == (2, NOW + 200, 2)


@dataclass
class Sent:
    sent_high_watermark: int
    sent_last_stable_offset: int
    sent_log_start_offset: int


def test_a_session_read_with_nothing_new_is_unchanged_and_any_news_is_read(pair):
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b"), NOW)
    replicate(leader, follower)
    replicate(leader, follower)  # the high watermark is 2 and the follower knows it
    told = Sent(2, 2, 0)
    at_end = {"replica_id": 2, "now_ms": NOW, "last_fetched_epoch": 1, "sent": told}
    assert leader.read(2, 1 << 20, **at_end) is UNCHANGED
    assert leader.read(2, 1 << 20, sent=told) is UNCHANGED  # a consumer at the high watermark
    # A moved high watermark, log start, or records to read are news.
    moved = leader.read(2, 1 << 20, **{**at_end, "sent": Sent(1, 1, 0)})
    assert moved is not UNCHANGED and moved.high_watermark == 2 and moved.records is None
    assert leader.read(2, 1 << 20, **{**at_end, "sent": Sent(2, 2, 1)}) is not UNCHANGED
    leader.append_as_leader(batch(b"c"), NOW)
    news = leader.read(2, 1 << 20, **at_end)
    assert news is not UNCHANGED and news.records is not None
    # A consumer still has nothing new below the unmoved high watermark.
    assert leader.read(2, 1 << 20, sent=told) is UNCHANGED
    # A divergence or an error is news, whatever the fetcher was told.
    assert leader.read(9, 1 << 20, **at_end).diverging_epoch == (1, 3)
    beyond = leader.read(9, 1 << 20, replica_id=2, now_ms=NOW, sent=told)
    assert beyond.error == ErrorCode.offset_out_of_range
    assert UNCHANGED.records is None and UNCHANGED.high_watermark == -1


def test_a_fetch_naming_an_epoch_newer_than_any_here_is_out_of_range(pair):
    leader, _ = pair
    leader.append_as_leader(batch(b"a"), NOW)
    read = leader.read(1, 1 << 20, last_fetched_epoch=7)
    assert read.error == ErrorCode.offset_out_of_range
    assert read.diverging_epoch is None


def test_a_partitions_waiters_stay_while_it_is_hosted_and_go_when_it_stops(pair):
    """A follower's session parks on the same partitions every round: their sets of
    waiters are kept, empty, between rounds; a stopped partition leaves none behind."""
    leader, _ = pair
    waiters = leader.waiters

    async def rounds() -> list[int]:
        woken: list[int] = []
        waiters.park([leader.key], lambda: woken.append(1)).cancel()
        assert waiters.parked(leader.key) == 0 and leader.key in waiters._waiting
        waiters.park([leader.key], lambda: woken.append(2))
        leader.stop()
        await asyncio.sleep(0)  # wake runs on the loop's next turn
        return woken

    assert asyncio.run(rounds()) == [2]
    assert leader.key not in waiters._waiting


def test_a_follower_that_truncates_wakes_the_fetches_parked_on_it(pair):
    """A consumer fetching from a follower (KIP-392) reads again when the follower
    truncates: its high watermark may have moved back."""
    leader, follower = pair
    leader.append_as_leader(batch(b"a", b"b"), NOW)
    replicate(leader, follower)

    async def truncated(change) -> list[str]:  # type: ignore[no-untyped-def]
        woken: list[str] = []
        follower.waiters.park([follower.key], lambda: woken.append("woken"))
        change()
        await asyncio.sleep(0)
        return woken

    assert asyncio.run(truncated(lambda: follower.truncate_to(1))) == ["woken"]
    assert asyncio.run(truncated(lambda: follower.truncate_fully_and_start_at(5))) == ["woken"]
