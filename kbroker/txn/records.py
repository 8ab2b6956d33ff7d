"""Records of the `__transaction_state` log, in Kafka's layout (key version 0, value
version 0 or 1).

Key: int16 version, string transactional id. Value: int16 version, int64 producer
id, int16 epoch, int32 timeout, int8 state, nullable array of (topic, [partition]),
int64 last update time, int64 start time. Version 1 is the flexible form of the same
fields (compact strings and arrays) with three tagged fields: the previous producer id
(0), the next producer id (1) and the client's transaction version (2), which
transactions version 2 needs to survive a coordinator failover. A null value
(tombstone) removes the id.
"""

from __future__ import annotations

import struct

from kbroker.protocol.errors import MalformedRequest
from kbroker.protocol.varint import read_uvarint, write_uvarint
from kbroker.txn.metadata import NO_PRODUCER_ID, TxnMetadata, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# The tagged fields of value version 1 (Kafka's TransactionLogValue.json).
_TAG_PREVIOUS_PRODUCER_ID, _TAG_NEXT_PRODUCER_ID, _TAG_CLIENT_VERSION = 0, 1, 2
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMES = struct.Struct(">qq")


class TxnRecordError(ValueError):
    """A record of the transaction log that cannot be read."""


def _string(value: str) -> bytes:
    data = value.encode()
    return _I16.pack(len(data)) + data


def encode_txn_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_txn_key(data: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(data, 0)
        (length,) = _I16.unpack_from(data, 2)
    except struct.error as exc:
        raise TxnRecordError("short transaction log key") from exc
    if version != KEY_VERSION or length < 0 or 4 + length > len(data):
        raise TxnRecordError(f"unreadable transaction log key (version {version})")
    return data[4 : 4 + length].decode()


def _partitions_by_topic(meta: TxnMetadata) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def encode_txn_value(meta: TxnMetadata, version: int = VALUE_VERSION) -> bytes:
    """The value of `meta`'s record: version 0, or 1 (flexible, with the tagged fields
    transactions version 2 needs) as Kafka writes once transaction.version is 1+."""
    if version >= 1:
        return _encode_v1(meta)
    out = bytearray(
        _VALUE_HEAD.pack(
            VALUE_VERSION, meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state)
        )
    )
    by_topic = _partitions_by_topic(meta)
    out += _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        out += _string(topic) + _I32.pack(len(partitions))
        out += b"".join(_I32.pack(p) for p in partitions)
    out += _TIMES.pack(meta.last_update_ms, meta.start_ms)
    return bytes(out)


def _encode_v1(meta: TxnMetadata) -> bytes:
    out = bytearray(
        _VALUE_HEAD.pack(1, meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state))
    )
    by_topic = _partitions_by_topic(meta)
    write_uvarint(out, len(by_topic) + 1)
    for topic, partitions in by_topic.items():
        name = topic.encode()
        write_uvarint(out, len(name) + 1)
        out += name
        write_uvarint(out, len(partitions) + 1)
        out += b"".join(_I32.pack(p) for p in partitions)
        out += b"\x00"  # no tagged fields
    out += _TIMES.pack(meta.last_update_ms, meta.start_ms)
    present: list[tuple[int, bytes]] = []
    if meta.last_producer_id != NO_PRODUCER_ID:
        present.append((_TAG_PREVIOUS_PRODUCER_ID, _I64.pack(meta.last_producer_id)))
    if meta.next_producer_id != NO_PRODUCER_ID:
        present.append((_TAG_NEXT_PRODUCER_ID, _I64.pack(meta.next_producer_id)))
    if meta.client_transaction_version:
        present.append((_TAG_CLIENT_VERSION, _I16.pack(meta.client_transaction_version)))
    write_uvarint(out, len(present))
    for tag, data in present:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data
    return bytes(out)


def _read_tagged(data: bytes, pos: int) -> tuple[dict[int, bytes], int]:
    count, pos = read_uvarint(data, pos)
    fields = {}
    for _ in range(count):
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        if pos + size > len(data):
            raise TxnRecordError("truncated tagged field")
        fields[tag] = data[pos : pos + size]
        pos += size
    return fields, pos


def _tagged_int(tagged: dict[int, bytes], tag: int, form: struct.Struct, default: int) -> int:
    data = tagged.get(tag)
    return default if data is None else int(form.unpack(data)[0])


def decode_txn_value(transactional_id: str, data: bytes) -> TxnMetadata:
    try:
        version, pid, epoch, timeout, state = _VALUE_HEAD.unpack_from(data, 0)
        if version not in (0, 1):
            raise TxnRecordError(f"transaction log value version {version}")
        flexible = version >= 1
        pos = _VALUE_HEAD.size
        if flexible:
            count, pos = read_uvarint(data, pos)
            count -= 1
        else:
            (count,) = _I32.unpack_from(data, pos)
            pos += 4
        partitions: set[tuple[str, int]] = set()
        for _ in range(max(count, 0)):
            if flexible:
                length, pos = read_uvarint(data, pos)
                length -= 1
            else:
                (length,) = _I16.unpack_from(data, pos)
                pos += 2
            topic = data[pos : pos + length].decode()
            pos += length
            if flexible:
                n, pos = read_uvarint(data, pos)
                n -= 1
            else:
                (n,) = _I32.unpack_from(data, pos)
                pos += 4
            for _ in range(n):
                partitions.add((topic, _I32.unpack_from(data, pos)[0]))
                pos += 4
            if flexible:
                _, pos = _read_tagged(data, pos)
        last_update, start = _TIMES.unpack_from(data, pos)
        pos += _TIMES.size
        tagged = _read_tagged(data, pos)[0] if flexible else {}
        txn_state = TxnState(state)
        previous = _tagged_int(tagged, _TAG_PREVIOUS_PRODUCER_ID, _I64, NO_PRODUCER_ID)
        nxt = _tagged_int(tagged, _TAG_NEXT_PRODUCER_ID, _I64, NO_PRODUCER_ID)
        client_version = _tagged_int(tagged, _TAG_CLIENT_VERSION, _I16, 0)
    except (struct.error, UnicodeDecodeError, ValueError, MalformedRequest) as exc:
        if isinstance(exc, TxnRecordError):
            raise
        raise TxnRecordError(f"unreadable transaction log value: {exc}") from exc
    return TxnMetadata(
        transactional_id,
        pid,
        epoch,
        timeout,
        txn_state,
        partitions,
        start,
        last_update,
        last_producer_id=previous,
        next_producer_id=nxt,
        client_transaction_version=client_version,
    )
