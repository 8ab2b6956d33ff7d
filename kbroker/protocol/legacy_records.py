"""Message formats v0 and v1 (magic 0 and 1), read for up-conversion on produce and
written for down-conversion on fetch. The log stores v2 batches only.

One entry of a message set: offset i64, size i32, then the message: crc u32 (CRC-32,
not CRC-32C, of everything after it), magic i8, attributes i8, timestamp i64 (v1
only), key and value as bytes (i32 length, -1 for null). A message whose attributes
name a codec (the low three bits) is a wrapper: its value is a compressed message set
of inner messages. A v1 wrapper's inner offsets are relative (0..n-1); v0's are
absolute. Bit 3 of a v1 message's attributes marks LogAppendTime.

Up-conversion follows Kafka's LogValidator: every message's CRC is checked, offsets
are the broker's to assign, the records become one v2 batch (no producer id) in the
wrappers' codec, v0 messages get no timestamp (-1) and LogAppendTime is applied by the
log as for any batch. Down-conversion follows RecordsUtil.downConvert: control batches
are dropped, records below the fetch offset too, headers are lost, and a compressed
batch keeps its codec: its messages go into one wrapper message, as Kafka's
MemoryRecordsBuilder writes it (v1 inner offsets relative, the wrapper at the last
offset; a v0 lz4 frame with the header checksum v0 clients expect, KAFKA-3160).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import lz4.block
import xxhash

from kbroker.protocol.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    Record,
    decode_records,
    encode_batch,
    read_header,
)
from kbroker.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    LZ4,
    NONE,
    ZSTD,
    CompressionError,
    compress,
    decompress,
)
from kbroker.protocol.errors import CorruptBatchError, InvalidBatchError

_ENTRY = struct.Struct(">qi")  # offset, message size
_V0_HEAD = struct.Struct(">Ibb")  # crc, magic, attributes
_V1_HEAD = struct.Struct(">Ibbq")  # crc, magic, attributes, timestamp
_I32 = struct.Struct(">i")
_CODEC_MASK = 0x07
_MIN_SIZE = (14, 22)  # crc..value of a v0 / v1 message with null key and value
_MAX_CODEC = LZ4  # v0/v1 know gzip, snappy and lz4; zstd came with v2


class ZstdDownConversionError(ValueError):
    """A zstd batch asked for in an old format, which knows no zstd (Kafka's
    UNSUPPORTED_COMPRESSION_TYPE)."""


class InvalidLegacyRecordError(InvalidBatchError):
    """Messages that parse but break a rule of the format (Kafka's INVALID_RECORD):
    an inner message whose magic differs from its wrapper's, a nested wrapper."""


def is_legacy(records: bytes | bytearray | memoryview) -> bool:
    """Whether a Produce's records start with a v0/v1 message rather than a v2 batch."""
    return len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] in (0, 1)


