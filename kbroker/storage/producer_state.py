"""Producer state of one partition: idempotence, open transactions, aborted transactions.

Every idempotent or transactional batch carries its producer id, epoch and sequence
range in the fixed header, so the checks Kafka makes (duplicate, out-of-order
sequence, fenced epoch, a plain write inside an open transaction) cost constant work
per batch here too: the last five batches of each producer are kept, and a batch
equal to one of them is answered with that batch's original offsets instead of being
written again.

The state is kept as the log is written and saved beside the segments: a
`<offset>.snapshot` file when a segment rolls and at a clean close, holding the state
of every producer for the offsets below `<offset>`. Opening the log loads the newest
snapshot at or below the log end offset and replays the batch headers after it (only
the headers: the records are never decoded, except the single record of a control
batch, which says commit or abort). Aborted transactions, which read_committed
fetches must report, are appended to `aborted.txnindex` as they happen.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from crc32c import crc32c

from kbroker.protocol.batch import (
    HEADER_SIZE,
    TRANSACTIONAL_MASK,
    TRANSACTIONAL_OR_CONTROL,
    BatchHeader,
    CorruptBatchError,
    read_varint,
)
from kbroker.storage.entry_file import replace_file

__all__ = [
    "CLIENT",
    "COORDINATOR",
    "REPLICATION",
    "AbortedTxn",
    "CoordinatorFencedError",
    "DuplicateBatch",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "UnknownProducerIdError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "read_control_record",
]

# Who is appending, which decides how much is checked (Kafka's AppendOrigin).
CLIENT = 0  # a producer: epoch, sequence, duplicates, transaction state
COORDINATOR = 1  # markers and transactional offset commits: epochs only
REPLICATION = 2  # a follower copying the leader: nothing, the leader checked

MAX_BATCHES = 5  # Kafka keeps the last five: max.in.flight of an idempotent producer
NO_EPOCH = -1
NO_SEQUENCE = -1
ABORT = 0
COMMIT = 1

SNAPSHOT_SUFFIX = ".snapshot"
ABORTED_INDEX_FILE = "aborted.txnindex"
SNAPSHOTS_KEPT = 2
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
_SNAPSHOT_MAGIC = b"KPS1"
_PRODUCER = struct.Struct(">qhiqqb")  # id, epoch, coordinator epoch, last ts, txn first, batches
_BATCH = struct.Struct(">iiqi")  # first seq, last seq, last offset, offset delta
_ABORTED = struct.Struct(">qqqq")  # producer id, first offset, last offset, last stable offset


class ProducerStateError(Exception):
    """A batch the producer state refuses; the subclass names Kafka's error."""


class OutOfOrderSequenceError(ProducerStateError):
    pass


class InvalidProducerEpochError(ProducerStateError):
    pass


class InvalidTxnStateError(ProducerStateError):
    pass


class CoordinatorFencedError(ProducerStateError):
    pass


class InvalidRecordError(ProducerStateError):
    pass


class UnknownProducerIdError(ProducerStateError):
    """A producer id no InitProducerId ever handed out."""


@dataclass(slots=True, frozen=True)
class DuplicateBatch:
    """A batch already in the log: the append answers with these and writes nothing."""

    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True, frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the abort marker
    last_stable_offset: int


@dataclass(slots=True)
class ProducerEntry:
    """What one partition remembers of one producer id."""

    producer_id: int
    epoch: int = NO_EPOCH
    # (first seq, last seq, last offset, offset delta, max timestamp), oldest first.
    batches: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int = -1  # first offset of the open transaction, -1 when none

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else NO_SEQUENCE

    def find_duplicate(self, h: BatchHeader) -> DuplicateBatch | None:
        if h.producer_epoch != self.epoch:
            return None
        first, last = h.base_sequence, h.last_sequence
        for b in self.batches:
            if b[0] == first and b[1] == last:
                return DuplicateBatch(b[2] - b[3], b[2], b[4])
        return None

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()


def _in_sequence(last: int, nxt: int) -> bool:
    return nxt == last + 1 or (nxt == 0 and last == 0x7FFFFFFF)


