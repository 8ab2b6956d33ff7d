"""A topic's compression.type decides the codec its batches are stored in (Kafka's
LogValidator): ``producer`` keeps each batch as sent, a codec rewrites the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.config import BrokerConfig, log_config_for
from kbroker.protocol.batch import (
    COMPRESSION_MASK,
    BatchTooLargeError,
    Record,
    decode_records,
    encode_batch,
    validate_batches,
)
from kbroker.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, decompress
from kbroker.storage.log import LogConfig, PartitionLog

NOW = 1_700_000_000_000
CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
RECORDS = [Record(b"k%d" % i, b"value-%d" % i * 20, NOW + i, [("h", b"x")]) for i in range(30)]


def stored(plog: PartitionLog) -> bytes:
    return plog.read(0, 1 << 24).read()  # type: ignore[union-attr]


def append_and_read(tmp_path: Path, compression_type: str, batch: bytes) -> bytes:
    config = LogConfig(**log_config_for({"compression.type": compression_type}, BrokerConfig()))
    plog = PartitionLog.open(tmp_path / "t-0", config, NOW)
    try:
        plog.append(batch, 0, NOW)
        return stored(plog)
    finally:
        plog.close()


@pytest.mark.parametrize("topic_codec", sorted(CODECS))
@pytest.mark.parametrize("produced_codec", [NONE, GZIP, ZSTD])
def test_a_batch_is_stored_in_the_topics_codec(
    tmp_path: Path, topic_codec: str, produced_codec: int
) -> None:
    batch = encode_batch(RECORDS, NOW, compression=produced_codec)
    data = append_and_read(tmp_path, topic_codec, batch)
    (h,) = validate_batches(data, 1 << 30)  # CRC and length of the rewritten batch hold
    assert h.attributes & COMPRESSION_MASK == CODECS[topic_codec]
    read_back = decode_records(data, h.position, decompress)
    assert [(r.key, r.value, r.timestamp, r.offset) for r in read_back] == [
        (r.key, r.value, r.timestamp, i) for i, r in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("produced_codec", [NONE, SNAPPY, LZ4])
def test_producer_keeps_the_batch_byte_for_byte(tmp_path: Path, produced_codec: int) -> None:
    batch = bytes(encode_batch(RECORDS, NOW, compression=produced_codec))
    data = append_and_read(tmp_path, "producer", batch)
    assert data[16:] == batch[16:]  # past the offset and leader epoch the append sets


def test_a_recompressed_idempotent_batch_keeps_its_producer_fields(tmp_path: Path) -> None:
    batch = encode_batch(
        RECORDS, NOW, compression=NONE, producer_id=0, producer_epoch=3, base_sequence=0
    )
    config = LogConfig(compression_type="gzip")
    plog = PartitionLog.open(tmp_path / "t-0", config, NOW)
    try:
        first = plog.append(batch, 0, NOW)
        again = plog.append(batch, 0, NOW)  # a retried send
        (h,) = validate_batches(stored(plog), 1 << 30)
    finally:
        plog.close()
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (0, 3, 0)
    assert h.attributes & COMPRESSION_MASK == GZIP
    assert again.base_offset == first.base_offset  # recognised as the duplicate it is


def test_a_batch_too_large_once_recompressed_is_refused(tmp_path: Path) -> None:
    batch = bytes(encode_batch(RECORDS, NOW, compression=ZSTD))
    config = LogConfig(compression_type="uncompressed", max_message_bytes=len(batch) + 10)
    plog = PartitionLog.open(tmp_path / "t-0", config, NOW)
    try:
        with pytest.raises(BatchTooLargeError):
            plog.append(batch, 0, NOW)
        assert plog.log_end_offset == 0
    finally:
        plog.close()


@pytest.mark.parametrize(
    ("codec", "low", "high"), [("gzip", 1, 9), ("lz4", 1, 17), ("zstd", 1, 19)]
)
def test_the_topics_level_for_its_codec_is_used(
    tmp_path: Path, codec: str, low: int, high: int
) -> None:
    text = b" ".join(
        b"record %d of a fairly repetitive payload %d" % (i, i % 7) for i in range(800)
    )
    batch = encode_batch([Record(None, text, NOW)], NOW)
    sizes = []
    for level in (low, high):
        overrides = {"compression.type": codec, f"compression.{codec}.level": str(level)}
        config = LogConfig(**log_config_for(overrides, BrokerConfig()))
        plog = PartitionLog.open(tmp_path / f"t-{level}", config, NOW)
        try:
            plog.append(batch, 0, NOW)
            sizes.append(len(stored(plog)))
        finally:
            plog.close()
    assert sizes[0] != sizes[1]  # the level reached the compressor
