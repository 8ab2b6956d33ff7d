"""Message formats v0/v1: up-conversion of what old producers send, down-conversion of
stored v2 batches for old consumers, checked against kafka-python's own encoder and
reader of the old formats."""

from __future__ import annotations

import contextlib
import gzip
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords, MemoryRecordsBuilder

from kbroker.protocol.batch import (
    CONTROL_MASK,
    Record,
    decode_records,
    encode_batch,
    read_header,
    validate_batches,
)
from kbroker.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, decompress
from kbroker.protocol.errors import CorruptBatchError, InvalidBatchError
from kbroker.protocol.legacy_records import (
    InvalidLegacyRecordError,
    ZstdDownConversionError,
    down_convert,
    is_legacy,
    up_convert,
)

KAFKA_PYTHON_CODEC = {NONE: 0, GZIP: 1, SNAPPY: 2, LZ4: 3}


def old_set(
    magic: int, records: list[tuple[int, bytes | None, bytes | None]], codec: int = 0
) -> bytes:
    builder = MemoryRecordsBuilder(magic, KAFKA_PYTHON_CODEC[codec], 1 << 20)
    for timestamp, key, value in records:
        builder.append(timestamp, key, value, [])
    builder.close()
    return bytes(builder.buffer())


def read_old(data: bytes) -> list[tuple[int, int | None, bytes | None, bytes | None, int]]:
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, r.timestamp_type))
    return out


def message(
    magic: int, key: bytes | None, value: bytes | None, attributes: int = 0, ts: int = 5
) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", ts)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    return struct.pack(">I", zlib.crc32(body)) + body


def entry(msg: bytes, offset: int = 0) -> bytes:
    return struct.pack(">qi", offset, len(msg)) + msg


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
def test_v1_messages_become_one_v2_batch_with_their_timestamps(codec: int) -> None:
    sent = [(1000 + i, f"k{i}".encode(), f"v{i}".encode()) for i in range(5)] + [(2000, None, None)]
    batch = up_convert(old_set(1, sent, codec))
    assert validate_batches(batch, 1 << 20)  # a well-formed v2 batch, CRC-32C right
    h = read_header(batch)
    assert (h.magic, h.record_count, h.compression, h.producer_id) == (2, 6, codec, -1)
    got = decode_records(batch, 0, decompress)
    assert [(r.timestamp, r.key, r.value) for r in got] == sent
    assert [r.offset for r in got] == list(range(6))


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY])
def test_v0_messages_have_no_timestamp(codec: int) -> None:
    batch = up_convert(old_set(0, [(0, b"a", b"1"), (0, None, b"2")], codec))
    got = decode_records(batch, 0, decompress)
    assert [(r.timestamp, r.key, r.value) for r in got] == [(-1, b"a", b"1"), (-1, None, b"2")]
    assert read_header(batch).max_timestamp == -1


def test_a_log_append_time_wrapper_gives_its_time_to_every_inner_message() -> None:
    inner = entry(message(1, b"a", b"1", ts=7), 0) + entry(message(1, b"b", b"2", ts=8), 1)
    wrapper = entry(message(1, None, gzip.compress(inner), attributes=GZIP | 0x08, ts=99), 1)
    got = decode_records(up_convert(wrapper), 0, decompress)
    assert [r.timestamp for r in got] == [99, 99]


def test_several_wrappers_join_one_batch() -> None:
    first = old_set(1, [(1, b"a", b"1"), (2, b"b", b"2")], GZIP)
    second = old_set(1, [(3, b"c", b"3")], GZIP)
    got = decode_records(up_convert(first + second), 0, decompress)
    assert [(r.offset, r.value) for r in got] == [(0, b"1"), (1, b"2"), (2, b"3")]


def test_is_legacy_looks_at_the_magic_byte() -> None:
    assert is_legacy(old_set(0, [(0, b"a", b"b")]))
    assert is_legacy(old_set(1, [(0, b"a", b"b")]))
    assert not is_legacy(bytes(encode_batch([b"x"], 0)))
    assert not is_legacy(b"")


def _flip_crc(data: bytes) -> bytes:
    out = bytearray(data)
    out[12] ^= 0xFF
    return bytes(out)


