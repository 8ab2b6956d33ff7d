"""Produce response encoding, by hand for every version 0-13.

Produce is the hottest request there is; encoding its small response directly costs a
fraction of the generic path, and it also covers v0-2, which kio has no schema for.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from kbroker.protocol.fetch_response import (
    NodeEndpoint,
    leader_field,
    node_endpoints_field,
    tagged_fields,
)
from kbroker.protocol.varint import uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihq")  # index, error code, base offset
_I64 = struct.Struct(">q")
# v8+: index, error code, base offset, log append time, log start offset.
_PARTITION_V8 = struct.Struct(">ihqqq")
_PARTITION_V2 = struct.Struct(">ihqq")  # v2-4: index, error code, base offset, append time
# v8+ after those, for a partition with no record errors, no message and (flexible) no
# current leader: an empty record_errors array, a null error_message, no tagged fields.
_NOTHING_MORE = {False: _I32.pack(0) + _I16.pack(-1), True: b"\x01\x00\x00"}

FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13
FIRST_CURRENT_LEADER = 10  # KIP-951


@dataclass(slots=True)
class ProducedPartition:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    # (index of the record within its batch, message): the records that failed the batch
    # A tuple: the usual answer (none) shares the empty one instead of making a list.
    record_errors: tuple[tuple[int, str | None], ...] = ()
    # (leader id, leader epoch) with NOT_LEADER_OR_FOLLOWER, v10+ (KIP-951)
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class ProducedTopic:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[ProducedPartition]


def _length(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else _I32.pack(n)


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else _I16.pack(-1)
    data = value.encode()
    return (uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


# (version, topic name or id) -> the answer's bytes before and after its one partition.
_skeletons: dict[tuple[int, object], tuple[bytes, bytes]] = {}
_MAX_SKELETONS = 4096


def encode_produce_response(
    version: int,
    topics: list[ProducedTopic],
    throttle_ms: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> bytes:
    """The Produce answer of `version`. The usual one (one topic, one partition, no
    error, no throttle) is the topic's cached bytes around the partition's fields; any
    other goes through `encode_produce_response_fields`, which gives the same bytes."""
    if len(topics) == 1 and not throttle_ms and not node_endpoints:
        topic = topics[0]
        if len(topic.partitions) == 1:
            p = topic.partitions[0]
            if (
                not p.error_code
                and not p.record_errors
                and p.error_message is None
                and p.current_leader is None
            ):
                key = (version, topic.topic_id if version >= FIRST_TOPIC_ID else topic.name)
                skeleton = _skeletons.get(key)
                if skeleton is None:
                    skeleton = _skeleton(version, topic)
                    if len(_skeletons) >= _MAX_SKELETONS:
                        _skeletons.clear()
                    _skeletons[key] = skeleton
                head, tail = skeleton
                if version >= 5:
                    middle = _PARTITION_V8.pack(
                        p.index, 0, p.base_offset, p.log_append_time_ms, p.log_start_offset
                    )
                elif version >= 2:
                    middle = _PARTITION_V2.pack(p.index, 0, p.base_offset, p.log_append_time_ms)
                else:
                    middle = _PARTITION.pack(p.index, 0, p.base_offset)
                return head + middle + tail
    return encode_produce_response_fields(version, topics, throttle_ms, node_endpoints)


def _skeleton(version: int, topic: ProducedTopic) -> tuple[bytes, bytes]:
    """The bytes of a one-partition answer for `topic` before and after the partition's
    index, error code, offsets and times (cut out of one the general encoder writes)."""
    probe = ProducedTopic(topic.name, topic.topic_id, [ProducedPartition(0)])
    whole = encode_produce_response_fields(version, [probe])
    fields = (_PARTITION_V8 if version >= 5 else _PARTITION_V2 if version >= 2 else _PARTITION).size
    flexible = version >= FIRST_FLEXIBLE
    after = (
        (len(_NOTHING_MORE[flexible]) if version >= 8 else 0)  # the partition's rest
        + flexible  # the topic's tagged fields
        + (4 if version >= 1 else 0)  # throttle time
        + flexible  # the response's tagged fields
    )
    start = len(whole) - after - fields
    return whole[:start], whole[start + fields :]


def encode_produce_response_fields(
    version: int,
    topics: list[ProducedTopic],
    throttle_ms: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> bytes:
    """The Produce answer of `version`, written field by field: any shape."""
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray(_length(len(topics), flexible))
    for topic in topics:
        if version >= FIRST_TOPIC_ID:
            out += (topic.topic_id or uuid.UUID(int=0)).bytes
        else:
            out += _nullable_string(topic.name or "", flexible)
        out += _length(len(topic.partitions), flexible)
        for p in topic.partitions:
            if (
                version >= 8
                and not p.record_errors
                and p.error_message is None
                and p.current_leader is None
            ):  # the usual partition, in one pack
                out += _PARTITION_V8.pack(
                    p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
                )
                out += _NOTHING_MORE[flexible]
                continue
            out += _PARTITION.pack(p.index, p.error_code, p.base_offset)
            if version >= 2:
                out += _I64.pack(p.log_append_time_ms)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            if version >= 8:
                out += _length(len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    out += _I32.pack(batch_index)
                    out += _nullable_string(message, flexible)
                    if flexible:
                        out += b"\x00"
                out += _nullable_string(p.error_message, flexible)
            if flexible:
                if p.current_leader is not None and version >= FIRST_CURRENT_LEADER:
                    out += tagged_fields([(0, leader_field(p.current_leader))])
                else:
                    out += b"\x00"
        if flexible:
            out += b"\x00"
    if version >= 1:
        out += _I32.pack(throttle_ms)
    if flexible:
        if node_endpoints and version >= FIRST_CURRENT_LEADER:
            out += tagged_fields([(0, node_endpoints_field(node_endpoints))])
        else:
            out += b"\x00"
    return bytes(out)
