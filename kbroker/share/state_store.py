"""The share coordinator's store: the persisted state of share-partitions (KIP-932).

In Kafka a share-partition lives on the leader of its data partition, which reads its
state from and writes it to the share coordinator: the leader of the share-partition's
`__share_group_state` partition, chosen by hashing "group:topicId:partition" (the key
FindCoordinator takes with key type SHARE). This store is that coordinator's memory of
the partitions it leads: the latest record per share-partition, each with the leader
epoch of the data partition that wrote it, so that a leader that lost its partition
(and does not know it yet) cannot overwrite what its successor wrote: its write is
refused with FENCED_LEADER_EPOCH, as Kafka's share coordinator refuses it. Likewise each
state has a state epoch, bumped when the group's coordinator starts it again at another
offset (AlterShareGroupOffsets: InitializeShareGroupState) or deletes it: a leader still
holding the old state is refused with FENCED_STATE_EPOCH and reads it again.

The store also keeps each state as its last committed write left it (the write's
records replicated to the ISR of the `__share_group_state` partition). Summaries
(DescribeShareGroupOffsets, its lag) answer from that alone, as Kafka's share coordinator
answers ReadShareGroupStateSummary at its last committed offset: a write a failover of
this coordinator could lose is never shown, so a start offset shown cannot go backwards.
A coordinator that loads a partition counts as committed only the records below its
high watermark, as Kafka's coordinator loader does; the others commit as it advances.
Share-partition leaders read the latest state, as they wrote it.

Pure and synchronous: the service appends the records and answers the requests.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kbroker.coordinator.records import partition_for
from kbroker.share.partition_state import DELIVERY_LIMIT, REJECTED
from kbroker.share.records import KeyValue, StateKey, fold

NONE = 0
FENCED_LEADER_EPOCH = 74
FENCED_STATE_EPOCH = 124


def share_key(key: StateKey) -> str:
    """Kafka's share coordinator key: "group:topicId:partition", the topic id written as
    Kafka writes a Uuid (URL-safe base64, unpadded)."""
    topic_id = base64.urlsafe_b64encode(key[1].bytes).rstrip(b"=").decode()
    return f"{key[0]}:{topic_id}:{key[2]}"


@dataclass(slots=True)
class StoredState:
    value: bytes  # the record's value (kbroker.share.records.state_value)
    leader_epoch: int
    state_epoch: int = 0


def state_epoch_of(value: bytes) -> int:
    try:
        return int(json.loads(value).get("state_epoch", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def leader_epoch_of(value: bytes) -> int:
    try:
        return int(json.loads(value).get("leader_epoch", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


@dataclass(slots=True)
class ShareStateStore:
    num_partitions: Callable[[], int]  # of `__share_group_state`, as it was created
    entries: dict[StateKey, StoredState] = field(default_factory=dict)
    # The state epoch of states deleted while this node coordinated them: a leader still
    # holding one may not write it back.
    deleted: dict[StateKey, int] = field(default_factory=dict)
    # Each state as committed (None: deleted), with the number of the write (`staged`)
    # that committed it: writes may commit out of the order they were appended in.
    committed: dict[StateKey, tuple[int, bytes | None]] = field(default_factory=dict)
    staged: int = 0

    def partition_of(self, key: StateKey) -> int:
        return partition_for(share_key(key), self.num_partitions())

    def load(
        self, partition: int, records: Iterable[KeyValue], committed: int | None = None
    ) -> tuple[int, dict[StateKey, bytes | None]]:
        """Fold a `__share_group_state` partition's records (oldest first) in: the number
        of states loaded, and the states the records after the first `committed` (all
        when None) leave. As Kafka's coordinator loader, only records below the
        partition's high watermark (the first `committed`) give the committed states: the
        others a failover could still lose. The states returned are to `commit` once the
        high watermark passes them."""
        records = list(records)
        split = len(records) if committed is None else max(0, committed)
        _, states = fold(records)
        _, settled = fold(records[:split])
        _, later = fold(records[split:])
        loaded = 0
        pending: dict[StateKey, bytes | None] = {}
        for key, data in states.items():
            placed = self.partition_of(key) == partition
            value: bytes | None = None
            if data is None:
                if not placed:
                    continue
                self.entries.pop(key, None)
            else:
                if not placed and key in self.entries:
                    continue  # stored where an older kbroker placed states (by group id)
                value = _dumps(data)
                self.entries[key] = StoredState(
                    value, int(data.get("leader_epoch", -1)), int(data.get("state_epoch", 0))
                )
                loaded += 1
            before = settled.get(key)
            if before is None:
                self.committed.pop(key, None)
            else:
                self.committed[key] = (0, _dumps(before))
            if key in later:
                pending[key] = value
        return loaded, pending

    def with_dead_letters(self, partition: int) -> list[StateKey]:
        """The share-partitions stored in `partition` with dead letters still to write."""
        return [
            k
            for k, s in self.entries.items()
            if self.partition_of(k) == partition and json.loads(s.value).get("dlq")
        ]

    def unload(self, partition: int) -> None:
        for key in [k for k in self.entries if self.partition_of(k) == partition]:
            del self.entries[key]
        for key in [k for k in self.deleted if self.partition_of(k) == partition]:
            del self.deleted[key]
        for key in [k for k in self.committed if self.partition_of(k) == partition]:
            del self.committed[key]

    def stage(self) -> int:
        """The number of a write about to be appended: later appends get larger ones."""
        self.staged += 1
        return self.staged

    def commit(self, number: int, states: dict[StateKey, bytes | None]) -> None:
        """The write `number` (`stage`) is committed: its states are the committed ones,
        but where a later write committed first."""
        for key, value in states.items():
            if self.committed.get(key, (-1, None))[0] < number:
                self.committed[key] = (number, value)

    def summary(self, key: StateKey) -> tuple[bytes | None, int]:
        """The committed state (None: none) and its state epoch."""
        value = self.committed.get(key, (0, None))[1]
        return value, 0 if value is None else state_epoch_of(value)

    def read(self, key: StateKey, leader_epoch: int) -> tuple[bytes | None, int]:
        """The stored state (None: none) and its state epoch (the one to start a new state
        with, when none); a reader with a newer leader epoch fences older writers."""
        stored = self.entries.get(key)
        if stored is None:
            return None, self.deleted.get(key, -1) + 1
        stored.leader_epoch = max(stored.leader_epoch, leader_epoch)
        return stored.value, stored.state_epoch

    def raise_leader_epoch(self, key: StateKey, leader_epoch: int) -> bytes | None:
        """Fence writers older than a reader's leader epoch, as Kafka's share coordinator
        does on ReadShareGroupState (readStateAndMaybeUpdateLeaderEpoch): the record to
        store before answering the read, the state with the new leader epoch in it, or
        None when the epoch is not newer. Stored, the fence outlasts a failover of the
        share coordinator: a leader that lost its partition while its write was under
        way cannot store that write at the next coordinator, over what its successor
        read (and acknowledged records would be delivered again)."""
        stored = self.entries.get(key)
        if stored is None or leader_epoch <= stored.leader_epoch:
            return None
        value = _dumps({**json.loads(stored.value), "leader_epoch": leader_epoch})
        self.entries[key] = StoredState(value, leader_epoch, stored.state_epoch)
        return value

    def write(self, key: StateKey, value: bytes | None, leader_epoch: int) -> int:
        """Record a new state (None deletes it); refused for a stale leader or state epoch."""
        stored = self.entries.get(key)
        if stored is not None and leader_epoch < stored.leader_epoch:
            return FENCED_LEADER_EPOCH
        if value is None:
            self.delete(key)
            return NONE
        state_epoch = state_epoch_of(value)
        current = stored.state_epoch if stored is not None else self.deleted.get(key, -1)
        if state_epoch < current or (stored is None and state_epoch <= current):
            return FENCED_STATE_EPOCH
        self.entries[key] = StoredState(value, leader_epoch, state_epoch)
        return NONE

    def initialize(self, key: StateKey, topic: str, state_epoch: int, start: int) -> int:
        """Start the state again at `start` under a newer state epoch (Kafka's
        InitializeShareGroupState); whoever holds the old state is fenced."""
        stored = self.entries.get(key)
        current = stored.state_epoch if stored is not None else self.deleted.get(key, -1)
        if state_epoch <= current:
            return FENCED_STATE_EPOCH
        leader_epoch = stored.leader_epoch if stored is not None else -1
        value = from_state_batches(topic, start, [], leader_epoch, state_epoch)
        self.entries[key] = StoredState(value, leader_epoch, state_epoch)
        self.deleted.pop(key, None)
        return NONE

    def delete(self, key: StateKey) -> None:
        stored = self.entries.pop(key, None)
        if stored is not None:
            self.deleted[key] = stored.state_epoch

    def groups(self) -> set[str]:
        return {k[0] for k in self.entries}

    def of_group(self, group_id: str) -> dict[StateKey, dict[str, Any]]:
        return {k: json.loads(s.value) for k, s in self.entries.items() if k[0] == group_id}


# -- Kafka's wire form of a share-partition's state (Read/WriteShareGroupState) -----------

# A record archived with its dead-letter copy not yet acknowledged goes to the share
# coordinator as a one-offset state batch of its own, after the others, in a delivery
# state Kafka does not use (ARCHIVED's 4 is the highest): this flag with the reason's
# index. Only kbroker brokers exchange these requests; the pending copies thus stay in
# the stored state until written, and whichever broker leads the data partition next
# reads them back.
PENDING_DEAD_LETTER = 0x40
DEAD_LETTER_REASONS = (DELIVERY_LIMIT, REJECTED)


def to_state_batches(value: bytes) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(start offset, [(first, last, delivery state, delivery count)]) of a stored state,
    its pending dead letters last."""
    data = json.loads(value)
    batches = [(int(a), int(b), int(s), int(c)) for a, b, s, c in data["runs"]]
    for offset, count, reason in data.get("dlq", []):
        code = DEAD_LETTER_REASONS.index(reason) if reason in DEAD_LETTER_REASONS else 0
        batches.append((int(offset), int(offset), PENDING_DEAD_LETTER | code, int(count)))
    return int(data["start"]), batches


