"""Keys and values of the records in `__consumer_offsets`, in Kafka's own layouts.

Using Kafka's schemas (OffsetCommitKey/Value, GroupMetadataKey/Value) means Kafka's
tooling (the console consumer's offsets formatter, kcat with a decoder) can read our
log. Keys start with an int16 that says which record it is: 0 and 1 are offset
commits, 2 is group metadata. We write value version 3 of both, which every Kafka
reader understands, and read versions 0 through 4 (4 is the first flexible one).
`Writer` and `Reader` hold the schema encoding, classic and flexible, for these records
and the consumer-protocol ones (`consumer_records`).
"""

from __future__ import annotations

import functools
import struct
import uuid
from dataclasses import dataclass

from kbroker.coordinator.group import NO_LEADER_EPOCH, OffsetAndMetadata
from kbroker.protocol.errors import MalformedRequest
from kbroker.protocol.varint import read_uvarint, write_uvarint

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
MAX_STRING_BYTES = 0x7FFF  # Kafka's non-flexible strings carry an int16 length


class RecordFormatError(ValueError):
    """A key or value in the offsets log that this code cannot read."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: tuple[StoredMember, ...]


# -- writing ------------------------------------------------------------------------------


class Writer:
    """Kafka's schema encoding, classic (int16-length strings, int32 lengths) or flexible
    (compact lengths, a tagged-field section after each struct): the version that
    starts a value says which."""

    __slots__ = ("out", "flexible")

    def __init__(self, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def int8(self, v: int) -> None:
        self.out += struct.pack(">b", v)

    def int16(self, v: int) -> None:
        self.out += struct.pack(">h", v)

    def int32(self, v: int) -> None:
        self.out += struct.pack(">i", v)

    def int64(self, v: int) -> None:
        self.out += struct.pack(">q", v)

    def uvarint(self, v: int) -> None:
        write_uvarint(self.out, v)

    def string(self, v: str | None) -> None:
        if v is None:
            self._length(-1, wide=False)
            return
        data = v.encode()
        if len(data) > MAX_STRING_BYTES and not self.flexible:
            raise RecordFormatError(f"string of {len(data)} bytes does not fit an int16 length")
        self._length(len(data), wide=False)
        self.out += data

    def bytes_(self, v: bytes | None) -> None:
        if v is None:
            self._length(-1, wide=True)
            return
        self._length(len(v), wide=True)
        self.out += v

    def array_length(self, n: int) -> None:
        self._length(n, wide=True)

    def uuid(self, v: uuid.UUID) -> None:
        self.out += v.bytes

    def no_tags(self) -> None:
        if self.flexible:
            self.uvarint(0)

    def _length(self, n: int, wide: bool) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        elif wide:
            self.int32(n)
        else:
            self.int16(n)


def fits_in_key(group_id: str) -> bool:
    """Whether a group id can be stored at all (keys hold it as an int16-length string)."""
    return len(group_id.encode()) <= MAX_STRING_BYTES


def encode_offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return b"".join(
        (_OFFSET_KEY_PREFIX, _short_string(group_id), _short_string(topic), _INT32.pack(partition))
    )


def encode_group_key(group_id: str) -> bytes:
    w = Writer()
    w.int16(GROUP_KEY_VERSION)
    w.string(group_id)
    return bytes(w.out)


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    """The value of one commit, packed directly (the same bytes as `Writer` writes): the
    first record of every OffsetCommit."""
    metadata = _short_string(value.metadata)
    if value.expire_timestamp_ms is not None:
        # Only version 1 can carry an explicit expiry; keep it rather than lose it.
        return b"".join(
            (
                _VALUE_V1_HEAD.pack(1, value.offset),
                metadata,
                _VALUE_V1_TAIL.pack(value.commit_timestamp_ms, value.expire_timestamp_ms),
            )
        )
    return b"".join(
        (
            _VALUE_HEAD.pack(OFFSET_VALUE_VERSION, value.offset, value.leader_epoch),
            metadata,
            _INT64.pack(value.commit_timestamp_ms),
        )
    )


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_OFFSET_KEY_PREFIX = _INT16.pack(OFFSET_KEY_VERSION)
_VALUE_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch
_VALUE_V1_HEAD = struct.Struct(">hq")  # version, offset
_VALUE_V1_TAIL = struct.Struct(">qq")  # commit time, expiry
_NULL_STRING = _INT16.pack(-1)


def _short_string(v: str | None) -> bytes:
    """A classic string (int16 length), as `Writer.string` writes it."""
    if v is None:
        return _NULL_STRING
    data = v.encode()
    if len(data) > MAX_STRING_BYTES:
        raise RecordFormatError(f"string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


def encode_group_value(group: StoredGroup) -> bytes:
    w = Writer()
    w.int16(GROUP_VALUE_VERSION)
    w.string(group.protocol_type)
    w.int32(group.generation)
    w.string(group.protocol)
    w.string(group.leader)
    w.int64(group.state_timestamp_ms)
    w.int32(len(group.members))
    for m in group.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return bytes(w.out)


# -- reading ------------------------------------------------------------------------------


class Reader:
    """Reads what `Writer` writes; every malformed input raises RecordFormatError."""

    __slots__ = ("data", "pos", "flexible")

    def __init__(self, data: bytes, pos: int = 0, flexible: bool = False) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("record ends early")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.data, self.pos)
        except MalformedRequest as exc:
            raise RecordFormatError(str(exc)) from None
        return value

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def string(self) -> str | None:
        n = self._length(False)
        return None if n < 0 else self._text(n)

    def key_string(self) -> str:
        """A string of a key: int16 length (keys are never flexible), never null."""
        n = self.int16()
        if n < 0:
            raise RecordFormatError("null string in a key")
        return self._text(n)

    def _text(self, n: int) -> str:
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string is not utf-8: {exc}") from None

    def bytes_(self) -> bytes | None:
        n = self._length(True)
        return None if n < 0 else self.take(n)

    def array_length(self) -> int:
        n = self._length(True)
        if n > len(self.data) - self.pos:
            raise RecordFormatError(f"array of {n} elements cannot fit the record")
        return n

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.int32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.string() or "")
    raise RecordFormatError(f"unknown key version {version}")


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown offset value version {version}")
    r.flexible = version >= 4
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string() or ""
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else None
    if expire_ts is not None and expire_ts < 0:
        expire_ts = None
    r.skip_tags()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire_ts)


def decode_group_value(data: bytes) -> StoredGroup:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown group value version {version}")
    r.flexible = version >= 4
    protocol_type = r.string() or ""
    generation = r.int32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(max(r.array_length(), 0)):
        member_id = r.string() or ""
        instance_id = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        subscription = r.bytes_() or b""
        assignment = r.bytes_() or b""
        r.skip_tags()
        members.append(
            StoredMember(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.skip_tags()
    return StoredGroup(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# -- placement ----------------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits (signed)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition of a group, chosen exactly as Kafka chooses it,
    so tools that compute it (and operators used to Kafka) find the same partition.

    Every group request asks this, so ordinary ids are cached; long ones are not, lest
    a client fill the cache with megabytes of names."""
    if len(group_id) <= 255:
        return _cached_partition(group_id, num_partitions)
    return _partition(group_id, num_partitions)


def _partition(group_id: str, num_partitions: int) -> int:
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions  # Kafka's Utils.abs


_cached_partition = functools.lru_cache(maxsize=8192)(_partition)
