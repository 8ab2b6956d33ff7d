"""Record batches whose header and CRC are valid but whose records lie.

Each is what a faulty or hostile producer can send and what Kafka's leader refuses
after looking inside the batch; stored, any of them would stop every consumer of the
partition. The unit tests (tests/test_record_validation.py) and the compat tests
(test_poisoned_batches.py) share them.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from crc32c import crc32c

from kbroker.protocol.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    Record,
    encode_batch,
    write_varint,
)
from kbroker.protocol.compression import GZIP, LZ4, SNAPPY, ZSTD, compress

CORRUPT_MESSAGE = 2
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
YEAR_MS = 365 * 24 * 3600 * 1000


def refresh_crc(batch: bytearray) -> bytes:
    _U32.pack_into(batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return bytes(batch)


def with_section(batch: bytearray, section: bytes) -> bytes:
    """`batch` with its records section replaced (batchLength and CRC made right)."""
    out = bytearray(batch[:HEADER_SIZE]) + section
    _I32.pack_into(out, 8, len(out) - 12)
    return refresh_crc(out)


def with_header(batch: bytearray, position: int, fmt: str, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, position, value)
    return refresh_crc(out)


def raw_record(fields: bytes) -> bytes:
    """A record whose body is `fields` as given, with a length prefix that fits them."""
    out = bytearray()
    write_varint(out, len(fields))
    return bytes(out + fields)


def record_fields(
    offset_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes = b"v",
    headers: int = 0,
    key_length: int | None = None,
    ts_delta: int = 0,
) -> bytes:
    out = bytearray(b"\x00")
    write_varint(out, ts_delta)
    write_varint(out, offset_delta)
    write_varint(out, (len(key) if key is not None else -1) if key_length is None else key_length)
    out += key or b""
    write_varint(out, len(value))
    out += value
    write_varint(out, headers)
    return bytes(out)


def _garbage_compressed(codec: int) -> bytes:
    good = bytes(compress(codec, b"x" * 500))
    # Keep each format's magic so the codec gets past its first check, then garbage.
    keep = {GZIP: 10, SNAPPY: 16, LZ4: 7, ZSTD: 6}[codec]
    return good[:keep] + random.Random(codec).randbytes(200)


def poisoned(now_ms: int) -> dict[str, tuple[bytes, int]]:
    """name -> (records blob, Kafka's error code for it) for a topic with default
    timestamp limits; `now_ms` is the broker's clock, roughly."""

    def good(codec: int = 0, **kw: object) -> bytearray:
        return encode_batch(
            [(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")],
            now_ms,
            compression=codec,
            compress=lambda d: compress(codec, d),
            **kw,
        )  # type: ignore[arg-type]

    def three(section_of: Callable[[int], bytes]) -> bytes:
        return with_section(good(), b"".join(section_of(i) for i in range(3)))

    cases: dict[str, tuple[bytes, int]] = {}
    for codec, name in ((GZIP, "gzip"), (SNAPPY, "snappy"), (LZ4, "lz4"), (ZSTD, "zstd")):
        cases[f"{name} payload that does not inflate"] = (
            with_section(good(codec), _garbage_compressed(codec)),
            CORRUPT_MESSAGE,
        )
    cases["gzip of random bytes"] = (
        with_section(good(GZIP), compress(GZIP, random.Random(1).randbytes(300))),
        INVALID_RECORD,
    )
    for codec in (5, 7):
        batch = good()
        attributes = _I16.unpack_from(batch, ATTRIBUTES_OFFSET)[0] | codec
        cases[f"codec id {codec}"] = (
            with_header(batch, ATTRIBUTES_OFFSET, ">h", attributes),
            CORRUPT_MESSAGE,
        )
    # recordCount 5 (lastOffsetDelta 4) over 3 records; recordCount 1 over 3 records.
    five = with_header(bytearray(good()), 57, ">i", 5)
    cases["count 5 with 3 records"] = (
        with_header(bytearray(five), 23, ">i", 4),
        INVALID_RECORD,
    )
    one = with_header(bytearray(good()), 57, ">i", 1)
    cases["count 1 with 3 records"] = (with_header(bytearray(one), 23, ">i", 0), INVALID_RECORD)
    cases["key length 1000"] = (
        three(
            lambda i: raw_record(record_fields(i, key_length=1000) if i == 1 else record_fields(i))
        ),
        INVALID_RECORD,
    )
    negative = bytearray()
    write_varint(negative, -7)
    cases["record length -7"] = (
        with_section(good(), raw_record(record_fields(0)) + bytes(negative) + b"\x00" * 12),
        INVALID_RECORD,
    )
    cases["record overrunning the batch"] = (
        with_section(good(), b"".join(raw_record(record_fields(i)) for i in range(3))[:-2]),
        INVALID_RECORD,
    )
    cases["two records at one offset delta"] = (
        three(lambda i: raw_record(record_fields(min(i, 1)))),
        INVALID_RECORD,
    )
    cases["header count 100000 with none present"] = (
        three(lambda i: raw_record(record_fields(i, headers=100_000))),
        INVALID_RECORD,
    )
    cases["garbage bytes inside the batch"] = (
        with_section(good(), random.Random(3).randbytes(40)),
        INVALID_RECORD,
    )
    cases["timestamp 100 years ahead"] = (
        bytes(encode_batch([b"future"], now_ms + 100 * YEAR_MS)),
        INVALID_TIMESTAMP,
    )
    cases["timestamp 2^62"] = (bytes(encode_batch([b"far"], 2**62)), INVALID_TIMESTAMP)
    return cases


def keyless(now_ms: int) -> bytes:
    """A batch whose second record has no key (refused by compacted topics)."""
    return bytes(encode_batch([Record(b"k", b"v"), Record(None, b"v")], now_ms))


def long_ago(now_ms: int) -> bytes:
    """A batch stamped -2^63 + 1 ms: refused where message.timestamp.before.max.ms is set."""
    return bytes(encode_batch([b"ancient"], -(2**63) + 1))


# -- message formats v0/v1 (Produce v0-2), up-converted by the leader ----------------------


def old_message(
    magic: int, key: bytes | None, value: bytes | None, attributes: int = 0, timestamp: int = 0
) -> bytes:
    """One v0/v1 message (crc, magic, attributes, [timestamp], key, value), CRC-32 right."""
    import zlib

    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += _I64.pack(timestamp)
    for part in (key, value):
        body += _I32.pack(-1) if part is None else _I32.pack(len(part)) + part
    return _U32.pack(zlib.crc32(body)) + body


def old_entry(message: bytes, offset: int = 0) -> bytes:
    return _I64.pack(offset) + _I32.pack(len(message)) + message


def old_poisoned(now_ms: int) -> dict[str, tuple[bytes, int]]:
    """Old-format message sets Kafka 3.9 refuses, with its error code."""
    import gzip

    good = old_entry(old_message(1, b"k", b"v", timestamp=now_ms))
    bad_crc = bytearray(good)
    bad_crc[12] ^= 0xFF
    v0_inner = old_entry(old_message(0, b"k", b"v"))
    return {
        "v1 message with a bad CRC-32": (bytes(bad_crc), CORRUPT_MESSAGE),
        "v0 message with a bad CRC-32": (
            bytes(bytearray(old_entry(old_message(0, b"k", b"v")))[:12])
            + b"\x00\x00\x00\x00"
            + old_entry(old_message(0, b"k", b"v"))[16:],
            CORRUPT_MESSAGE,
        ),
        "v1 wrapper holding a v0 message": (
            old_entry(old_message(1, None, gzip.compress(v0_inner), GZIP, now_ms)),
            INVALID_RECORD,
        ),
        "wrapper holding a wrapper": (
            old_entry(
                old_message(
                    1,
                    None,
                    gzip.compress(old_entry(old_message(1, None, gzip.compress(good), GZIP))),
                    GZIP,
                )
            ),
            INVALID_RECORD,
        ),
        "wrapper of nested garbage": (
            old_entry(old_message(1, None, gzip.compress(b"\x00\x01garbage" * 3), GZIP, now_ms)),
            CORRUPT_MESSAGE,
        ),
        "wrapper that is not gzip": (
            old_entry(old_message(1, None, b"not gzip at all", GZIP, now_ms)),
            CORRUPT_MESSAGE,
        ),
        "magic 3": (good[:16] + b"\x03" + good[17:], CORRUPT_MESSAGE),
        "message cut short": (good[:-2], CORRUPT_MESSAGE),
    }
