"""The share-partition state machine against a plain per-offset model (hypothesis
stateful testing), plus the rules a client can see one by one."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kbroker.share.partition_state import (
    DELIVERY_LIMIT,
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    REJECTED,
    AckBatch,
    AckError,
    AckType,
    Acquired,
    InFlight,
    RecordState,
    SharePartitionState,
    split_at_batches,
)

pytestmark = pytest.mark.slow  # make test-fast leaves these out

LOCK = 1000
LIMIT = 3
LOG = [(0, 4), (6, 9), (10, 10), (13, 19)]  # offsets the log holds; 5, 11, 12 are gaps
HELD = [o for first, last in LOG for o in range(first, last + 1)]
MEMBERS = ("a", "b", "c")


def _offsets(acquired: list[Acquired]) -> list[int]:
    return [o for a in acquired for o in range(a.first_offset, a.last_offset + 1)]


class Model:
    """Each log offset's (state, deliveries, member, deadline), in the plainest terms."""

    def __init__(self) -> None:
        self.records = {o: ["available", 0, None, 0] for o in HELD}
        self.dead: list[tuple[int, int, str]] = []
        self.end = 0  # past the highest offset ever acquired: gaps below it are done

    def acquire(self, member: str, limit: int, now: int, window_end: int) -> list[int]:
        """Batches in order until `limit` records are taken, each batch whole; records
        never acquired before only from a batch whose first of them is below
        `window_end`."""
        out: list[int] = []
        for first, last in LOG:
            if len(out) >= limit:
                break
            first_new = None
            for o in range(first, last + 1):
                r = self.records[o]
                if r[0] != "available":
                    continue
                if o >= self.end:
                    first_new = o if first_new is None else first_new
                    if first_new >= window_end:
                        break
                r[0], r[1], r[2], r[3] = "acquired", r[1] + 1, member, now + LOCK
                out.append(o)
            if out:
                self.end = max(self.end, out[-1] + 1)
        return out

    def release(self, o: int) -> None:
        r = self.records[o]
        if r[1] >= LIMIT:
            r[0] = "archived"
            self.dead.append((o, r[1], DELIVERY_LIMIT))
        else:
            r[0] = "available"
        r[2] = None

    def acknowledge(self, o: int, kind: AckType, now: int) -> None:
        """The member that holds `o` acknowledges it with `kind`."""
        r = self.records[o]
        if kind == AckType.ACCEPT:
            r[0], r[2] = "acknowledged", None
        elif kind == AckType.REJECT:
            r[0], r[2] = "archived", None
            self.dead.append((o, r[1], REJECTED))
        elif kind == AckType.RELEASE:
            self.release(o)
        else:  # RENEW: held again for a whole lock
            r[3] = now + LOCK

    def start(self) -> int:
        for o in HELD:
            if self.records[o][0] in ("available", "acquired"):
                return min(o, self.end)
        return self.end


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sp = SharePartitionState(0, delivery_limit=LIMIT, max_in_flight=12)
        self.sp.dead_letters_enabled = True
        self.model = Model()
        self.now = 0

    @rule(member=st.sampled_from(MEMBERS), limit=st.integers(1, 8))
    def acquire(self, member: str, limit: int) -> None:
        window_end = self.sp.start_offset + self.sp.max_in_flight
        got = _offsets(self.sp.acquire(member, LOG, limit, self.now, LOCK))
        expected = self.model.acquire(member, limit, self.now, window_end)
        assert got == expected

    @rule(
        member=st.sampled_from(MEMBERS),
        kind=st.sampled_from([AckType.ACCEPT, AckType.RELEASE, AckType.REJECT]),
        data=st.data(),
    )
    def acknowledge(self, member: str, kind: AckType, data: st.DataObject) -> None:
        candidates = [o for o in HELD if self.model.records[o][0] == "acquired"]
        if not candidates:
            return
        offset = data.draw(st.sampled_from(candidates))
        owner = self.model.records[offset][2]
        batch = [AckBatch(offset, offset, (int(kind),))]
        if owner != member:
            with pytest.raises(AckError) as caught:
                self.sp.acknowledge(member, batch, self.now, LOCK)
            assert caught.value.code == INVALID_RECORD_STATE
            return
        self.sp.acknowledge(member, batch, self.now, LOCK)
        self.model.acknowledge(offset, kind, self.now)

    @rule(
        member=st.sampled_from(MEMBERS),
        data=st.data(),
    )
    def acknowledge_a_range_record_by_record(self, member: str, data: st.DataObject) -> None:
        """One batch over consecutive offsets the member holds, a type for each."""
        held = [
            o
            for o in HELD
            if self.model.records[o][:1] + self.model.records[o][2:3] == ["acquired", member]
        ]
        if not held:
            return
        first = data.draw(st.sampled_from(held))
        last = first
        while last + 1 in held:
            last += 1
        last = data.draw(st.integers(first, last))
        kinds = [AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.RENEW]
        types = data.draw(
            st.lists(st.sampled_from(kinds), min_size=last - first + 1, max_size=last - first + 1)
        )
        self.sp.acknowledge(
            member, [AckBatch(first, last, tuple(int(t) for t in types))], self.now, LOCK
        )
        for offset, kind in zip(range(first, last + 1), types, strict=True):
            self.model.acknowledge(offset, kind, self.now)

    @rule(ms=st.integers(1, 1500))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self.sp.expire_locks(self.now)
        for o in HELD:
            r = self.model.records[o]
            if r[0] == "acquired" and r[3] <= self.now:
                self.model.release(o)

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member: str) -> None:
        self.sp.release_member(member)
        for o in HELD:
            r = self.model.records[o]
            if r[0] == "acquired" and r[2] == member:
                self.model.release(o)

    @rule(data=st.data())
    def log_start_moves(self, data: st.DataObject) -> None:
        """Retention or DeleteRecords: records below the new log start are no longer owed."""
        start = data.draw(st.integers(self.sp.start_offset, self.sp.start_offset + 3))
        self.sp.move_start_to(start)
        for o in HELD:
            r = self.model.records[o]
            if o < start and r[0] in ("available", "acquired"):
                r[0], r[2] = "acknowledged", None
        self.model.end = max(self.model.end, start)

    @rule()
    def restart(self) -> None:
        """A restart keeps everything but the locks: acquired records come back available."""
        self.sp = SharePartitionState.from_snapshot(self.sp.snapshot(), LIMIT, 12)
        self.sp.dead_letters_enabled = True
        for o in HELD:
            r = self.model.records[o]
            if r[0] == "acquired":
                r[0], r[2] = "available", None

    @invariant()
    def states_agree(self) -> None:
        assert self.sp.start_offset == self.model.start()
        for o in HELD:
            if o < self.sp.start_offset:
                assert self.model.records[o][0] in ("acknowledged", "archived")
                continue
            record = self.sp.record(o)
            expected = self.model.records[o]
            if record is None:
                assert expected[0] == "available" and expected[1] == 0
                continue
            assert record.state.name.lower() == expected[0]
            assert record.delivery_count == expected[1]

    @invariant()
    def dead_letters_agree(self) -> None:
        got = [(d.offset, d.delivery_count, d.reason) for d in self.sp.pending_dead_letters]
        assert got == self.model.dead


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None
)


