"""A streams group (KIP-1071): its topology, members, target and current task assignments,
and the records it is kept as in `__consumer_offsets`.

A task is a subtopology id and a partition; `Tasks` maps subtopology ids to partitions.
Every change to a group is one of six records, in Kafka 4.3's record types and layouts
(the int16 that starts the key is the record type):

    17  StreamsGroupMetadata                 group epoch, metadata hash
    19  StreamsGroupMemberMetadata           one member's process, endpoint, tags, ...
    20  StreamsGroupTargetAssignmentMetadata assignment epoch
    21  StreamsGroupTargetAssignmentMember   one member's target tasks
    22  StreamsGroupCurrentMemberAssignment  one member's epoch, state and tasks
    23  StreamsGroupTopology                 the topology the group runs

Keys are non-flexible (int16-length strings); values start with an int16 version (0)
and are flexibly encoded. A record whose value is None is a tombstone.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kbroker.coordinator.group import OffsetAndMetadata
from kbroker.coordinator.records import Reader, RecordFormatError, Writer
from kbroker.coordinator.store import KeyValue

TopicPartition = tuple[str, int]
Tasks = Mapping[str, frozenset[int]]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

GROUP_METADATA_KEY = 17
MEMBER_METADATA_KEY = 19
TARGET_EPOCH_KEY = 20
TARGET_MEMBER_KEY = 21
CURRENT_ASSIGNMENT_KEY = 22
TOPOLOGY_KEY = 23
STREAMS_KEY_VERSIONS = frozenset(
    (
        GROUP_METADATA_KEY,
        MEMBER_METADATA_KEY,
        TARGET_EPOCH_KEY,
        TARGET_MEMBER_KEY,
        CURRENT_ASSIGNMENT_KEY,
        TOPOLOGY_KEY,
    )
)
_MEMBER_KEYS = (MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY)
VALUE_VERSION = 0


def tasks_of(pairs: Iterable[tuple[str, Iterable[int]]]) -> dict[str, frozenset[int]]:
    """Tasks from (subtopology, partitions) pairs, empty subtopologies left out."""
    out: dict[str, set[int]] = {}
    for subtopology, partitions in pairs:
        out.setdefault(subtopology, set()).update(int(p) for p in partitions)
    return {s: frozenset(p) for s, p in sorted(out.items()) if p}


def minus(a: Tasks, b: Tasks) -> dict[str, frozenset[int]]:
    return tasks_of((s, p - b.get(s, frozenset())) for s, p in a.items())


def intersect(a: Tasks, b: Tasks) -> dict[str, frozenset[int]]:
    return tasks_of((s, p & b.get(s, frozenset())) for s, p in a.items())


def union(a: Tasks, b: Tasks) -> dict[str, frozenset[int]]:
    return tasks_of([*a.items(), *b.items()])


def task_set(tasks: Tasks) -> set[tuple[str, int]]:
    return {(s, p) for s, parts in tasks.items() for p in parts}


def count(tasks: Tasks) -> int:
    return sum(len(p) for p in tasks.values())


@dataclass(frozen=True, slots=True)
class TaskAssignment:
    """A member's active, standby and warm-up tasks."""

    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)


EMPTY_ASSIGNMENT = TaskAssignment()


# -- the topology --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]


# -- members -------------------------------------------------------------------------------


class MemberState(enum.IntEnum):
    """Kafka's streams MemberState, stored as its int8 value."""

    STABLE = 0
    UNREVOKED_TASKS = 1
    UNRELEASED_TASKS = 2
    UNKNOWN = 127

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


