"""Compression codecs: round trips, Kafka's xerial snappy framing, the decompression-bomb
guard, and batches produced by librdkafka (confluent-kafka) read back from the segments."""

from __future__ import annotations

import asyncio
import gzip
import os
import struct
import time
import uuid

import cramjam
import lz4.frame
import pytest
import zstandard
from inprocess import run_broker

from kbroker.protocol.batch import Record, decode_records, encode_batch, read_header
from kbroker.protocol.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    XERIAL_MAGIC,
    ZSTD,
    CompressionError,
    DecompressionBombError,
    bounded_decompressor,
    compress,
    decompress,
    xerial_snappy,
)
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog
from kbroker.storage.segment import scan_batches

CODECS = [GZIP, SNAPPY, LZ4, ZSTD]
PAYLOAD = os.urandom(40_000) + b"kafka " * 30_000 + bytes(range(256)) * 100


@pytest.mark.parametrize("codec", [NONE, *CODECS])
def test_round_trip(codec):
    assert decompress(codec, compress(codec, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_of_empty_input(codec):
    assert decompress(codec, compress(codec, b"")) == b""


@pytest.mark.parametrize("codec", CODECS)
def test_compression_shrinks_repetitive_data(codec):
    data = b"abcdefgh" * 10_000
    assert len(compress(codec, data)) < len(data) // 10


def test_snappy_is_written_in_xerial_framing():
    out = compress(SNAPPY, PAYLOAD)
    magic, version, compatible = struct.unpack_from(">8sii", out)
    assert (magic, version, compatible) == (XERIAL_MAGIC, 1, 1)
    # Blocks of at most 32 KiB input, each [length][raw snappy block].
    pos, total = 16, 0
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        block = bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + size]))
        assert len(block) <= 32 * 1024
        total += len(block)
        pos += 4 + size
    assert pos == len(out)
    assert total == len(PAYLOAD)


def test_xerial_snappy_written_by_hand_is_read():
    blocks = [b"first block " * 100, b"second " * 50]
    framed = struct.pack(">8sii", XERIAL_MAGIC, 1, 1)
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        framed += struct.pack(">i", len(raw)) + raw
    assert decompress(SNAPPY, framed) == b"".join(blocks)


def test_raw_snappy_block_is_accepted():
    raw = bytes(cramjam.snappy.compress_raw(PAYLOAD))
    assert decompress(SNAPPY, raw) == PAYLOAD


def test_xerial_framing_round_trips_with_small_blocks():
    framed = xerial_snappy(PAYLOAD, block_size=1000)
    assert decompress(SNAPPY, framed) == PAYLOAD


def test_gzip_reads_concatenated_members():
    data = gzip.compress(b"one ") + gzip.compress(b"two")
    assert decompress(GZIP, data) == b"one two"


def test_lz4_frames_have_independent_blocks():
    # The Java client rejects linked blocks: FLG bit 5 (block independence) must be set.
    out = compress(LZ4, PAYLOAD)
    assert out[:4] == b"\x04\x22\x4d\x18"
    assert out[4] & 0x20


def test_lz4_frame_from_stock_library_is_read():
    assert decompress(LZ4, lz4.frame.compress(PAYLOAD)) == PAYLOAD


def test_zstd_frame_without_content_size_is_read():
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    chunker = cctx.chunker(chunk_size=4096)
    frame = b"".join(chunker.compress(PAYLOAD)) + b"".join(chunker.finish())
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(ZSTD, frame) == PAYLOAD


def test_zstd_concatenated_frames_are_read():
    data = compress(ZSTD, b"left ") + compress(ZSTD, b"right")
    assert decompress(ZSTD, data) == b"left right"


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_is_refused_before_it_expands(codec):
    bomb = compress(codec, b"\0" * (64 * 1024 * 1024))
    assert len(bomb) < 4 * 1024 * 1024
    with pytest.raises(DecompressionBombError):
        decompress(codec, bomb, max_size=1024 * 1024)


def test_raw_snappy_bomb_is_refused_from_its_preamble():
    raw = bytes(cramjam.snappy.compress_raw(b"\0" * (8 * 1024 * 1024)))
    started = time.monotonic()
    with pytest.raises(DecompressionBombError):
        decompress(SNAPPY, raw, max_size=1024)
    assert time.monotonic() - started < 0.05


