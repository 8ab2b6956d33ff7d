"""Consumer-protocol group records in `__consumer_offsets`, in Kafka's layouts.

Kafka's group coordinator (KIP-848) keeps a consumer group as six record kinds, told
apart by the int16 that starts the key (the "key version"):

    3  ConsumerGroupMetadata              group epoch
    4  ConsumerGroupPartitionMetadata     topics the group assigns from
    5  ConsumerGroupMemberMetadata        one member's subscription
    6  ConsumerGroupTargetAssignmentMetadata   assignment epoch
    7  ConsumerGroupTargetAssignmentMember     one member's target partitions
    8  ConsumerGroupCurrentMemberAssignment    one member's epoch, state and partitions

Keys are non-flexible (int16-length strings). Values start with an int16 version (0)
followed by the flexible encoding: compact strings and arrays, 16-byte uuids, and a
tagged-field section after every struct. Unknown tagged fields are skipped on read.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable

from kbroker.coordinator.consumer_group import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    GroupRecord,
    MemberMetadataRecord,
    MemberState,
    SubscriptionMetadataRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    TopicMetadata,
)
from kbroker.coordinator.records import Reader, RecordFormatError, Writer
from kbroker.coordinator.store import KeyValue

GROUP_EPOCH_KEY = 3
PARTITION_METADATA_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_EPOCH_KEY = 6
TARGET_MEMBER_KEY = 7
CURRENT_ASSIGNMENT_KEY = 8
CONSUMER_KEY_VERSIONS = frozenset(range(GROUP_EPOCH_KEY, CURRENT_ASSIGNMENT_KEY + 1))
VALUE_VERSION = 0
ASSIGNMENT_EPOCHS_TAG = 0  # in a current assignment's topic: each partition's assignment epoch
CLASSIC_MEMBER_METADATA_TAG = 0  # in the member metadata value: a classic member's JoinGroup
_MEMBER_KEYS = (MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY)


def is_consumer_record(key: bytes) -> bool:
    """Whether a `__consumer_offsets` key belongs to a consumer-protocol group."""
    return len(key) >= 2 and struct.unpack_from(">h", key)[0] in CONSUMER_KEY_VERSIONS


def record_group_id(key: bytes) -> str:
    """The group a consumer-protocol key belongs to (its first field)."""
    return Reader(key, 2).key_string()


# -- writing ------------------------------------------------------------------------------


def group_record_key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    """A group record's key in __consumer_offsets: its record type, the group and, for
    a member's records, the member (consumer and share groups alike)."""
    out = Writer()
    out.int16(version)
    out.string(group_id)
    if member_id is not None:
        out.string(member_id)
    return bytes(out.out)


def write_topic_partitions(
    out: Writer,
    assignment: Assignment,
    epochs: Callable[[uuid.UUID, int], int | None] | None = None,
) -> None:
    """The [TopicId, [Partition]] array the consumer and share groups' assignment records
    share, topics and partitions in order; with `epochs`, each topic's AssignmentEpochs
    (a current member assignment's tagged field 0, KIP-1251), one a partition."""
    out.array_length(len(assignment))
    for topic_id in sorted(assignment, key=str):
        partitions = sorted(assignment[topic_id])
        out.uuid(topic_id)
        out.array_length(len(partitions))
        for p in partitions:
            out.int32(p)
        if epochs is None or not partitions:
            out.no_tags()
            continue
        tag = Writer(flexible=True)
        tag.array_length(len(partitions))
        for p in partitions:
            epoch = epochs(topic_id, p)
            tag.int32(-1 if epoch is None else epoch)
        out.uvarint(1)
        out.uvarint(ASSIGNMENT_EPOCHS_TAG)
        out.uvarint(len(tag.out))
        out.out += tag.out


def _value() -> Writer:
    out = Writer(flexible=True)
    out.int16(VALUE_VERSION)
    return out