@dataclass(frozen=True, slots=True)
class StreamsMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    assigned: TaskAssignment = EMPTY_ASSIGNMENT
    pending_revocation: TaskAssignment = EMPTY_ASSIGNMENT

    def metadata(self) -> tuple[Any, ...]:
        """What the member metadata record holds (a change writes it again)."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.topology_epoch,
            self.process_id,
            self.user_endpoint,
            self.client_tags,
        )

    def current(self) -> tuple[Any, ...]:
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            self.assigned,
            self.pending_revocation,
        )


# -- records -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupEpochRecord:
    group_id: str
    epoch: int | None  # None: tombstone (the group is deleted)
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class TopologyRecord:
    group_id: str
    topology: Topology | None


@dataclass(frozen=True, slots=True)
class MemberMetadataRecord:
    group_id: str
    member_id: str
    member: StreamsMember | None


@dataclass(frozen=True, slots=True)
class TargetEpochRecord:
    group_id: str
    epoch: int | None


@dataclass(frozen=True, slots=True)
class TargetMemberRecord:
    group_id: str
    member_id: str
    assignment: TaskAssignment | None


@dataclass(frozen=True, slots=True)
class CurrentAssignmentRecord:
    group_id: str
    member_id: str
    member: StreamsMember | None


StreamsRecord = (
    GroupEpochRecord
    | TopologyRecord
    | MemberMetadataRecord
    | TargetEpochRecord
    | TargetMemberRecord
    | CurrentAssignmentRecord
)


class StreamsGroupState(enum.Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class StreamsGroup:
    """One streams group as its records leave it; timers and the configured topology
    (derived from the cluster metadata) ride along but are never stored."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.topology: Topology | None = None
        self.members: dict[str, StreamsMember] = {}
        self.target: dict[str, TaskAssignment] = {}
        self.assignment_epoch = 0
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        # Not stored: the topology is configured (all topics there) as of the last look.
        self.configured = False
        self.session_timers: dict[str, tuple[Any, int]] = {}
        self.session_deadlines: dict[str, int] = {}
        self.rebalance_timers: dict[str, Any] = {}
        self.shutdown_requested = False

    def copy(self) -> StreamsGroup:
        other = StreamsGroup(self.group_id)
        other.group_epoch = self.group_epoch
        other.metadata_hash = self.metadata_hash
        other.topology = self.topology
        other.members = dict(self.members)
        other.target = dict(self.target)
        other.assignment_epoch = self.assignment_epoch
        other.offsets = self.offsets
        other.configured = self.configured
        return other

    @property
    def state(self) -> StreamsGroupState:
        if not self.members:
            return StreamsGroupState.EMPTY
        if not self.configured:
            return StreamsGroupState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or member.state != MemberState.STABLE:
                return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def source_topics(self) -> set[str]:
        if self.topology is None:
            return set()
        return {t for s in self.topology.subtopologies for t in s.source_topics}

    def static_member(self, instance_id: str) -> StreamsMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def apply(
        self, record: StreamsRecord, on_conflict: Callable[[str], None] | None = None
    ) -> None:
        if isinstance(record, GroupEpochRecord):
            if record.epoch is not None:
                self.group_epoch = record.epoch
                self.metadata_hash = record.metadata_hash
        elif isinstance(record, TopologyRecord):
            self.topology = record.topology
        elif isinstance(record, MemberMetadataRecord):
            if record.member is None:
                self.members.pop(record.member_id, None)
            else:
                old = self.members.get(record.member_id)
                member = record.member
                if old is not None:
                    member = replace(
                        member,
                        member_epoch=old.member_epoch,
                        previous_member_epoch=old.previous_member_epoch,
                        state=old.state,
                        assigned=old.assigned,
                        pending_revocation=old.pending_revocation,
                    )
                self.members[record.member_id] = member
        elif isinstance(record, TargetEpochRecord):
            if record.epoch is not None:
                self.assignment_epoch = record.epoch
        elif isinstance(record, TargetMemberRecord):
            if record.assignment is None:
                self.target.pop(record.member_id, None)
            else:
                self.target[record.member_id] = record.assignment
        elif isinstance(record, CurrentAssignmentRecord):
            if record.member is None:
                old = self.members.get(record.member_id)
                if old is not None:
                    self.members[record.member_id] = replace(
                        old,
                        member_epoch=0,
                        previous_member_epoch=0,
                        state=MemberState.STABLE,
                        assigned=EMPTY_ASSIGNMENT,
                        pending_revocation=EMPTY_ASSIGNMENT,
                    )
                return
            old = self.members.get(record.member_id)
            m = record.member
            if old is None:
                # The current assignment may be replayed before the metadata record.
                self.members[record.member_id] = m
            else:
                self.members[record.member_id] = replace(
                    old,
                    member_epoch=m.member_epoch,
                    previous_member_epoch=m.previous_member_epoch,
                    state=m.state,
                    assigned=m.assigned,
                    pending_revocation=m.pending_revocation,
                )

    def tombstones(self) -> list[StreamsRecord]:
        """The records that delete the group (members' first, the epoch last)."""
        gid = self.group_id
        out: list[StreamsRecord] = []
        for member_id in sorted(set(self.members) | set(self.target)):
            out.append(CurrentAssignmentRecord(gid, member_id, None))
            out.append(TargetMemberRecord(gid, member_id, None))
            out.append(MemberMetadataRecord(gid, member_id, None))
        out.append(TargetEpochRecord(gid, None))
        out.append(TopologyRecord(gid, None))
        out.append(GroupEpochRecord(gid, None))
        return out