BAD = {
    "bad crc v0": (_flip_crc(old_set(0, [(0, b"a", b"b")])), CorruptBatchError),
    "bad crc v1": (_flip_crc(old_set(1, [(0, b"a", b"b")])), CorruptBatchError),
    "bad crc inside a wrapper": (
        entry(message(1, None, gzip.compress(_flip_crc(entry(message(1, b"a", b"b")))), GZIP)),
        CorruptBatchError,
    ),
    "magic 0 inside a v1 wrapper": (
        entry(message(1, None, gzip.compress(entry(message(0, b"a", b"b"))), GZIP)),
        InvalidLegacyRecordError,
    ),
    "wrapper in a wrapper": (
        entry(message(1, None, gzip.compress(old_set(1, [(0, b"a", b"b")], GZIP)), GZIP)),
        InvalidLegacyRecordError,
    ),
    "wrapper of garbage": (
        entry(message(1, None, b"\x1f\x8bnot gzip at all", GZIP)),
        CorruptBatchError,
    ),
    "wrapper of gzipped garbage": (
        entry(message(1, None, gzip.compress(b"\x00" * 7 + b"\x01garbage"), GZIP)),
        CorruptBatchError,
    ),
    "wrapper with codec 4": (entry(message(1, None, b"x", ZSTD)), CorruptBatchError),
    "wrapper with a null value": (entry(message(1, None, None, GZIP)), CorruptBatchError),
    "mixed magics": (
        old_set(0, [(0, b"a", b"b")]) + old_set(1, [(0, b"a", b"b")]),
        InvalidLegacyRecordError,
    ),
    "size past the end": (old_set(1, [(0, b"a", b"b")])[:-3], CorruptBatchError),
    "partial entry header": (old_set(1, [(0, b"a", b"b")]) + b"\x00" * 5, CorruptBatchError),
    "size below a message": (struct.pack(">qi", 0, 3) + b"\x00" * 13, CorruptBatchError),
    "key length past its message": (
        entry(
            (lambda body: struct.pack(">I", zlib.crc32(body)) + body)(
                struct.pack(">bbqi", 1, 0, 0, 100) + b"\x00" * 8
            )
        ),
        CorruptBatchError,
    ),
    "bytes after the value": (
        entry(
            (lambda m: struct.pack(">I", zlib.crc32(m[4:] + b"!")) + m[4:] + b"!")(
                message(1, b"a", b"b")
            )
        ),
        CorruptBatchError,
    ),
}


@pytest.mark.parametrize("name", list(BAD), ids=list(BAD))
def test_bad_old_messages_are_refused(name: str) -> None:
    data, error = BAD[name]
    with pytest.raises(error):
        up_convert(data)


def test_down_conversion_reads_back_as_old_messages_from_the_fetch_offset() -> None:
    first = encode_batch(
        [Record(b"k0", b"v0", 10), Record(None, b"v1", 11, [("h", b"x")])], 10, base_offset=40
    )
    second = encode_batch([Record(b"k2", None, 12)], 12, base_offset=42, compression=GZIP)
    control = encode_batch([b"marker"], 13, base_offset=43, is_control=True)
    data = bytes(first + second + control)
    assert read_old(down_convert(data, 1, 41)) == [
        (41, 11, None, b"v1", 0),
        (42, 12, b"k2", None, 0),
    ]
    assert read_old(down_convert(data, 0, 0)) == [
        (40, None, b"k0", b"v0", None),
        (41, None, None, b"v1", None),
        (42, None, b"k2", None, None),
    ]
    assert read_header(control).attributes & CONTROL_MASK


def test_down_conversion_keeps_log_append_time_and_drops_a_partial_batch() -> None:
    batch = encode_batch([b"a", b"b"], 5, base_offset=0, log_append_time=True)
    got = read_old(down_convert(bytes(batch) + bytes(batch[:30]), 1, 0))
    assert [(o, t) for o, t, *_ in got] == [(0, 5), (1, 5)]
    assert [tt for *_, tt in got] == [1, 1]


def test_zstd_cannot_be_down_converted() -> None:
    with pytest.raises(ZstdDownConversionError):
        down_convert(bytes(encode_batch([b"a"], 0, compression=ZSTD)), 1, 0)


def test_up_then_down_conversion_round_trips() -> None:
    sent = [(100 + i, f"k{i}".encode(), bytes(range(i))) for i in range(20)]
    batch = up_convert(old_set(1, sent, GZIP))
    got = read_old(down_convert(bytes(batch), 1, 0))
    assert [(t, k, v) for _, t, k, v, _ in got] == sent


