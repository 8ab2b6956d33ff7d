"""The share-partition leader: share sessions and the in-flight records of the share-partitions
whose data partitions this broker leads (Kafka's SharePartitionManager and SharePartition).

A ShareFetch names its share session (opened, continued or closed by its epoch), gives
the records the member acknowledges, and acquires available records for it under an
acquisition lock; each share-partition's per-record states are a `SharePartitionState`.
A member that leaves its group (`ShareGroupMembership`) gives back what it holds, a lock
that runs out gives its records back, and a session of no member is evicted once idle.

Persistence: each share-partition's whole state (`SharePartitionState.snapshot`) is a
record keyed by (group, topic id, partition) in `__share_group_state`, a compacted
topic, so the latest record is the state and loading is a fold. A change marks the
share-partition dirty; `take_dirty` hands the states to write to their share
coordinator, and a caller that must not answer before an acknowledgement is durable
waits for that write.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kbroker.protocol.encoded import FileRegion
from kbroker.share.group_configs import ShareConfig, ShareGroupConfigs, parse_duration_ms
from kbroker.share.partition_state import (
    AckBatch,
    AckError,
    AckType,
    Acquired,
    DeadLetter,
    SharePartitionState,
    split_at_batches,
)
from kbroker.share.records import (
    StateKey,
    fold,
    state_key,
    state_value,
)

KeyValue = tuple[bytes, bytes | None]

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
GROUP_ID_NOT_FOUND = 69
INVALID_REQUEST = 42
UNKNOWN_MEMBER_ID = 25
GROUP_MAX_SIZE_REACHED = 81
INCONSISTENT_GROUP_PROTOCOL = 23
NON_EMPTY_GROUP = 68
UNKNOWN_TOPIC_ID = 100
FENCED_MEMBER_EPOCH = 110
SHARE_SESSION_NOT_FOUND = 122
SHARE_SESSION_LIMIT_REACHED = 133
INVALID_SHARE_SESSION_EPOCH = 123
INVALID_CONFIG = 40

# Bytes read from one partition for one fetch: plenty for max_records of small records;
# the log returns at least one whole batch whatever its size.
READ_CHUNK = 1 << 20

LEAVE_EPOCH = -1
FINAL_SESSION_EPOCH = -1


class ShareLog(Protocol):
    """The data partitions as share-partitions read them (kbroker.share.coordinates)."""

    def bounds(self, topic: str, partition: int, committed: bool) -> tuple[int, int] | None:
        """(log start, readable end: high watermark or last stable offset), or None when
        this node does not lead the partition."""
        ...

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose record is stamped at or after `timestamp_ms`."""
        ...

    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        end: int,
        committed: bool,
        stop_offset: int,
    ) -> tuple[Records | None, list[tuple[int, int, int]]]:
        """Whole batches from `offset` below `end` and, per deliverable data batch, (first
        offset, last offset, position in the records); with `committed`, batches of
        aborted transactions are not deliverable. Reading may stop after the first batch
        at or past `stop_offset`."""
        ...


class RecordRegion(FileRegion, Protocol):
    """Batches in a file, sent from there (kbroker.storage.file_slice.FileSlice)."""

    def narrow(self, start: int, length: int) -> RecordRegion: ...


Records = bytes | RecordRegion


def _cut(records: Records, begin: int, end: int) -> Records:
    if isinstance(records, bytes):
        return records[begin:end]
    return records.narrow(begin, end - begin)


@dataclass(frozen=True, slots=True)
class TopicRef:
    name: str
    topic_id: uuid.UUID
    partitions: int


class Topics(Protocol):
    """What the coordinator needs of the cluster metadata."""

    def by_name(self, name: str) -> TopicRef | None: ...

    def by_id(self, topic_id: uuid.UUID) -> TopicRef | None: ...


@dataclass(slots=True)
class ShareSession:
    epoch: int
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    last_used_ms: int = 0


