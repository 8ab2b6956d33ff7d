"""ShareFetch response encoding (versions 1-2) with record sets left as file regions.

Like Fetch (kbroker.protocol.fetch_response), a ShareFetch answer carries the batches
records were acquired from; they are sent straight from the segment file instead of
being read into Python and copied into a kio-encoded body. Versions 1 and 2 share one
layout, flexible throughout.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from kbroker.protocol.encoded import EncodedBody, RecordsField, records_length
from kbroker.protocol.fetch_response import (
    BodyWriter,
    NodeEndpoint,
    _nullable_compact_string,
    node_endpoints_field,
)
from kbroker.protocol.varint import uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ih")  # partition, error
_LEADER = struct.Struct(">ii")
_ACQUIRED = struct.Struct(">qqh")  # first offset, last offset, delivery count


@dataclass(slots=True)
class SharePartitionData:
    partition: int
    error_code: int = 0
    error_message: str | None = None
    acknowledge_error_code: int = 0
    acknowledge_error_message: str | None = None
    current_leader: tuple[int, int] = (-1, -1)  # (leader id, leader epoch)
    records: RecordsField = None
    acquired: list[tuple[int, int, int]] = field(default_factory=list)  # first, last, count


@dataclass(slots=True)
class ShareFetchedTopic:
    topic_id: uuid.UUID
    partitions: list[SharePartitionData] = field(default_factory=list)


def encode_share_fetch_response(
    topics: list[ShareFetchedTopic],
    *,
    acquisition_lock_timeout_ms: int,
    error_code: int = 0,
    error_message: str | None = None,
    throttle_time_ms: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> EncodedBody:
    out = BodyWriter()
    out.write(_I32.pack(throttle_time_ms) + _I16.pack(error_code))
    out.write(_nullable_compact_string(error_message))
    out.write(_I32.pack(acquisition_lock_timeout_ms))
    out.write(uvarint(len(topics) + 1))
    for topic in topics:
        out.write(topic.topic_id.bytes)
        out.write(uvarint(len(topic.partitions) + 1))
        for p in topic.partitions:
            out.write(_PARTITION_HEAD.pack(p.partition, p.error_code))
            out.write(_nullable_compact_string(p.error_message))
            out.write(_I16.pack(p.acknowledge_error_code))
            out.write(_nullable_compact_string(p.acknowledge_error_message))
            out.write(_LEADER.pack(*p.current_leader) + b"\x00")
            size = records_length(p.records)
            out.write(uvarint(size + 1))
            if size:
                if isinstance(p.records, bytes | bytearray):
                    out.write(p.records)
                elif p.records is not None:
                    out.region(p.records, size)
            out.write(uvarint(len(p.acquired) + 1))
            for acquired in p.acquired:
                out.write(_ACQUIRED.pack(*acquired) + b"\x00")
            out.write(b"\x00")
        out.write(b"\x00")
    # node_endpoints: a regular (untagged) field here, then the message's own tags.
    out.write(node_endpoints_field(node_endpoints or []))
    out.write(b"\x00")
    return out.finish()
