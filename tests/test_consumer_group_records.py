"""Consumer-group records in `__consumer_offsets`: Kafka's layouts, round trips, replay."""

from __future__ import annotations

import struct
import uuid

import pytest

from kbroker.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberMetadataRecord,
    MemberState,
    SubscriptionMetadataRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    TopicMetadata,
)
from kbroker.coordinator.consumer_records import (
    decode_record,
    encode_record,
    is_consumer_record,
    record_group_id,
)
from kbroker.coordinator.records import RecordFormatError, encode_group_key, encode_offset_key

T = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
MEMBER = ConsumerMember(
    "m-1",
    instance_id="inst",
    rack_id=None,
    client_id="rdkafka",
    client_host="/10.0.0.1",
    subscribed_topic_names=frozenset({"a", "b"}),
    subscribed_topic_regex="^x.*",
    rebalance_timeout_ms=300_000,
    server_assignor="range",
    member_epoch=7,
    previous_member_epoch=6,
    state=MemberState.UNREVOKED_PARTITIONS,
    assigned={T: frozenset({0, 2})},
    pending_revocation={T: frozenset({1})},
)

RECORDS = [
    GroupEpochRecord("g", 7),
    SubscriptionMetadataRecord("g", (TopicMetadata(T, "a", 3),)),
    MemberMetadataRecord("g", "m-1", MEMBER),
    TargetEpochRecord("g", 7),
    TargetMemberRecord("g", "m-1", {T: frozenset({0, 2})}),
    CurrentAssignmentRecord("g", "m-1", MEMBER),
]


def test_group_epoch_record_has_kafkas_bytes():
    key, value = encode_record(GroupEpochRecord("grp", 5))
    assert key == b"\x00\x03\x00\x03grp"
    # value version 0, epoch, no tagged fields
    assert value == b"\x00\x00" + struct.pack(">i", 5) + b"\x00"


def test_member_keys_carry_group_and_member_id():
    key, _ = encode_record(TargetMemberRecord("grp", "mem", {}))
    assert key == b"\x00\x07\x00\x03grp\x00\x03mem"


def test_current_assignment_value_has_kafkas_layout():
    _, value = encode_record(CurrentAssignmentRecord("g", "m", MEMBER))
    expected = (
        b"\x00\x00"
        + struct.pack(">iib", 7, 6, 1)
        + b"\x02"
        + T.bytes
        + b"\x03"
        + struct.pack(">ii", 0, 2)
        + b"\x01\x00\x09\x03"  # assigned, then tag 0: each partition's assignment epoch
        + struct.pack(">ii", 7, 7)
        + b"\x02"
        + T.bytes
        + b"\x02"
        + struct.pack(">i", 1)
        + b"\x01\x00\x05\x02"  # revoking, and its assignment epoch
        + struct.pack(">i", 7)
        + b"\x00"
    )
    assert value == expected


def test_assignment_epochs_are_stored_byte_for_byte_as_kafka_stores_them():
    """The value Kafka 4.3.1's newConsumerGroupCurrentAssignmentRecord writes for a member
    at epoch 7 holding p0 (assigned at 7) and p2 (at 5), revoking p1 (assigned at 3)."""
    kafka = bytes.fromhex(
        "00000000000700000006010200000000000000000000000000000001030000000000000002010009"
        "03000000070000000502000000000000000000000000000000010200000001010005020000000300"
    )
    topic = uuid.UUID(int=1)
    member = ConsumerMember(
        "m",
        member_epoch=7,
        previous_member_epoch=6,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned={topic: frozenset({0, 2})},
        pending_revocation={topic: frozenset({1})},
        assignment_epochs={(topic, 2): 5, (topic, 1): 3},
    )
    key, value = encode_record(CurrentAssignmentRecord("g", "m", member))
    assert value == kafka
    decoded = decode_record(key, kafka)
    assert isinstance(decoded, CurrentAssignmentRecord) and decoded.member == member


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_records_round_trip(record):
    key, value = encode_record(record)
    decoded = decode_record(key, value)
    assert type(decoded) is type(record)
    assert encode_record(decoded) == (key, value)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_tombstones_round_trip(record):
    field = {
        GroupEpochRecord: "epoch",
        SubscriptionMetadataRecord: "topics",
        TargetEpochRecord: "epoch",
        TargetMemberRecord: "assignment",
    }.get(type(record), "member")
    tombstone = type(record)(**{**_fields(record), field: None})
    key, value = encode_record(tombstone)
    assert value is None
    assert decode_record(key, None) == tombstone


def _fields(record):
    return {name: getattr(record, name) for name in record.__slots__}


def test_unknown_tagged_fields_are_skipped():
    key, value = encode_record(GroupEpochRecord("g", 3))
    # replace the empty tag section with one tag (MetadataHash, tag 0) of 8 bytes
    tagged = value[:-1] + b"\x01\x00\x08" + bytes(8)
    assert decode_record(key, tagged) == GroupEpochRecord("g", 3)


def test_truncated_value_is_a_format_error():
    key, value = encode_record(CurrentAssignmentRecord("g", "m", MEMBER))
    with pytest.raises(RecordFormatError):
        decode_record(key, value[:10])


def test_consumer_keys_are_told_from_classic_ones():
    assert all(is_consumer_record(encode_record(r)[0]) for r in RECORDS)
    assert not is_consumer_record(encode_group_key("g"))
    assert not is_consumer_record(encode_offset_key("g", "t", 0))
    assert record_group_id(encode_record(RECORDS[2])[0]) == "g"


def test_replaying_records_rebuilds_the_group():
    group = ConsumerGroup("g")
    for record in RECORDS:
        group.apply(decode_record(*encode_record(record)))
    assert group.group_epoch == 7
    assert group.assignment_epoch == 7
    assert group.members["m-1"] == MEMBER
    assert group.static_members == {"inst": "m-1"}
    assert group.partition_epoch(T, 0) == 7
    assert group.partition_epoch(T, 1) == 7  # still revoking: still owned


def test_member_tombstones_release_partitions_and_the_instance_id():
    group = ConsumerGroup("g")
    for record in RECORDS:
        group.apply(record)
    group.apply(CurrentAssignmentRecord("g", "m-1", None))
    assert group.partition_epoch(T, 0) == -1
    group.apply(MemberMetadataRecord("g", "m-1", None))
    assert group.members == {}
    assert group.static_members == {}


def test_group_tombstones_are_in_kafkas_order():
    group = ConsumerGroup("g")
    for record in RECORDS:
        group.apply(record)
    kinds = [type(r).__name__ for r in group.tombstones()]
    assert kinds == [
        "CurrentAssignmentRecord",
        "TargetMemberRecord",
        "MemberMetadataRecord",
        "TargetEpochRecord",
        "SubscriptionMetadataRecord",
        "GroupEpochRecord",
    ]