@dataclass(slots=True)
class PartitionAnswer:
    """One partition of a ShareFetch or ShareAcknowledge answer."""

    topic_id: uuid.UUID
    partition: int
    error: int = NONE
    ack_error: int = NONE
    ack_message: str | None = None
    records: Records = b""
    acquired: list[Acquired] = field(default_factory=list)


@dataclass(slots=True)
class FetchAnswer:
    error: int = NONE
    message: str | None = None
    partitions: dict[tuple[uuid.UUID, int], PartitionAnswer] = field(default_factory=dict)
    lock_ms: int = 0
    acknowledged: bool = False  # acknowledgements were applied: answer once they are stored

    def part(self, topic_id: uuid.UUID, partition: int) -> PartitionAnswer:
        key = (topic_id, partition)
        answer = self.partitions.get(key)
        if answer is None:
            answer = self.partitions[key] = PartitionAnswer(topic_id, partition)
        return answer

    @property
    def acquired_any(self) -> bool:
        return any(p.acquired for p in self.partitions.values())

    @property
    def failed_any(self) -> bool:
        """Whether a partition is answered with an error (nothing to wait for there)."""
        return any(p.error or p.ack_error for p in self.partitions.values())


PartitionAcks = list[tuple[uuid.UUID, int, list[AckBatch]]]


@dataclass(slots=True)
class HeldPartition:
    """A share-partition with the topic name it reads."""

    topic: str
    state: SharePartitionState
    leader_epoch: int = 0  # of the data partition when this node took it: fences writes
    state_epoch: int = 0  # of the stored state it started from: fences writes


class GroupsView(Protocol):
    """What the share-partition leader asks of share-group membership."""

    def has_member(self, group_id: str, member_id: str) -> bool: ...

    def note_group(self, group_id: str) -> bool: ...


