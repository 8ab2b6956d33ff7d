"""The consumer's embedded protocol: what a classic consumer puts in JoinGroup's member
metadata (a Subscription) and what SyncGroup hands back (an Assignment).

Kafka's ConsumerProtocol; none of its versions is flexible. The coordinator reads them
when a classic consumer lives inside a consumer-protocol group (KIP-848's migration):
its subscription becomes the member's, and the server-side assignment goes back to it
in the layout its own version speaks. Pure: bytes in, values out.

    Subscription  v0: version int16, topics [string], user_data nullable bytes
                  v1: + owned_partitions [topic string, partitions [int32]]
                  v2: + generation_id int32
                  v3: + rack_id nullable string
    Assignment    v0-v3: version int16, assigned [topic string, partitions [int32]],
                  user_data nullable bytes
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CONSUMER_PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


class ConsumerProtocolError(ValueError):
    """The bytes are not a consumer protocol message."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = -1
    rack_id: str | None = None


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, fmt: struct.Struct) -> int:
        try:
            (value,) = fmt.unpack_from(self.data, self.pos)
        except struct.error:
            raise ConsumerProtocolError("truncated consumer protocol message") from None
        self.pos += fmt.size
        return int(value)

    def int16(self) -> int:
        return self._unpack(_INT16)

    def int32(self) -> int:
        return self._unpack(_INT32)

    def string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        end = self.pos + length
        if end > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol message")
        try:
            text = self.data[self.pos : end].decode()
        except UnicodeDecodeError:
            raise ConsumerProtocolError("a string is not UTF-8") from None
        self.pos = end
        return text

    def bytes_(self) -> bytes | None:
        length = self.int32()
        if length < 0:
            return None
        end = self.pos + length
        if end > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol message")
        value = bytes(self.data[self.pos : end])
        self.pos = end
        return value

    def count(self) -> int:
        n = self.int32()
        # Each element takes at least 2 bytes: a larger count is a lie, not a big array.
        if n > (len(self.data) - self.pos) // 2:
            raise ConsumerProtocolError("array longer than the message")
        return max(n, 0)

    def topic_partitions(self) -> TopicPartitions:
        out = []
        for _ in range(self.count()):
            topic = self.string() or ""
            out.append((topic, tuple(self.int32() for _ in range(self.count()))))
        return tuple(out)


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def decode_subscription(data: bytes) -> Subscription:
    """A Subscription of any version; fields of versions above 3 are not read."""
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise ConsumerProtocolError(f"subscription version {version}")
    topics = tuple(r.string() or "" for _ in range(r.count()))
    user_data = r.bytes_()
    owned: TopicPartitions = ()
    generation = -1
    rack = None
    if version >= 1:
        owned = r.topic_partitions()
    if version >= 2:
        generation = r.int32()
    if version >= 3:
        rack = r.string()
    return Subscription(version, topics, user_data, owned, generation, rack)


def decode_assignment(data: bytes) -> tuple[TopicPartitions, bytes | None]:
    """The partitions and user data of an Assignment (every version starts alike); empty
    bytes, which a leader may send for a member it gives nothing, are no partitions."""
    if not data:
        return (), None
    r = _Reader(data)
    if r.int16() < 0:
        raise ConsumerProtocolError("negative assignment version")
    partitions = r.topic_partitions()
    return partitions, r.bytes_()


def encode_assignment(partitions: TopicPartitions, version: int = 0) -> bytes:
    """An Assignment at `version` (capped at the highest known), topics in order, no
    user data: the server-side assignors keep none."""
    parts = [_INT16.pack(min(max(version, 0), HIGHEST_VERSION)), _INT32.pack(len(partitions))]
    for topic, numbers in sorted(partitions):
        raw = topic.encode()
        parts.append(_INT16.pack(len(raw)))
        parts.append(raw)
        parts.append(_INT32.pack(len(numbers)))
        parts.extend(_INT32.pack(p) for p in sorted(numbers))
    parts.append(_INT32.pack(-1))
    return b"".join(parts)
