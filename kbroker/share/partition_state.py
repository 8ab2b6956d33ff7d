"""The state of one share-partition: which records a share group still owes delivery.

Kafka's model (KIP-932): below the share-partition start offset (SPSO) every record is
done; from the SPSO up to the end offset (SPEO, the first offset never acquired) each
record is in flight with a state and a delivery count. A record is AVAILABLE until a
consumer acquires it (its delivery count goes up by one and it is locked to that member
until the acquisition lock expires); the member then accepts it (ACKNOWLEDGED), releases
it (AVAILABLE again) or rejects it (ARCHIVED). A record released or timed out after
its last allowed delivery is ARCHIVED instead of made available. When the records at
the SPSO are finished the SPSO moves past them.

This module does no I/O and reads no clock: callers pass the time and the offsets the
log holds, and learn of records to dead-letter from the returned `DeadLetter`s. The
state is small enough to persist whole (`snapshot` / `from_snapshot`): the window
between SPSO and SPEO is bounded by `max_in_flight`, and it is held as runs of offsets
alike (`Run`), so acquiring, acknowledging and storing cost per range, not per record.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum


class RecordState(IntEnum):
    """Kafka's RecordState ids (they appear in the persisted state)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """AcknowledgeType ids of ShareFetch/ShareAcknowledge batches."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


REJECTED = "rejected"
DELIVERY_LIMIT = "delivery count limit reached"


