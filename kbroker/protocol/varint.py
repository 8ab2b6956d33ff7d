"""Kafka's varints, the one codec for them: unsigned ones frame flexible message versions
(lengths, counts, tags), zigzag ones encode the fields of a record.

kio has a native reader for both, but it takes read-only buffers only, while a
produced batch is read and patched in a writable one; and a call into it costs more
than the one-byte case, which is nearly every varint, costs here.
"""

from __future__ import annotations

from kbroker.protocol.errors import CorruptBatchError, MalformedRequest

Buffer = bytes | bytearray | memoryview

_SMALL = [bytes((i,)) for i in range(0x80)]


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos` (at most 5 bytes, an int32 as Kafka's) and the
    position after it; MalformedRequest if it is truncated or longer."""
    end = len(buf)
    if pos < end:
        first = buf[pos]
        if first < 0x80:
            return first, pos + 1
    result = 0
    for shift in (0, 7, 14, 21, 28):
        if pos >= end:
            raise MalformedRequest("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise MalformedRequest("varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    """Append `value` (non-negative) as an unsigned varint."""
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint(value: int) -> bytes:
    """`value` (non-negative) as an unsigned varint."""
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """The zigzag varint at `pos` and the position after it (CorruptBatchError if over
    ten bytes; IndexError if the buffer ends first)."""
    shift = 0
    v = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint too long")
    return (v >> 1) ^ -(v & 1), pos


def read_varint_within(buf: Buffer, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """The zigzag varint at `pos` inside [pos, end) and the position after it, for the
    record walks that check a batch before it is stored: IndexError when it runs past
    `end`, OverflowError when it is longer than `max_bytes` (5 for an int32 field, 10
    for an int64)."""
    v = shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise IndexError
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return (v >> 1) ^ -(v & 1), pos
        shift += 7
    raise OverflowError


def write_varint(out: bytearray, n: int) -> None:
    """Append `n` as a zigzag varint, the encoding of record fields."""
    v = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