def test_output_exactly_at_the_limit_is_allowed():
    data = b"x" * 5000
    for codec in CODECS:
        assert decompress(codec, compress(codec, data), max_size=5000) == data


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_data_is_an_error(codec):
    out = compress(codec, PAYLOAD)
    with pytest.raises(CompressionError):
        decompress(codec, out[: len(out) // 2])


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_is_an_error(codec):
    with pytest.raises(CompressionError):
        decompress(codec, b"\x82SNAPPY\x00garbage that is no codec's data at all" * 3)


def test_unknown_codec_is_an_error():
    with pytest.raises(CompressionError):
        decompress(5, b"abc")
    with pytest.raises(CompressionError):
        compress(7, b"abc")


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batch_decodes_with_bounded_decompressor(codec):
    records = [Record(b"k%d" % i, b"v%d" % i * 50) for i in range(100)]
    batch = encode_batch(records, 1_700_000_000_000, compression=codec, compress=_with(codec))
    decoded = decode_records(batch, 0, bounded_decompressor(1 << 20))
    assert [(r.key, r.value) for r in decoded] == [(r.key, r.value) for r in records]
    with pytest.raises(DecompressionBombError):
        decode_records(batch, 0, bounded_decompressor(100))


def _with(codec):
    return lambda data: compress(codec, data)


@pytest.mark.parametrize("codec", CODECS)
def test_offset_for_timestamp_finds_record_inside_compressed_batch(tmp_path, codec):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    try:
        base = 1_700_000_000_000
        records = [Record(b"k", b"v" * 100, base + i * 10) for i in range(50)]
        plog.append(encode_batch(records, base, compression=codec, compress=_with(codec)), 0, base)
        assert plog.offset_for_timestamp(base + 255) == (26, base + 260)
        assert plog.max_timestamp() == (base + 490, 49)
    finally:
        plog.close()


# -- interop: batches librdkafka compressed, as stored by a real broker ------------------

LIBRDKAFKA_CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


@pytest.mark.timeout(120)
def test_batches_produced_by_librdkafka_decompress(tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    results: dict[str, tuple[set[int], list[tuple[bytes | None, bytes | None]]]] = {}

    async def check(broker, port):
        loop = asyncio.get_running_loop()
        bootstrap = f"127.0.0.1:{port}"

        def create(names):
            admin = AdminClient({"bootstrap.servers": bootstrap})
            futures = admin.create_topics([NewTopic(n, 1, 1) for n in names])
            for f in futures.values():
                f.result(timeout=20)

        def produce(topic, codec):
            producer = confluent_kafka.Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "compression.type": codec,
                    "linger.ms": 50,
                    "batch.num.messages": 200,
                }
            )
            for i in range(600):
                producer.produce(topic, value=b"value %05d " % i * 20, key=b"key-%d" % i)
            assert producer.flush(30) == 0

        topics = {codec: f"compress-{codec}-{uuid.uuid4().hex[:8]}" for codec in LIBRDKAFKA_CODECS}
        await loop.run_in_executor(None, create, list(topics.values()))
        for codec, topic in topics.items():
            await loop.run_in_executor(None, produce, topic, codec)
        for codec, topic in topics.items():
            plog = broker.logs.get(topic, 0)
            seg = plog.segments[0]
            codecs: set[int] = set()
            decoded: list[tuple[bytes | None, bytes | None]] = []
            for h in scan_batches(seg.file.fd, 0, seg.size):
                raw = seg.read_bytes(h.position, h.total_size)
                codecs.add(read_header(raw).compression)
                decoded += [(r.key, r.value) for r in decode_records(raw, 0, decompress)]
            results[codec] = (codecs, decoded)

    run_broker(tmp_path, check)
    expected = [(b"key-%d" % i, b"value %05d " % i * 20) for i in range(600)]
    for name, codec in LIBRDKAFKA_CODECS.items():
        codecs, decoded = results[name]
        assert codecs == {codec}, name
        assert decoded == expected, name


def test_a_corrupt_snappy_block_is_a_compression_error() -> None:
    """cramjam's own error for a block that does not inflate is turned into ours, which
    the append path answers with CORRUPT_MESSAGE."""
    from kbroker.protocol.compression import SNAPPY, CompressionError, decompress, xerial_snappy

    data = bytearray(xerial_snappy(b"abcdefgh" * 100))
    data[-6:] = b"\x7f\xff\xff\xff\xff\xff"
    with pytest.raises(CompressionError):
        decompress(SNAPPY, bytes(data))
