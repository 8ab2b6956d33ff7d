"""Share-group records in `__consumer_offsets`, in Kafka 4.2's layouts.

Kafka's group coordinator keeps a share group (KIP-932) in the offsets topic as it keeps
a KIP-848 consumer group, as record kinds told apart by the int16 that starts the key
(Kafka's coordinator record type):

    10  ShareGroupMemberMetadata            one member's rack, client and subscription
    11  ShareGroupMetadata                  group epoch and metadata hash
    12  ShareGroupTargetAssignmentMetadata  assignment epoch
    13  ShareGroupTargetAssignmentMember    one member's target partitions
    14  ShareGroupCurrentMemberAssignment   one member's epochs, state and partitions

Keys are non-flexible (int16-length strings: the group id, then the member id for the
member records); values start with an int16 version (0) and use the flexible encoding.
A tombstone removes what its key names; the group's tombstones remove it.

What Kafka 4.2 writes that is not here, and why:
- ShareGroupPartitionMetadata (type 9) is gone from Kafka since 4.1 (KIP-1101 replaced
  it with the metadata hash in ShareGroupMetadata); it is not written.
- ShareGroupStatePartitionMetadata (type 15) records which share-partitions Kafka's
  group coordinator has initialized at their share coordinators (and which it is
  deleting). kbroker's share-partitions are started by their data partition's leader
  when first fetched, and the group coordinator finds a group's share-partitions by
  asking the share coordinators, so there is no initialization of the coordinator's to
  record.
- The metadata hash is kbroker's own (a BLAKE2b digest of the subscribed topics' ids,
  names and partition counts), not Kafka's XXH3 one: only kbroker compares it, and it
  recomputes the assignment from the metadata at each heartbeat anyway.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kbroker.coordinator.consumer_group import MemberState
from kbroker.coordinator.consumer_records import (
    group_record_key,
    read_topic_partitions,
    write_topic_partitions,
)
from kbroker.coordinator.records import Reader, RecordFormatError, Writer
from kbroker.coordinator.store import KeyValue

Assignment = dict[uuid.UUID, frozenset[int]]

MEMBER_METADATA_KEY = 10
SHARE_GROUP_METADATA_KEY = 11
TARGET_EPOCH_KEY = 12
TARGET_MEMBER_KEY = 13
CURRENT_ASSIGNMENT_KEY = 14
SHARE_KEY_VERSIONS = frozenset(range(MEMBER_METADATA_KEY, CURRENT_ASSIGNMENT_KEY + 1))
_MEMBER_KEYS = (MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY)
VALUE_VERSION = 0


def is_share_group_record(key: bytes) -> bool:
    """Whether a `__consumer_offsets` key belongs to a share group."""
    return len(key) >= 2 and struct.unpack_from(">h", key)[0] in SHARE_KEY_VERSIONS


@dataclass(slots=True)
class StoredShareMember:
    """A member as its records hold it: who it is, what it subscribes to, its epochs and
    its current and target assignments."""

    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_epoch: int = 0
    assignment: Assignment = field(default_factory=dict)
    target: Assignment = field(default_factory=dict)


@dataclass(slots=True)
class StoredShareGroup:
    group_id: str
    epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, StoredShareMember] = field(default_factory=dict)
    # The latest record per key, as written: what the next write is compared with.
    records: dict[bytes, bytes] = field(default_factory=dict)


# -- writing ------------------------------------------------------------------------------


def _value() -> Writer:
    out = Writer(flexible=True)
    out.int16(VALUE_VERSION)
    return out


def group_metadata_key(group_id: str) -> bytes:
    return group_record_key(SHARE_GROUP_METADATA_KEY, group_id)


def metadata_hash(topics: Iterable[tuple[uuid.UUID, str, int]]) -> int:
    """A signed 64-bit digest of (topic id, name, partition count) of subscribed topics."""
    digest = hashlib.blake2b(digest_size=8)
    for topic_id, name, partitions in sorted(topics, key=lambda t: t[1]):
        digest.update(topic_id.bytes + struct.pack(">i", partitions) + name.encode() + b"\0")
    return int.from_bytes(digest.digest(), "big", signed=True)


def group_records(group: StoredShareGroup) -> dict[bytes, bytes]:
    """Every record that holds the group as it is now, key -> value."""
    gid = group.group_id
    out: dict[bytes, bytes] = {}
    value = _value()
    value.int32(group.epoch)
    value.int64(group.metadata_hash)
    value.no_tags()
    out[group_metadata_key(gid)] = bytes(value.out)
    value = _value()
    value.int32(group.assignment_epoch)
    value.no_tags()
    out[group_record_key(TARGET_EPOCH_KEY, gid)] = bytes(value.out)
    for member_id in sorted(group.members):
        m = group.members[member_id]
        value = _value()
        value.string(m.rack_id)
        value.string(m.client_id)
        value.string(m.client_host)
        value.array_length(len(m.subscribed))
        for name in m.subscribed:
            value.string(name)
        value.no_tags()
        out[group_record_key(MEMBER_METADATA_KEY, gid, member_id)] = bytes(value.out)
        value = _value()
        write_topic_partitions(value, m.target)
        value.no_tags()
        out[group_record_key(TARGET_MEMBER_KEY, gid, member_id)] = bytes(value.out)
        value = _value()
        value.int32(m.member_epoch)
        value.int32(m.previous_epoch)
        value.int8(int(MemberState.STABLE))  # a share member takes its assignment at once
        write_topic_partitions(value, m.assignment)
        value.no_tags()
        out[group_record_key(CURRENT_ASSIGNMENT_KEY, gid, member_id)] = bytes(value.out)
    return out


def changed_records(
    group_id: str, before: Mapping[bytes, bytes], now: Mapping[bytes, bytes] | None
) -> list[KeyValue]:
    """The records to write to go from `before` to `now` (None: the group is deleted,
    every record of it gets a tombstone, its metadata's last)."""
    if now is None:
        metadata = group_metadata_key(group_id)
        tombstones: list[KeyValue] = [(k, None) for k in before if k != metadata]
        return [*tombstones, (metadata, None)]
    out: list[KeyValue] = [(k, v) for k, v in now.items() if before.get(k) != v]
    return out + [(k, None) for k in before if k not in now]


# -- reading ------------------------------------------------------------------------------


def _value_reader(value: bytes) -> Reader:
    r = Reader(value, flexible=True)
    version = r.int16()
    if version < VALUE_VERSION:
        raise RecordFormatError(f"unknown share group value version {version}")
    return r  # a later version adds fields after these: they are left unread


def fold_share_groups(
    records: Iterable[KeyValue], skip: Callable[[RecordFormatError], None]
) -> dict[str, StoredShareGroup | None]:
    """Share groups (None: deleted) held by records read oldest first, the latest record
    per key winning as compaction keeps it; unreadable records go to `skip` and change
    nothing. Member records of a group without its metadata record are dropped."""
    latest: dict[bytes, bytes | None] = {}
    for key, value in records:
        latest[key] = value
    groups: dict[str, StoredShareGroup | None] = {}
    parts: list[tuple[int, str, str | None, bytes, bytes]] = []
    for key, value in latest.items():
        try:
            k = Reader(key)
            kind = k.int16()
            group_id = k.key_string()
            member_id = k.key_string() if kind in _MEMBER_KEYS else None
        except RecordFormatError as exc:
            skip(exc)
            continue
        if kind == SHARE_GROUP_METADATA_KEY and value is None:
            groups[group_id] = None
        elif value is not None:
            parts.append((kind, group_id, member_id, key, value))
    for kind, group_id, member_id, key, value in sorted(parts, key=lambda p: p[0] != 11):
        try:
            _replay(groups, kind, group_id, member_id, value)
        except RecordFormatError as exc:
            skip(exc)
            continue
        group = groups.get(group_id)
        if group is not None:
            group.records[key] = value
    return groups


def _replay(
    groups: dict[str, StoredShareGroup | None],
    kind: int,
    group_id: str,
    member_id: str | None,
    value: bytes,
) -> None:
    r = _value_reader(value)
    if kind == SHARE_GROUP_METADATA_KEY:
        epoch = r.int32()
        # Records kbroker wrote before it wrote Kafka's MetadataHash end after the epoch.
        hashed = r.int64() if len(value) - r.pos > 1 else 0
        groups[group_id] = StoredShareGroup(group_id, epoch, hashed)
        return
    group = groups.get(group_id)
    if group is None:
        return
    if kind == TARGET_EPOCH_KEY:
        group.assignment_epoch = r.int32()
        return
    assert member_id is not None
    member = group.members.get(member_id)
    if member is None:
        member = group.members[member_id] = StoredShareMember(member_id)
    if kind == MEMBER_METADATA_KEY:
        member.rack_id = r.string()
        member.client_id = r.string() or ""
        member.client_host = r.string() or ""
        member.subscribed = tuple(r.string() or "" for _ in range(max(r.array_length(), 0)))
    elif kind == TARGET_MEMBER_KEY:
        member.target = read_topic_partitions(r)
    else:  # CURRENT_ASSIGNMENT_KEY
        member.member_epoch = r.int32()
        member.previous_epoch = r.int32()
        r.int8()  # state: always STABLE for a share member
        member.assignment = read_topic_partitions(r)
