"""The state of one classic consumer group: members, generation, protocol, offsets.

Pure data and the rules that only look at one group (which protocol to pick, whether a
join's protocols fit, who is leader). Time, timers, persistence and responses belong
to the coordinator; keeping them out of here makes the group easy to reason about.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from kio.schema.errors import ErrorCode

from kbroker.coordinator.clock import Timer
from kbroker.protocol import responses


class GroupState(Enum):
    """Kafka's classic group states; `value` is the name clients see (DescribeGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Which state may follow which: Kafka's table, checked so a bug shows up as an error
# at the faulty transition rather than as a group that misbehaves later.
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
}

NO_GENERATION = -1
NO_LEADER_EPOCH = -1
NO_OFFSET = -1
UNKNOWN_MEMBER_ID = ""
CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup call answers; `members` is filled for the leader only."""

    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    # A member that joined for the first time and has not had a join answer yet; such a
    # member is kept only for the new-member timeout (KIP-394), not indefinitely.
    is_new: bool = False
    # The session deadline moves on every heartbeat; the timer only moves when it would
    # fire late, so a heartbeat costs an assignment rather than a timer reschedule.
    heartbeat_deadline_ms: int = 0
    heartbeat_timer: Timer | None = None
    heartbeat_timer_due_ms: int = 0

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a rejoin carries exactly the protocols and metadata this member has."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = 0
    # Only written by old clients (OffsetCommit v1 / value schema v1); kept so a log
    # written by them replays with the same meaning.
    expire_timestamp_ms: int | None = None

    def expired(self, now: int, retention_ms: int, since_ms: int | None = None) -> bool:
        """Past retention at `now` (KIP-211): at its explicit expiry if it was committed
        with one, else `retention_ms` after `since_ms` (its commit time by default; an
        Empty classic group's offsets age from when it became empty)."""
        if self.expire_timestamp_ms is not None:
            return now >= self.expire_timestamp_ms
        since = self.commit_timestamp_ms if since_ms is None else since_ms
        return now - since >= retention_ms

    def stamped(
        self, commit_timestamp_ms: int, expire_timestamp_ms: int | None
    ) -> OffsetAndMetadata:
        """The commit as stored: with its commit time and explicit expiry, if any."""
        return OffsetAndMetadata(
            self.offset, self.leader_epoch, self.metadata, commit_timestamp_ms, expire_timestamp_ms
        )


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    # The state before the current one: a rebalance that started from Empty is the
    # initial one, which waits group.initial.rebalance.delay.ms instead of completing early.
    previous_state: GroupState | None = None
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # member ids handed out with MEMBER_ID_REQUIRED and not yet used to join
    pending_members: set[str] = field(default_factory=set)
    # members of the current generation that have not sent SyncGroup yet
    pending_sync_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # A member arrived during the initial rebalance delay: wait another delay.
    new_member_added: bool = False
    join_timer: Timer | None = None
    sync_timer: Timer | None = None
    pending_member_timers: dict[str, Timer] = field(default_factory=dict)
    subscribed_topics: frozenset[str] | None = None

    # -- state --------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(
                f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}"
            )
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
        )

    # -- members ------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.pending_sync_members.discard(member_id)
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give a static member's place to its new incarnation (KIP-345)."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """A request naming an instance id whose current member id is someone else."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.awaiting_join is not None for m in self.members.values()
        )

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ----------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names)
        for m in members[1:]:
            common &= set(m.protocol_names)
        return common

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(self.candidate_protocols() & set(names))

    def select_protocol(self) -> str:
        """The protocol with most first-choice votes among those all members support.

        Ties go to the protocol that came first in the leader's (then the earliest
        member's) list, so the choice is deterministic.
        """
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {name: i for i, name in enumerate(leader.protocol_names)}
        return max(votes, key=lambda name: (votes[name], -order.get(name, len(order))))

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        )

    def update_subscriptions(self) -> None:
        """Topics the members subscribe to, when the consumer protocol tells us.

        Used by OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC) and offset expiry; None means
        unknown (another protocol type, or metadata we cannot read).
        """
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            self.subscribed_topics = None
            return
        if not self.members:
            self.subscribed_topics = frozenset()
            return
        if self.protocol_name is None:
            self.subscribed_topics = None
            return
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata_for(self.protocol_name))
            if parsed is None:
                self.subscribed_topics = None
                return
            topics.update(parsed)
        self.subscribed_topics = frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        """Only a known subscription protects a topic's offsets (Kafka's rule)."""
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    def describe_state(self) -> str:
        return self.state.value


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version; none is flexible).

    Layout: version int16, topics [int32 count, each int16 length + utf-8], then
    version-dependent fields we do not need.
    """
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0:
            return []
        position = 6
        topics = []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.append(metadata[position : position + length].decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def describe_members(group: ClassicGroup) -> list[responses.DescribedGroupMember]:
    """DescribeGroups member entries: each member's last assignment, and its metadata
    only once Stable (Kafka's describe and describeNoMetadata)."""
    stable = group.is_in(GroupState.STABLE)
    return [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata_for(group.protocol_name) if stable else b"",
            "member_assignment": m.assignment,
        }
        for m in group.members.values()
    ]


def int_group_config(configs: Mapping[str, str], name: str, default: int) -> int:
    """A group's own integer config (IncrementalAlterConfigs on its GROUP resource) when
    it has one, else `default`, the broker's setting."""
    value = configs.get(name)
    try:
        return default if value is None else int(value)
    except ValueError:
        return default