def encode_record(record: GroupRecord) -> KeyValue:
    """The (key, value) of a record; value None is a tombstone."""
    gid = record.group_id
    if isinstance(record, (GroupEpochRecord, TargetEpochRecord)):
        # The group's epoch and its target assignment's epoch are stored alike.
        kind = GROUP_EPOCH_KEY if isinstance(record, GroupEpochRecord) else TARGET_EPOCH_KEY
        key = group_record_key(kind, gid)
        if record.epoch is None:
            return key, None
        out = _value()
        out.int32(record.epoch)
        out.no_tags()
        return key, bytes(out.out)
    if isinstance(record, SubscriptionMetadataRecord):
        key = group_record_key(PARTITION_METADATA_KEY, gid)
        if record.topics is None:
            return key, None
        out = _value()
        out.array_length(len(record.topics))
        for topic in sorted(record.topics, key=lambda t: t.name):
            out.uuid(topic.topic_id)
            out.string(topic.name)
            out.int32(topic.num_partitions)
            out.array_length(0)  # partition racks: not tracked
            out.no_tags()
        out.no_tags()
        return key, bytes(out.out)
    if isinstance(record, MemberMetadataRecord):
        key = group_record_key(MEMBER_METADATA_KEY, gid, record.member_id)
        m = record.member
        if m is None:
            return key, None
        out = _value()
        out.string(m.instance_id)
        out.string(m.rack_id)
        out.string(m.client_id)
        out.string(m.client_host)
        names = sorted(m.subscribed_topic_names)
        out.array_length(len(names))
        for name in names:
            out.string(name)
        out.string(m.subscribed_topic_regex)
        out.int32(m.rebalance_timeout_ms)
        out.string(m.server_assignor)
        if m.classic is None:
            out.no_tags()
        else:
            classic = _classic_member_metadata(m.classic)
            out.uvarint(1)  # one tagged field: ClassicMemberMetadata, tag 0
            out.uvarint(CLASSIC_MEMBER_METADATA_TAG)
            out.uvarint(len(classic))
            out.out += classic
        return key, bytes(out.out)
    if isinstance(record, TargetMemberRecord):
        key = group_record_key(TARGET_MEMBER_KEY, gid, record.member_id)
        if record.assignment is None:
            return key, None
        out = _value()
        write_topic_partitions(out, record.assignment)
        out.no_tags()
        return key, bytes(out.out)
    if isinstance(record, CurrentAssignmentRecord):
        key = group_record_key(CURRENT_ASSIGNMENT_KEY, gid, record.member_id)
        m = record.member
        if m is None:
            return key, None
        out = _value()
        out.int32(m.member_epoch)
        out.int32(m.previous_member_epoch)
        out.int8(int(m.state))
        write_topic_partitions(out, m.assigned, m.assignment_epoch)
        write_topic_partitions(out, m.pending_revocation, m.assignment_epoch)
        out.no_tags()
        return key, bytes(out.out)
    raise TypeError(f"not a consumer group record: {record!r}")


def _classic_member_metadata(metadata: ClassicMemberMetadata) -> bytes:
    out = Writer(flexible=True)
    out.int8(1)  # a nullable struct: present
    out.int32(metadata.session_timeout_ms)
    out.array_length(len(metadata.protocols))
    for name, data in metadata.protocols:
        out.string(name)
        out.bytes_(data)
        out.no_tags()
    out.no_tags()
    return bytes(out.out)


def _read_classic_member_metadata(data: bytes) -> ClassicMemberMetadata | None:
    r = Reader(data, flexible=True)
    if r.int8() < 0:
        return None
    session_timeout = r.int32()
    protocols = []
    for _ in range(max(r.array_length(), 0)):
        name = r.string() or ""
        protocols.append((name, r.bytes_() or b""))
        r.skip_tags()
    r.skip_tags()
    return ClassicMemberMetadata(session_timeout, tuple(protocols))


def _read_member_tags(r: Reader) -> ClassicMemberMetadata | None:
    """The member metadata value's tagged fields: ClassicMemberMetadata (tag 0), the
    rest skipped."""
    classic = None
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        data = r.take(r.uvarint())
        if tag == CLASSIC_MEMBER_METADATA_TAG:
            classic = _read_classic_member_metadata(data)
    return classic


def encode_records(records: Iterable[GroupRecord]) -> list[KeyValue]:
    return [encode_record(r) for r in records]


# -- reading ------------------------------------------------------------------------------


