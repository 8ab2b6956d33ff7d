"""`__consumer_offsets` records, placement, and rebuilding groups from them."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode as E
from test_group_harness import NUM_PARTITIONS, Box, Harness

from kbroker.coordinator import GroupCoordinator, GroupState, OffsetAndMetadata
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
    java_string_hash,
    partition_for,
)

MEMBER = StoredMember("m-1", "inst", "client", "/10.0.0.1", 30_000, 10_000, b"sub", b"asg")


def test_offset_key_round_trips_in_kafkas_layout():
    data = encode_offset_key("grp", "topic", 7)
    assert data == b"\x00\x01\x00\x03grp\x00\x05topic\x00\x00\x00\x07"
    assert decode_key(data) == OffsetKey("grp", "topic", 7)


def test_group_key_round_trips_in_kafkas_layout():
    data = encode_group_key("grp")
    assert data == b"\x00\x02\x00\x03grp"
    assert decode_key(data) == GroupKey("grp")


def test_offset_value_v3_round_trips():
    value = OffsetAndMetadata(123, 5, "meta", 1_700_000_000_000)
    data = encode_offset_value(value)
    assert data[:2] == b"\x00\x03"
    assert decode_offset_value(data) == value


def test_offset_value_with_expiry_is_written_as_v1():
    value = OffsetAndMetadata(9, -1, "", 100, expire_timestamp_ms=200)
    data = encode_offset_value(value)
    assert data[:2] == b"\x00\x01"
    assert decode_offset_value(data) == value


def test_offset_value_v0_from_old_kafka_reads():
    data = struct.pack(">hq", 0, 55) + b"\x00\x02hi" + struct.pack(">q", 77)
    assert decode_offset_value(data) == OffsetAndMetadata(55, -1, "hi", 77)


def test_offset_value_v4_flexible_reads():
    # version 4, offset, leader epoch, compact string "ab", commit ts, empty tagged fields
    data = struct.pack(">hqi", 4, 10, 2) + b"\x03ab" + struct.pack(">q", 5) + b"\x00"
    assert decode_offset_value(data) == OffsetAndMetadata(10, 2, "ab", 5)


def test_group_value_round_trips():
    group = StoredGroup("consumer", 4, "range", "m-1", 1234, (MEMBER,))
    data = encode_group_value(group)
    assert data[:2] == b"\x00\x03"
    assert decode_group_value(data) == group


def test_group_value_with_no_protocol_round_trips():
    group = StoredGroup("consumer", 2, None, None, -1, ())
    assert decode_group_value(encode_group_value(group)) == group


def test_truncated_value_is_a_format_error():
    data = encode_group_value(StoredGroup("consumer", 4, "range", "m-1", 1234, (MEMBER,)))
    with pytest.raises(RecordFormatError):
        decode_group_value(data[:-3])


def test_unknown_key_version_is_a_format_error():
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x09\x00\x00")


def test_java_string_hash_matches_java():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # over UTF-16 units


def test_partition_uses_kafkas_abs_of_the_hash():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert java_string_hash("my-group") < 0
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50


# -- replay ----------------------------------------------------------------------------------


def restart(h: Harness, **config: int) -> Harness:
    """A second coordinator on a fresh clock (with `config`), loaded from everything the
    first wrote."""
    fresh = Harness(**config)
    fresh.clock.advance(h.clock.now_ms() - fresh.clock.now_ms())
    for p in range(NUM_PARTITIONS):
        fresh.c.unload_partition(p)
        fresh.c.begin_loading(p)
        fresh.c.load_partition(p, h.store.records(p))
    return fresh


def test_stable_group_and_offsets_survive_a_reload():
    h = Harness()
    a, b = h.stable_group(2)
    box = Box()
    h.c.commit_offsets("g", a.member_id, a.generation_id, {("t", 1): OffsetAndMetadata(8)}, box)
    assert box.value == {("t", 1): E.none}
    again = restart(h)
    group = again.c.groups["g"]
    assert group.state == GroupState.STABLE
    assert group.generation_id == a.generation_id
    assert group.leader_id == a.leader_id
    assert set(group.members) == {a.member_id, b.member_id}
    assert group.members[b.member_id].assignment == b.member_id.encode()
    assert group.offsets[("t", 1)].offset == 8
    assert again.c.classic.heartbeat("g", b.member_id, b.generation_id) == E.none


def test_reloaded_members_that_never_return_expire():
    h = Harness()
    h.stable_group(2, session_ms=1000)
    again = restart(h)
    again.clock.advance(1001)
    assert again.c.groups["g"].state == GroupState.EMPTY


def test_a_group_loaded_over_a_lowered_size_limit_rebalances_and_refuses_the_last_to_rejoin():
    """Kafka's onLoaded: group.max.size lowered across a coordinator move. The loaded
    group rebalances; the first members to rejoin stay, the last is refused and removed
    (GROUP_MAX_SIZE_REACHED), and the generation completes without it."""
    h = Harness()
    a, b, c = h.stable_group(3)
    again = restart(h, max_group_size=2)
    assert again.c.classic.heartbeat("g", a.member_id, a.generation_id) == E.rebalance_in_progress
    first, second = (again.join(member_id=m.member_id) for m in (a, b))
    refused = again.join(member_id=c.member_id).value
    assert (refused.error, refused.member_id) == (E.group_max_size_reached, "")
    assert first.value.error == second.value.error == E.none
    assert first.value.generation_id == a.generation_id + 1
    assert set(again.c.groups["g"].members) == {a.member_id, b.member_id}


def test_deleted_group_stays_deleted_after_a_reload():
    h = Harness()
    h.c.commit_offsets("g", "", -1, {("t", 0): OffsetAndMetadata(1)}, Box())
    h.c.delete_groups(["g"], Box())
    assert "g" not in restart(h).c.groups


def test_offsets_without_group_metadata_load_as_a_simple_group():
    h = Harness()
    h.c.commit_offsets("s", "", -1, {("t", 0): OffsetAndMetadata(4)}, Box())
    group = restart(h).c.groups["s"]
    assert group.state == GroupState.EMPTY
    assert group.protocol_type is None
    assert group.offsets[("t", 0)].offset == 4


def test_unreadable_records_are_skipped_on_load():
    h = Harness()
    c: GroupCoordinator = h.c
    c.unload_partition(0)
    loaded = c.load_partition(
        0, [(b"\x00\x09junk", b"x"), (encode_offset_key("s", "t", 0), b"\x00\x07")]
    )
    assert loaded == 0
    assert "s" not in c.groups
