"""One partition this broker hosts: Kafka's `Partition`, the seam between requests and a log.

Every append (as leader, as follower), every read (a consumer's or a follower's),
every leadership check and every high-watermark read goes through this object, so
that the role, the leader epoch, the ISR and the high watermark are decided in one
place. The leader learns each follower's log end offset from the follower's fetches
and advances the high watermark to the smallest log end offset in the ISR; a Produce
with acks=all waits (in `DelayedAcks`, never blocking the loop) until the high
watermark passes its batch. On a single node the ISR is the leader alone, so the
high watermark follows the log end offset at once.

Changes to the ISR are not made here: the leader proposes them (`isr_proposer`) and
applies what the controller committed (`update_isr`), as Kafka's AlterPartition does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from kio.schema.errors import ErrorCode

from kbroker.replica.delayed import (
    AckCallback,
    DataWaiters,
    DelayedAcks,
    DeletionCallback,
    PendingAck,
    PendingDeletion,
)
from kbroker.storage.errors import LogClosedError, OffsetOutOfRangeError
from kbroker.storage.file_slice import FileSlice
from kbroker.storage.log import AppendResult, PartitionLog
from kbroker.storage.producer_state import CLIENT, AbortedTxn

NO_REPLICA = -1
"""A Fetch's replica id when a consumer (not a follower) sends it."""

IsrProposer = Callable[["Partition", tuple[int, ...]], None]


class PartitionError(Exception):
    """An append refused for a reason the client sees as an error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from that follower's fetches (Kafka's
    `Replica`). The log end offset is unknown (-1) until the first fetch after this
    broker became leader."""

    log_end_offset: int = -1
    log_start_offset: int = -1  # as its last fetch said (Fetch v5+); -1 until then
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = -1


@dataclass(slots=True)
class PartitionRead:
    """One partition's part of a Fetch answer: the records and the offsets around them."""

    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: FileSlice | None = None
    aborted: list[AbortedTxn] | None = None
    # KIP-320: (epoch, end offset) when the fetcher's log diverged from this one.
    diverging_epoch: tuple[int, int] | None = None


class SentOffsets(Protocol):
    """What a fetcher in a fetch session (KIP-227) was last told of a partition."""

    @property
    def sent_high_watermark(self) -> int: ...
    @property
    def sent_last_stable_offset(self) -> int: ...
    @property
    def sent_log_start_offset(self) -> int: ...


UNCHANGED: Final = PartitionRead(ErrorCode.none)
"""A session's read that found nothing its fetcher does not know (`Partition.read`'s
`sent`): no records and the offsets it was last sent. One shared object, never filled
in, so that a fetch session of thousands of idle partitions allocates nothing for them."""


