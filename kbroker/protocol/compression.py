"""Kafka's record compression codecs: gzip, snappy (xerial framing), lz4 frame, zstd.

The produce and fetch paths never call these: batches are stored and served as
produced. They exist for the features that need records (compaction, offset lookups
by timestamp inside a batch, coordinator state loading).

Decompression is bounded. A batch is at most max.message.bytes on the wire, but a
hostile one can expand a thousandfold or more; every codec here stops and raises
`DecompressionBombError` as soon as the output passes `max_size`, having held at most
about that much (plus one codec step) in memory.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import zstandard

from kbroker.protocol.errors import MalformedRequest
from kbroker.protocol.varint import read_uvarint

__all__ = [
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "CompressionError",
    "DecompressionBombError",
    "bounded_decompressor",
    "compress",
    "decompress",
]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Enough for any sane batch (the default max.message.bytes is 1 MiB), small enough that a
# few concurrent decompressions cannot exhaust a broker's memory.
DEFAULT_MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, minimum compatible version
XERIAL_VERSION = 1
XERIAL_BLOCK_SIZE = 32 * 1024  # what the Java client's SnappyOutputStream writes
_BLOCK_LENGTH = struct.Struct(">i")

GZIP_LEVEL = 6  # Kafka's compression.gzip.level default (Deflater's default)
ZSTD_LEVEL = 3  # Kafka's compression.zstd.level default
# zstd output per call is bounded by the input fed to it: at most a 128 KiB block per
# 3-byte block header, so slices of this size expand to at most ~44 MiB each.
_ZSTD_SLICE = 1024
_GZIP_MAGIC = b"\x1f\x8b"


class CompressionError(ValueError):
    """Unknown codec, or compressed data that is corrupt or truncated."""


class DecompressionBombError(CompressionError):
    """Compressed data that expands beyond the allowed size."""


# -- decompression ------------------------------------------------------------------------


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """The records section of a batch compressed with `codec` (attributes & 7)."""
    data = bytes(data)
    try:
        if codec == GZIP:
            return _gunzip(data, max_size)
        if codec == SNAPPY:
            return _unsnappy(data, max_size)
        if codec == LZ4:
            return _unlz4(data, max_size)
        if codec == ZSTD:
            return _unzstd(data, max_size)
        if codec == NONE:
            if len(data) > max_size:
                raise DecompressionBombError(f"{len(data)} bytes exceed {max_size}")
            return data
    except CompressionError:
        raise
    except (
        zlib.error,
        RuntimeError,
        ValueError,
        zstandard.ZstdError,
        cramjam.DecompressionError,
    ) as exc:
        raise CompressionError(f"corrupt {CODEC_NAMES[codec]} data: {exc}") from exc
    raise CompressionError(f"unknown compression codec {codec}")


def bounded_decompressor(max_size: int) -> Callable[[int, bytes], bytes]:
    """decompress(codec, data) with a fixed cap, in the shape decode_records expects."""

    def bounded(codec: int, data: bytes) -> bytes:
        return decompress(codec, data, max_size)

    return bounded


def _too_large(size: int, max_size: int, codec: str) -> DecompressionBombError:
    return DecompressionBombError(f"{codec} data expands past {max_size} bytes (at least {size})")


def _gunzip(data: bytes, max_size: int) -> bytes:
    """One or more gzip members (as Java's GZIPInputStream reads); zlib streams too."""
    out = bytearray()
    rest = data
    while True:
        d = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, auto-detected
        buf = rest
        while True:
            chunk = d.decompress(buf, max_size + 1 - len(out))
            out += chunk
            if len(out) > max_size:
                raise _too_large(len(out), max_size, "gzip")
            if d.eof:
                break
            buf = d.unconsumed_tail
            if not buf and not chunk:
                raise CompressionError("truncated gzip data")
        rest = d.unused_data
        if not rest.startswith(_GZIP_MAGIC):
            return bytes(out)  # trailing bytes that are no member are ignored, as Java does


def _unsnappy(data: bytes, max_size: int) -> bytes:
    """Kafka's xerial framing, or one raw snappy block (some clients send those)."""
    if not data.startswith(XERIAL_MAGIC):
        return _raw_snappy_block(data, 0, max_size)
    if len(data) < XERIAL_HEADER.size:
        raise CompressionError("truncated xerial snappy header")
    out = bytearray()
    pos = XERIAL_HEADER.size
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CompressionError("truncated xerial snappy block length")
        (size,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CompressionError("xerial snappy block runs past the data")
        out += _raw_snappy_block(data[pos : pos + size], len(out), max_size)
        pos += size
    return bytes(out)


def _raw_snappy_block(block: bytes, already: int, max_size: int) -> bytes:
    # The block's preamble states its uncompressed length: refuse before expanding.
    length = _snappy_length(block)
    if already + length > max_size:
        raise _too_large(already + length, max_size, "snappy")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_length(block: bytes) -> int:
    try:
        value, _ = read_uvarint(block, 0)
    except MalformedRequest:
        raise CompressionError("bad snappy length preamble") from None
    return value


def _unlz4(data: bytes, max_size: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:
        d = lz4.frame.LZ4FrameDecompressor()
        chunk = d.decompress(rest, max_length=max_size + 1 - len(out))
        while True:
            out += chunk
            if len(out) > max_size:
                raise _too_large(len(out), max_size, "lz4")
            if d.eof:
                break
            if d.needs_input:
                raise CompressionError("truncated lz4 frame")
            chunk = d.decompress(b"", max_length=max_size + 1 - len(out))
        rest = d.unused_data
    return bytes(out)


def _unzstd(data: bytes, max_size: int) -> bytes:
    """Frames with or without a content size, concatenated frames too (Java's
    ZstdInputStream reads across them)."""
    out = bytearray()
    rest = data
    dctx = zstandard.ZstdDecompressor()
    while rest:
        d = dctx.decompressobj()
        view = memoryview(rest)
        pos = 0
        while not d.eof:
            if pos >= len(view):
                raise CompressionError("truncated zstd frame")
            out += d.decompress(view[pos : pos + _ZSTD_SLICE])
            pos += _ZSTD_SLICE
            if len(out) > max_size:
                raise _too_large(len(out), max_size, "zstd")
        rest = d.unused_data + bytes(view[pos:])
    return bytes(out)


# -- compression ----------------------------------------------------------------------------


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress a records section the way Kafka's own producers do, so that every client
    can read it back: gzip members, xerial-framed snappy, lz4 frames with independent
    blocks (the Java client rejects linked ones), zstd frames."""
    data = bytes(data)
    if codec == GZIP:
        return _gzip(data, GZIP_LEVEL if level is None else level)
    if codec == SNAPPY:
        return xerial_snappy(data)
    if codec == LZ4:
        return lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL if level is None else level).compress(data)
    if codec == NONE:
        return data
    raise CompressionError(f"unknown compression codec {codec}")


def _gzip(data: bytes, level: int) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)  # 16 + 15: a gzip member
    return c.compress(data) + c.flush()


def xerial_snappy(data: bytes, block_size: int = XERIAL_BLOCK_SIZE) -> bytes:
    """Snappy in the xerial stream framing Kafka's clients write and read."""
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_VERSION)]
    for start in range(0, len(data), block_size):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + block_size]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)
