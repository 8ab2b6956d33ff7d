"""Records of the `__transaction_state` log, in Kafka's layout (key and value version 0).

Key: int16 version, string transactional id. Value: int16 version, int64 producer
id, int16 epoch, int32 timeout, int8 state, nullable array of (topic, [partition]),
int64 last update time, int64 start time. A null value (tombstone) removes the id.
"""

from __future__ import annotations

import struct

from kbroker.txn.metadata import TxnMetadata, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
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


def encode_txn_value(meta: TxnMetadata) -> bytes:
    out = bytearray(
        _VALUE_HEAD.pack(
            VALUE_VERSION, meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state)
        )
    )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out += _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        out += _string(topic) + _I32.pack(len(partitions))
        out += b"".join(_I32.pack(p) for p in partitions)
    out += _TIMES.pack(meta.last_update_ms, meta.start_ms)
    return bytes(out)


def decode_txn_value(transactional_id: str, data: bytes) -> TxnMetadata:
    try:
        version, pid, epoch, timeout, state = _VALUE_HEAD.unpack_from(data, 0)
        if version not in (0, 1):
            raise TxnRecordError(f"transaction log value version {version}")
        pos = _VALUE_HEAD.size
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        partitions: set[tuple[str, int]] = set()
        for _ in range(max(count, 0)):
            (length,) = _I16.unpack_from(data, pos)
            topic = data[pos + 2 : pos + 2 + length].decode()
            pos += 2 + length
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(n):
                partitions.add((topic, _I32.unpack_from(data, pos)[0]))
                pos += 4
        last_update, start = _TIMES.unpack_from(data, pos)
        txn_state = TxnState(state)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
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
    )
