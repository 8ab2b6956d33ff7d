"""A topic's ``compression.type`` applied to the batches of an append, as Kafka's leader does.

Kafka stores a batch as produced when the topic says ``producer`` (the default) and
otherwise rewrites it in the topic's codec (``uncompressed`` stores it plain) whenever
the batch's codec differs. Only the records section changes: the header keeps the
producer id, epoch, base sequence, transactional flag, timestamps and record count;
the codec bits, the batch length and the CRC are set anew. Offsets are assigned to the
rewritten blob afterwards, as to any other.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c

from kbroker.protocol.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
)
from kbroker.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress

TOPIC_CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
"""compression.type values naming a codec; ``producer`` (keep the batch's) is absent."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


def needs_recompression(headers: Sequence[BatchHeader], codec: int) -> bool:
    """Whether some data batch is stored in another codec than ``codec``."""
    return any(
        (h.attributes & COMPRESSION_MASK) != codec and not h.attributes & CONTROL_MASK
        for h in headers
    )


def recompress(
    buf: bytes | bytearray | memoryview,
    headers: Sequence[BatchHeader],
    codec: int,
    level: int | None,
    max_decompressed_bytes: int,
) -> bytearray:
    """The blob with every data batch in ``codec`` (at ``level``, None: Kafka's default).

    Batches already in ``codec`` and control batches are copied unchanged. The batches
    must have passed record validation (their payloads inflate within the bound).
    """
    view = memoryview(buf)
    out = bytearray()
    for h in headers:
        start, end = h.position, h.position + h.total_size
        current = h.attributes & COMPRESSION_MASK
        if current == codec or h.attributes & CONTROL_MASK:
            out += view[start:end]
            continue
        section: bytes | memoryview = view[start + HEADER_SIZE : end]
        if current != NONE:
            section = decompress(current, section, max_decompressed_bytes)
        payload = compress(codec, section, level) if codec != NONE else section
        at = len(out)
        out += view[start : start + HEADER_SIZE]
        out += payload
        _I32.pack_into(out, at + BATCH_LENGTH_OFFSET, HEADER_SIZE - LOG_OVERHEAD + len(payload))
        attributes = (h.attributes & ~COMPRESSION_MASK) | codec
        _I16.pack_into(out, at + ATTRIBUTES_OFFSET, attributes)
        _U32.pack_into(out, at + CRC_OFFSET, crc32c(memoryview(out)[at + ATTRIBUTES_OFFSET :]))
    return out
