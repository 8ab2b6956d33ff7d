"""Share-group membership and the assignment of partitions to members, on the group's
coordinator (Kafka's GroupCoordinator for share groups).

A share group has no rebalance protocol: the coordinator assigns and the member takes
what it is given at its next heartbeat, with no revocation step, because records are
handed out one by one and any number of members may read a partition at once. Members
are kept alive by heartbeats within the session timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kbroker.coordinator.share_group_records import (
    KeyValue,
    StoredShareGroup,
    StoredShareMember,
    changed_records,
    group_records,
    metadata_hash,
)
from kbroker.share.group_configs import ShareConfig, ShareGroupConfigs

if TYPE_CHECKING:
    from kbroker.share.partition import TopicRef

NONE = 0
INVALID_REQUEST = 42
UNKNOWN_MEMBER_ID = 25
GROUP_MAX_SIZE_REACHED = 81
INCONSISTENT_GROUP_PROTOCOL = 23
FENCED_MEMBER_EPOCH = 110
LEAVE_EPOCH = -1

TopicPartition = tuple[uuid.UUID, int]
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    previous_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    last_seen_ms: int
    assignment: Assignment = field(default_factory=dict)
    sent_assignment: Assignment | None = None  # what the member was last told


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's ShareGroup states as ListGroups and describe show them."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


def assign(
    members: Mapping[str, Iterable[str]], partitions: Mapping[str, tuple[uuid.UUID, int]]
) -> dict[str, Assignment]:
    """Spread each topic's partitions over the members subscribed to it.

    `members` maps member id to subscribed topic names; `partitions` maps topic name to
    (topic id, partition count). With at least as many partitions as members each
    partition goes to one member, round-robin; with fewer, each member gets one
    partition and a partition is shared by several members, as Kafka's share-group
    SimpleAssignor spreads them.
    """
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic, (topic_id, count) in sorted(partitions.items()):
        readers = sorted(m for m, topics in members.items() if topic in set(topics))
        if not readers or count <= 0:
            continue
        if count >= len(readers):
            for p in range(count):
                result[readers[p % len(readers)]].setdefault(topic_id, set()).add(p)
        else:
            for i, member in enumerate(readers):
                result[member].setdefault(topic_id, set()).add(i % count)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in result.items()}


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class TopicNames(Protocol):
    """The topics a group subscribes to, by name, with their ids and partition counts."""

    def by_name(self, name: str) -> TopicRef | None: ...


class ShareGroupMembership:
    """Share-group membership on the group's coordinator (the leader of its
    `__consumer_offsets` partition): ShareGroupHeartbeat, the assignment, members that
    expire, and the share group records that store them in `__consumer_offsets`.

    It does not touch the records members hold: a member that leaves or expires is
    handed to `member_gone` (the share-partition leader's `SharePartitionManager`
    releases its records), as Kafka's group coordinator and share-partition leaders are
    apart."""

    def __init__(self, config: ShareConfig, topics: TopicNames, configs: ShareGroupConfigs) -> None:
        self.config = config
        self.topics = topics
        self.configs = configs
        self.groups: dict[str, ShareGroup] = {}
        # Groups whose records (existence, epochs, members) are to be written.
        self.changed_groups: set[str] = set()
        self._written: dict[str, dict[bytes, bytes]] = {}  # group records last written
        self._writing: dict[str, dict[bytes, bytes]] = {}  # those before a pending write
        self.is_other_group: Callable[[str], bool] = lambda group_id: False
        # Whether this node coordinates the group (leads its __consumer_offsets partition).
        self.owns_group: Callable[[str], bool] = lambda group_id: True
        # A member left (expired: True when its session timed out).
        self.member_gone: Callable[[str, str, bool], None] = lambda g, m, expired: None

    def has_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def note_group(self, group_id: str) -> bool:
        """Know the group (a share-partition of it is held here); True if it was new."""
        if group_id in self.groups:
            return False
        self.groups[group_id] = ShareGroup(group_id)
        return True

    def remove_group(self, group_id: str) -> None:
        self.groups.pop(group_id, None)
        self.changed_groups.add(group_id)

    def is_empty(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is None or not group.members

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
            return HeartbeatResult(
                NONE, None, member_id, LEAVE_EPOCH, self.configs.heartbeat_interval_ms(group_id)
            )
        if member_epoch == 0:
            if subscribed is None:
                return HeartbeatResult(INVALID_REQUEST, "SubscribedTopicNames must be set.")
            if group is None:  # as many share groups as are made, as on Kafka 4.3
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
            self.configs.heartbeat_interval_ms(group_id),
            assignment,
        )

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
        never ended is evicted once idle (`SharePartitionManager.expire`), and locks time out
        meanwhile."""
        del group.members[member_id]
        self.member_gone(group.group_id, member_id, expired)
        if group.members:
            self._reassign(group)
        else:
            group.group_epoch += 1
            self.changed_groups.add(group.group_id)

    def expire(self, now_ms: int) -> None:
        """Members silent for longer than their group's session timeout leave."""
        for group in list(self.groups.values()):
            timeout = self.configs.session_timeout_ms(group.group_id)
            for member in list(group.members.values()):
                if now_ms - member.last_seen_ms > timeout:
                    self._remove_member(group, member.member_id, expired=True)

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
