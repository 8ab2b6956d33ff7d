"""The usual answers of the consumer group's per-request APIs, encoded field by field
with struct, without building kio entities: ConsumerGroupHeartbeat (every version) and
OffsetCommit v8-v10 (the flexible versions clients send today). Every other shape goes
through kio (kbroker.protocol.messages.encode_response); tests/test_group_answers.py
holds both to the same bytes."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping

_HEAD = struct.Struct(">ih")  # throttle_time_ms, error_code
_EPOCH_INTERVAL = struct.Struct(">ii")
_PARTITION = struct.Struct(">ihB")  # partition_index, error_code, no tagged fields
_INT32 = struct.Struct(">i")
_NULL_STRING = b"\x00"
_NULL_ASSIGNMENT = b"\xff\x00"  # a null nullable struct (int8 -1), then no tagged fields

FIRST_FLEXIBLE_COMMIT = 8
FIRST_COMMIT_BY_ID = 10
LAST_DIRECT_COMMIT = 10


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return _NULL_STRING
    data = value.encode()
    return _uvarint(len(data) + 1) + data


def encode_heartbeat_answer(
    error: int,
    message: str | None,
    member_id: str | None,
    member_epoch: int,
    heartbeat_interval_ms: int,
    assignment: Mapping[uuid.UUID, Iterable[int]] | None,
    throttle_ms: int = 0,
) -> bytes:
    """A ConsumerGroupHeartbeat answer (v0 and v1 share it), the assignment's topics in
    the order of their ids' text and each topic's partitions in order."""
    parts = [
        _HEAD.pack(throttle_ms, error),
        _compact_string(message),
        _compact_string(member_id),
        _EPOCH_INTERVAL.pack(member_epoch, heartbeat_interval_ms),
    ]
    if assignment is None:
        parts.append(_NULL_ASSIGNMENT)
    else:
        parts.append(b"\x01" + _uvarint(len(assignment) + 1))
        for topic_id, partitions in sorted(assignment.items(), key=lambda kv: str(kv[0])):
            ordered = sorted(partitions)
            parts.append(topic_id.bytes + _uvarint(len(ordered) + 1))
            parts.append(b"".join(_INT32.pack(p) for p in ordered))
            parts.append(b"\x00")
        parts.append(b"\x00\x00")  # the assignment's tagged fields, then the answer's
    return b"".join(parts)


def encode_offset_commit_answer(
    version: int,
    topics: Iterable[tuple[str, uuid.UUID | None, Iterable[tuple[int, int]]]],
    throttle_ms: int = 0,
) -> bytes | None:
    """An OffsetCommit answer of v8-v10: per topic (name, id, [(partition, error code)]),
    named by name up to v9 and by id from v10 (a missing id as zeros). None for the
    versions kio encodes."""
    if not FIRST_FLEXIBLE_COMMIT <= version <= LAST_DIRECT_COMMIT:
        return None
    by_id = version >= FIRST_COMMIT_BY_ID
    listed = list(topics)
    parts = [_INT32.pack(throttle_ms), _uvarint(len(listed) + 1)]
    for name, topic_id, partitions in listed:
        if by_id:
            parts.append(topic_id.bytes if topic_id is not None else bytes(16))
        else:
            parts.append(_compact_string(name))
        entries = list(partitions)
        parts.append(_uvarint(len(entries) + 1))
        parts.extend(_PARTITION.pack(index, error, 0) for index, error in entries)
        parts.append(b"\x00")
    parts.append(b"\x00")
    return b"".join(parts)
