"""Fetch response encoding with record sets left as file regions.

Every other response is encoded whole by kio. A Fetch response's records fields are
byte ranges of segment files, so this encoder writes the structure bytes itself and
leaves each records field as a region for the connection to sendfile. Versions 0-18
(v0-3 carry message format v0/v1 records, down-converted by the handler).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker.protocol.encoded import EncodedBody, FileRegion, RecordsField, records_length
from kbroker.protocol.varint import uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_OLD_PARTITION_HEAD = struct.Struct(">ihq")  # v0-3: partition, error, high watermark
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_LEADER = struct.Struct(">ii")
_DIVERGING = struct.Struct(">iq")

FIRST_THROTTLE = 1
FIRST_TRANSACTIONAL = 4  # last stable offset, aborted transactions, message format v2
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13
FIRST_NODE_ENDPOINTS = 16


@dataclass(slots=True)
class FetchedPartition:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: RecordsField = None
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch), v12+
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), v12+

    @property
    def records_size(self) -> int:
        return records_length(self.records)


@dataclass(slots=True)
class FetchedTopic:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[FetchedPartition] = field(default_factory=list)


@dataclass(slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class BodyWriter:
    """Accumulates structure bytes and interleaves file regions between them."""

    __slots__ = ("parts", "pending", "size")

    def __init__(self) -> None:
        self.parts: list[bytes | FileRegion] = []
        self.pending = bytearray()
        self.size = 0

    def write(self, data: bytes | bytearray) -> None:
        self.pending += data

    def region(self, region: FileRegion, length: int) -> None:
        if self.pending:
            self.parts.append(bytes(self.pending))
            self.size += len(self.pending)
            self.pending = bytearray()
        self.parts.append(region)
        self.size += length

    def finish(self) -> EncodedBody:
        if self.pending:
            self.parts.append(bytes(self.pending))
            self.size += len(self.pending)
        return EncodedBody(self.parts, self.size)


def _array_len(out: BodyWriter, n: int, flexible: bool) -> None:
    out.write(uvarint(n + 1) if flexible else _I32.pack(n))


def _string(value: str, flexible: bool) -> bytes:
    data = value.encode()
    return (uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _nullable_compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = value.encode()
    return uvarint(len(data) + 1) + data


def node_endpoints_field(nodes: list[NodeEndpoint]) -> bytes:
    """The NodeEndpoints tagged field's value (KIP-951), as Fetch v16+ and Produce v10+
    carry it: the brokers a response names as current leaders."""
    payload = bytearray(uvarint(len(nodes) + 1))
    for node in nodes:
        payload += _I32.pack(node.node_id) + _string(node.host, True)
        payload += _I32.pack(node.port) + _nullable_compact_string(node.rack) + b"\x00"
    return bytes(payload)


def leader_field(leader: tuple[int, int]) -> bytes:
    """A CurrentLeader tagged field's value: leader id, leader epoch, no tags."""
    return _LEADER.pack(*leader) + b"\x00"


def tagged_fields(fields: list[tuple[int, bytes]]) -> bytes:
    return _tagged(fields)


def _tagged(fields: list[tuple[int, bytes]]) -> bytes:
    if not fields:
        return b"\x00"
    out = bytearray(uvarint(len(fields)))
    for tag, payload in fields:
        out += uvarint(tag) + uvarint(len(payload)) + payload
    return bytes(out)


def _partition(out: BodyWriter, p: FetchedPartition, version: int, flexible: bool) -> None:
    if version < FIRST_TRANSACTIONAL:
        out.write(_OLD_PARTITION_HEAD.pack(p.partition, p.error_code, p.high_watermark))
        old = p.records
        size = p.records_size
        out.write(_I32.pack(size))
        if size:
            if isinstance(old, bytes | bytearray):
                out.write(old)
            elif old is not None:
                out.region(old, size)
        return
    out.write(
        _PARTITION_HEAD.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
    )
    if version >= 5:
        out.write(_I64.pack(p.log_start_offset))
    aborted = p.aborted_transactions
    if aborted is None:
        out.write(b"\x00" if flexible else _I32.pack(-1))
    else:
        _array_len(out, len(aborted), flexible)
        for producer_id, first_offset in aborted:
            out.write(_ABORTED.pack(producer_id, first_offset))
            if flexible:
                out.write(b"\x00")
    if version >= 11:
        out.write(_I32.pack(p.preferred_read_replica))
    records = p.records
    size = p.records_size
    out.write(uvarint(size + 1) if flexible else _I32.pack(size))
    if size:
        if isinstance(records, bytes | bytearray):
            out.write(records)
        elif records is not None:
            out.region(records, size)
    if flexible:
        tags: list[tuple[int, bytes]] = []
        if p.diverging_epoch is not None:
            tags.append((0, _DIVERGING.pack(*p.diverging_epoch) + b"\x00"))
        if p.current_leader is not None:
            tags.append((1, leader_field(p.current_leader)))
        out.write(_tagged(tags))


def encode_fetch_response(
    version: int,
    topics: list[FetchedTopic],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> EncodedBody:
    """A Fetch answer's body, `version` 0-18: its structure as bytes parts, each records
    field that is a file region a part of its own (sent by sendfile). Written in C where
    the extension is built (kbroker/protocol/_responsewrite.c), else by `encode_fetch_py`,
    the reference the tests hold the C to."""
    endpoints = (
        node_endpoints_field(node_endpoints)
        if node_endpoints and version >= FIRST_NODE_ENDPOINTS
        else None
    )
    return encode_fetch(version, topics, error_code, session_id, throttle_time_ms, endpoints)


def encode_fetch_py(
    version: int,
    topics: list[FetchedTopic],
    error_code: int,
    session_id: int,
    throttle_time_ms: int,
    endpoints: bytes | None,
) -> EncodedBody:
    """encode_fetch_response's body in Python, `endpoints` the NodeEndpoints tag's value
    (None: no tag): the C writer's arguments."""
    flexible = version >= FIRST_FLEXIBLE
    out = BodyWriter()
    if version >= FIRST_THROTTLE:
        out.write(_I32.pack(throttle_time_ms))
    if version >= 7:
        out.write(_I16.pack(error_code) + _I32.pack(session_id))
    _array_len(out, len(topics), flexible)
    for topic in topics:
        if version >= FIRST_TOPIC_ID:
            out.write((topic.topic_id or uuid.UUID(int=0)).bytes)
        else:
            out.write(_string(topic.name, flexible))
        _array_len(out, len(topic.partitions), flexible)
        for partition in topic.partitions:
            _partition(out, partition, version, flexible)
        if flexible:
            out.write(b"\x00")
    if flexible:
        out.write(_tagged([(0, endpoints)] if endpoints is not None else []))
    return out.finish()


_Encode = Callable[[int, list[FetchedTopic], int, int, int, "bytes | None"], EncodedBody]
encode_fetch: _Encode
try:
    from kbroker.protocol import _responsewrite
except ImportError:  # the extension is not built: the same bytes, in Python
    encode_fetch = encode_fetch_py
else:
    _responsewrite.bind_fetch_response(EncodedBody)
    encode_fetch = _responsewrite.encode_fetch