class AckError(Exception):
    """Acknowledgements refused as a whole; `code` is Kafka's error code for them."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


INVALID_REQUEST = 42
INVALID_RECORD_STATE = 121


@dataclass(slots=True)
class InFlight:
    """One in-flight record as a caller sees it (`SharePartitionState.record`)."""

    state: RecordState
    delivery_count: int
    member: str | None = None
    deadline_ms: int = 0


@dataclass(slots=True)
class Run:
    """Consecutive in-flight offsets in the same state, with the same delivery count,
    member and lock deadline. Records are acquired and acknowledged in ranges, so a
    share-partition holds a few runs, not one object per record, and every operation
    costs per run."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member: str | None = None
    deadline_ms: int = 0

    def same(self, other: Run) -> bool:
        return (
            self.state == other.state
            and self.delivery_count == other.delivery_count
            and self.member == other.member
            and self.deadline_ms == other.deadline_ms
        )


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of consecutive offsets acquired with the same delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record archived for a reason a dead-letter topic records."""

    offset: int
    delivery_count: int
    reason: str


@dataclass(frozen=True, slots=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]  # one type for the whole range, or one per offset


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_UNBOUNDED = 1 << 62  # no cap on records acquired within a batch
_KNOWN_TYPES = frozenset(int(t) for t in AckType)


@dataclass(slots=True)
class SharePartitionState:
    """`runs` cover [start_offset, end_offset) exactly, in order, without gaps."""

    start_offset: int
    delivery_limit: int = 5
    max_in_flight: int = 200
    runs: list[Run] = field(default_factory=list)
    end_offset: int = -1  # first offset never acquired; -1 until set from start_offset
    pending_dead_letters: list[DeadLetter] = field(default_factory=list)
    dead_letters_enabled: bool = False

    def __post_init__(self) -> None:
        if self.end_offset < self.start_offset:
            self.end_offset = self.start_offset
        if not self.runs and self.end_offset > self.start_offset:
            self.runs.append(Run(self.start_offset, self.end_offset - 1, RecordState.AVAILABLE, 0))

    # -- reading -----------------------------------------------------------------------

    def record(self, offset: int) -> InFlight | None:
        """The in-flight record at `offset`, or None outside [start_offset, end_offset)."""
        if not self.start_offset <= offset < self.end_offset:
            return None
        run = self.runs[self._index(offset)]
        return InFlight(run.state, run.delivery_count, run.member, run.deadline_ms)

    def fetch_offset(self) -> int | None:
        """Where a fetch should start reading: the first available in-flight record,
        else the end offset; None when nothing can be acquired (all in flight are
        locked and the window is full)."""
        for run in self.runs:
            if run.state == RecordState.AVAILABLE:
                return run.first
        if self.end_offset - self.start_offset >= self.max_in_flight:
            return None
        return self.end_offset

    def in_flight(self) -> int:
        """Records acquired and not yet acknowledged, released or timed out."""
        return sum(r.last - r.first + 1 for r in self.runs if r.state == RecordState.ACQUIRED)

    def lag(self, end_offset: int) -> int:
        """Records below `end_offset` not yet acknowledged or archived (KIP-1226's lag)."""
        done = sum(
            min(r.last, end_offset - 1) - r.first + 1
            for r in self.runs
            if r.first < end_offset and r.state in _DONE
        )
        return max(end_offset - self.start_offset - done, 0)

    def acquired_by(self, member: str) -> list[int]:
        return [
            o
            for r in self.runs
            if r.state == RecordState.ACQUIRED and r.member == member
            for o in range(r.first, r.last + 1)
        ]

    def holds(self, member: str) -> bool:
        """Whether `member` has records acquired here."""
        return any(r.state == RecordState.ACQUIRED and r.member == member for r in self.runs)

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline_ms for r in self.runs if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- acquiring ---------------------------------------------------------------------

    def acquire(
        self,
        member: str,
        batches: Iterable[tuple[int, int]],
        max_records: int,
        now_ms: int,
        lock_ms: int,
        batch_aligned: bool = True,
    ) -> list[Acquired]:
        """Acquire for `member` available records among the offsets the log holds
        (`batches`: (first, last) offset ranges in order): `max_records` of them, and on
        to the end of the batch the last one is in, as Kafka's batch-optimized
        acquisition does. There max_records is a soft limit: a batch is taken whole, so
        an answer, which must carry whole batches, carries no records of them that it
        did not acquire. New records are taken from a batch that starts inside the
        window of `max_in_flight` records past the start offset (Kafka's
        group.share.partition.max.record.locks gates fetching); the batch may run past
        it. Offsets past the end offset that no batch holds (compacted away, or control
        records) become ARCHIVED as they are passed; they were never deliverable.
        Without `batch_aligned` (ShareFetch's record-limit acquire mode) neither
        `max_records` nor the window is ever exceeded."""
        taken: list[Acquired] = []
        count = 0
        deadline = now_ms + lock_ms
        ceiling = max_records if not batch_aligned else _UNBOUNDED
        window_end = self.start_offset + self.max_in_flight  # first offset past the window
        for first, last in batches:
            if count >= max_records:
                break
            lo = max(first, self.start_offset)
            # In flight already: available runs within [lo, last] are taken again.
            if lo < self.end_offset:
                i = self._index(lo)
                while i < len(self.runs) and count < ceiling:
                    run = self.runs[i]
                    if run.first > last:
                        break
                    if run.state == RecordState.AVAILABLE:
                        a = max(run.first, lo)
                        b = min(run.last, last, a + ceiling - count - 1)
                        i = self._isolate(i, a, b)
                        run = self.runs[i]
                        run.state = RecordState.ACQUIRED
                        run.delivery_count += 1
                        run.member = member
                        run.deadline_ms = deadline
                        taken.append(Acquired(a, b, run.delivery_count))
                        count += b - a + 1
                    i += 1
                lo = self.end_offset
            # Never acquired before: a new run, from inside the window.
            if lo > last or count >= ceiling or lo >= window_end:
                continue
            b = min(last, lo + ceiling - count - 1)
            if not batch_aligned:
                b = min(b, window_end - 1)
            if lo > self.end_offset:  # offsets no batch holds
                self._append(Run(self.end_offset, lo - 1, RecordState.ARCHIVED, 0))
            self._append(Run(lo, b, RecordState.ACQUIRED, 1, member, deadline))
            self.end_offset = b + 1
            taken.append(Acquired(lo, b, 1))
            count += b - lo + 1
        self._advance()
        return _merged(taken)

    # -- acknowledging -----------------------------------------------------------------

    def acknowledge(
        self, member: str, batches: Sequence[AckBatch], now_ms: int, lock_ms: int
    ) -> list[DeadLetter]:
        """Apply a member's acknowledgements, all or none.

        Raises AckError: INVALID_REQUEST for batches out of order, overlapping, with an
        unknown type or a type list of the wrong length; INVALID_RECORD_STATE when an
        offset is not acquired by `member`."""
        previous_last = -1
        for batch in batches:
            if batch.first_offset < 0 or batch.last_offset < batch.first_offset:
                raise AckError(INVALID_REQUEST, "acknowledgement batch with last before first")
            if batch.first_offset <= previous_last:
                raise AckError(INVALID_REQUEST, "acknowledgement batches overlap or are unsorted")
            previous_last = batch.last_offset
            size = batch.last_offset - batch.first_offset + 1
            if len(batch.types) not in (1, size) or not _KNOWN_TYPES.issuperset(batch.types):
                raise AckError(INVALID_REQUEST, "bad acknowledge types")
            if batch.first_offset < self.start_offset or batch.last_offset >= self.end_offset:
                # Checked before walking the range: a hostile range of 2^62 offsets must
                # cost no more than one in flight.
                raise AckError(
                    INVALID_RECORD_STATE,
                    f"offsets {batch.first_offset}-{batch.last_offset} are not in flight",
                )
            i = self._index(batch.first_offset)
            while i < len(self.runs) and self.runs[i].first <= batch.last_offset:
                run = self.runs[i]
                if run.state != RecordState.ACQUIRED or run.member != member:
                    offset = max(run.first, batch.first_offset)
                    raise AckError(
                        INVALID_RECORD_STATE, f"offset {offset} is not acquired by this member"
                    )
                i += 1
        dead: list[DeadLetter] = []
        for batch in batches:
            if len(batch.types) == 1:
                self._apply(
                    batch.first_offset, batch.last_offset, batch.types[0], dead, now_ms, lock_ms
                )
                continue
            a = batch.first_offset
            for k in range(1, len(batch.types) + 1):
                if k == len(batch.types) or batch.types[k] != batch.types[k - 1]:
                    b = batch.first_offset + k - 1
                    self._apply(a, b, batch.types[k - 1], dead, now_ms, lock_ms)
                    a = b + 1
        self._advance()
        return self._note(dead)

    def _apply(
        self, a: int, b: int, kind: int, dead: list[DeadLetter], now_ms: int, lock_ms: int
    ) -> None:
        """One acknowledgement type over [a, b], all acquired by the acknowledging member."""
        i = self._isolate(self._index(a), a, b)
        while i < len(self.runs) and self.runs[i].first <= b:
            i = self._isolate(i, self.runs[i].first, b)
            run = self.runs[i]
            if kind == AckType.ACCEPT:
                _finish(run, RecordState.ACKNOWLEDGED)
            elif kind == AckType.GAP:
                _finish(run, RecordState.ARCHIVED)
            elif kind == AckType.REJECT:
                _finish(run, RecordState.ARCHIVED)
                dead.extend(
                    DeadLetter(o, run.delivery_count, REJECTED)
                    for o in range(run.first, run.last + 1)
                )
            elif kind == AckType.RELEASE:
                self._release(run, dead)
            else:  # RENEW
                run.deadline_ms = now_ms + lock_ms
            i += 1

    # -- releasing ---------------------------------------------------------------------

    def expire_locks(self, now_ms: int) -> list[DeadLetter]:
        """Release every record whose acquisition lock has run out."""
        dead: list[DeadLetter] = []
        for run in self.runs:
            if run.state == RecordState.ACQUIRED and run.deadline_ms <= now_ms:
                self._release(run, dead)
        self._advance()
        return self._note(dead)

    def release_member(self, member: str) -> list[DeadLetter]:
        """Release every record `member` holds (it left, was fenced or closed its session)."""
        dead: list[DeadLetter] = []
        for run in self.runs:
            if run.state == RecordState.ACQUIRED and run.member == member:
                self._release(run, dead)
        self._advance()
        return self._note(dead)

    def reset(self, start_offset: int) -> None:
        """Start over at `start_offset` (AlterShareGroupOffsets; only with no members)."""
        self.runs.clear()
        self.start_offset = self.end_offset = start_offset

    def move_start_to(self, log_start_offset: int) -> None:
        """Records deleted from the log (retention, DeleteRecords) are no longer owed."""
        if log_start_offset <= self.start_offset:
            return
        if log_start_offset >= self.end_offset:
            self.runs.clear()
        else:
            i = self._index(log_start_offset)
            del self.runs[:i]
            self.runs[0].first = log_start_offset
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        self._advance()

    # -- persistence -------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """The durable part: SPSO, SPEO and runs of (first, last, state, deliveries) for
        in-flight records. An acquired record is stored AVAILABLE (locks do not survive a
        restart) with the delivery it was given counted."""
        runs: list[list[int]] = []
        for run in self.runs:
            state = RecordState.AVAILABLE if run.state == RecordState.ACQUIRED else run.state
            last = runs[-1] if runs else None
            if last is not None and last[2] == state and last[3] == run.delivery_count:
                last[1] = run.last
            else:
                runs.append([run.first, run.last, int(state), run.delivery_count])
        return {
            "start": self.start_offset,
            "end": self.end_offset,
            "runs": runs,
            "dlq": [[d.offset, d.delivery_count, d.reason] for d in self.pending_dead_letters],
        }

    @classmethod
    def from_snapshot(
        cls, data: dict[str, object], delivery_limit: int, max_in_flight: int
    ) -> SharePartitionState:
        start = int(data["start"])  # type: ignore[call-overload]
        end = int(data["end"])  # type: ignore[call-overload]
        state = cls(start, delivery_limit, max_in_flight, end_offset=end)
        state.runs.clear()
        at = start
        stored: list[list[int]] = sorted(data["runs"])  # type: ignore[call-overload]
        for first, last, kind, deliveries in stored:
            first, last = max(first, at), min(last, end - 1)
            if first > last:
                continue
            if first > at:
                state.runs.append(Run(at, first - 1, RecordState.AVAILABLE, 0))
            state.runs.append(Run(first, last, RecordState(kind), deliveries))
            at = last + 1
        if at < end:
            state.runs.append(Run(at, end - 1, RecordState.AVAILABLE, 0))
        state.pending_dead_letters = [
            DeadLetter(o, c, r)
            for o, c, r in data.get("dlq", [])  # type: ignore[attr-defined]
        ]
        state._advance()
        return state

    # -- internals ---------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """The index of the run holding `offset` (start_offset <= offset < end_offset)."""
        return bisect_right(self.runs, offset, key=_first) - 1

    def _isolate(self, i: int, a: int, b: int) -> int:
        """Splits run `i` so that [a, b] (within it from a on) is a run of its own;
        returns that run's index. [a, b] may reach past run `i`: only its part in run
        `i` is isolated."""
        run = self.runs[i]
        if a > run.first:
            head = Run(run.first, a - 1, run.state, run.delivery_count, run.member, run.deadline_ms)
            run.first = a
            self.runs.insert(i, head)
            i += 1
        if b < run.last:
            tail = Run(b + 1, run.last, run.state, run.delivery_count, run.member, run.deadline_ms)
            run.last = b
            self.runs.insert(i + 1, tail)
        return i

    def _append(self, run: Run) -> None:
        runs = self.runs
        if runs and runs[-1].same(run) and runs[-1].last + 1 == run.first:
            runs[-1].last = run.last
        else:
            runs.append(run)

    def _release(self, run: Run, dead: list[DeadLetter]) -> None:
        if run.delivery_count >= self.delivery_limit:
            _finish(run, RecordState.ARCHIVED)
            dead.extend(
                DeadLetter(o, run.delivery_count, DELIVERY_LIMIT)
                for o in range(run.first, run.last + 1)
            )
        else:
            _finish(run, RecordState.AVAILABLE)

    def _note(self, dead: list[DeadLetter]) -> list[DeadLetter]:
        if self.dead_letters_enabled:
            self.pending_dead_letters.extend(dead)
        return dead

    def _advance(self) -> None:
        """Drop finished runs at the start, and join neighbours that became alike."""
        runs = self.runs
        k = 0
        while k < len(runs) and runs[k].state in _DONE:
            k += 1
        if k:
            del runs[:k]
        self.start_offset = runs[0].first if runs else self.end_offset
        merged: list[Run] = []
        for run in runs:
            if merged and merged[-1].same(run):
                merged[-1].last = run.last
            else:
                merged.append(run)
        if len(merged) != len(runs):
            self.runs = merged


def _first(run: Run) -> int:
    return run.first


def _finish(run: Run, state: RecordState) -> None:
    run.state = state
    run.member = None
    run.deadline_ms = 0


def _merged(taken: list[Acquired]) -> list[Acquired]:
    """Adjacent acquired ranges of one delivery count as one (the answer's ranges)."""
    out: list[Acquired] = []
    for a in taken:
        if (
            out
            and out[-1].last_offset + 1 == a.first_offset
            and out[-1].delivery_count == a.delivery_count
        ):
            out[-1] = Acquired(out[-1].first_offset, a.last_offset, a.delivery_count)
        else:
            out.append(a)
    return out


def split_at_batches(
    acquired: list[Acquired], batch_starts: Sequence[int], batch_size: int
) -> list[Acquired]:
    """Acquired ranges as Kafka's batch-optimized acquisition lists them for ShareFetch's
    BatchSize: a range longer than `batch_size` is cut where a producer batch starts
    once `batch_size` records or more precede the cut, so each listed range holds whole
    batches and at least `batch_size` records (but the last), for a client to
    acknowledge about that many at a time. `batch_starts` are the base offsets of the
    batches read, in order."""
    out: list[Acquired] = []
    for a in acquired:
        first = a.first_offset
        if a.last_offset - first + 1 > batch_size:
            for start in batch_starts:
                if start > a.last_offset:
                    break
                if start - first >= batch_size:
                    out.append(Acquired(first, start - 1, a.delivery_count))
                    first = start
        out.append(Acquired(first, a.last_offset, a.delivery_count))
    return out