def state_batch_fields(batches: Iterable[tuple[int, int, int, int]]) -> list[dict[str, int]]:
    """The `state_batches` of Read/WriteShareGroupState from `to_state_batches`' tuples."""
    return [
        {"first_offset": a, "last_offset": b, "delivery_state": s, "delivery_count": c}
        for a, b, s, c in batches
    ]


def from_state_batches(
    topic: str,
    start: int,
    batches: Iterable[tuple[int, int, int, int]],
    leader_epoch: int,
    state_epoch: int = 0,
) -> bytes:
    """A stored state from the wire form: the in-flight window ends after its last batch."""
    runs: list[list[int]] = []
    dlq: list[list[int | str]] = []
    for a, b, s, c in batches:
        if s & PENDING_DEAD_LETTER:
            reason = DEAD_LETTER_REASONS[
                min(s & ~PENDING_DEAD_LETTER, len(DEAD_LETTER_REASONS) - 1)
            ]
            dlq.extend([o, c, reason] for o in range(a, b + 1))
        else:
            runs.append([a, b, s, c])
    runs.sort()
    end = max([start, *(b + 1 for _, b, _, _ in runs)])
    data = {
        "start": start,
        "end": end,
        "runs": runs,
        "dlq": dlq,
        "topic": topic,
        "leader_epoch": leader_epoch,
        "state_epoch": state_epoch,
    }
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
