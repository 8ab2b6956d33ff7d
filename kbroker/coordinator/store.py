"""Where the coordinator's records go: the interface, and the `__consumer_offsets` log.

The coordinator hands a list of (key, value) records for one partition to `write` and
learns the outcome through a callback, so the state machine itself stays synchronous
and testable with an in-memory store. The log-backed store turns the records into one
v2 batch and appends it through the replica manager like any produced batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kbroker.protocol.batch import (
    HEADER_SIZE,
    BatchTooLargeError,
    InvalidBatchError,
    Record,
    decode_records,
    encode_batch,
    read_header,
)

log = logging.getLogger("kbroker.coordinator.store")

OFFSETS_TOPIC = "__consumer_offsets"

KeyValue = tuple[bytes, bytes | None]
WriteDone = Callable[[ErrorCode], None]


class GroupStore(Protocol):
    def write(self, partition: int, records: list[KeyValue], done: WriteDone) -> None:
        """Append `records` to the partition as one batch; report the outcome to `done`."""
        ...


class LogGroupStore:
    """Writes coordinator records to this broker's replicas of `__consumer_offsets`."""

    def __init__(self, broker: Any, now_ms: Callable[[], int]) -> None:
        self._broker = broker
        self._now_ms = now_ms

    def write(self, partition: int, records: list[KeyValue], done: WriteDone) -> None:
        if not records:
            done(ErrorCode.none)
            return
        replica = self._broker.replicas.get(OFFSETS_TOPIC, partition)
        if replica is None:
            done(ErrorCode.unknown_topic_or_partition)
            return
        if not replica.is_leader:
            done(ErrorCode.not_leader_or_follower)
            return
        now = self._now_ms()
        batch = encode_batch([Record(k, v, now) for k, v in records], now)
        try:
            self._broker.replicas.append(replica, batch, now)
        except BatchTooLargeError:
            done(ErrorCode.message_too_large)
            return
        except InvalidBatchError as exc:
            log.error("coordinator batch for partition %d refused: %s", partition, exc)
            done(ErrorCode.unknown_server_error)
            return
        except OSError as exc:
            log.error("cannot write coordinator records to partition %d: %s", partition, exc)
            done(ErrorCode.kafka_storage_error)
            return
        waits = []
        if replica.log.config.flush_interval_messages == 1:
            # The same durability policy as a produce: fsync before acknowledging.
            waits.append(self._broker.logs.flush_for_ack(replica.log))
        waiter = getattr(self._broker.replicas, "wait_for_commit", None)
        if waiter is not None:
            # Where the replica manager can wait for the ISR (acks=-1 semantics), answer
            # only once the records are replicated: a coordinator failover must not lose them.
            waits.append(waiter(replica))
        if not waits:
            done(ErrorCode.none)
            return
        task = asyncio.ensure_future(_all(waits))
        task.add_done_callback(lambda t: done(_outcome(t)))


async def _all(waits: list[Any]) -> Any:
    result = None
    for wait in waits:
        result = await wait
    return result


def _outcome(task: asyncio.Future[Any]) -> ErrorCode:
    if task.cancelled():
        return ErrorCode.request_timed_out
    exc = task.exception()
    if exc is not None:
        log.error("waiting for coordinator records to replicate failed: %r", exc)
        return ErrorCode.request_timed_out
    result = task.result()
    return ErrorCode(result) if isinstance(result, int) else ErrorCode.none


def read_log_records(
    plog: Any, start: int = 0, chunk_bytes: int = 1 << 20
) -> Iterator[tuple[int, list[KeyValue]]]:
    """Every (offset, [(key, value)]) batch of a partition log, oldest first.

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
                recs = decode_records(data, pos, plog.decompressor or _decompress)
                yield (
                    header.base_offset,
                    [(r.key, r.value) for r in recs if r.key is not None and r.offset >= offset],
                )
            offset = header.next_offset
            pos += size
        if not progressed:
            if chunk_bytes >= 1 << 30:
                raise ValueError(f"batch at offset {offset} larger than {chunk_bytes} bytes")
            chunk_bytes *= 4


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        import gzip

        return gzip.decompress(data)
    if codec == 2:
        return _xerial_snappy(data)
    if codec == 3:
        import lz4.frame

        return lz4.frame.decompress(data)
    if codec == 4:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise ValueError(f"unknown compression codec {codec}")


def _xerial_snappy(data: bytes) -> bytes:
    import snappy

    magic = b"\x82SNAPPY\x00"
    if not data.startswith(magic):
        return snappy.decompress(data)
    out = bytearray()
    pos = 16  # magic + version + compatible version
    while pos + 4 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        pos += 4
        out += snappy.decompress(data[pos : pos + size])
        pos += size
    return bytes(out)
