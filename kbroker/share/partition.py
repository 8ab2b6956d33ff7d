"""The share-group coordinator: membership, share sessions, and share-partitions.

One object per broker plays the three parts KIP-932 gives a broker: group coordinator
for the share groups whose `__consumer_offsets` partition it leads (membership and
assignment: `groups`), share-partition leader for the data partitions it leads (share
sessions and the in-flight records: `partitions`), and share coordinator for the
`__share_group_state` partitions it leads (the persisted states: `store`). On one node
they are all here; in a cluster each is wherever its partition's leader is. It is
synchronous and does no I/O: the log is read through `ShareLog`, and time comes in as
arguments, so tests drive it with a manual clock. `kbroker.share.service` hosts it.

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

from kbroker.coordinator.records import partition_for
from kbroker.coordinator.share_group_records import (
    StoredShareGroup,
    StoredShareMember,
    changed_records,
    group_records,
    metadata_hash,
)
from kbroker.coordinator.share_membership import Assignment, ShareGroup, ShareMember, assign
from kbroker.protocol.encoded import FileRegion
from kbroker.share.group_configs import (
    ShareConfig,
    parse_duration_ms,
    validate_group_config,
)
from kbroker.share.partition_state import (
    AckBatch,
    AckError,
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
from kbroker.share.state_store import ShareStateStore

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
    """The data partitions as share-partitions read them (kbroker.share.service)."""

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


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


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


class ShareCoordinator:
    def __init__(self, config: ShareConfig, log: ShareLog, topics: Topics) -> None:
        self.config = config
        self.log = log
        self.topics = topics
        self.groups: dict[str, ShareGroup] = {}
        # Groups whose records (existence, epochs, members) are to be written.
        self.changed_groups: set[str] = set()
        self._written: dict[str, dict[bytes, bytes]] = {}  # group records last written
        self._writing: dict[str, dict[bytes, bytes]] = {}  # those before a pending write
        self.group_configs: dict[str, dict[str, str]] = {}
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
        self.is_other_group: Callable[[str], bool] = lambda group_id: False
        # Whether this node coordinates the group (leads its __consumer_offsets partition).
        self.owns_group: Callable[[str], bool] = lambda group_id: True
        # Whether acquiring may start a share-partition not held here afresh (a broker
        # first asks its share coordinator for the stored state, see `hold`).
        self.may_initialize: Callable[[StateKey], bool] = lambda key: True
        # The leader epoch of a data partition led here (-1 when not led here).
        self.leader_epoch: Callable[[str, int], int] = lambda topic, partition: 0
        self.owned: set[int] = set()  # partitions of __share_group_state loaded here
        self.loading: set[int] = set()
        self.store = ShareStateStore(lambda: self.config.num_partitions)

    # -- placement (what InternalTopicService asks of a hosted coordinator) --------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def unload_partition(self, partition: int) -> None:
        """This node no longer leads a `__share_group_state` partition: forget its states
        (share-partitions led here stay; their writes go to its new leader)."""
        self.owned.discard(partition)
        self.loading.discard(partition)
        self.store.unload(partition)

    def shutdown(self) -> None:
        self.on_available.clear()

    # -- group configs -----------------------------------------------------------------

    def group_config(self, group_id: str, name: str) -> str | None:
        return self.group_configs.get(group_id, {}).get(name)

    def lock_ms(self, group_id: str) -> int:
        value = self.group_config(group_id, "share.record.lock.duration.ms")
        return int(value) if value is not None else self.config.record_lock_ms

    def delivery_limit(self, group_id: str) -> int:
        value = self.group_config(group_id, "share.delivery.count.limit")
        return int(value) if value is not None else self.config.delivery_count_limit

    def dead_letter_topic(self, group_id: str) -> str | None:
        name = (self.group_config(group_id, "errors.deadletterqueue.topic.name") or "").strip()
        return name or None

    def dead_letters_copy_records(self, group_id: str) -> bool:
        """KIP-1191's `errors.deadletterqueue.copy.record.enable`: whether a dead-letter
        record carries the original key, value and headers (off: only where from, why)."""
        value = self.group_config(group_id, "errors.deadletterqueue.copy.record.enable")
        return value is not None and value.strip().lower() == "true"

    def validate_group_config(self, name: str, value: str | None) -> str | None:
        """Why a group config is refused, or None when it is fine."""
        return validate_group_config(self.config, name, value)

    def set_group_configs(self, group_id: str, changes: dict[str, str | None]) -> None:
        configs = self.group_configs.setdefault(group_id, {})
        for name, value in changes.items():
            if value is None:
                configs.pop(name, None)
            else:
                configs[name] = value
        for key, held in self.partitions.items():
            if key[0] == group_id:
                held.state.delivery_limit = self.delivery_limit(group_id)
                held.state.dead_letters_enabled = self.dead_letter_topic(group_id) is not None

    # -- membership (ShareGroupHeartbeat) ----------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed: tuple[str, ...] | None,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> HeartbeatResult:
        if not group_id:
            return HeartbeatResult(INVALID_REQUEST, "GroupId can't be empty.")
        if not member_id:
            return HeartbeatResult(INVALID_REQUEST, "MemberId can't be empty.")
        if self.is_other_group(group_id):
            return HeartbeatResult(
                INCONSISTENT_GROUP_PROTOCOL, f"Group {group_id} is not a share group."
            )
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is not None and member_id in group.members:
                self._remove_member(group, member_id)
            return HeartbeatResult(NONE, None, member_id, LEAVE_EPOCH, self._interval(group_id))
        if member_epoch == 0:
            if subscribed is None:
                return HeartbeatResult(INVALID_REQUEST, "SubscribedTopicNames must be set.")
            if group is None:
                if len(self.groups) >= self.config.max_groups:
                    return HeartbeatResult(GROUP_MAX_SIZE_REACHED, "Too many share groups.")
                group = self.groups[group_id] = ShareGroup(group_id)
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.config.max_size:
                    return HeartbeatResult(
                        GROUP_MAX_SIZE_REACHED,
                        f"The share group has reached its maximum capacity of "
                        f"{self.config.max_size} members.",
                    )
                member = group.members[member_id] = ShareMember(
                    member_id, 0, 0, client_id, client_host, rack_id, (), now_ms
                )
            member.subscribed = tuple(sorted(set(subscribed)))
            member.sent_assignment = None
            self._reassign(group)
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatResult(
                    UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
                )
            if member_epoch not in (member.member_epoch, member.previous_epoch):
                return HeartbeatResult(
                    FENCED_MEMBER_EPOCH,
                    f"The share group member has a stale member epoch {member_epoch}; "
                    f"current {member.member_epoch}.",
                )
            if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
                member.subscribed = tuple(sorted(set(subscribed)))
                self._reassign(group)
            elif self._assignment_stale(group):
                self._reassign(group)
        if member.member_epoch != group.assignment_epoch:
            # As on Kafka, a member's epoch moves to the assignment's when it heartbeats
            # (a share member takes its assignment at once: nothing to revoke).
            member.previous_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
            self.changed_groups.add(group_id)  # the member's record changes
        member.last_seen_ms = now_ms
        if (member.client_id, member.client_host) != (client_id, client_host):
            member.client_id = client_id
            member.client_host = client_host
            self.changed_groups.add(group_id)
        assignment = None
        if member.sent_assignment != member.assignment:
            assignment = member.assignment
            member.sent_assignment = dict(member.assignment)
        return HeartbeatResult(
            NONE,
            None,
            member_id,
            member.member_epoch,
            self._interval(group_id),
            assignment,
        )

    def _interval(self, group_id: str) -> int:
        value = self.group_config(group_id, "share.heartbeat.interval.ms")
        return int(value) if value is not None else self.config.heartbeat_interval_ms

    def _session_timeout(self, group_id: str) -> int:
        value = self.group_config(group_id, "share.session.timeout.ms")
        return int(value) if value is not None else self.config.session_timeout_ms

    def _topic_layout(self, group: ShareGroup) -> dict[str, tuple[uuid.UUID, int]]:
        layout = {}
        for name in group.subscribed_topics():
            ref = self.topics.by_name(name)
            if ref is not None:
                layout[name] = (ref.topic_id, ref.partitions)
        return layout

    def _assignment_stale(self, group: ShareGroup) -> bool:
        """Whether topics appeared, vanished or grew since the last assignment."""
        wanted = assign(
            {m.member_id: m.subscribed for m in group.members.values()}, self._topic_layout(group)
        )
        return any(wanted.get(m.member_id) != m.assignment for m in group.members.values())

    def _reassign(self, group: ShareGroup) -> None:
        """A new group epoch and target assignment. The other members' epochs stay: each
        takes the new one with its next heartbeat, so members joining together do not
        fence each other (a member's last answer would otherwise be stale before it
        could use it, and its rejoining would fence the others in turn)."""
        group.group_epoch += 1
        self.changed_groups.add(group.group_id)
        wanted = assign(
            {m.member_id: m.subscribed for m in group.members.values()}, self._topic_layout(group)
        )
        for member in group.members.values():
            member.assignment = wanted.get(member.member_id, {})
        group.assignment_epoch = group.group_epoch

    def _remove_member(self, group: ShareGroup, member_id: str, expired: bool = False) -> None:
        """A member leaves or expires. An expired member's records go back to the group
        at once. A leaving member with a share session keeps its records until it ends
        that session, as on Kafka, where leaving the group does not touch the share-
        partitions: a closing consumer sends its final acknowledgements (ShareAcknowledge
        at epoch -1) and its leave heartbeat together, on two connections, and whichever
        comes first, those acknowledgements apply before the rest is released. A session
        never ended is evicted once idle (`tick`), and locks time out meanwhile."""
        del group.members[member_id]
        key = (group.group_id, member_id)
        if expired:
            self._release_member(group.group_id, member_id, self.sessions.pop(key, None))
        elif key not in self.sessions:
            self._release_member(group.group_id, member_id, None)
        if group.members:
            self._reassign(group)
        else:
            group.group_epoch += 1
            self.changed_groups.add(group.group_id)

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

    # -- time --------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Expire silent members, idle share sessions of no member, and acquisition locks
        that have run out."""
        for group in list(self.groups.values()):
            timeout = self._session_timeout(group.group_id)
            for member in list(group.members.values()):
                if now_ms - member.last_seen_ms > timeout:
                    self._remove_member(group, member.member_id, expired=True)
        for (group_id, member_id), session in list(self.sessions.items()):
            holder = self.groups.get(group_id)
            member_gone = holder is None or member_id not in holder.members
            if member_gone and now_ms - session.last_used_ms > self._session_timeout(group_id):
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
        lock_ms = self.lock_ms(group_id)
        released = False
        for topic_id, partition, batches in acks:
            part = answer.part(topic_id, partition)
            if not batches:
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
        lock_ms = answer.lock_ms = self.lock_ms(group_id)
        committed = self.group_config(group_id, "share.isolation.level") == "read_committed"
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
            reset = self.group_config(group_id, "share.auto.offset.reset") or "latest"
            start = bounds[1]
            if reset == "earliest":
                start = bounds[0]
            elif reset.startswith("by_duration:"):
                since = now_ms - parse_duration_ms(reset.removeprefix("by_duration:"))
                found = self.log.offset_for_time(ref.name, partition, since)
                if found is not None:
                    start = min(max(found, bounds[0]), bounds[1])
            state = SharePartitionState(
                start, self.delivery_limit(group_id), self.config.max_record_locks
            )
            state.dead_letters_enabled = self.dead_letter_topic(group_id) is not None
            held = self.partitions[key] = HeldPartition(
                ref.name, state, self.leader_epoch(ref.name, partition)
            )
            self.groups.setdefault(group_id, ShareGroup(group_id))
            self.dirty.add(key)
        return held

    # -- group records (`__consumer_offsets`) ------------------------------------------

    def take_group_records(self) -> dict[str, list[KeyValue]]:
        """Group id -> the records to write of the groups changed since the last call that
        this node coordinates (Kafka's share group records, written to the group's
        offsets partition): what differs from the records last written, tombstones for
        members gone, and every record's tombstone for a deleted group. Until
        `group_records_stored` says how the write went, they count as written."""
        changed, self.changed_groups = self.changed_groups, set()
        out: dict[str, list[KeyValue]] = {}
        for group_id in changed:
            if not self.owns_group(group_id):
                continue
            group = self.groups.get(group_id)
            before = self._written.get(group_id, {})
            now = None if group is None else group_records(self._stored(group))
            records = changed_records(group_id, before, now)
            if not records:
                continue
            out[group_id] = records
            self._writing[group_id] = before
            if now is None:
                self._written.pop(group_id, None)
            else:
                self._written[group_id] = now
        return out

    def group_records_stored(self, group_ids: Iterable[str], stored: bool) -> None:
        """The outcome of writing the groups' records: if not stored, they are written
        again (from what was stored before) with the next round."""
        for group_id in group_ids:
            before = self._writing.pop(group_id, {})
            if not stored:
                self._written[group_id] = before
                self.changed_groups.add(group_id)

    def _stored(self, group: ShareGroup) -> StoredShareGroup:
        layout = self._topic_layout(group)
        return StoredShareGroup(
            group.group_id,
            group.group_epoch,
            metadata_hash((tid, name, count) for name, (tid, count) in layout.items()),
            group.assignment_epoch,
            {
                m.member_id: StoredShareMember(
                    m.member_id,
                    m.rack_id,
                    m.client_id,
                    m.client_host,
                    m.subscribed,
                    m.member_epoch,
                    m.previous_epoch,
                    m.assignment,
                    m.assignment,  # a share member's target is what it is given
                )
                for m in group.members.values()
            },
        )

    def load_groups(self, stored: dict[str, StoredShareGroup | None], now_ms: int) -> None:
        """Groups read from a newly led offsets partition replace what this node held of
        them (the log is newer than anything held from an earlier term): a stored group
        comes back with its epochs and its members, each with its member epoch and
        assignment, as Kafka's coordinator replays them. As on Kafka a loaded member's
        session starts now: one that heartbeats within the session timeout goes on at its
        epoch without joining again, one that stays silent expires (its records then get
        their tombstones and the group epoch moves on). A deleted group is gone."""
        for group_id, found in stored.items():
            if found is None:
                self.groups.pop(group_id, None)
                self._written.pop(group_id, None)
                continue
            members = {
                m.member_id: ShareMember(
                    m.member_id,
                    m.member_epoch,
                    m.previous_epoch,
                    m.client_id,
                    m.client_host,
                    m.rack_id,
                    m.subscribed,
                    now_ms,
                    dict(m.assignment),
                    dict(m.assignment),  # told already: the record follows the answer
                )
                for m in found.members.values()
            }
            self.groups[group_id] = ShareGroup(
                group_id, found.epoch, found.assignment_epoch, members
            )
            self._written[group_id] = dict(found.records)

    def unload_groups(self, in_partition: Callable[[str], bool]) -> None:
        """This node no longer coordinates the groups of an offsets partition: their
        membership is forgotten, as Kafka unloads a partition's groups (the next
        coordinator has it from their records). Their members do not expire here, so
        they release nothing: the share-partitions led here and their share sessions
        stay as they are."""
        for group_id in [g for g in self.groups if in_partition(g)]:
            del self.groups[group_id]
            self._written.pop(group_id, None)
            self.changed_groups.discard(group_id)

    # -- admin -------------------------------------------------------------------------

    def share_group_ids(self) -> set[str]:
        """The share groups this node coordinates: with members, or with stored state."""
        known = set(self.groups) | {k[0] for k in self.partitions} | self.store.groups()
        return {g for g in known if self.owns_group(g)}

    def lag(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """KIP-1226's lag of a share-partition: records up to the high watermark the
        group has not finished; -1 when unknown here."""
        key = (group_id, topic_id, partition)
        held = self.partitions.get(key)
        if held is not None:
            topic, state = held.topic, held.state
        else:
            data = self.store.of_group(group_id).get(key)
            if data is None:
                return -1
            topic = str(data["topic"])
            state = SharePartitionState.from_snapshot(
                data, self.delivery_limit(group_id), self.config.max_record_locks
            )
        bounds = self.log.bounds(topic, partition, False)
        return -1 if bounds is None else state.lag(bounds[1])

    def in_flight(self) -> dict[tuple[str, str, int], int]:
        """Records acquired and not yet acknowledged, per (group, topic, partition)."""
        return {
            (k[0], held.topic, k[2]): held.state.in_flight() for k, held in self.partitions.items()
        }

    def alter_start_offset(self, group_id: str, ref: TopicRef, partition: int, offset: int) -> int:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return NON_EMPTY_GROUP
        key = (group_id, ref.topic_id, partition)
        held = self.partitions.get(key)
        if held is None:
            state = SharePartitionState(
                offset, self.delivery_limit(group_id), self.config.max_record_locks
            )
            stored = self.store.entries.get(key)
            epoch = max(
                stored.leader_epoch if stored else 0, self.leader_epoch(ref.name, partition)
            )
            held = self.partitions[key] = HeldPartition(ref.name, state, epoch)
            if group_id not in self.groups:
                self.groups[group_id] = ShareGroup(group_id)
                self.changed_groups.add(group_id)
        else:
            held.state.reset(offset)
        self.dirty.add(key)
        return NONE

    def delete_topic_state(self, group_id: str, topic_id: uuid.UUID) -> int:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return NON_EMPTY_GROUP
        stored = [k for k in self.store.entries if k[0] == group_id and k[1] == topic_id]
        for key in [k for k in self.partitions if k[0] == group_id and k[1] == topic_id] + stored:
            self._delete(key)
        return NONE

    def forget_topic(self, topic_id: uuid.UUID) -> None:
        """A deleted topic's share-partitions go, with their stored state: a topic created
        again under the name has a new id and starts afresh."""
        for key in [k for k in self.partitions if k[1] == topic_id] + [
            k for k in self.store.entries if k[1] == topic_id
        ]:
            self._delete(key)
        for session in self.sessions.values():
            session.partitions = {tp for tp in session.partitions if tp[0] != topic_id}

    def delete_group(self, group_id: str) -> int:
        if group_id not in self.share_group_ids():
            return GROUP_ID_NOT_FOUND
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return NON_EMPTY_GROUP
        for key in [k for k in self.partitions if k[0] == group_id] + [
            k for k in self.store.entries if k[0] == group_id
        ]:
            self._delete(key)
        self.groups.pop(group_id, None)
        self.changed_groups.add(group_id)
        return NONE

    def _delete(self, key: StateKey) -> None:
        held = self.partitions.pop(key, None)
        stored = self.store.entries.get(key)
        epoch = held.leader_epoch if held is not None else stored.leader_epoch if stored else 0
        self.deleted.add(key)
        self.dirty.add(key)
        self._deleted_epochs[key] = epoch

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
                data, self.delivery_limit(group_id), self.config.max_record_locks
            )
            state.dead_letters_enabled = self.dead_letter_topic(group_id) is not None
            self.partitions[key] = HeldPartition(
                str(data["topic"]), state, leader_epoch, int(data.get("state_epoch", 0))
            )
            self.groups.setdefault(group_id, ShareGroup(group_id))
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
