"""Batch headers: the walk every append runs (validate_batches), offsets, timestamps.

The walk runs in C where the extension is built; tests that take `walk` run it both
ways, and random, cut and flipped blobs get the same headers or the same error from both.
"""

import random
import struct

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from kbroker.protocol.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    MAGIC_OFFSET,
    BatchTooLargeError,
    CorruptBatchError,
    InvalidBatchError,
    InvalidRecordsError,
    Record,
    assign_offsets,
    decode_records,
    encode_batch,
    read_header,
    set_log_append_time,
    validate_batches,
    validate_batches_py,
)

BIG = 1 << 30


@pytest.fixture(params=["c", "python"])
def walk(request, monkeypatch):
    """validate_batches through the C walk, or through validate_batches_py."""
    from kbroker.protocol import _requestread, batch

    if request.param == "python":
        monkeypatch.setattr(batch, "_batch_headers", validate_batches_py)
    else:
        assert batch._batch_headers is _requestread.batch_headers
    return request.param


def test_header_fields_parse_from_encoded_batch():
    buf = encode_batch(
        [b"a", b"b", b"c"],
        1_000,
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
    )
    h = read_header(buf, 0)
    assert h.magic == 2
    assert h.batch_length == len(buf) - 12
    assert h.total_size == len(buf)
    assert h.record_count == 3
    assert h.last_offset_delta == 2
    assert h.base_timestamp == 1_000
    assert h.max_timestamp == 1_000
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, 11)
    assert h.is_transactional and not h.is_control
    assert h.compression == 0 and h.timestamp_type == 0
    assert h.last_sequence == 13
    assert h.crc == crc32c(bytes(buf[ATTRIBUTES_OFFSET:]))


def test_attribute_bits_map_to_properties():
    buf = encode_batch([b"x"], 0, is_control=True, log_append_time=True, compression=1)
    h = read_header(buf)
    assert h.is_control and h.timestamp_type == 1 and h.compression == 1


def test_validate_walks_concatenated_batches(walk):
    a = encode_batch([b"1", b"2"], 10)
    b = encode_batch([b"3"], 20)
    headers = validate_batches(a + b, BIG)
    assert [h.position for h in headers] == [0, len(a)]
    assert [h.record_count for h in headers] == [2, 1]


def test_validate_accepts_memoryview(walk):
    a = encode_batch([b"1"], 10)
    assert len(validate_batches(memoryview(a), BIG)) == 1


def test_crc_mismatch_is_rejected(walk):
    buf = encode_batch([b"payload"], 5)
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        validate_batches(buf, BIG)


def test_wrong_magic_is_rejected(walk):
    buf = encode_batch([b"payload"], 5)
    buf[MAGIC_OFFSET] = 1
    with pytest.raises(CorruptBatchError, match="magic"):
        validate_batches(buf, BIG)


def test_empty_input_is_rejected(walk):
    with pytest.raises(CorruptBatchError):
        validate_batches(b"", BIG)


@pytest.mark.parametrize("cut", [1, 12, HEADER_SIZE - 1, HEADER_SIZE, -1])
def test_truncated_input_is_rejected(walk, cut):
    buf = encode_batch([b"payload", b"more"], 5)
    with pytest.raises(CorruptBatchError):
        validate_batches(bytes(buf[:cut]), BIG)


def test_trailing_partial_batch_is_rejected(walk):
    a = encode_batch([b"1"], 10)
    with pytest.raises(CorruptBatchError, match="partial"):
        validate_batches(a + a[:30], BIG)


def test_batch_length_below_header_is_rejected(walk):
    buf = encode_batch([b"1"], 10)
    struct.pack_into(">i", buf, 8, 20)
    with pytest.raises(CorruptBatchError, match="length"):
        validate_batches(buf, BIG)


def test_record_count_disagreeing_with_offset_delta_is_an_invalid_record(walk):
    buf = encode_batch([b"1", b"2"], 10)
    struct.pack_into(">i", buf, 57, 5)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    with pytest.raises(InvalidRecordsError, match="count"):
        validate_batches(buf, BIG)
    assert len(validate_batches(buf, BIG, check_record_count=False)) == 1


def test_oversized_batch_raises_too_large(walk):
    buf = encode_batch([b"x" * 1000], 10)
    with pytest.raises(BatchTooLargeError):
        validate_batches(buf, len(buf) - 1)
    assert validate_batches(buf, len(buf))
    assert issubclass(BatchTooLargeError, InvalidBatchError)


def test_assign_offsets_patches_consecutive_bases_and_epoch(walk):
    a = encode_batch([b"1", b"2", b"3"], 10)
    b = encode_batch([b"4"], 10)
    buf = a + b
    headers = validate_batches(buf, BIG)
    nxt = assign_offsets(buf, headers, 100, 9)
    assert nxt == 104
    assert [read_header(buf, h.position).base_offset for h in headers] == [100, 103]
    assert {read_header(buf, h.position).partition_leader_epoch for h in headers} == {9}
    assert headers[1].base_offset == 103
    validate_batches(buf, BIG)  # CRC still valid: fields are outside it