def _acquire_all(sp: SharePartitionState, member: str = "a") -> list[Acquired]:
    return sp.acquire(member, [(0, 9)], 100, 0, LOCK)


def test_acquired_records_come_in_runs_of_one_delivery_count() -> None:
    sp = SharePartitionState(0, LIMIT, 100)
    assert _acquire_all(sp) == [Acquired(0, 9, 1)]
    sp.acknowledge("a", [AckBatch(3, 4, (int(AckType.RELEASE),))], 0, LOCK)
    assert sp.acquire("b", [(0, 9)], 100, 0, LOCK) == [Acquired(3, 4, 2)]


def test_overlapping_acknowledgement_batches_are_invalid_request() -> None:
    sp = SharePartitionState(0, LIMIT, 100)
    _acquire_all(sp)
    batches = [AckBatch(0, 4, (1,)), AckBatch(4, 6, (1,))]
    with pytest.raises(AckError) as caught:
        sp.acknowledge("a", batches, 0, LOCK)
    assert caught.value.code == INVALID_REQUEST
    assert sp.in_flight() == 10  # nothing applied


def test_acknowledging_records_acquired_by_another_member_is_invalid_record_state() -> None:
    sp = SharePartitionState(0, LIMIT, 100)
    _acquire_all(sp, "a")
    with pytest.raises(AckError) as caught:
        sp.acknowledge("b", [AckBatch(0, 0, (1,))], 0, LOCK)
    assert caught.value.code == INVALID_RECORD_STATE


