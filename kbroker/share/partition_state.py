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
between SPSO and SPEO is bounded by `max_in_flight`.
"""

from __future__ import annotations

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
    state: RecordState
    delivery_count: int
    member: str | None = None
    deadline_ms: int = 0


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


@dataclass(slots=True)
class SharePartitionState:
    start_offset: int
    delivery_limit: int = 5
    max_in_flight: int = 200
    records: dict[int, InFlight] = field(default_factory=dict)
    end_offset: int = -1  # first offset never acquired; -1 until set from start_offset
    pending_dead_letters: list[DeadLetter] = field(default_factory=list)
    dead_letters_enabled: bool = False

    def __post_init__(self) -> None:
        if self.end_offset < self.start_offset:
            self.end_offset = self.start_offset

    # -- reading -----------------------------------------------------------------------

    def fetch_offset(self) -> int | None:
        """Where a fetch should start reading: the first available in-flight record,
        else the end offset; None when nothing can be acquired (all in flight are
        locked and the window is full)."""
        for offset in range(self.start_offset, self.end_offset):
            record = self.records.get(offset)
            if record is not None and record.state == RecordState.AVAILABLE:
                return offset
        if self.end_offset - self.start_offset >= self.max_in_flight:
            return None
        return self.end_offset

    def in_flight(self) -> int:
        """Records acquired and not yet acknowledged, released or timed out."""
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)

    def lag(self, end_offset: int) -> int:
        """Records below `end_offset` not yet acknowledged or archived (KIP-1226's lag)."""
        done = sum(
            1
            for o, r in self.records.items()
            if o < end_offset and r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        )
        return max(end_offset - self.start_offset - done, 0)

    def acquired_by(self, member: str) -> list[int]:
        return sorted(
            o
            for o, r in self.records.items()
            if r.state == RecordState.ACQUIRED and r.member == member
        )

    def next_deadline(self) -> int | None:
        deadlines = [
            r.deadline_ms for r in self.records.values() if r.state == RecordState.ACQUIRED
        ]
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
        acquisition does (ShareFetch's max_records may be exceeded for batch alignment),
        but never more than twice `max_records`. Offsets past the end offset that no
        batch holds (compacted away, or control records) become ARCHIVED as they are
        passed; they were never deliverable. Without `batch_aligned` (ShareFetch's
        record-limit acquire mode) `max_records` is never exceeded."""
        taken: list[tuple[int, int]] = []
        deadline = now_ms + lock_ms
        ceiling = 2 * max_records if batch_aligned else max_records
        for first, last in batches:
            if len(taken) >= max_records:
                break
            for offset in range(max(first, self.start_offset), last + 1):
                if len(taken) >= ceiling:
                    break
                if offset < self.end_offset:
                    record = self.records.get(offset)
                    if record is None or record.state != RecordState.AVAILABLE:
                        continue
                else:
                    if offset - self.start_offset >= self.max_in_flight:
                        break
                    for gap in range(self.end_offset, offset):
                        self.records[gap] = InFlight(RecordState.ARCHIVED, 0)
                    self.records[offset] = InFlight(RecordState.ACQUIRED, 1, member, deadline)
                    self.end_offset = offset + 1
                    taken.append((offset, 1))
                    continue
                record.state = RecordState.ACQUIRED
                record.delivery_count += 1
                record.member = member
                record.deadline_ms = deadline
                taken.append((offset, record.delivery_count))
        self._advance()
        return _runs(taken)

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
            if len(batch.types) not in (1, size) or any(
                t not in AckType._value2member_map_ for t in batch.types
            ):
                raise AckError(INVALID_REQUEST, "bad acknowledge types")
            if batch.first_offset < self.start_offset or batch.last_offset >= self.end_offset:
                # Checked before walking the range: a hostile range of 2^62 offsets must
                # cost no more than one in flight.
                raise AckError(
                    INVALID_RECORD_STATE,
                    f"offsets {batch.first_offset}-{batch.last_offset} are not in flight",
                )
            for offset in range(batch.first_offset, batch.last_offset + 1):
                record = self.records.get(offset)
                if (
                    record is None
                    or record.state != RecordState.ACQUIRED
                    or record.member != member
                ):
                    raise AckError(
                        INVALID_RECORD_STATE, f"offset {offset} is not acquired by this member"
                    )
        dead: list[DeadLetter] = []
        for batch in batches:
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                kind = batch.types[i] if len(batch.types) > 1 else batch.types[0]
                record = self.records[offset]
                if kind == AckType.ACCEPT:
                    self._finish(record, RecordState.ACKNOWLEDGED)
                elif kind == AckType.GAP:
                    self._finish(record, RecordState.ARCHIVED)
                elif kind == AckType.REJECT:
                    self._finish(record, RecordState.ARCHIVED)
                    dead.append(DeadLetter(offset, record.delivery_count, REJECTED))
                elif kind == AckType.RELEASE:
                    dead.extend(self._release(offset, record))
                else:  # RENEW
                    record.deadline_ms = now_ms + lock_ms
        self._advance()
        return self._note(dead)

    # -- releasing ---------------------------------------------------------------------

    def expire_locks(self, now_ms: int) -> list[DeadLetter]:
        """Release every record whose acquisition lock has run out."""
        dead: list[DeadLetter] = []
        for offset, record in sorted(self.records.items()):
            if record.state == RecordState.ACQUIRED and record.deadline_ms <= now_ms:
                dead.extend(self._release(offset, record))
        self._advance()
        return self._note(dead)

    def release_member(self, member: str) -> list[DeadLetter]:
        """Release every record `member` holds (it left, was fenced or closed its session)."""
        dead: list[DeadLetter] = []
        for offset, record in sorted(self.records.items()):
            if record.state == RecordState.ACQUIRED and record.member == member:
                dead.extend(self._release(offset, record))
        self._advance()
        return self._note(dead)

    def reset(self, start_offset: int) -> None:
        """Start over at `start_offset` (AlterShareGroupOffsets; only with no members)."""
        self.records.clear()
        self.start_offset = self.end_offset = start_offset

    def move_start_to(self, log_start_offset: int) -> None:
        """Records deleted from the log (retention, DeleteRecords) are no longer owed."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            self.records.pop(offset, None)
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        self._advance()

    # -- persistence -------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """The durable part: SPSO, SPEO and runs of (first, last, state, deliveries) for
        in-flight records. An acquired record is stored AVAILABLE (locks do not survive a
        restart) with the delivery it was given counted."""
        runs: list[list[int]] = []
        for offset in range(self.start_offset, self.end_offset):
            record = self.records.get(offset)
            if record is None:
                continue
            state = RecordState.AVAILABLE if record.state == RecordState.ACQUIRED else record.state
            last = runs[-1] if runs else None
            if (
                last is not None
                and last[1] == offset - 1
                and last[2] == state
                and last[3] == record.delivery_count
            ):
                last[1] = offset
            else:
                runs.append([offset, offset, int(state), record.delivery_count])
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
        for first, last, kind, deliveries in data["runs"]:  # type: ignore[attr-defined]
            for offset in range(first, last + 1):
                state.records[offset] = InFlight(RecordState(kind), deliveries)
        for offset in range(start, end):
            state.records.setdefault(offset, InFlight(RecordState.AVAILABLE, 0))
        state.pending_dead_letters = [
            DeadLetter(o, c, r)
            for o, c, r in data.get("dlq", [])  # type: ignore[attr-defined]
        ]
        state._advance()
        return state

    # -- internals ---------------------------------------------------------------------

    def _release(self, offset: int, record: InFlight) -> list[DeadLetter]:
        if record.delivery_count >= self.delivery_limit:
            self._finish(record, RecordState.ARCHIVED)
            return [DeadLetter(offset, record.delivery_count, DELIVERY_LIMIT)]
        self._finish(record, RecordState.AVAILABLE)
        return []

    @staticmethod
    def _finish(record: InFlight, state: RecordState) -> None:
        record.state = state
        record.member = None
        record.deadline_ms = 0

    def _note(self, dead: list[DeadLetter]) -> list[DeadLetter]:
        if self.dead_letters_enabled:
            self.pending_dead_letters.extend(dead)
        return dead

    def _advance(self) -> None:
        records = self.records
        offset = self.start_offset
        while offset < self.end_offset:
            record = records.get(offset)
            if record is not None and record.state not in (
                RecordState.ACKNOWLEDGED,
                RecordState.ARCHIVED,
            ):
                break
            records.pop(offset, None)
            offset += 1
        self.start_offset = offset


def _runs(taken: list[tuple[int, int]]) -> list[Acquired]:
    out: list[Acquired] = []
    for offset, count in taken:
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            out[-1] = Acquired(out[-1].first_offset, offset, count)
        else:
            out.append(Acquired(offset, offset, count))
    return out
