"""Records in bulk: as `kbroker produce` writes them and `kbroker consume` reads them, and
as the coordinators write theirs to their internal topics (coordinator_runtime).

A batch's record section is built straight from the lines of the input (`encode_lines`)
or from (key, value) pairs (`encode_pairs`), every record with timestamp delta 0 and
the same encoded headers; `batch` puts the v2 header (and CRC-32C) in front. Reading,
`sections` walks the batches of a fetched partition and `decode` / `join_values` read a
section's records: `join_values` builds the text of the common outputs (values, or
key, separator and value) without a Python object per record.

The functions below are the reference: the same ones run in C (`_recordcodec`, built
with the package) at a few percent of the cost; a test checks that both agree.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from crc32c import crc32c

from kbroker.protocol.varint import read_varint, write_varint

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# One batch of a request: under the broker's default message.max.bytes (1 MiB + 12).
BATCH_BYTES = 900 * 1024
BATCH_RECORDS = 100_000

# The v2 batch header (kbroker.protocol.batch reads it the same way; that module and the
# compression codecs it imports are left out of a command that needs neither).
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size
_CRC = struct.Struct(">I")
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_TIMESTAMP_TYPE = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


class Header:
    """The fields of a batch header the consumer reads."""

    __slots__ = ("base_offset", "total_size", "attributes", "last_offset_delta",
                 "base_timestamp", "max_timestamp", "producer_id", "record_count")  # fmt: skip

    def __init__(self, data: bytes | memoryview, pos: int) -> None:
        (self.base_offset, length, _, _, _, self.attributes, self.last_offset_delta,
         self.base_timestamp, self.max_timestamp, self.producer_id, _, _,
         self.record_count) = _HEADER.unpack_from(data, pos)  # fmt: skip
        self.total_size: int = length + 12

    @property
    def compression(self) -> int:
        return int(self.attributes) & 0x07

    @property
    def last_offset(self) -> int:
        return int(self.base_offset) + int(self.last_offset_delta)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def read_header(data: bytes | memoryview, pos: int) -> Header:
    return Header(data, pos)


Decoded = tuple[int, int, bytes | None, bytes | None, tuple[tuple[bytes, bytes | None], ...]]


NO_HEADERS = b"\x00"
"""The headers blob of records without headers: a count of zero."""


def headers_blob(headers: Sequence[tuple[str, str | None]]) -> bytes:
    """The encoded header count and headers every record of a run carries."""
    out = bytearray()
    write_varint(out, len(headers))
    for key, value in headers:
        k = key.encode()
        write_varint(out, len(k))
        out += k
        if value is None:
            write_varint(out, -1)
        else:
            v = value.encode()
            write_varint(out, len(v))
            out += v
    return bytes(out)


def _record(out: bytearray, delta: int, key: bytes | None, value: bytes | None, hb: bytes) -> None:
    body = bytearray(b"\x00\x00")
    write_varint(body, delta)
    for field in (key, value):
        if field is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(field))
            body += field
    body += hb
    write_varint(out, len(body))
    out += body


def encode_lines_py(
    data: bytes,
    pos: int,
    final: bool,
    key_sep: bytes | None,
    headers: bytes,
    max_records: int,
    max_bytes: int,
) -> tuple[bytes, int, int]:
    """Records of the lines of data[pos:] (offset deltas from 0) until `max_records` or
    `max_bytes`: (section, count, position after the last line used). A last line with
    no newline counts only when `final`; a line without `key_sep` (when one is given)
    raises ValueError(index of the line in this section, its position)."""
    out = bytearray()
    count = 0
    while pos < len(data) and count < max_records and len(out) < max_bytes:
        nl = data.find(b"\n", pos)
        if nl < 0:
            if not final:
                break
            nl = len(data)
        line = data[pos:nl]
        key = None
        if key_sep is not None:
            cut = line.find(key_sep)
            if cut < 0:
                raise ValueError(count, pos)
            key, line = line[:cut], line[cut + len(key_sep) :]
        _record(out, count, key, line, headers)
        count += 1
        pos = nl + 1 if nl < len(data) else nl
    return bytes(out), count, pos


def encode_pairs_py(pairs: Sequence[tuple[bytes | None, bytes | None]], headers: bytes) -> bytes:
    out = bytearray()
    for i, (key, value) in enumerate(pairs):
        _record(out, i, key, value, headers)
    return bytes(out)


def _field(data: bytes, p: int) -> tuple[bytes | None, int]:
    n, p = read_varint(data, p)
    if n < -1 or p + max(n, 0) > len(data):
        raise ValueError("corrupt record")
    return (None, p) if n < 0 else (data[p : p + n], p + n)


def decode_py(data: bytes, count: int, min_delta: int) -> list[Decoded]:
    """(offset delta, timestamp delta, key, value, headers) of each record of a section
    whose offset delta is at least `min_delta`."""
    out: list[Decoded] = []
    p = 0
    try:
        for _ in range(count):
            length, p = read_varint(data, p)
            end = p + length
            if length < 0 or end > len(data):
                raise ValueError("corrupt record")
            ts, p = read_varint(data, p + 1)
            delta, p = read_varint(data, p)
            key, p = _field(data, p)
            value, p = _field(data, p)
            n, p = read_varint(data, p)
            headers = []
            for _ in range(n):
                hk, p = _field(data, p)
                hv, p = _field(data, p)
                if hk is None:
                    raise ValueError("corrupt record")
                headers.append((hk, hv))
            if p != end:
                raise ValueError("corrupt record")
            if delta >= min_delta:
                out.append((delta, ts, key, value, tuple(headers)))
    except IndexError:
        raise ValueError("corrupt record") from None
    return out


def join_values_py(
    data: bytes, count: int, min_delta: int, key_sep: bytes | None, end: bytes
) -> tuple[bytes, int]:
    """The text of the records' values (after key and `key_sep` when given), each
    followed by `end`; null keys and values print as nothing."""
    parts = []
    records = decode_py(data, count, min_delta)
    for _, _, key, value, _ in records:
        if key_sep is not None:
            parts.append((key or b"") + key_sep)
        parts.append((value or b"") + end)
    return b"".join(parts), len(records)


try:
    from kbroker.protocol._recordcodec import decode, encode_lines, encode_pairs, join_values
except ImportError:  # built without a compiler: the same, slower
    encode_lines, encode_pairs = encode_lines_py, encode_pairs_py
    decode, join_values = decode_py, join_values_py


def batch(section: bytes, count: int, timestamp: int, codec: int = 0) -> bytearray:
    """A v2 batch of the records in `section` (offset deltas 0..count-1, all at
    `timestamp`), its section compressed with `codec` as Kafka's producers do."""
    if codec:
        from kbroker.protocol.compression import compress

        body = compress(codec, section)
    else:
        body = section
    out = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        out, 0, 0, HEADER_SIZE - 12 + len(body), -1, 2, 0, codec, count - 1,
        timestamp, timestamp, -1, -1, -1, count,
    )  # fmt: skip
    out += body
    _CRC.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return out