def test_a_v0_lz4_wrapper_is_read_whatever_its_header_checksum() -> None:
    """v0 clients wrote the lz4 frame header checksum wrongly (KAFKA-3160); Kafka reads
    their frames regardless, and so does the up-conversion."""
    import lz4.frame

    inner = entry(message(0, b"a", b"1")) + entry(message(0, b"b", b"2" * 5000), 1)
    frame = bytearray(lz4.frame.compress(inner, block_size=lz4.frame.BLOCKSIZE_MAX64KB))
    checksum_at = 6 + (8 if frame[4] & 0x08 else 0)  # after the content size, if any
    frame[checksum_at] ^= 0x5A  # the header checksum, as an old client computed it
    with pytest.raises(RuntimeError):  # a frame reader that checks it refuses the frame
        lz4.frame.decompress(bytes(frame))
    got = decode_records(up_convert(entry(message(0, None, bytes(frame), LZ4))), 0, decompress)
    assert [(r.key, r.value) for r in got] == [(b"a", b"1"), (b"b", b"2" * 5000)]
    with pytest.raises(CorruptBatchError):  # garbage blocks are still refused
        up_convert(
            entry(message(0, None, bytes(frame[: checksum_at + 1]) + b"\x05\x00\x00\x00junk!", LZ4))
        )


VALID_SETS = [
    old_set(0, [(0, b"a", b"1"), (0, None, b"2")]),
    old_set(1, [(5, b"a", b"1"), (6, b"b", None)], GZIP),
    old_set(1, [(5, b"a", b"1")], SNAPPY),
]


def _with_crcs(data: bytes) -> bytes:
    """`data` with every top-level message's CRC made right again, so that a mutation
    reaches the parsing behind the check."""
    out = bytearray(data)
    pos = 0
    while pos + 16 <= len(out):
        size = struct.unpack_from(">i", out, pos + 8)[0]
        end = pos + 12 + size
        if size < 4 or end > len(out):
            break
        struct.pack_into(">I", out, pos + 12, zlib.crc32(bytes(out[pos + 16 : end])))
        pos = end
    return bytes(out)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.sampled_from(VALID_SETS),
    st.integers(0, 120),
    st.binary(min_size=1, max_size=6),
    st.binary(max_size=120),
)
def test_mutated_message_sets_raise_only_the_formats_errors(
    valid: bytes, at: int, patch: bytes, noise: bytes
) -> None:
    mutated = valid[:at] + patch + valid[at + len(patch) :]
    for candidate in (noise, mutated, _with_crcs(mutated)):
        # CORRUPT_MESSAGE or INVALID_RECORD; any other exception fails the test
        with contextlib.suppress(InvalidBatchError):
            up_convert(candidate)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_down_conversion_keeps_a_compressed_batch_in_one_wrapper_of_its_codec(
    magic: int, codec: int
) -> None:
    # Kafka 3.9 (RecordsUtil.downConvert) builds each batch in its own codec: one wrapper
    # message at the batch's last offset holding the records from the fetch offset on.
    sent = [Record(f"k{i}".encode(), b"v" * i, 100 + i) for i in range(6)]
    data = bytes(encode_batch(sent, 100, base_offset=50, compression=codec))
    converted = down_convert(data, magic, 52)
    wrapper_offset, size = struct.unpack_from(">qi", converted)
    assert (wrapper_offset, len(converted)) == (55, 12 + size)  # one message, the wrapper
    got_magic, attributes = struct.unpack_from(">bb", converted, 16)
    assert (got_magic, attributes & 0x07) == (magic, codec)
    if magic == 1:
        assert struct.unpack_from(">q", converted, 18)[0] == 105  # the largest timestamp
    got = read_old(converted)
    assert [(o, k, v) for o, _t, k, v, _tt in got] == [
        (50 + i, f"k{i}".encode(), b"v" * i) for i in range(2, 6)
    ]
    if magic == 1:
        assert [t for _o, t, *_ in got] == [102, 103, 104, 105]
    if codec == LZ4 and magic == 0:  # the header checksum v0 clients compute (KAFKA-3160)
        import lz4.frame
        import xxhash

        key_end = 16 + 2 + 4
        frame = converted[key_end + 4 :]
        assert frame[6] == (xxhash.xxh32_intdigest(frame[:6]) >> 8) & 0xFF
        with pytest.raises(RuntimeError):
            lz4.frame.decompress(frame)
    # kbroker's own reader of old message sets takes it back with every CRC right
    back = decode_records(up_convert(converted), 0, decompress)
    assert [(r.key, r.value) for r in back] == [(r.key, r.value) for r in sent[2:]]