# -- encoding ------------------------------------------------------------------------------


def is_streams_record(key: bytes) -> bool:
    return len(key) >= 2 and struct.unpack_from(">h", key)[0] in STREAMS_KEY_VERSIONS


def _key(kind: int, group_id: str, member_id: str | None = None) -> bytes:
    out = Writer()
    out.int16(kind)
    out.string(group_id)
    if member_id is not None:
        out.string(member_id)
    return bytes(out.out)


def _value() -> Writer:
    out = Writer(flexible=True)
    out.int16(VALUE_VERSION)
    return out


def _write_tasks(out: Writer, tasks: Tasks) -> None:
    out.array_length(len(tasks))
    for subtopology in sorted(tasks):
        partitions = sorted(tasks[subtopology])
        out.string(subtopology)
        out.array_length(len(partitions))
        for p in partitions:
            out.int32(p)
        out.no_tags()


def _write_strings(out: Writer, values: Iterable[str]) -> None:
    items = list(values)
    out.array_length(len(items))
    for v in items:
        out.string(v)


def _write_topic_infos(out: Writer, infos: Iterable[TopicInfo]) -> None:
    items = list(infos)
    out.array_length(len(items))
    for info in items:
        out.string(info.name)
        out.int32(info.partitions)
        out.int16(info.replication_factor)
        out.array_length(len(info.configs))
        for k, v in info.configs:
            out.string(k)
            out.string(v)
            out.no_tags()
        out.no_tags()


def _write_int16s(out: Writer, values: Iterable[int]) -> None:
    items = list(values)
    out.array_length(len(items))
    for v in items:
        out.int16(v)