class SharePartitionManager:
    def __init__(
        self,
        config: ShareConfig,
        log: ShareLog,
        topics: Topics,
        configs: ShareGroupConfigs,
        groups: GroupsView,
    ) -> None:
        self.config = config
        self.log = log
        self.topics = topics
        self.configs = configs
        self.groups = groups
        self.partitions: dict[StateKey, HeldPartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.dirty: set[StateKey] = set()
        # Dirty with acknowledgements a client waits on; those dropped before they were
        # taken to be stored (`lost_acknowledgements`).
        self._acknowledged: set[StateKey] = set()
        self._lost_acks: set[StateKey] = set()
        self.deleted: set[StateKey] = set()  # dirty, and to be removed from the store
        self._deleted_epochs: dict[StateKey, int] = {}
        self.on_available: list[Callable[[], None]] = []
        # Whether acquiring may start a share-partition not held here afresh (a broker
        # first asks its share coordinator for the stored state, see `hold`).
        self.may_initialize: Callable[[StateKey], bool] = lambda key: True
        # The leader epoch of a data partition led here (-1 when not led here).
        self.leader_epoch: Callable[[str, int], int] = lambda topic, partition: 0

    def apply_group_configs(self, group_id: str) -> None:
        """The group's configs changed: its share-partitions held here follow."""
        for key, held in self.partitions.items():
            if key[0] == group_id:
                held.state.delivery_limit = self.configs.delivery_limit(group_id)
                held.state.max_in_flight = self.configs.max_record_locks(group_id)
                held.state.dead_letters_enabled = (
                    self.configs.dead_letter_topic(group_id) is not None
                )

    # -- members gone, and time --------------------------------------------------------

    def member_gone(self, group_id: str, member_id: str, expired: bool) -> None:
        """A member left its group (`ShareGroupMembership`). An expired member's records
        go back to the group at once; a leaving member with a share session keeps them
        until it ends that session (see `ShareGroupMembership._remove_member`)."""
        key = (group_id, member_id)
        if expired:
            self._release_member(group_id, member_id, self.sessions.pop(key, None))
        elif key not in self.sessions:
            self._release_member(group_id, member_id, None)

    def _release_member(self, group_id: str, member_id: str, session: ShareSession | None) -> None:
        released = False
        for key, held in self.partitions.items():
            if key[0] != group_id:
                continue
            if held.state.holds(member_id):
                held.state.release_member(member_id)
                self.dirty.add(key)
                released = True
        if released:
            self._notify()

    def expire(self, now_ms: int) -> None:
        """Evict idle share sessions of no member, and expire acquisition locks that have
        run out."""
        for (group_id, member_id), session in list(self.sessions.items()):
            member_gone = not self.groups.has_member(group_id, member_id)
            timeout = self.configs.session_timeout_ms(group_id)
            if member_gone and now_ms - session.last_used_ms > timeout:
                self.close_session(group_id, member_id)  # idle, of no member: evicted
        released = False
        for key, held in self.partitions.items():
            deadline = held.state.next_deadline()
            if deadline is not None and deadline <= now_ms:
                held.state.expire_locks(now_ms)
                self.dirty.add(key)
                released = True
        if released:
            self._notify()

    def _notify(self) -> None:
        listeners, self.on_available = self.on_available, []
        for listener in listeners:
            listener()

    # -- share sessions, fetching and acknowledging ------------------------------------

    def open_session(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[tuple[uuid.UUID, int]],
        forgotten: Iterable[tuple[uuid.UUID, int]],
        has_acks: bool,
        answer: FetchAnswer,
        now_ms: int = 0,
    ) -> ShareSession | None:
        """The share session a ShareFetch names, opened, continued or closed (KIP-932's
        epochs: 0 opens, -1 closes, otherwise the next in sequence)."""
        if not group_id or not member_id:
            answer.error, answer.message = INVALID_REQUEST, "GroupId and MemberId must be set."
            return None
        key = (group_id, member_id)
        session = self.sessions.get(key)
        if epoch == 0:
            if has_acks:
                answer.error = INVALID_REQUEST
                answer.message = "Acknowledgements are not allowed when opening a share session."
                return None
            if session is not None:
                self._release_member(group_id, member_id, session)
            elif len(self.sessions) >= self.config.max_share_sessions:
                answer.error = SHARE_SESSION_LIMIT_REACHED
                answer.message = "The share session cache is full."
                return None
            session = self.sessions[key] = ShareSession(0)
        elif session is None:
            answer.error = SHARE_SESSION_NOT_FOUND
            answer.message = f"Share session for member {member_id} not found."
            return None
        elif epoch != FINAL_SESSION_EPOCH and epoch != session.epoch:
            answer.error = INVALID_SHARE_SESSION_EPOCH
            answer.message = f"Share session epoch {epoch} is not the expected {session.epoch}."
            return None
        session.partitions.update(added)
        session.partitions.difference_update(forgotten)
        session.last_used_ms = now_ms
        if epoch != FINAL_SESSION_EPOCH:
            session.epoch += 1
        return session

    def refresh_unshared(
        self, group_id: str, member_id: str, partitions: Iterable[tuple[uuid.UUID, int]]
    ) -> None:
        """A share session opens on partitions no other session of the group reads: the
        states held of those with nothing in flight, all stored, are forgotten, to be
        read again from their share coordinators, so that what the group's coordinator
        changed there meanwhile (AlterShareGroupOffsets, DeleteGroups) is seen."""
        for topic_id, partition in partitions:
            key = (group_id, topic_id, partition)
            held = self.partitions.get(key)
            if (
                held is None
                or key in self.dirty
                or held.state.in_flight()
                or held.state.pending_dead_letters
            ):
                continue
            if any(
                g == group_id and m != member_id and (topic_id, partition) in s.partitions
                for (g, m), s in self.sessions.items()
            ):
                continue
            del self.partitions[key]

    def close_session(self, group_id: str, member_id: str) -> None:
        """The final request of a session (epoch -1), its acknowledgements applied
        first: what its member still holds goes back to the group, as Kafka's
        SharePartitionManager.releaseSession does after the acknowledgements.

        A consumer closing in implicit mode does not accept the records of its last
        poll: on the wire, both librdkafka 2.16 (confluent-kafka's ShareConsumer) and
        kafka-clients 4.3 end with a ShareAcknowledge at epoch -1 carrying no
        acknowledgement for them (implicit acceptance happens at the next poll or
        commit, not at close), so they are released here and delivered again, as on
        Kafka. An application that wants them accepted commits before closing."""
        session = self.sessions.pop((group_id, member_id), None)
        self._release_member(group_id, member_id, session)

    def forget(
        self, group_id: str, member_id: str, partitions: Iterable[tuple[uuid.UUID, int]]
    ) -> None:
        for topic_id, partition in partitions:
            held = self.partitions.get((group_id, topic_id, partition))
            if held is not None and held.state.holds(member_id):
                held.state.release_member(member_id)
                self.dirty.add((group_id, topic_id, partition))
                self._notify()

    def acknowledge(
        self,
        group_id: str,
        member_id: str,
        acks: PartitionAcks,
        now_ms: int,
        answer: FetchAnswer,
    ) -> None:
        """Apply each partition's acknowledgements; a partition's error goes to its answer."""
        lock_ms = self.configs.lock_ms(group_id)
        renew_enabled = self.configs.renew_enabled(group_id)
        released = False
        for topic_id, partition, batches in acks:
            part = answer.part(topic_id, partition)
            if not batches:
                continue
            if not renew_enabled and any(AckType.RENEW in b.types for b in batches):
                # share.renew.acknowledge.enable=false (KIP-1240): as Kafka, the partition's
                # acknowledgements are refused with INVALID_RECORD_STATE
                part.ack_error = INVALID_RECORD_STATE_CODE
                part.ack_message = "Renew acknowledgements are disabled for this share group."
                continue
            held = self.partitions.get((group_id, topic_id, partition))
            if held is None:
                part.ack_error = INVALID_RECORD_STATE_CODE
                part.ack_message = "No records were acquired from this partition."
                continue
            try:
                held.state.acknowledge(member_id, batches, now_ms, lock_ms)
            except AckError as exc:
                part.ack_error, part.ack_message = exc.code, exc.message
                continue
            answer.acknowledged = True
            self.dirty.add((group_id, topic_id, partition))
            self._acknowledged.add((group_id, topic_id, partition))
            released = True
        if released:  # records came back, or the window moved on: parked fetches may acquire
            self._notify()

    def acquire(
        self,
        group_id: str,
        member_id: str,
        session: ShareSession,
        max_records: int,
        max_bytes: int,
        now_ms: int,
        answer: FetchAnswer,
        batch_aligned: bool = True,
        batch_size: int = 0,
    ) -> None:
        """Acquire available records of the session's partitions, in turn, within
        `max_records` and `max_bytes`; their batches and ranges go to the answer, the
        ranges listed by `batch_size` (ShareFetch's BatchSize) in batch-optimized mode."""
        lock_ms = answer.lock_ms = self.configs.lock_ms(group_id)
        committed = self.configs.get(group_id, "share.isolation.level") == "read_committed"
        budget_records, budget_bytes = max_records, max_bytes
        for topic_id, partition in sorted(session.partitions, key=lambda tp: (str(tp[0]), tp[1])):
            if budget_records <= 0 or budget_bytes <= 0:
                break
            ref = self.topics.by_id(topic_id)
            if ref is None:
                answer.part(topic_id, partition).error = UNKNOWN_TOPIC_ID
                continue
            if not 0 <= partition < ref.partitions:
                answer.part(topic_id, partition).error = UNKNOWN_TOPIC_OR_PARTITION
                continue
            bounds = self.log.bounds(ref.name, partition, committed)
            if bounds is None:
                answer.part(topic_id, partition).error = NOT_LEADER_OR_FOLLOWER
                continue
            key = (group_id, topic_id, partition)
            if key not in self.partitions and not self.may_initialize(key):
                continue  # its stored state is not known yet (the service said why)
            held = self._held(group_id, ref, partition, bounds, now_ms)
            state = held.state
            if state.start_offset < bounds[0]:
                state.move_start_to(bounds[0])
                self.dirty.add((group_id, topic_id, partition))
            offset = state.fetch_offset()
            if offset is None or offset >= bounds[1]:
                continue
            # No batch starting at or past this is acquired now: the window's end, or the
            # records wanted past the records in flight (the batch holding the last of
            # them is read whole, as it starts before).
            stop = max(
                state.end_offset,
                min(state.start_offset + state.max_in_flight, state.end_offset + budget_records),
            )
            records, batches = self.log.read(
                ref.name,
                partition,
                offset,
                min(budget_bytes, READ_CHUNK),
                bounds[1],
                committed,
                stop,
            )
            if records is None or not batches:
                continue
            acquired = state.acquire(
                member_id,
                [(f, last) for f, last, _ in batches],
                budget_records,
                now_ms,
                lock_ms,
                batch_aligned,
            )
            if not acquired:
                continue
            if batch_aligned and batch_size > 0:
                acquired = split_at_batches(acquired, [f for f, _, _ in batches], batch_size)
            self.dirty.add((group_id, topic_id, partition))
            first = acquired[0].first_offset
            last = acquired[-1].last_offset
            used = [(pos, f, lo) for f, lo, pos in batches if lo >= first and f <= last]
            begin = used[0][0]
            after = [pos for f, _, pos in batches if f > last]
            end = (
                after[0]
                if after
                else len(records)
                if isinstance(records, bytes)
                else records.length
            )
            part = answer.part(topic_id, partition)
            part.records = _cut(records, begin, end)
            part.acquired = acquired
            budget_records -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            budget_bytes -= end - begin

    def hold(
        self,
        group_id: str,
        ref: TopicRef,
        partition: int,
        bounds: tuple[int, int],
        now_ms: int,
        stored: bytes | None,
        state_epoch: int = 0,
    ) -> None:
        """Hold a share-partition whose data partition this node leads: from the state
        its share coordinator stored, or afresh (`share.auto.offset.reset`) if none."""
        key = (group_id, ref.topic_id, partition)
        if stored is None:
            self._held(group_id, ref, partition, bounds, now_ms).state_epoch = state_epoch
        else:
            self.load([(state_key(key), stored)], self.leader_epoch(ref.name, partition))
        self.dirty.add(key)  # stored (again) under this leader's epoch, fencing the last

    def _held(
        self,
        group_id: str,
        ref: TopicRef,
        partition: int,
        bounds: tuple[int, int],
        now_ms: int,
    ) -> HeldPartition:
        key = (group_id, ref.topic_id, partition)
        held = self.partitions.get(key)
        if held is None:
            reset = self.configs.get(group_id, "share.auto.offset.reset") or "latest"
            start = bounds[1]
            if reset == "earliest":
                start = bounds[0]
            elif reset.startswith("by_duration:"):
                since = now_ms - parse_duration_ms(reset.removeprefix("by_duration:"))
                found = self.log.offset_for_time(ref.name, partition, since)
                if found is not None:
                    start = min(max(found, bounds[0]), bounds[1])
            state = SharePartitionState(
                start,
                self.configs.delivery_limit(group_id),
                self.configs.max_record_locks(group_id),
            )
            state.dead_letters_enabled = self.configs.dead_letter_topic(group_id) is not None
            held = self.partitions[key] = HeldPartition(
                ref.name, state, self.leader_epoch(ref.name, partition)
            )
            self.groups.note_group(group_id)
            self.dirty.add(key)
        return held

    def in_flight(self) -> dict[tuple[str, str, int], int]:
        """Records acquired and not yet acknowledged, per (group, topic, partition)."""
        return {
            (k[0], held.topic, k[2]): held.state.in_flight() for k, held in self.partitions.items()
        }

    # -- leaving -----------------------------------------------------------------------

    def delete(self, key: StateKey, stored_leader_epoch: int) -> None:
        """Forget the share-partition and have its stored state removed, under the leader
        epoch it was held at (or the one stored, when not held here)."""
        held = self.partitions.pop(key, None)
        self.deleted.add(key)
        self.dirty.add(key)
        self._deleted_epochs[key] = held.leader_epoch if held is not None else stored_leader_epoch

    def drop(self, key: StateKey) -> None:
        """This node no longer leads the share-partition's data partition: forget it
        without writing (its new leader reads the stored state)."""
        self.partitions.pop(key, None)
        self.dirty.discard(key)
        if key in self._acknowledged:
            self._acknowledged.discard(key)
            self._lost_acks.add(key)

    def lost_acknowledgements(self) -> set[StateKey]:
        """The share-partitions dropped (`drop`) with acknowledgements not yet taken to be
        stored, since last asked: the requests that made them must not be answered as
        stored, for the next leader reads a state without them."""
        lost, self._lost_acks = self._lost_acks, set()
        return lost

    # -- persistence -------------------------------------------------------------------

    def take_dirty(self) -> dict[StateKey, tuple[bytes | None, int]]:
        """The state to store of every changed share-partition (None: delete it), with
        the leader epoch of the data partition it was changed under."""
        out: dict[StateKey, tuple[bytes | None, int]] = {}
        for key in sorted(self.dirty, key=lambda k: (k[0], str(k[1]), k[2])):
            held = self.partitions.get(key)
            if held is not None:
                snapshot = {
                    **held.state.snapshot(),
                    "leader_epoch": held.leader_epoch,
                    "state_epoch": held.state_epoch,
                }
                out[key] = (state_value(held.topic, snapshot), held.leader_epoch)
            elif key in self.deleted:
                out[key] = (None, self._deleted_epochs.pop(key, 0))
        self.dirty.clear()
        self._acknowledged.clear()
        self.deleted.clear()
        return out

    def load(self, records: Iterable[KeyValue], leader_epoch: int = 0) -> int:
        """Hold the share-partitions in `__share_group_state` records (oldest first), as
        the leader of their data partitions at `leader_epoch`."""
        _, states = fold(records)  # group configs are in the cluster metadata
        loaded = 0
        for key, data in states.items():
            if data is None:
                self.partitions.pop(key, None)
                continue
            group_id = key[0]
            state = SharePartitionState.from_snapshot(
                data, self.configs.delivery_limit(group_id), self.configs.max_record_locks(group_id)
            )
            state.dead_letters_enabled = self.configs.dead_letter_topic(group_id) is not None
            self.partitions[key] = HeldPartition(
                str(data["topic"]), state, leader_epoch, int(data.get("state_epoch", 0))
            )
            self.groups.note_group(group_id)
            loaded += 1
        return loaded

    def pending_dead_letters(self) -> list[tuple[StateKey, str, list[DeadLetter]]]:
        """(share-partition, its topic, records to dead-letter) where a group has a DLQ."""
        return [
            (key, held.topic, list(held.state.pending_dead_letters))
            for key, held in self.partitions.items()
            if held.state.pending_dead_letters
        ]

    def dead_letters_written(self, key: StateKey, offsets: set[int]) -> None:
        held = self.partitions.get(key)
        if held is None:
            return
        held.state.pending_dead_letters = [
            d for d in held.state.pending_dead_letters if d.offset not in offsets
        ]
        self.dirty.add(key)


INVALID_RECORD_STATE_CODE = 121