def read_control_record(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(control type, coordinator epoch) of the control batch at `pos`: type 0 is abort,
    1 commit, -1 unreadable (compressed, empty or malformed). Reads one record only."""
    try:
        if buf[pos + 21 + 1] & 0x07:  # compressed: coordinators never compress markers
            return -1, -1
        p = pos + HEADER_SIZE
        _, p = read_varint(buf, p)  # record length
        p += 1  # attributes
        _, p = read_varint(buf, p)  # timestamp delta
        _, p = read_varint(buf, p)  # offset delta
        key_len, p = read_varint(buf, p)
        if key_len < 4:
            return -1, -1
        version, ctype = struct.unpack_from(">hh", buf, p)
        p += key_len
        value_len, p = read_varint(buf, p)
        coordinator_epoch = -1
        if value_len >= 6:
            coordinator_epoch = struct.unpack_from(">i", buf, p + 2)[0]
        if version < 0 or ctype not in (ABORT, COMMIT):
            return -1, -1
        return ctype, coordinator_epoch
    except (IndexError, struct.error, CorruptBatchError):
        return -1, -1


class Verifying(NamedTuple):
    """The transactional batches of one producer waiting for a partition to join their
    transaction: their epoch, their lowest sequence, and when the first came."""

    epoch: int
    sequence: int
    since: float


class ProducerStateManager:
    """The producer state of one partition log, and its files in the log's directory."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open txn
        self.aborted: list[AbortedTxn] = []  # ordered by last offset
        self._aborted_last: list[int] = []
        self._max_span = 0  # the longest aborted transaction, for bounded lookups
        self._index_fd: int | None = None
        # Kafka's VerificationStateEntry (KIP-890), per producer id.
        self.verifying: dict[int, Verifying] = {}

    def start_verification(self, pid: int, sequence: int, epoch: int) -> None:
        """A transactional batch of `pid` waits for its partition to be added to the
        transaction. Should that fail (the coordinator busy ending the last one) while a
        later batch of the producer is added and written, the first could never follow
        it: so no batch above the lowest sequence waiting is taken (OUT_OF_ORDER, which
        the client retries after the lower one). A higher epoch starts afresh."""
        found = self.verifying.get(pid)
        if found is None:
            self.verifying[pid] = Verifying(epoch, sequence, time.monotonic())
        elif epoch > found.epoch or (epoch == found.epoch and sequence < found.sequence):
            self.verifying[pid] = Verifying(epoch, sequence, found.since)

    # -- checks before an append ----------------------------------------------------------

    def check(
        self, buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], origin: int
    ) -> DuplicateBatch | None:
        """Validate the batches of one append without changing anything.

        Returns the original offsets when the (first) producer batch is a duplicate of a
        recent one, in which case nothing of the append may be written, as in Kafka.
        Raises a ProducerStateError subclass for a batch Kafka would refuse.
        """
        producers = self.producers
        if origin == CLIENT and len(headers) == 1:
            # The usual case, answered with a few comparisons: the next batch of a known
            # producer, same epoch, in sequence (so it cannot be a duplicate either).
            h = headers[0]
            entry = producers.get(h.producer_id)
            if (
                entry is not None
                and h.producer_epoch == entry.epoch
                and entry.batches
                and h.base_sequence == entry.batches[-1][1] + 1
                and not h.attributes & 0x20
                and (entry.txn_first_offset < 0 or h.attributes & 0x10)
            ):
                return None
        staged: dict[int, tuple[int, int, bool]] | None = None  # pid -> epoch, last seq, txn
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                if h.attributes & TRANSACTIONAL_OR_CONTROL:
                    raise InvalidRecordError("a transactional or control batch needs a producer id")
                continue
            entry = producers.get(pid)
            if staged is not None and pid in staged:
                epoch, last_seq, in_txn = staged[pid]
            elif entry is not None:
                epoch, last_seq, in_txn = (
                    entry.epoch,
                    entry.last_sequence,
                    entry.txn_first_offset >= 0,
                )
            else:
                epoch, last_seq, in_txn = NO_EPOCH, NO_SEQUENCE, False
            if h.attributes & 0x20:  # control batch: a transaction marker
                if origin == CLIENT:
                    raise InvalidRecordError("clients may not produce control batches")
                if h.producer_epoch < epoch:
                    raise InvalidProducerEpochError(
                        f"marker epoch {h.producer_epoch} of producer {pid} is below {epoch}"
                    )
                _, coordinator_epoch = read_control_record(buf, h.position)
                if entry is not None and coordinator_epoch < entry.coordinator_epoch:
                    raise CoordinatorFencedError(
                        f"marker from coordinator epoch {coordinator_epoch} of producer {pid}, "
                        f"which has seen {entry.coordinator_epoch}"
                    )
                if staged is None:
                    staged = {}
                staged[pid] = (
                    h.producer_epoch,
                    last_seq if epoch == h.producer_epoch else -1,
                    False,
                )
                continue
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"epoch {h.producer_epoch} of producer {pid} is below the current {epoch}"
                )
            if origin == CLIENT:
                if h.base_sequence < 0:
                    raise InvalidRecordError(f"producer {pid} sent sequence {h.base_sequence}")
                if entry is not None and staged is None:
                    duplicate = entry.find_duplicate(h)
                    if duplicate is not None:
                        return duplicate
                first_seq = h.base_sequence
                verifying = self.verifying.get(pid)
                if verifying is not None and first_seq > verifying.sequence:
                    raise OutOfOrderSequenceError(
                        f"producer {pid} sent sequence {first_seq} while its sequence "
                        f"{verifying.sequence} waits for the partition to join its transaction"
                    )
                if h.producer_epoch != epoch:
                    if first_seq != 0 and epoch != NO_EPOCH:
                        raise OutOfOrderSequenceError(
                            f"producer {pid} starts epoch {h.producer_epoch} at sequence "
                            f"{first_seq}, not 0"
                        )
                elif epoch != NO_EPOCH and not _in_sequence(last_seq, first_seq):
                    raise OutOfOrderSequenceError(
                        f"producer {pid} sent sequence {first_seq} after {last_seq}"
                    )
            transactional = bool(h.attributes & 0x10)
            if in_txn and not transactional and h.producer_epoch == epoch:
                raise InvalidTxnStateError(
                    f"producer {pid} wrote outside the transaction it has open"
                )
            if len(headers) > 1:
                if staged is None:
                    staged = {}
                staged[pid] = (h.producer_epoch, h.last_sequence, in_txn or transactional)
        return None

    # -- applying what was written ---------------------------------------------------------

    def apply(self, buf: bytes | bytearray | memoryview, headers: Iterable[BatchHeader]) -> None:
        """Record the batches just written (offsets assigned); producer id -1 is skipped."""
        for h in headers:
            if h.producer_id >= 0:
                if h.attributes & 0x20:
                    ctype, coordinator_epoch = read_control_record(buf, h.position)
                    self.apply_marker(h, ctype, coordinator_epoch)
                else:
                    self.apply_data(h)

    def apply_data(self, h: BatchHeader) -> None:
        pid = h.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if h.producer_epoch != entry.epoch:
            entry.set_epoch(h.producer_epoch)
        batches = entry.batches
        last_offset = h.base_offset + h.last_offset_delta
        if h.base_sequence >= 0:
            batches.append(
                (
                    h.base_sequence,
                    h.last_sequence,
                    last_offset,
                    h.last_offset_delta,
                    h.max_timestamp,
                )
            )
            if len(batches) > MAX_BATCHES:
                del batches[0]
        entry.last_timestamp = h.max_timestamp
        if h.attributes & TRANSACTIONAL_MASK:
            # Written, so the transaction holds this partition: nothing waits any more.
            self.verifying.pop(pid, None)
            if entry.txn_first_offset < 0:
                entry.txn_first_offset = h.base_offset
                self.ongoing[pid] = h.base_offset

    def apply_marker(self, h: BatchHeader, ctype: int, coordinator_epoch: int) -> None:
        pid = h.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        first = entry.txn_first_offset
        if first >= 0:
            self.ongoing.pop(pid, None)
            entry.txn_first_offset = -1
            if ctype == ABORT:
                lso = min(self.ongoing.values(), default=h.base_offset + 1)
                self._add_aborted(AbortedTxn(pid, first, h.base_offset, lso), persist=True)
        entry.set_epoch(h.producer_epoch)
        if coordinator_epoch >= 0:
            entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = h.max_timestamp

    def _add_aborted(self, txn: AbortedTxn, persist: bool) -> None:
        self.aborted.append(txn)
        self._aborted_last.append(txn.last_offset)
        span = txn.last_offset - txn.first_offset
        if span > self._max_span:
            self._max_span = span
        if persist:
            fd = self._index()
            os.write(fd, _ABORTED.pack(*_aborted_fields(txn)))

    def _index(self) -> int:
        if self._index_fd is None:
            self._index_fd = os.open(
                os.path.join(self.directory, ABORTED_INDEX_FILE),
                os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0),
                0o644,
            )
        return self._index_fd

    # -- queries ---------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (None when none is open)."""
        ongoing = self.ongoing
        if not ongoing:
            return None
        return min(ongoing.values())

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None or first > high_watermark else first

    def aborted_between(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_offset): what a
        read_committed fetch of that range must list."""
        out: list[AbortedTxn] = []
        aborted = self.aborted
        i = bisect_left(self._aborted_last, fetch_offset)
        span = self._max_span
        while i < len(aborted):
            txn = aborted[i]
            if txn.last_offset - span >= upper_offset:
                break
            if txn.first_offset < upper_offset:
                out.append(txn)
            i += 1
        return out

    def expire(self, now_ms: int, max_age_ms: int) -> int:
        """Forget producers idle for `max_age_ms` with no open transaction (Kafka's
        producer.id.expiration.ms); returns how many went."""
        doomed = [
            pid
            for pid, e in self.producers.items()
            if e.txn_first_offset < 0
            and e.last_timestamp >= 0
            and now_ms - e.last_timestamp > max_age_ms
        ]
        for pid in doomed:
            del self.producers[pid]
        horizon = time.monotonic() - max_age_ms / 1000
        for pid in [p for p, v in self.verifying.items() if v.since < horizon]:
            del self.verifying[pid]  # never written: left behind by a failed producer
        return len(doomed)

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        found = []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        for name in names:
            m = _SNAPSHOT_RE.match(name)
            if m is not None:
                found.append(int(m.group(1)))
        found.sort()
        return found

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def take_snapshot(self, offset: int, log_start_offset: int = 0) -> None:
        """Save the state as of `offset` (everything below it applied); keep the newest
        few snapshots. Aborted transactions wholly below the log start are dropped."""
        if self.aborted and self.aborted[0].last_offset < log_start_offset:
            self._prune_aborted(log_start_offset)
        body = bytearray()
        count = 0
        for e in self.producers.values():
            body += _PRODUCER.pack(
                e.producer_id,
                e.epoch,
                e.coordinator_epoch,
                e.last_timestamp,
                e.txn_first_offset,
                len(e.batches),
            )
            for b in e.batches:
                body += _BATCH.pack(b[0], b[1], b[2], b[3])
            count += 1
        aborted_below = bisect_left(self._aborted_last, offset)
        tail = struct.pack(">qi", offset, count)
        head_rest = struct.pack(">q", aborted_below) + tail + body
        crc = crc32c(head_rest)
        data = _SNAPSHOT_MAGIC + struct.pack(">I", crc) + head_rest
        path = self._snapshot_path(offset)
        replace_file(path, data)
        for old in self.snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._snapshot_path(old))

    def _read_snapshot(self, offset: int) -> tuple[int, dict[int, ProducerEntry]] | None:
        """(aborted entries below the offset, producers), or None when unreadable."""
        try:
            with open(self._snapshot_path(offset), "rb") as f:
                data = f.read()
        except OSError:
            return None
        if len(data) < 28 or data[:4] != _SNAPSHOT_MAGIC:
            return None
        (crc,) = struct.unpack_from(">I", data, 4)
        if crc32c(memoryview(data)[8:]) != crc:
            return None
        aborted_below, stored_offset, count = struct.unpack_from(">qqi", data, 8)
        if stored_offset != offset:
            return None
        producers: dict[int, ProducerEntry] = {}
        pos = 28
        try:
            for _ in range(count):
                pid, epoch, coord, ts, txn_first, nb = _PRODUCER.unpack_from(data, pos)
                pos += _PRODUCER.size
                batches = []
                for _ in range(nb):
                    first, last, last_off, delta = _BATCH.unpack_from(data, pos)
                    pos += _BATCH.size
                    batches.append((first, last, last_off, delta, ts))
                producers[pid] = ProducerEntry(pid, epoch, batches, coord, ts, txn_first)
        except struct.error:
            return None
        return aborted_below, producers

    # -- loading -----------------------------------------------------------------------------

    def load(self, segments: Sequence[object], log_start_offset: int, log_end_offset: int) -> int:
        """Rebuild the state for a log of `segments` ending at `log_end_offset`: the newest
        usable snapshot, then the batch headers after it. Returns the offset replay began
        at (the log end offset when the snapshot was current)."""
        self.close()
        for offset in self.snapshot_offsets():
            if offset > log_end_offset:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._snapshot_path(offset))
        aborted = self._read_aborted_index()
        start = None
        for offset in reversed(self.snapshot_offsets()):
            loaded = self._read_snapshot(offset)
            if loaded is None:
                continue
            aborted_below, producers = loaded
            kept = [a for a in aborted if a.last_offset < offset]
            if len(kept) < aborted_below:
                continue  # the index lost entries this snapshot counts on: look further back
            start = offset
            self.producers = producers
            aborted = kept[len(kept) - aborted_below :] if aborted_below else []
            break
        if start is None:
            start = 0
            self.producers = {}
            aborted = []
        self._reset_aborted(aborted, log_start_offset)
        self.ongoing = {
            pid: e.txn_first_offset for pid, e in self.producers.items() if e.txn_first_offset >= 0
        }
        if start < log_end_offset:
            for h, buf in _headers_from(segments, start):
                if h.producer_id < 0:
                    continue
                if h.attributes & 0x20:
                    ctype, coordinator_epoch = read_control_record(buf, 0)
                    self.apply_marker(h, ctype, coordinator_epoch)
                else:
                    self.apply_data(h)
            # Save the replay: a log that is opened clean from now on (and perhaps never
            # written again) must not replay the same headers at every start.
            self.take_snapshot(log_end_offset, log_start_offset)
        return min(start, log_end_offset)

    def truncate(self, segments: Sequence[object], log_start_offset: int, offset: int) -> None:
        """The log was cut back to `offset`: forget everything at or after it."""
        self.load(segments, log_start_offset, offset)

    def _read_aborted_index(self) -> list[AbortedTxn]:
        path = os.path.join(self.directory, ABORTED_INDEX_FILE)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        size = _ABORTED.size
        return [
            AbortedTxn(*_ABORTED.unpack_from(data, pos))
            for pos in range(0, len(data) - size + 1, size)
        ]

    def _reset_aborted(self, entries: list[AbortedTxn], log_start_offset: int) -> None:
        """Make `entries` (minus those wholly below the log start) the whole index."""
        self.aborted = []
        self._aborted_last = []
        self._max_span = 0
        for txn in entries:
            if txn.last_offset >= log_start_offset:
                self._add_aborted(txn, persist=False)
        self._rewrite_index()

    def _prune_aborted(self, log_start_offset: int) -> None:
        self._reset_aborted(list(self.aborted), log_start_offset)

    def _rewrite_index(self) -> None:
        if self._index_fd is not None:
            os.close(self._index_fd)
            self._index_fd = None
        path = os.path.join(self.directory, ABORTED_INDEX_FILE)
        if not self.aborted:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(_ABORTED.pack(*_aborted_fields(a)) for a in self.aborted))
        os.replace(tmp, path)

    def close(self) -> None:
        if self._index_fd is not None:
            os.close(self._index_fd)
            self._index_fd = None


def _aborted_fields(txn: AbortedTxn) -> tuple[int, int, int, int]:
    return txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset


def _headers_from(segments: Sequence[object], start: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """Headers of the batches ending at or after `start`, oldest first; for control
    batches the batch bytes come along (position 0), otherwise an empty buffer."""
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        if nxt is not None and nxt.base_offset <= start:  # type: ignore[attr-defined]
            continue
        if seg.size == 0:  # type: ignore[attr-defined]
            continue
        first = seg.find(start) if start > seg.base_offset else None  # type: ignore[attr-defined]
        position = first.position if first is not None else 0
        for h in seg.batches(position):  # type: ignore[attr-defined]
            if h.base_offset + h.last_offset_delta < start:
                continue
            if h.producer_id >= 0 and h.attributes & 0x20:
                yield h, seg.read_bytes(h.position, min(h.total_size, 4096))  # type: ignore[attr-defined]
            else:
                yield h, b""
