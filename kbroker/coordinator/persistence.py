"""Groups to `__consumer_offsets` records and back, and which offsets have expired.

Pure functions: the coordinator decides when to write and what to load; this module
knows how a group looks as records, how a partition's records fold back into groups,
and Kafka's offset retention rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kbroker.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    GroupState,
    Member,
    OffsetAndMetadata,
)
from kbroker.coordinator.records import (
    GroupKey,
    OffsetKey,
    RecordFormatError,
    StoredGroup,
    StoredMember,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from kbroker.coordinator.store import KeyValue

TopicPartition = tuple[str, int]
GroupOffsets = dict[TopicPartition, OffsetAndMetadata]


def group_record(group: ClassicGroup, assignment: dict[str, bytes]) -> KeyValue:
    """The group's metadata record; members carry the metadata of the chosen protocol."""
    stored = StoredGroup(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        state_timestamp_ms=-1 if group.state_timestamp_ms is None else group.state_timestamp_ms,
        members=tuple(
            StoredMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata_for(group.protocol_name),
                assignment=assignment.get(m.member_id, b""),
            )
            for m in group.members.values()
        ),
    )
    return encode_group_key(group.group_id), encode_group_value(stored)


def offset_records(group_id: str, offsets: GroupOffsets) -> list[KeyValue]:
    return [
        (encode_offset_key(group_id, topic, partition), encode_offset_value(value))
        for (topic, partition), value in offsets.items()
    ]


def offset_tombstones(group_id: str, offsets: Iterable[TopicPartition]) -> list[KeyValue]:
    """The records that delete these committed offsets of a group."""
    return [(encode_offset_key(group_id, topic, partition), None) for topic, partition in offsets]


def tombstones(group: ClassicGroup) -> list[KeyValue]:
    """Records that delete the group: one per committed offset, then its metadata."""
    records = offset_tombstones(group.group_id, group.offsets)
    records.append((encode_group_key(group.group_id), None))
    return records


def replay(
    records: Iterable[KeyValue], skip: Callable[[RecordFormatError], None]
) -> tuple[dict[str, StoredGroup | None], dict[str, GroupOffsets]]:
    """Fold a partition's records, oldest first: the latest per key wins, a tombstone
    removes. Unreadable records go to `skip` and change nothing."""
    metadata: dict[str, StoredGroup | None] = {}
    offsets: dict[str, GroupOffsets] = {}
    for key_bytes, value in records:
        try:
            key = decode_key(key_bytes)
            if isinstance(key, OffsetKey):
                group_offsets = offsets.setdefault(key.group_id, {})
                tp = (key.topic, key.partition)
                if value is None:
                    group_offsets.pop(tp, None)
                else:
                    group_offsets[tp] = decode_offset_value(value)
            elif isinstance(key, GroupKey):
                metadata[key.group_id] = None if value is None else decode_group_value(value)
        except RecordFormatError as exc:
            skip(exc)
    return metadata, offsets


def group_from_record(group_id: str, stored: StoredGroup | None, now: int) -> ClassicGroup:
    """A loaded group: Stable with its stored members, or Empty (also when only
    offsets were stored: a simple group, as Kafka loads it)."""
    if stored is None:
        return ClassicGroup(group_id, state_timestamp_ms=now)
    group = ClassicGroup(
        group_id,
        state=GroupState.STABLE if stored.members else GroupState.EMPTY,
        state_timestamp_ms=stored.state_timestamp_ms if stored.state_timestamp_ms >= 0 else None,
        generation_id=stored.generation,
        protocol_type=stored.protocol_type or None,
        protocol_name=stored.protocol,
        leader_id=stored.leader if stored.members else None,
    )
    for m in stored.members:
        group.members[m.member_id] = Member(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            session_timeout_ms=m.session_timeout_ms,
            protocol_type=stored.protocol_type,
            protocols=[(stored.protocol or "", m.subscription)],
            assignment=m.assignment,
        )
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    if group.leader_id not in group.members:
        group.leader_id = next(iter(group.members), None)
    group.update_subscriptions()
    return group


def expired_offsets(group: ClassicGroup, now: int, retention_ms: int) -> list[TopicPartition]:
    """Offsets past retention, by Kafka's rules (KIP-211).

    An Empty group with a protocol type ages its offsets from when it became empty; a
    Stable consumer group loses only offsets of topics it no longer subscribes to,
    aged from their commit; a simple group (no protocol type) ages each offset from its
    commit. An offset committed with an explicit expiry (OffsetCommit v2-v4 retention
    time) expires at that time instead.
    """

    def older(since: int | None, keep: frozenset[str]) -> list[TopicPartition]:
        return [
            tp
            for tp, value in group.offsets.items()
            if tp[0] not in keep and value.expired(now, retention_ms, since)
        ]

    if not group.protocol_type:
        return older(None, frozenset())
    if group.is_in(GroupState.EMPTY):
        return older(group.state_timestamp_ms, frozenset())
    if (
        group.protocol_type == CONSUMER_PROTOCOL_TYPE
        and group.subscribed_topics is not None
        and group.is_in(GroupState.STABLE)
    ):
        return older(None, group.subscribed_topics)
    return []