def read_topic_partitions(
    r: Reader, epochs: dict[tuple[uuid.UUID, int], int] | None = None
) -> dict[uuid.UUID, frozenset[int]]:
    """What `write_topic_partitions` writes; topics without partitions are left out.
    Assignment epochs, where the record has them, go into `epochs`."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(max(r.array_length(), 0)):
        topic_id = r.uuid()
        listed = [r.int32() for _ in range(max(r.array_length(), 0))]
        for _ in range(r.uvarint() if r.flexible else 0):
            tag = r.uvarint()
            data = r.take(r.uvarint())
            if tag == ASSIGNMENT_EPOCHS_TAG and epochs is not None:
                t = Reader(data, flexible=True)
                values = [t.int32() for _ in range(max(t.array_length(), 0))]
                if len(values) == len(listed):
                    epochs.update(((topic_id, p), e) for p, e in zip(listed, values, strict=True))
        if listed:
            out[topic_id] = frozenset(listed)
    return out


def _value_reader(value: bytes) -> Reader:
    r = Reader(value, flexible=True)
    version = r.int16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown consumer group value version {version}")
    return r


def decode_record(key: bytes, value: bytes | None) -> GroupRecord:
    """The record a (key, value) pair holds; RecordFormatError if it cannot be read."""
    k = Reader(key)
    kind = k.int16()
    if kind not in CONSUMER_KEY_VERSIONS:
        raise RecordFormatError(f"key version {kind} is not a consumer group record")
    gid = k.key_string()
    member_id = k.key_string() if kind in _MEMBER_KEYS else None
    if kind in (GROUP_EPOCH_KEY, TARGET_EPOCH_KEY):
        epoch_record = GroupEpochRecord if kind == GROUP_EPOCH_KEY else TargetEpochRecord
        if value is None:
            return epoch_record(gid, None)
        r = _value_reader(value)
        epoch = r.int32()
        r.skip_tags()
        return epoch_record(gid, epoch)
    if kind == PARTITION_METADATA_KEY:
        if value is None:
            return SubscriptionMetadataRecord(gid, None)
        r = _value_reader(value)
        topics = []
        for _ in range(max(r.array_length(), 0)):
            topic_id = r.uuid()
            name = r.string() or ""
            num_partitions = r.int32()
            for _ in range(max(r.array_length(), 0)):
                r.int32()
                for _ in range(max(r.array_length(), 0)):
                    r.string()
                r.skip_tags()
            r.skip_tags()
            topics.append(TopicMetadata(topic_id, name, num_partitions))
        r.skip_tags()
        return SubscriptionMetadataRecord(gid, tuple(topics))
    assert member_id is not None
    if kind == MEMBER_METADATA_KEY:
        if value is None:
            return MemberMetadataRecord(gid, member_id, None)
        r = _value_reader(value)
        instance_id = r.string()
        rack_id = r.string()
        client_id = r.string() or ""
        client_host = r.string() or ""
        names = frozenset(r.string() or "" for _ in range(max(r.array_length(), 0)))
        regex = r.string()
        rebalance_timeout = r.int32()
        assignor = r.string()
        classic = _read_member_tags(r)
        member = ConsumerMember(
            member_id,
            instance_id=instance_id,
            rack_id=rack_id,
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=names,
            subscribed_topic_regex=regex or None,
            rebalance_timeout_ms=rebalance_timeout,
            server_assignor=assignor,
            classic=classic,
        )
        return MemberMetadataRecord(gid, member_id, member)
    if kind == TARGET_MEMBER_KEY:
        if value is None:
            return TargetMemberRecord(gid, member_id, None)
        r = _value_reader(value)
        assignment = read_topic_partitions(r)
        r.skip_tags()
        return TargetMemberRecord(gid, member_id, assignment)
    # CURRENT_ASSIGNMENT_KEY
    if value is None:
        return CurrentAssignmentRecord(gid, member_id, None)
    r = _value_reader(value)
    epoch = r.int32()
    previous = r.int32()
    state = MemberState.of(r.int8())
    epochs: dict[tuple[uuid.UUID, int], int] = {}
    assigned = read_topic_partitions(r, epochs)
    revoking = read_topic_partitions(r, epochs)
    r.skip_tags()
    member = ConsumerMember(
        member_id,
        member_epoch=epoch,
        previous_member_epoch=previous,
        state=state,
        assigned=assigned,
        pending_revocation=revoking,
        assignment_epochs={k: e for k, e in epochs.items() if e != epoch},
    )
    return CurrentAssignmentRecord(gid, member_id, member)