def encode_record(record: StreamsRecord) -> KeyValue:
    gid = record.group_id
    if isinstance(record, GroupEpochRecord):
        key = _key(GROUP_METADATA_KEY, gid)
        if record.epoch is None:
            return key, None
        out = _value()
        out.int32(record.epoch)
        out.int64(record.metadata_hash)
        out.no_tags()
        return key, bytes(out.out)
    if isinstance(record, TopologyRecord):
        key = _key(TOPOLOGY_KEY, gid)
        if record.topology is None:
            return key, None
        out = _value()
        out.int32(record.topology.epoch)
        out.array_length(len(record.topology.subtopologies))
        for s in record.topology.subtopologies:
            out.string(s.subtopology_id)
            _write_strings(out, s.source_topics)
            _write_strings(out, s.source_topic_regex)
            _write_topic_infos(out, s.state_changelog_topics)
            _write_strings(out, s.repartition_sink_topics)
            _write_topic_infos(out, s.repartition_source_topics)
            out.array_length(len(s.copartition_groups))
            for g in s.copartition_groups:
                _write_int16s(out, g.source_topics)
                _write_int16s(out, g.source_topic_regex)
                _write_int16s(out, g.repartition_source_topics)
                out.no_tags()
            out.no_tags()
        out.no_tags()
        return key, bytes(out.out)
    if isinstance(record, TargetEpochRecord):
        key = _key(TARGET_EPOCH_KEY, gid)
        if record.epoch is None:
            return key, None
        out = _value()
        out.int32(record.epoch)
        out.no_tags()
        return key, bytes(out.out)
    if isinstance(record, MemberMetadataRecord):
        key = _key(MEMBER_METADATA_KEY, gid, record.member_id)
        m = record.member
        if m is None:
            return key, None
        out = _value()
        out.string(m.instance_id)
        out.string(m.rack_id)
        out.string(m.client_id)
        out.string(m.client_host)
        out.int32(m.rebalance_timeout_ms)
        out.int32(m.topology_epoch)
        out.string(m.process_id)
        if m.user_endpoint is None:  # a nullable struct: a presence byte first
            out.int8(-1)
        else:
            out.int8(1)
            out.string(m.user_endpoint[0])
            out.out += struct.pack(">H", m.user_endpoint[1])
            out.no_tags()
        out.array_length(len(m.client_tags))
        for k, v in m.client_tags:
            out.string(k)
            out.string(v)
            out.no_tags()
        out.no_tags()
        return key, bytes(out.out)
    if isinstance(record, TargetMemberRecord):
        key = _key(TARGET_MEMBER_KEY, gid, record.member_id)
        a = record.assignment
        if a is None:
            return key, None
        out = _value()
        _write_tasks(out, a.active)
        _write_tasks(out, a.standby)
        _write_tasks(out, a.warmup)
        out.no_tags()
        return key, bytes(out.out)
    key = _key(CURRENT_ASSIGNMENT_KEY, gid, record.member_id)
    m = record.member
    if m is None:
        return key, None
    out = _value()
    out.int32(m.member_epoch)
    out.int32(m.previous_member_epoch)
    out.int8(int(m.state))
    _write_tasks(out, m.assigned.active)
    _write_tasks(out, m.assigned.standby)
    _write_tasks(out, m.assigned.warmup)
    _write_tasks(out, m.pending_revocation.active)
    _write_tasks(out, m.pending_revocation.standby)
    _write_tasks(out, m.pending_revocation.warmup)
    out.no_tags()
    return key, bytes(out.out)


def encode_records(records: Iterable[StreamsRecord]) -> list[KeyValue]:
    return [encode_record(r) for r in records]


def _read_tasks(r: Reader) -> dict[str, frozenset[int]]:
    pairs = []
    for _ in range(r.array_length()):
        subtopology = r.string() or ""
        partitions = [r.int32() for _ in range(r.array_length())]
        r.skip_tags()
        pairs.append((subtopology, partitions))
    return tasks_of(pairs)


def _read_strings(r: Reader) -> tuple[str, ...]:
    return tuple(r.string() or "" for _ in range(r.array_length()))


def _read_topic_infos(r: Reader) -> tuple[TopicInfo, ...]:
    infos = []
    for _ in range(r.array_length()):
        name = r.string() or ""
        partitions = r.int32()
        replication = r.int16()
        configs = []
        for _ in range(r.array_length()):
            k, v = r.string() or "", r.string() or ""
            r.skip_tags()
            configs.append((k, v))
        r.skip_tags()
        infos.append(TopicInfo(name, partitions, replication, tuple(configs)))
    return tuple(infos)


def _value_reader(value: bytes) -> Reader:
    r = Reader(value, flexible=True)
    version = r.int16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown streams group value version {version}")
    return r


