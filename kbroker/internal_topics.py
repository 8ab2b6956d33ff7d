"""The coordinators' internal compacted topics (`__consumer_offsets`, `__transaction_state`).

The group and the transaction coordinator keep their state the same way: as keyed
records in a compacted topic whose partition leaders are the coordinators. What they
share lives here: appending records to a led partition with the durability a produce
would get, and reading a partition's records back to rebuild state after gaining it.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Iterator
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.protocol.batch import (
    HEADER_SIZE,
    BatchHeader,
    BatchTooLargeError,
    InvalidBatchError,
    Record,
    decode_records,
    encode_batch,
    read_header,
)
from kbroker.protocol.compression import decompress

log = logging.getLogger("kbroker.internal_topics")

E = ErrorCode
KeyValue = tuple[bytes, bytes | None]
Acknowledgement = Coroutine[Any, Any, ErrorCode]


# -- writing ------------------------------------------------------------------------------


def append_records(
    broker: Any, topic: str, partition: int, records: list[KeyValue], now_ms: int
) -> tuple[ErrorCode, Acknowledgement | None]:
    """Append `records` as one batch to this node's leader replica of the partition.

    The append itself happens before this returns, so records of successive calls land
    in call order. Returns its error and, when it succeeded but may not be acknowledged
    yet, what to await first (the same policy as a produce: fsync when the topic flushes
    every message, and the ISR where the replica manager can wait for it, so that a
    coordinator failover cannot lose what was acknowledged). The awaitable gives the
    final error and raises OSError when the fsync fails.
    """
    replica = broker.replicas.get(topic, partition)
    if replica is None:
        return E.unknown_topic_or_partition, None
    if not replica.is_leader:
        return E.not_leader_or_follower, None
    batch = encode_batch([Record(k, v, now_ms) for k, v in records], now_ms)
    try:
        broker.replicas.append(replica, batch, now_ms)
    except BatchTooLargeError:
        return E.message_too_large, None
    except InvalidBatchError as exc:
        log.error("%s-%d refused a coordinator batch: %s", topic, partition, exc)
        return E.unknown_server_error, None
    except OSError as exc:
        log.error("cannot write to %s-%d: %s", topic, partition, exc)
        return E.kafka_storage_error, None
    flush = replica.log.config.flush_interval_messages == 1
    waiter = getattr(broker.replicas, "wait_for_commit", None)
    if not flush and waiter is None:
        return E.none, None
    return E.none, _acknowledgement(broker, replica, flush, waiter)


async def _acknowledgement(broker: Any, replica: Any, flush: bool, waiter: Any) -> ErrorCode:
    if flush:
        await broker.logs.flush_for_ack(replica.log)
    if waiter is not None:
        result = await waiter(replica)
        if isinstance(result, int) and result:
            return ErrorCode(result)
    return E.none


# -- reading ------------------------------------------------------------------------------


def read_batches(
    plog: Any, start: int = 0, chunk_bytes: int = 1 << 20
) -> Iterator[tuple[BatchHeader, list[KeyValue]]]:
    """Every data batch of a partition log with its keyed records, oldest first.

    Reads the log through its public read API in chunks and decodes only complete
    batches; compressed batches are decompressed with the stock codecs. Control
    batches (transaction markers) are skipped: they carry no coordinator state.
    """
    offset = max(start, plog.log_start_offset)
    end = plog.log_end_offset
    while offset < end:
        region = plog.read(offset, chunk_bytes, end)
        if region is None or region.length == 0:
            return
        with region:
            data = region.read()
        pos = 0
        progressed = False
        while pos + HEADER_SIZE <= len(data):
            header = read_header(data, pos)
            size = header.total_size
            if pos + size > len(data):
                break
            progressed = True
            if header.next_offset <= offset:
                pos += size
                continue
            if not header.is_control:
                recs = decode_records(data, pos, plog.decompressor or decompress)
                yield (
                    header,
                    [(r.key, r.value) for r in recs if r.key is not None and r.offset >= offset],
                )
            offset = header.next_offset
            pos += size
        if not progressed:
            if chunk_bytes >= 1 << 30:
                raise ValueError(f"batch at offset {offset} larger than {chunk_bytes} bytes")
            chunk_bytes *= 4


def read_log_records(
    plog: Any, start: int = 0, chunk_bytes: int = 1 << 20
) -> Iterator[tuple[int, list[KeyValue]]]:
    """Every (base offset, [(key, value)]) batch of a partition log, as `read_batches`."""
    for header, records in read_batches(plog, start, chunk_bytes):
        yield header.base_offset, records