def test_a_record_released_at_the_delivery_limit_is_archived_once() -> None:
    sp = SharePartitionState(0, LIMIT, 100)
    sp.dead_letters_enabled = True
    for _ in range(LIMIT):
        assert sp.acquire("a", [(0, 0)], 1, 0, LOCK)
        sp.acknowledge("a", [AckBatch(0, 0, (int(AckType.RELEASE),))], 0, LOCK)
    assert sp.acquire("a", [(0, 0)], 1, 0, LOCK) == []
    assert sp.start_offset == 1
    assert [(d.offset, d.delivery_count, d.reason) for d in sp.pending_dead_letters] == [
        (0, LIMIT, DELIVERY_LIMIT)
    ]


def test_renew_extends_the_lock() -> None:
    sp = SharePartitionState(0, LIMIT, 100)
    sp.acquire("a", [(0, 0)], 1, 0, LOCK)
    sp.acknowledge("a", [AckBatch(0, 0, (int(AckType.RENEW),))], 900, LOCK)
    sp.expire_locks(1500)
    assert sp.record(0).state == RecordState.ACQUIRED
    sp.expire_locks(1900)
    assert sp.record(0).state == RecordState.AVAILABLE


def test_acquisition_takes_the_batch_holding_the_last_wanted_record_whole() -> None:
    """Kafka's batch-optimized mode: max_records is a soft limit, batches go whole."""
    sp = SharePartitionState(0, LIMIT, 100)
    assert _offsets(sp.acquire("a", [(0, 2), (3, 5), (6, 9)], 4, 0, LOCK)) == [0, 1, 2, 3, 4, 5]
    assert _offsets(sp.acquire("a", [(6, 30)], 2, 0, LOCK)) == list(range(6, 31))


def test_the_window_of_in_flight_records_is_bounded() -> None:
    sp = SharePartitionState(0, LIMIT, 4)
    batches = [(0, 1), (2, 3), (4, 5), (6, 9)]
    assert _offsets(sp.acquire("a", batches, 100, 0, LOCK)) == [0, 1, 2, 3]
    assert sp.fetch_offset() is None
    sp.acknowledge("a", [AckBatch(0, 1, (1,))], 0, LOCK)
    assert _offsets(sp.acquire("a", batches[2:], 100, 0, LOCK)) == [4, 5]


def test_a_batch_starting_inside_the_window_is_taken_whole() -> None:
    sp = SharePartitionState(0, LIMIT, 4)
    assert _offsets(sp.acquire("a", [(0, 9)], 100, 0, LOCK)) == list(range(10))
    assert sp.fetch_offset() is None


def test_a_huge_acknowledgement_range_is_refused_without_walking_it() -> None:
    sp = SharePartitionState(0, LIMIT, 100)
    _acquire_all(sp)
    with pytest.raises(AckError) as caught:
        sp.acknowledge("a", [AckBatch(0, 2**62, (int(AckType.ACCEPT),))], 0, LOCK)
    assert caught.value.code == INVALID_RECORD_STATE
    assert sp.in_flight() == 10


def test_record_limit_mode_never_exceeds_max_records() -> None:
    sp = SharePartitionState(0, LIMIT, 100)
    got = sp.acquire("a", [(0, 9)], 4, 0, LOCK, batch_aligned=False)
    assert _offsets(got) == [0, 1, 2, 3]


def test_acquired_ranges_are_listed_by_batch_size_cut_where_batches_start() -> None:
    """Kafka's createBatches: a range over batch_size records is cut at a batch start once
    batch_size records or more precede the cut; a batch is never cut."""
    acquired = [Acquired(0, 29, 1)]
    starts = [0, 3, 6, 10, 12, 20, 25]
    assert split_at_batches(acquired, starts, 5) == [
        Acquired(0, 5, 1),
        Acquired(6, 11, 1),
        Acquired(12, 19, 1),
        Acquired(20, 24, 1),
        Acquired(25, 29, 1),
    ]
    assert split_at_batches(acquired, starts, 30) == acquired
    assert split_at_batches([Acquired(0, 9, 2)], [0], 3) == [Acquired(0, 9, 2)]  # one batch


def test_records_below_a_moved_log_start_are_no_longer_owed() -> None:
    sp = SharePartitionState(0, LIMIT, 100)
    _acquire_all(sp)  # 0-9, one run held by "a"
    sp.move_start_to(4)  # inside that run
    assert sp.start_offset == 4
    assert sp.record(3) is None
    assert sp.record(4) == InFlight(RecordState.ACQUIRED, 1, "a", LOCK)
    assert sp.in_flight() == 6
    with pytest.raises(AckError):
        sp.acknowledge("a", [AckBatch(2, 5, (int(AckType.ACCEPT),))], 0, LOCK)
    sp.acknowledge("a", [AckBatch(4, 9, (int(AckType.ACCEPT),))], 0, LOCK)
    assert sp.start_offset == 10