def _read_bytes(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptBatchError("message ends inside a length")
    (size,) = _I32.unpack_from(view, pos)
    pos += 4
    if size < 0:
        if size != -1:
            raise CorruptBatchError(f"invalid length {size}")
        return None, pos
    if pos + size > end:
        raise CorruptBatchError(f"a {size}-byte field runs past its message")
    return bytes(view[pos : pos + size]), pos + size


def _messages(
    view: memoryview,
    decompress_fn: Callable[[int, bytes], bytes],
    out: list[Record],
    codecs: list[int],
    wrapper_magic: int | None,
    wrapper_time: int | None,
) -> int:
    """Append the records of a message set to `out`; the magic of its messages."""
    pos = 0
    end = len(view)
    magic_seen = -1
    if end == 0:
        raise CorruptBatchError("empty message set")
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptBatchError(f"partial message header at byte {pos}")
        _offset, size = _ENTRY.unpack_from(view, pos)
        start = pos + LOG_OVERHEAD
        if size < _MIN_SIZE[0] or start + size > end:
            raise CorruptBatchError(f"message size {size} at byte {pos} does not fit")
        stop = start + size
        crc, magic, attributes = _V0_HEAD.unpack_from(view, start)
        if magic not in (0, 1):
            raise CorruptBatchError(f"message format magic {magic} at byte {pos}")
        if size < _MIN_SIZE[magic]:
            raise CorruptBatchError(f"message size {size} is too small for magic {magic}")
        if zlib.crc32(view[start + 4 : stop]) != crc:
            raise CorruptBatchError(f"message at byte {pos} fails its CRC-32 check")
        if wrapper_magic is not None and magic != wrapper_magic:
            raise InvalidLegacyRecordError("Log record magic does not match outer magic")
        if magic_seen not in (-1, magic):
            raise InvalidLegacyRecordError("messages of one message set differ in magic")
        magic_seen = magic
        if magic == 1:
            timestamp = _V1_HEAD.unpack_from(view, start)[3]
            body = start + _V1_HEAD.size
        else:
            timestamp = NO_TIMESTAMP
            body = start + _V0_HEAD.size
        key, body = _read_bytes(view, body, stop)
        value, body = _read_bytes(view, body, stop)
        if body != stop:
            raise CorruptBatchError(f"message at byte {pos} has {stop - body} bytes past its value")
        codec = attributes & _CODEC_MASK
        if codec:
            if wrapper_magic is not None:
                raise InvalidLegacyRecordError("compressed message inside a compressed message")
            if codec > _MAX_CODEC or value is None:
                raise CorruptBatchError(f"wrapper message with codec {codec} and no valid value")
            try:
                if magic == 0 and codec == LZ4:
                    inner = unlz4_kafka_0_8(value)
                else:
                    inner = decompress_fn(codec, value)
            except CompressionError as exc:
                raise CorruptBatchError(f"wrapper message: {exc}") from exc
            log_append = magic == 1 and attributes & TIMESTAMP_TYPE_MASK
            codecs.append(codec)
            _messages(
                memoryview(inner),
                decompress_fn,
                out,
                codecs,
                magic,
                timestamp if log_append else None,
            )
        else:
            out.append(Record(key, value, timestamp if wrapper_time is None else wrapper_time))
        pos = stop
    return magic_seen


_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_U32LE = struct.Struct("<I")


def unlz4_kafka_0_8(data: bytes, max_size: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """An lz4 frame of a v0 wrapper. Clients of message format v0 computed the frame
    header's checksum over the wrong bytes (KAFKA-3160), and Kafka reads their frames
    without checking it; so does this, block by block. Block and content checksums are
    skipped likewise (v0 clients wrote none)."""
    try:
        if data[:4] != _LZ4_MAGIC:
            raise CompressionError("not an lz4 frame")
        flags, descriptor = data[4], data[5]
        block_max = _LZ4_BLOCK_MAX.get((descriptor >> 4) & 7)
        if block_max is None or flags >> 6 != 1:
            raise CompressionError("unsupported lz4 frame descriptor")
        pos = 6 + (8 if flags & 0x08 else 0) + 1  # descriptor, content size, header checksum
        out = bytearray()
        while True:
            if pos + 4 > len(data):
                raise CompressionError("truncated lz4 frame")
            (size,) = _U32LE.unpack_from(data, pos)
            pos += 4
            if size == 0:
                return bytes(out)
            stored = size & 0x80000000
            size &= 0x7FFFFFFF
            if size > block_max or pos + size > len(data):
                raise CompressionError("lz4 block runs past its frame")
            block = data[pos : pos + size]
            out += block if stored else lz4.block.decompress(block, uncompressed_size=block_max)
            if len(out) > max_size:
                raise CompressionError(f"lz4 data inflates past {max_size} bytes")
            pos += size + (4 if flags & 0x10 else 0)
    except (IndexError, lz4.block.LZ4BlockError) as exc:
        raise CompressionError(f"corrupt lz4 data: {exc}") from exc


def up_convert(
    records: bytes | bytearray | memoryview,
    decompress_fn: Callable[[int, bytes], bytes] = decompress,
) -> bytearray:
    """One v2 batch holding every message of a v0/v1 message set, offsets from 0.

    Raises CorruptBatchError (CORRUPT_MESSAGE) for bytes that do not parse or fail a
    CRC, InvalidLegacyRecordError (INVALID_RECORD) for a rule of the format broken.
    """
    out: list[Record] = []
    codecs: list[int] = []
    _messages(memoryview(records), decompress_fn, out, codecs, None, None)
    if not out:
        raise CorruptBatchError("message set without messages")
    codec = codecs[-1] if codecs else 0  # Kafka takes the last wrapper's codec
    for i, rec in enumerate(out):
        rec.offset = i
    return encode_batch(out, out[0].timestamp or NO_TIMESTAMP, compression=codec)


def down_convert(
    data: bytes | bytearray | memoryview,
    magic: int,
    fetch_offset: int,
    decompress_fn: Callable[[int, bytes], bytes] = decompress,
) -> bytes:
    """The whole v2 batches of `data` as a message set of `magic` (0 or 1), a compressed
    batch as one wrapper message of its codec; records below `fetch_offset` and control
    batches are left out, a trailing partial batch too."""
    view = memoryview(data)
    out = bytearray()
    pos = 0
    end = len(view)
    v1 = magic == 1
    while end - pos >= HEADER_SIZE:
        h = read_header(view, pos)
        if h.magic != 2 or pos + h.total_size > end:
            break
        if h.compression == ZSTD:
            raise ZstdDownConversionError("zstd batches cannot be read in message format v0/v1")
        if not h.attributes & CONTROL_MASK:
            log_append = v1 and h.attributes & TIMESTAMP_TYPE_MASK
            attributes = TIMESTAMP_TYPE_MASK if log_append else 0
            records = [
                r
                for r in decode_records(view, pos, decompress_fn)
                if (r.offset if r.offset is not None else 0) >= fetch_offset
            ]
            if h.compression == NONE:
                for rec in records:
                    _write_message(out, rec.offset or 0, magic, attributes, rec)
            elif records:
                _write_wrapper(out, magic, attributes, h.compression, records)
        pos += h.total_size
    return bytes(out)


def _write_wrapper(
    out: bytearray, magic: int, attributes: int, codec: int, records: list[Record]
) -> None:
    """`records` as one wrapper message of `codec`: inner offsets relative to the first
    in v1 (absolute in v0), the wrapper at the last offset with the largest timestamp."""
    inner = bytearray()
    first = records[0].offset or 0
    for rec in records:
        offset = rec.offset or 0
        _write_message(inner, offset - first if magic == 1 else offset, magic, attributes, rec)
    value = compress(codec, inner)
    if codec == LZ4 and magic == 0:
        value = _lz4_kafka_0_8_header(value)
    stamps = [r.timestamp for r in records if r.timestamp is not None]
    wrapper = Record(None, value, max(stamps) if stamps else NO_TIMESTAMP)
    _write_message(out, records[-1].offset or 0, magic, attributes | codec, wrapper)


def _lz4_kafka_0_8_header(frame: bytes) -> bytes:
    """An lz4 frame (no content size) with the header checksum v0 clients compute: over
    the magic number too (KAFKA-3160), as Kafka writes v0 lz4 wrappers."""
    return frame[:6] + bytes([(xxhash.xxh32_intdigest(frame[:6]) >> 8) & 0xFF]) + frame[7:]


def _write_message(out: bytearray, offset: int, magic: int, attributes: int, rec: Record) -> None:
    body = bytearray()
    if magic == 1:
        body += struct.pack(
            ">bbq", 1, attributes, NO_TIMESTAMP if rec.timestamp is None else rec.timestamp
        )
    else:
        body += struct.pack(">bb", 0, attributes)
    for part in (rec.key, rec.value):
        if part is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _I32.pack(len(part)) + part
    out += _ENTRY.pack(offset, len(body) + 4)
    out += struct.pack(">I", zlib.crc32(body))
    out += body
