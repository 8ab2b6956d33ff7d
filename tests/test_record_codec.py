"""The record codec of `kbroker produce` / `consume` and of the coordinators' writes: C and
Python agree, and what they build is what Kafka's batch reader (kbroker.protocol.batch) reads."""

from __future__ import annotations

import random

import pytest

from kbroker.protocol import record_codec as codec
from kbroker.protocol.batch import decode_records


def random_lines(rng: random.Random, n: int) -> bytes:
    lines = []
    for _ in range(n):
        size = rng.choice([0, 1, 5, 63, 64, 200, 9000])
        lines.append(bytes(rng.randrange(256) for _ in range(size)).replace(b"\n", b"."))
    return b"\n".join(lines)


@pytest.mark.parametrize("seed", range(5))
def test_c_and_python_encode_and_decode_alike(seed):
    rng = random.Random(seed)
    data = random_lines(rng, 300) + b"\nk1:tail"
    headers = codec.headers_blob([("a", "1"), ("b", None)][: rng.randrange(3)])
    sep = rng.choice([None, b":", b"::"])
    if sep is not None:
        data = data.replace(b"\n", b"\n" + sep)[len(sep) :]
        data = sep + data
    for final in (False, True):
        args = (data, 0, final, sep, headers, 200, 50_000)
        assert codec.encode_lines(*args) == codec.encode_lines_py(*args)
    section, count, _ = codec.encode_lines(data, 0, True, sep, headers, 10**6, 10**8)
    assert count == 301
    for skip in (0, 7):
        assert codec.decode(section, count, skip) == codec.decode_py(section, count, skip)
        for key_sep in (None, b"\t"):
            assert codec.join_values(section, count, skip, key_sep, b"\n") == (
                codec.join_values_py(section, count, skip, key_sep, b"\n")
            )
    pairs = [(None, b"v"), (b"k", None), (b"", b"")]
    assert codec.encode_pairs(pairs, headers) == codec.encode_pairs_py(pairs, headers)


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_a_batch_reads_back_as_the_lines_with_their_headers(compression):
    data = b"a\nbb\n\nk=v"
    headers = codec.headers_blob([("source", "cli")])
    section, count, pos = codec.encode_lines(data, 0, True, None, headers, 100, 10**6)
    assert (count, pos) == (4, len(data))
    batch = codec.batch(section, count, 1234, codec.CODECS[compression])
    from kbroker.protocol.compression import decompress

    records = decode_records(batch, 0, decompress)
    assert [r.value for r in records] == [b"a", b"bb", b"", b"k=v"]
    assert {r.timestamp for r in records} == {1234}
    assert records[0].headers == [("source", b"cli")]
    (section_read,) = codec.sections(batch)
    assert codec.join_values(section_read.data, section_read.count, 1, None, b"|") == (
        b"bb||k=v|",
        3,
    )


def test_a_line_without_the_key_separator_is_named():
    for encode in (codec.encode_lines, codec.encode_lines_py):
        with pytest.raises(ValueError) as caught:
            encode(b"k:v\nnokey\n", 0, True, b":", b"\x00", 10, 10**6)
        assert caught.value.args == (1, 4)


def test_batches_stop_at_the_record_and_byte_limits():
    data = b"".join(b"%05d\n" % i for i in range(100))
    _, count, pos = codec.encode_lines(data, 0, True, None, b"\x00", 10, 10**6)
    assert (count, pos) == (10, 60)
    _, count, _ = codec.encode_lines(data, 0, True, None, b"\x00", 1000, 50)
    assert count == 5
    _, count, pos = codec.encode_lines(b"whole\npart", 0, False, None, b"\x00", 10, 10**6)
    assert (count, pos) == (1, 6)


def test_aborted_transactions_are_skipped_until_their_marker():
    from kbroker.protocol.batch import encode_batch

    def txn(offset: int, pid: int, value: bytes) -> bytes:
        return bytes(
            encode_batch([value], 0, base_offset=offset, producer_id=pid, producer_epoch=0,
                         base_sequence=0, is_transactional=True)
        )  # fmt: skip

    def marker(offset: int, pid: int) -> bytes:
        return bytes(
            encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], 0,
                         base_offset=offset, producer_id=pid, producer_epoch=0,
                         is_transactional=True, is_control=True)
        )  # fmt: skip

    data = txn(0, 7, b"aborted") + marker(1, 7) + txn(2, 7, b"committed") + marker(3, 7)
    values = [s.data for s in codec.sections(data, [(7, 0)])]
    assert [codec.join_values(v, 1, 0, None, b"")[0] for v in values] == [b"committed"]
    assert codec.last_offset_after(data) == 4


def test_a_hostile_record_count_does_not_size_the_output():
    """A batch header may claim two billion records over a few bytes: the reader fails
    on the section, without first reserving gigabytes for the records it announced."""
    import tracemalloc

    section = codec.encode_pairs_py([(b"k", b"v")], b"\x00")
    tracemalloc.start()
    try:
        for join in (codec.join_values, codec.join_values_py):
            with pytest.raises(ValueError):
                join(section, 2**31 - 1, 0, b"\t", b"\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize("compression", ["none", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("count", [1, 6, 300])
def test_key_value_pairs_make_the_batch_encode_batch_makes(compression, count):
    """A coordinator's records (coordinator_runtime.internal_topics) go through
    encode_pairs and batch: the very bytes the general encoder gives the same records."""
    from kbroker.protocol.batch import Record, encode_batch

    rng = random.Random(count)
    pairs = [
        (bytes(rng.randrange(256) for _ in range(rng.randrange(80))), rng.choice([None, b"v" * i]))
        for i in range(count)
    ]
    codec_id = codec.CODECS[compression]
    fast = codec.batch(
        codec.encode_pairs(pairs, codec.NO_HEADERS), count, 1_700_000_000_123, codec_id
    )
    general = encode_batch(
        [Record(k, v, 1_700_000_000_123) for k, v in pairs],
        1_700_000_000_123,
        compression=codec_id,
    )
    assert bytes(fast) == bytes(general)
