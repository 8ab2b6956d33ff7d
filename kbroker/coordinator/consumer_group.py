"""The state of one consumer-protocol group (KIP-848): epochs, members, assignments.

A group changes only by applying records, the same records that go to
`__consumer_offsets`. The live coordinator applies what it wrote and the loader applies
what it reads, so a group rebuilt after a restart is the group that was running, and
persistence cannot drift from memory.

Assignments are keyed by topic id, as on the wire: `{topic_id: frozenset(partitions)}`.
Mappings held here are never mutated in place; every change builds a new one, so a
member value can be shared between a group and a working copy of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum

from kbroker.coordinator.clock import Timer
from kbroker.coordinator.group import OffsetAndMetadata

TopicPartition = tuple[str, int]
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
NO_OWNER = -1


class MemberState(IntEnum):
    """Where a member is on its way to the target assignment (Kafka's byte values)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


class ConsumerGroupState(Enum):
    """The states clients see (ListGroups, ConsumerGroupDescribe)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What the group last saw of a subscribed topic; a change means a new assignment."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member that speaks the classic protocol inside a consumer group joined with
    (KIP-848's migration): its session timeout and every (protocol name, metadata) of its
    JoinGroup, kept so that the group can turn classic again with its members intact."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def first_protocol(self) -> str:
        return self.protocols[0][0] if self.protocols else ""

    def metadata(self, name: str | None = None) -> bytes:
        """The metadata of protocol `name` (the first one by default)."""
        for protocol, metadata in self.protocols:
            if name is None or protocol == name:
                return metadata
        return b""


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """One member. The first fields are its subscription (the member metadata record),
    the rest its current assignment (the current member assignment record). `classic` is
    set for a member that joined with JoinGroup rather than ConsumerGroupHeartbeat."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: the member epoch at which each partition it holds was assigned to it; a
    # partition not listed was assigned at its current epoch. A commit at an epoch older
    # than the member's is accepted for the partitions it held since that epoch.
    assignment_epochs: Mapping[tuple[uuid.UUID, int], int] = field(default_factory=dict)

    def assignment_epoch(self, topic_id: uuid.UUID, partition: int) -> int | None:
        """The epoch at which the member got the partition, None if it does not hold it
        (assigned or pending revocation)."""
        if partition in self.assigned.get(topic_id, ()) or partition in (
            self.pending_revocation.get(topic_id, ())
        ):
            return self.assignment_epochs.get((topic_id, partition), self.member_epoch)
        return None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == epoch

    def subscription(self) -> tuple[object, ...]:
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        )

    def with_subscription_of(self, other: ConsumerMember) -> ConsumerMember:
        return replace(
            self,
            instance_id=other.instance_id,
            rack_id=other.rack_id,
            client_id=other.client_id,
            client_host=other.client_host,
            subscribed_topic_names=other.subscribed_topic_names,
            subscribed_topic_regex=other.subscribed_topic_regex,
            rebalance_timeout_ms=other.rebalance_timeout_ms,
            server_assignor=other.server_assignor,
            classic=other.classic,
        )

    def with_assignment_of(self, other: ConsumerMember) -> ConsumerMember:
        return replace(
            self,
            member_epoch=other.member_epoch,
            previous_member_epoch=other.previous_member_epoch,
            state=other.state,
            assigned=other.assigned,
            pending_revocation=other.pending_revocation,
            assignment_epochs=other.assignment_epochs,
        )

    def without_assignment(self) -> ConsumerMember:
        return replace(
            self,
            member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
            previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
            state=MemberState.STABLE,
            assigned={},
            pending_revocation={},
            assignment_epochs={},
        )


# -- records: the only way a group changes ------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupEpochRecord:
    group_id: str
    epoch: int | None  # None: the group is deleted


@dataclass(frozen=True, slots=True)
class SubscriptionMetadataRecord:
    group_id: str
    topics: tuple[TopicMetadata, ...] | None


@dataclass(frozen=True, slots=True)
class MemberMetadataRecord:
    group_id: str
    member_id: str
    member: ConsumerMember | None  # only the subscription fields are meant


@dataclass(frozen=True, slots=True)
class TargetEpochRecord:
    group_id: str
    epoch: int | None


@dataclass(frozen=True, slots=True)
class TargetMemberRecord:
    group_id: str
    member_id: str
    assignment: Assignment | None


@dataclass(frozen=True, slots=True)
class CurrentAssignmentRecord:
    group_id: str
    member_id: str
    member: ConsumerMember | None  # only the assignment fields are meant


GroupRecord = (
    GroupEpochRecord
    | SubscriptionMetadataRecord
    | MemberMetadataRecord
    | TargetEpochRecord
    | TargetMemberRecord
    | CurrentAssignmentRecord
)