def test_set_log_append_time_sets_type_and_max_timestamp_and_crc(walk):
    buf = encode_batch([Record(b"k", b"v", 50), Record(None, b"w", 70)], 50)
    (h,) = validate_batches(buf, BIG)
    set_log_append_time(buf, h, 0, 12345)
    (h2,) = validate_batches(buf, BIG)
    assert h2.timestamp_type == 1
    assert h2.max_timestamp == 12345
    assert h2.base_timestamp == 50
    assert [r.timestamp for r in decode_records(buf)] == [12345, 12345]


def test_decode_round_trips_records():
    recs = [
        Record(b"k1", b"v1", 100, [("h", b"x")]),
        Record(None, None, 90),
        Record(b"", b"v" * 300, 150),
    ]
    buf = encode_batch(recs, 100, base_offset=40)
    out = decode_records(buf)
    assert [(r.key, r.value, r.timestamp, r.offset) for r in out] == [
        (b"k1", b"v1", 100, 40),
        (None, None, 90, 41),
        (b"", b"v" * 300, 150, 42),
    ]
    assert out[0].headers == [("h", b"x")]
    assert read_header(buf).max_timestamp == 150


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_compressed_batch_round_trips(walk, codec):
    import gzip

    import lz4.frame
    import zstandard

    decompressors = {
        1: gzip.decompress,
        3: lz4.frame.decompress,
        4: zstandard.ZstdDecompressor().decompress,
    }
    buf = encode_batch([b"abc" * 50, b"def"], 7, compression=codec)
    validate_batches(buf, BIG)
    out = decode_records(buf, decompress=lambda c, d: decompressors[c](d))
    assert [r.value for r in out] == [b"abc" * 50, b"def"]


@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.binary(max_size=200)),
        min_size=1,
        max_size=20,
    ),
    st.integers(min_value=0, max_value=2**40),
)
@pytest.mark.slow
def test_encode_then_validate_and_decode_property(pairs, ts):
    buf = encode_batch(pairs, ts)
    (h,) = validate_batches(buf, BIG)
    assert h.record_count == len(pairs)
    assert [(r.key, r.value) for r in decode_records(buf)] == pairs


@given(st.integers(min_value=HEADER_SIZE, max_value=400), st.integers(0, 255))
def test_any_single_byte_flip_in_crc_range_is_detected(pos_seed, flip):
    buf = encode_batch([b"x" * 300], 1)
    pos = ATTRIBUTES_OFFSET + pos_seed % (len(buf) - ATTRIBUTES_OFFSET)
    if flip == 0:
        flip = 1
    buf[pos] ^= flip
    with pytest.raises(InvalidBatchError):
        validate_batches(buf, BIG)


def test_declared_length_past_end_is_corrupt_not_too_large(walk):
    buf = encode_batch([b"x"], 10)
    struct.pack_into(">i", buf, 8, 2**31 - 1)
    with pytest.raises(CorruptBatchError):
        validate_batches(buf, 1000)


def test_message_format_v0_and_v1_are_unsupported_not_corrupt(walk) -> None:
    from kbroker.protocol.batch import UnsupportedMagicError

    # offset, size, crc, magic 1, attributes, timestamp, key -1, value "x": a v1 message
    message = struct.pack(">qii", 0, 23, 0) + bytes([1, 0]) + struct.pack(">qii", 0, -1, 1) + b"x"
    with pytest.raises(UnsupportedMagicError, match="message format v1"):
        validate_batches(message, 1 << 20)


def _outcome(validate, data, check_record_count):
    try:
        return validate(data, 4000, check_record_count)
    except InvalidBatchError as exc:
        return type(exc), str(exc), getattr(exc, "record_errors", None)


def test_c_and_python_agree_on_cut_and_flipped_batches():
    """Every cut of two batches, and thousands of them with header bytes changed: both
    walks give equal headers, or the same error with the same message."""
    from kbroker.protocol._requestread import batch_headers

    rng = random.Random(7)
    whole = bytes(encode_batch([b"x" * 30, b"y"], 5) + encode_batch([(b"k", b"v")], 9))
    v1 = struct.pack(">qii", 0, 23, 0) + bytes([1, 0]) + struct.pack(">qii", 0, -1, 1) + b"x"
    cases = [whole[:cut] for cut in range(len(whole) + 1)] + [v1, v1[:20]]
    for _ in range(4000):
        data = bytearray(whole)
        for _ in range(rng.randint(1, 2)):
            data[rng.randrange(HEADER_SIZE)] = rng.choice((0, 1, 2, 0x7F, 0xFF, rng.randrange(256)))
        cases.append(bytes(data))
    for data in cases:
        for check in (True, False):
            c = _outcome(batch_headers, data, check)
            assert c == _outcome(validate_batches_py, data, check), data.hex()


@given(st.binary(max_size=200), st.booleans())
def test_c_and_python_agree_on_random_bytes(data, check_record_count):
    from kbroker.protocol._requestread import batch_headers

    c = _outcome(batch_headers, data, check_record_count)
    assert c == _outcome(validate_batches_py, data, check_record_count)