class Section:
    """The records of one fetched batch: where they start, when, and their bytes."""

    __slots__ = ("base_offset", "base_timestamp", "log_append_time", "count", "data", "next")

    def __init__(self, header: Header, data: bytes) -> None:
        self.base_offset: int = header.base_offset
        self.base_timestamp: int = header.base_timestamp
        # LogAppendTime batches give every record the batch's max timestamp.
        self.log_append_time: int | None = (
            header.max_timestamp if header.attributes & _TIMESTAMP_TYPE else None
        )
        self.count: int = header.record_count
        self.data = data
        self.next: int = header.next_offset


def sections(records: bytes, aborted: Sequence[tuple[int, int]] | None = None) -> Iterator[Section]:
    """The data batches of fetched `records` (compressed ones decompressed), leaving out
    control batches and, as Kafka's read_committed consumers do, the batches of aborted
    transactions: `aborted` is the Fetch answer's (producer id, first offset) pairs, a
    producer's batches from its first offset on skipped until its abort marker. A
    trailing partial batch ends it."""
    pending = sorted((first, pid) for pid, first in aborted or ())
    active: set[int] = set()
    pos = 0
    view = memoryview(records)
    while pos + HEADER_SIZE <= len(records):
        header = read_header(records, pos)
        end = pos + header.total_size
        if end > len(records):
            return
        while pending and pending[0][0] <= header.last_offset:
            active.add(pending.pop(0)[1])
        if header.attributes & _CONTROL:
            active.discard(header.producer_id)
        elif not (header.attributes & _TRANSACTIONAL and header.producer_id in active):
            body = bytes(view[pos + HEADER_SIZE : end])
            if header.compression:
                from kbroker.protocol.compression import decompress

                body = decompress(header.compression, body)
            yield Section(header, body)
        pos = end


def last_offset_after(records: bytes) -> int | None:
    """The offset after the last whole batch of fetched `records`, read from the batch
    headers alone (so the next fetch can be asked before the records are read)."""
    pos, after = 0, None
    while pos + HEADER_SIZE <= len(records):
        header = read_header(records, pos)
        if pos + header.total_size > len(records):
            break
        after = header.next_offset
        pos += header.total_size
    return after