def normalize(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment without empty topics, with frozen partition sets."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def assignment_size(assignment: Assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


# -- the group ----------------------------------------------------------------------------


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # topic name -> what the group assigned from; keys are the subscribed topics that exist
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    # (topic id, partition) -> epoch of the member that owns it (assigned or revoking)
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # Topics changed under the group (counted by the coordinator as they happen): the
    # next heartbeat recomputes what the group assigns from, and records how far it got.
    metadata_changes: int = 0
    metadata_seen: int = 0
    # Live-only state: deadlines and timers per member id.
    session_deadlines: dict[str, int] = field(default_factory=dict)
    session_timers: dict[str, tuple[Timer, int]] = field(default_factory=dict)
    rebalance_timers: dict[str, Timer] = field(default_factory=dict)
    # A classic member must send SyncGroup within its rebalance timeout of its JoinGroup.
    classic_sync_timers: dict[str, Timer] = field(default_factory=dict)

    # -- derived --------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def needs_metadata_refresh(self) -> bool:
        return self.metadata_changes != self.metadata_seen

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), NO_OWNER)

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set(self.subscription_metadata)
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
        return names

    def classic_members(self) -> int:
        return sum(1 for m in self.members.values() if m.classic is not None)

    def classic_protocols_fit(self, names: Iterable[str]) -> bool:
        """Whether a joining classic member's protocols fit the group: one of `names` is
        supported by every classic member already in it (Kafka's check, by counts)."""
        classic = [m.classic for m in self.members.values() if m.classic is not None]
        wanted = set(names)
        for metadata in classic:
            wanted &= {name for name, _ in metadata.protocols}
        return bool(wanted)

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether a live member reads the topic: its committed offsets are in use."""
        if not self.members:
            return False
        if topic in self.subscription_metadata:
            return True
        return any(topic in m.subscribed_topic_names for m in self.members.values())

    def copy(self) -> ConsumerGroup:
        """A working copy to compute the next state in; shares the immutable members."""
        return ConsumerGroup(
            group_id=self.group_id,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            members=dict(self.members),
            target=dict(self.target),
            subscription_metadata=dict(self.subscription_metadata),
            partition_epochs=dict(self.partition_epochs),
            static_members=dict(self.static_members),
        )

    # -- replay ---------------------------------------------------------------------------

    def apply(self, record: GroupRecord, on_conflict: Callable[[str], None] | None = None) -> None:
        """Fold one record into the group (tombstones of the group itself are the
        coordinator's business: it drops the group object)."""
        if isinstance(record, GroupEpochRecord):
            if record.epoch is not None:
                self.group_epoch = record.epoch
        elif isinstance(record, SubscriptionMetadataRecord):
            topics = record.topics or ()
            self.subscription_metadata = {t.name: t for t in topics}
        elif isinstance(record, TargetEpochRecord):
            if record.epoch is not None:
                self.assignment_epoch = record.epoch
        elif isinstance(record, TargetMemberRecord):
            if record.assignment is None:
                self.target.pop(record.member_id, None)
            else:
                self.target[record.member_id] = normalize(record.assignment)
        elif isinstance(record, MemberMetadataRecord):
            self._apply_member_metadata(record)
        elif isinstance(record, CurrentAssignmentRecord):
            self._apply_current_assignment(record, on_conflict)

    def _apply_member_metadata(self, record: MemberMetadataRecord) -> None:
        old = self.members.get(record.member_id)
        if record.member is None:
            if old is not None:
                self._release_partitions(old)
                del self.members[record.member_id]
                if old.instance_id is not None and (
                    self.static_members.get(old.instance_id) == record.member_id
                ):
                    del self.static_members[old.instance_id]
            return
        base = old if old is not None else ConsumerMember(record.member_id)
        new = base.with_subscription_of(record.member)
        self.members[record.member_id] = new
        stale_instance = old.instance_id if old is not None else None
        if (
            stale_instance is not None
            and stale_instance != new.instance_id
            and self.static_members.get(stale_instance) == record.member_id
        ):
            del self.static_members[stale_instance]
        if new.instance_id is not None:
            self.static_members[new.instance_id] = record.member_id

    def _apply_current_assignment(
        self, record: CurrentAssignmentRecord, on_conflict: Callable[[str], None] | None
    ) -> None:
        old = self.members.get(record.member_id)
        base = old if old is not None else ConsumerMember(record.member_id)
        if record.member is None:
            new = base.without_assignment()
        else:
            new = base.with_assignment_of(record.member)
        if old is not None:
            self._release_partitions(old)
        self.members[record.member_id] = new
        for owned in (new.assigned, new.pending_revocation):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    key = (topic_id, p)
                    current = self.partition_epochs.get(key)
                    if current is not None and on_conflict is not None:
                        on_conflict(
                            f"partition {topic_id}-{p} given to {record.member_id} at epoch "
                            f"{new.member_epoch} while still owned at epoch {current}"
                        )
                    self.partition_epochs[key] = new.member_epoch

    def _release_partitions(self, member: ConsumerMember) -> None:
        for owned in (member.assigned, member.pending_revocation):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    if self.partition_epochs.get((topic_id, p)) == member.member_epoch:
                        del self.partition_epochs[(topic_id, p)]

    # -- records that describe the whole group --------------------------------------------

    def tombstones(self) -> list[GroupRecord]:
        """Records deleting the group, in the order Kafka writes them."""
        gid = self.group_id
        records: list[GroupRecord] = []
        records.extend(CurrentAssignmentRecord(gid, m, None) for m in self.members)
        records.extend(TargetMemberRecord(gid, m, None) for m in self.members)
        records.extend(MemberMetadataRecord(gid, m, None) for m in self.members)
        records.append(TargetEpochRecord(gid, None))
        records.append(SubscriptionMetadataRecord(gid, None))
        records.append(GroupEpochRecord(gid, None))
        return records