def decode_record(key: bytes, value: bytes | None) -> StreamsRecord:
    r = Reader(key)
    kind = r.int16()
    gid = r.key_string()
    member_id = r.key_string() if kind in _MEMBER_KEYS else ""
    if kind == GROUP_METADATA_KEY:
        if value is None:
            return GroupEpochRecord(gid, None)
        v = _value_reader(value)
        epoch, metadata_hash = v.int32(), v.int64()
        return GroupEpochRecord(gid, epoch, metadata_hash)
    if kind == TOPOLOGY_KEY:
        if value is None:
            return TopologyRecord(gid, None)
        v = _value_reader(value)
        epoch = v.int32()
        subtopologies = []
        for _ in range(v.array_length()):
            sid = v.string() or ""
            sources = _read_strings(v)
            regexes = _read_strings(v)
            changelogs = _read_topic_infos(v)
            sinks = _read_strings(v)
            repartitions = _read_topic_infos(v)
            groups = []
            for _ in range(v.array_length()):
                a = tuple(v.int16() for _ in range(v.array_length()))
                b = tuple(v.int16() for _ in range(v.array_length()))
                c = tuple(v.int16() for _ in range(v.array_length()))
                v.skip_tags()
                groups.append(CopartitionGroup(a, b, c))
            v.skip_tags()
            subtopologies.append(
                Subtopology(sid, sources, regexes, changelogs, sinks, repartitions, tuple(groups))
            )
        return TopologyRecord(gid, Topology(epoch, tuple(subtopologies)))
    if kind == TARGET_EPOCH_KEY:
        if value is None:
            return TargetEpochRecord(gid, None)
        return TargetEpochRecord(gid, _value_reader(value).int32())
    if kind == MEMBER_METADATA_KEY:
        if value is None:
            return MemberMetadataRecord(gid, member_id, None)
        v = _value_reader(value)
        instance_id, rack_id = v.string(), v.string()
        client_id, client_host = v.string() or "", v.string() or ""
        rebalance_timeout, topology_epoch = v.int32(), v.int32()
        process_id = v.string() or ""
        endpoint = None
        if v.int8() >= 0:
            host = v.string() or ""
            (port,) = struct.unpack(">H", v.take(2))
            v.skip_tags()
            endpoint = (host, port)
        tags = []
        for _ in range(v.array_length()):
            k, val = v.string() or "", v.string() or ""
            v.skip_tags()
            tags.append((k, val))
        member = StreamsMember(
            member_id,
            instance_id=instance_id,
            rack_id=rack_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout,
            topology_epoch=topology_epoch,
            process_id=process_id,
            user_endpoint=endpoint,
            client_tags=tuple(tags),
        )
        return MemberMetadataRecord(gid, member_id, member)
    if kind == TARGET_MEMBER_KEY:
        if value is None:
            return TargetMemberRecord(gid, member_id, None)
        v = _value_reader(value)
        return TargetMemberRecord(
            gid, member_id, TaskAssignment(_read_tasks(v), _read_tasks(v), _read_tasks(v))
        )
    if kind == CURRENT_ASSIGNMENT_KEY:
        if value is None:
            return CurrentAssignmentRecord(gid, member_id, None)
        v = _value_reader(value)
        epoch, previous = v.int32(), v.int32()
        try:
            state = MemberState(v.int8())
        except ValueError:
            state = MemberState.UNKNOWN
        assigned = TaskAssignment(_read_tasks(v), _read_tasks(v), _read_tasks(v))
        pending = TaskAssignment(_read_tasks(v), _read_tasks(v), _read_tasks(v))
        member = StreamsMember(
            member_id,
            member_epoch=epoch,
            previous_member_epoch=previous,
            state=state,
            assigned=assigned,
            pending_revocation=pending,
        )
        return CurrentAssignmentRecord(gid, member_id, member)
    raise RecordFormatError(f"not a streams group record type: {kind}")