@dataclass(slots=True, eq=False)
class Partition:
    """This broker's replica of one partition, with the state of its role."""

    topic: str
    index: int
    log: PartitionLog
    node_id: int
    waiters: DataWaiters
    leader_id: int = NO_REPLICA
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    min_insync_replicas: int = 1
    # eligible.leader.replicas.version >= 1 (KIP-966): the high watermark stays while the
    # ISR is below min.insync.replicas, so the replicas that left it hold every record
    # below it and may lead (their ELR).
    elr_enabled: bool = False
    followers: dict[int, FollowerState] = field(default_factory=dict)
    isr_proposer: IsrProposer | None = None
    # An ISR sent to the controller and not committed yet; while it is in flight the high
    # watermark and min.insync.replicas count the larger of the two (Kafka's maximal ISR).
    pending_isr: tuple[int, ...] | None = None
    _acks: DelayedAcks = field(default_factory=DelayedAcks)
    _deletions: list[PendingDeletion] = field(default_factory=list)
    key: tuple[str, int] = field(init=False)  # (topic, index), the partition's name

    def __post_init__(self) -> None:
        self.key = (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    # -- offsets ---------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark_lags_epoch_start(self) -> bool:
        """A leader elected moments ago may hold records its high watermark does not
        cover yet (the old leader had committed them; the followers have yet to fetch
        from it): its high watermark is below the start of its epoch. Kafka answers
        ListOffsets with OFFSET_NOT_AVAILABLE meanwhile, never an offset lower than one
        a client may already have seen."""
        return self.log.epoch_start(self.leader_epoch) > self.log.high_watermark

    # -- leadership checks ------------------------------------------------------------------

    def check_leader(self, current_leader_epoch: int = -1) -> ErrorCode:
        """Kafka's check of a request that only the leader may serve: NOT_LEADER_OR_FOLLOWER
        on a follower; against the client's current_leader_epoch (-1: unset)
        FENCED_LEADER_EPOCH when the client is behind, UNKNOWN_LEADER_EPOCH when ahead."""
        if self.leader_id != self.node_id:
            return ErrorCode.not_leader_or_follower
        if current_leader_epoch < 0:
            return ErrorCode.none
        return self.check_epoch(current_leader_epoch)

    def check_epoch(self, current_leader_epoch: int) -> ErrorCode:
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.none
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        return ErrorCode.unknown_leader_epoch

    # -- role changes ------------------------------------------------------------------------

    def become_leader(
        self,
        leader_epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        now_ms: int,
    ) -> bool:
        """Lead from `leader_epoch` on; True if this is a new leadership (not just a
        newer ISR). A stale epoch is ignored. Followers start unknown, except that those
        in the ISR count as caught up now (they have until replica.lag.time.max.ms)."""
        if leader_epoch < self.leader_epoch:
            return False
        new = not self.is_leader or leader_epoch > self.leader_epoch
        self.leader_id = self.node_id
        self.replicas = tuple(replicas)
        self.partition_epoch = partition_epoch
        self.isr = tuple(isr)
        self.pending_isr = None
        if new:
            self.leader_epoch = leader_epoch
            # The new epoch starts at the log end: OffsetForLeaderEpoch tells followers so
            # even before the first append of this epoch.
            self.log.begin_epoch(leader_epoch)
            self.followers = {
                r: FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
                for r in self.replicas
                if r != self.node_id
            }
        else:
            for r in self.replicas:
                if r != self.node_id and r not in self.followers:
                    self.followers[r] = FollowerState()
        self._advance_high_watermark()
        self.waiters.wake(self.key)
        return new

    def become_follower(
        self,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
    ) -> bool:
        """Follow `leader_id` from `leader_epoch` on; True when the leader or its epoch
        changed (the fetcher must then find where to truncate). Acknowledgements that
        waited here fail with NOT_LEADER_OR_FOLLOWER; parked fetches answer again."""
        if leader_epoch < self.leader_epoch:
            return False
        changed = self.leader_id != leader_id or leader_epoch > self.leader_epoch
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending_isr = None
        self.followers = {}
        self._acks.fail_all(ErrorCode.not_leader_or_follower)
        self._fail_deletions()
        self.waiters.wake(self.key)
        return changed

    def update_isr(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        """The controller committed a new ISR for this leader (AlterPartition's answer)."""
        if partition_epoch < self.partition_epoch:
            return
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        self._advance_high_watermark()

    def stop(self) -> None:
        """The partition left this broker (deleted or reassigned away)."""
        self.leader_id = NO_REPLICA
        self._acks.fail_all(ErrorCode.not_leader_or_follower)
        self._fail_deletions()
        self.waiters.wake(self.key)
        self.waiters.release(self.key)

    # -- appends --------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytearray | memoryview,
        now_ms: int,
        origin: int = CLIENT,
        required_acks: int = 1,
    ) -> AppendResult:
        """Append a client's (or a coordinator's) batches with offsets from this log.
        Requests reach it through `ReplicaManager.append_records` (replica/append.py),
        which turns what this raises into Kafka error codes.

        Raises PartitionError with NOT_LEADER_OR_FOLLOWER on a follower and, for
        acks=all, NOT_ENOUGH_REPLICAS when the ISR is smaller than min.insync.replicas
        (nothing is written then). Storage's errors (corrupt or oversized batches,
        producer state) pass through. `origin` is storage.producer_state's CLIENT or
        COORDINATOR."""
        if self.leader_id != self.node_id:
            raise PartitionError(
                ErrorCode.not_leader_or_follower, f"{self.topic}-{self.index} is led elsewhere"
            )
        if (
            required_acks == -1
            and len(self.isr if self.pending_isr is None else self._maximal_isr())
            < self.min_insync_replicas
        ):
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"{self.topic}-{self.index} has {len(self.isr)} in-sync replicas, "
                f"fewer than min.insync.replicas={self.min_insync_replicas}",
            )
        result = self.log.append(records, self.leader_epoch, now_ms, origin)
        if not self._advance_high_watermark():
            self.waiters.wake(self.key)  # followers' parked fetches
        return result

    def append_as_follower(self, records: bytearray | memoryview, now_ms: int) -> AppendResult:
        """Append the leader's batches as they are: its offsets, epochs and timestamps.
        The producer state is rebuilt from them by the log as it is on the leader."""
        if self.is_leader:
            raise PartitionError(
                ErrorCode.not_leader_or_follower, f"{self.topic}-{self.index} leads here"
            )
        return self.log.append_as_follower(records, now_ms)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's high watermark is the leader's, as far as its own log reaches."""
        before = self.log.high_watermark
        self.log.high_watermark = min(leader_high_watermark, self.log.log_end_offset)
        if self.log.high_watermark != before:
            self.waiters.wake(self.key)

    def follow_log_start(self, leader_log_start: int) -> None:
        """Kafka's follower moves its log start up to the leader's (which DeleteRecords or
        retention moved there), as far as its own high watermark: a replica elected
        leader later must not serve again the records the old leader had deleted."""
        target = min(leader_log_start, self.log.high_watermark)
        if target > self.log.log_start_offset:
            self.log.delete_records_before(target)

    def truncate_to(self, offset: int) -> None:
        """Drop this follower's records from `offset` on (a tail the leader does not have).
        Consumers parked here (KIP-392) read again: the high watermark may have moved back."""
        self.log.truncate_to(offset)
        self.waiters.wake(self.key)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty this follower's log and continue from `offset`, the leader's log start,
        when the records between its log end and there are gone on the leader."""
        self.log.truncate_fully_and_start_at(offset)
        self.waiters.wake(self.key)

    # -- acks=all --------------------------------------------------------------------------

    def await_replication(
        self, required_offset: int, callback: AckCallback
    ) -> ErrorCode | PendingAck:
        """How an acks=all append ending before `required_offset` is answered: an error
        code now when the high watermark already covers it (NONE, or
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas),
        else a pending acknowledgement whose callback gets the code later."""
        outcome = self.replication_outcome(required_offset)
        if outcome is not None:
            return outcome
        return self._acks.add(required_offset, callback)

    def replication_outcome(self, required_offset: int) -> ErrorCode | None:
        """The answer to an acks=all append ending before `required_offset` if it is
        decided now, else None (the ISR has not reached it yet)."""
        if self.leader_id != self.node_id:
            return ErrorCode.not_leader_or_follower
        if self.log.high_watermark >= required_offset:  # _ack_code, inline
            if len(self.isr) < self.min_insync_replicas:
                return ErrorCode.not_enough_replicas_after_append
            return ErrorCode.none
        return None

    def _ack_code(self) -> ErrorCode:
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def _maximal_isr(self) -> tuple[int, ...]:
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    def _advance_high_watermark(self) -> bool:
        """The smallest log end offset in the ISR (the leader's own included); True if
        the high watermark moved (parked fetches are woken then)."""
        node = self.node_id
        if self.leader_id != node:
            return False
        plog = self.log
        new = plog.log_end_offset
        isr = self.isr if self.pending_isr is None else self._maximal_isr()
        if self.elr_enabled and len(isr) < self.min_insync_replicas:
            return False
        for replica in isr:
            if replica != node:
                state = self.followers.get(replica)
                if state is None or state.log_end_offset < 0:
                    return False  # a member not heard from yet holds the high watermark
                if state.log_end_offset < new:
                    new = state.log_end_offset
        if new <= plog.high_watermark:
            return False
        plog.high_watermark = new
        if self._acks.pending:
            self._acks.complete_up_to(new, self._ack_code())
        self.waiters.wake(self.key)
        return True

    # -- reads --------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        committed_only: bool = False,
        replica_id: int = NO_REPLICA,
        current_leader_epoch: int = -1,
        now_ms: int = 0,
        from_follower_ok: bool = False,
        last_fetched_epoch: int = -1,
        follower_log_start: int = -1,
        record: bool = True,
        sent: SentOffsets | None = None,
    ) -> PartitionRead:
        """A Fetch's read: a consumer's up to the high watermark (the last stable offset
        for read_committed), a follower's (`replica_id` set) up to the log end; the
        follower's fetch offset is its log end offset, which may move the high
        watermark and its place in the ISR before the read. With `from_follower_ok`
        (a consumer's Fetch v11+, KIP-392) a follower serves the consumer too, up to
        the high watermark the leader last sent it. A fetcher that names the epoch of
        the last batch it holds (`last_fetched_epoch`, Fetch v12+) is first checked for
        a divergent log (`diverging`). A follower also says where its log starts
        (`follower_log_start`), which a DeleteRecords may be waiting for. A parked
        fetch reading again passes `record=False`: only a request's first read moves
        the follower's state, as Kafka's DelayedFetch reads without. Within a fetch
        session, `sent` is what the fetcher was last told; a read with nothing beyond it
        (no records, the same offsets) is the shared UNCHANGED, which the session leaves
        out of its answer."""
        if from_follower_ok and replica_id < 0 and self.leader_id not in (NO_REPLICA, self.node_id):
            code = self.check_epoch(current_leader_epoch)
        else:
            code = self.check_leader(current_leader_epoch)
        if code:
            return PartitionRead(code)
        plog = self.log
        if replica_id >= 0 and replica_id not in self.followers:
            return PartitionRead(ErrorCode.not_leader_or_follower)
        if last_fetched_epoch >= 0 and not (
            # The common case, a fetcher holding this leader's latest epoch within the log:
            # that epoch ends at the log end, so nothing diverges (no epoch lookup).
            last_fetched_epoch == plog.epoch_cache.latest_epoch
            and plog.log_start_offset <= fetch_offset <= plog.log_end_offset
        ):
            diverged = self.diverging(fetch_offset, last_fetched_epoch)
            if diverged is not None:
                return diverged
        if replica_id >= 0:
            if not plog.log_start_offset <= fetch_offset <= plog.log_end_offset:
                # Beyond this log's end it has a tail this leader never wrote; it must
                # truncate before its offsets may count.
                return PartitionRead(
                    ErrorCode.offset_out_of_range,
                    plog.high_watermark,
                    plog.last_stable_offset,
                    plog.log_start_offset,
                )
            if record:
                self.record_follower_fetch(replica_id, fetch_offset, now_ms, follower_log_start)
            upper = plog.log_end_offset
        high_watermark = plog.high_watermark
        stable = plog.last_stable_offset
        if replica_id < 0:
            upper = stable if committed_only else high_watermark
        if (
            sent is not None
            and upper <= fetch_offset <= plog.log_end_offset
            and high_watermark == sent.sent_high_watermark
            and stable == sent.sent_last_stable_offset
            and plog.log_start_offset == sent.sent_log_start_offset
            and fetch_offset >= plog.log_start_offset
        ):
            return UNCHANGED
        out = PartitionRead(ErrorCode.none, high_watermark, stable, plog.log_start_offset)
        if committed_only and replica_id < 0:
            out.aborted = []
        try:
            out.records = plog.read(fetch_offset, max(max_bytes, 1), upper)
        except OffsetOutOfRangeError:
            out.error = ErrorCode.offset_out_of_range
            return out
        except LogClosedError:  # deleted while a fetch was parked on it
            return PartitionRead(ErrorCode.unknown_topic_or_partition)
        if committed_only and out.records is not None and plog.producer_state.aborted:
            following = out.records.next_base_offset()
            end = stable if following is None else min(following, stable)
            out.aborted = plog.aborted_transactions(fetch_offset, end)
        return out

    def diverging(self, fetch_offset: int, last_fetched_epoch: int) -> PartitionRead | None:
        """Kafka's check of a Fetch with a last fetched epoch (KIP-320, and how followers
        truncate since Kafka 2.7): where that epoch ends here. If this log has no such
        epoch (its largest one below is older) or the epoch ends before the fetch
        offset, the fetcher holds records this log does not: the answer carries no
        records and `diverging_epoch` (epoch, end offset), from which the fetcher
        truncates (a follower) or detects the truncation (a consumer), and a follower's
        fetch offset counts for nothing. With no epoch at all to compare, or a fetch
        offset below the log start, the answer is OFFSET_OUT_OF_RANGE. None: no
        divergence, read on."""
        plog = self.log
        epoch, end = plog.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or end < 0 or fetch_offset < plog.log_start_offset:
            return PartitionRead(
                ErrorCode.offset_out_of_range,
                plog.high_watermark,
                plog.last_stable_offset,
                plog.log_start_offset,
            )
        if epoch < last_fetched_epoch or end < fetch_offset:
            return PartitionRead(
                ErrorCode.none,
                plog.high_watermark,
                plog.last_stable_offset,
                plog.log_start_offset,
                diverging_epoch=(epoch, end),
            )
        return None

    def read_offsets(self, current_leader_epoch: int = -1) -> PartitionRead:
        """The offsets a Fetch answers when it may read no bytes (its budget is spent)."""
        code = self.check_leader(current_leader_epoch)
        if code:
            return PartitionRead(code)
        plog = self.log
        return PartitionRead(
            ErrorCode.none, plog.high_watermark, plog.last_stable_offset, plog.log_start_offset
        )

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `epoch`, the offset where it ended)."""
        return self.log.end_offset_for_epoch(epoch)

    # -- followers, as the leader sees them ------------------------------------------------

    def record_follower_fetch(
        self, replica_id: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1
    ) -> None:
        """Kafka's updateFollowerFetchState: a follower fetching from `fetch_offset` has
        everything below it. It is caught up if it reached the log end as of this fetch
        or of its previous one; a caught-up follower outside the ISR is proposed back.
        Its log start offset may complete a DeleteRecords waiting for it."""
        state = self.followers[replica_id]
        if log_start_offset != state.log_start_offset:
            state.log_start_offset = log_start_offset
            if self._deletions:
                self._complete_deletions()
        plog = self.log
        leader_end = plog.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_end >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        moved = fetch_offset != state.log_end_offset
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_end = leader_end
        state.last_fetch_ms = now_ms
        if replica_id not in self.isr and self._may_join_isr(state):
            self._propose_isr(self.isr + (replica_id,))
        if moved or plog.high_watermark < leader_end:
            # (A high watermark at the log end has nowhere to go: a caught-up follower's
            # every idle fetch skips the ISR walk.)
            self._advance_high_watermark()

    # -- DeleteRecords ---------------------------------------------------------------------

    def low_watermark(self, live: Callable[[int], bool]) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset of this leader and
        of its followers on live brokers (-1 for one that has not fetched yet)."""
        low = self.log.log_start_offset
        for replica_id, state in self.followers.items():
            if state.log_start_offset < low and live(replica_id):
                low = state.log_start_offset
        return low

    def await_log_start(
        self, offset: int, live: Callable[[int], bool], callback: DeletionCallback
    ) -> int | PendingDeletion:
        """After DeleteRecords moved this leader's log start to `offset`: the low
        watermark now if every live replica already has it too, else a pending
        deletion whose callback gets the outcome once they have (or leadership moved)."""
        low = self.low_watermark(live)
        if low >= offset:
            return low
        pending = PendingDeletion(offset, live, callback)
        self._deletions.append(pending)
        return pending

    def _complete_deletions(self) -> None:
        waiting = []
        for pending in self._deletions:
            if pending.done:
                continue
            low = self.low_watermark(pending.live)
            if low >= pending.offset:
                pending.finish(ErrorCode.none, low)
            else:
                waiting.append(pending)
        self._deletions = waiting

    def _fail_deletions(self) -> None:
        deletions, self._deletions = self._deletions, []
        for pending in deletions:
            pending.finish(ErrorCode.not_leader_or_follower, -1)

    def _may_join_isr(self, state: FollowerState) -> bool:
        """Kafka's isFollowerInSync: at least at the high watermark and past the start of
        this leader's epoch (so it holds nothing a new leader would truncate)."""
        end = state.log_end_offset
        return end >= self.log.high_watermark and end >= self.log.epoch_start(self.leader_epoch)

    def lagging_followers(self, now_ms: int, lag_time_max_ms: int) -> list[int]:
        """ISR members that have not caught up within replica.lag.time.max.ms."""
        return [
            r
            for r in self.isr
            if r != self.node_id
            and (state := self.followers.get(r)) is not None
            and now_ms - state.last_caught_up_ms > lag_time_max_ms
        ]

    def maybe_shrink_isr(self, now_ms: int, lag_time_max_ms: int) -> tuple[int, ...] | None:
        """Propose the ISR without followers that fell behind; the proposal, or None."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        lagging = self.lagging_followers(now_ms, lag_time_max_ms)
        if not lagging:
            return None
        shrunk = tuple(r for r in self.isr if r not in lagging)
        self._propose_isr(shrunk)
        return shrunk

    def _propose_isr(self, isr: tuple[int, ...]) -> None:
        if self.pending_isr is not None or self.isr_proposer is None:
            return
        self.pending_isr = isr
        self.isr_proposer(self, isr)

    def isr_proposal_failed(self) -> None:
        """The controller refused or lost the proposal: the next check may try again."""
        self.pending_isr = None
