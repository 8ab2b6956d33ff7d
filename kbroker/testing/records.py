"""One record written, and a partition read to its end, for kbroker.testing: on the wire
primitives (kbroker.protocol and the admin client's connections), as a test would see
what a stock consumer reads with read_uncommitted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from kbroker.admin.client import ClientError, Cluster, fetch_fields, produce_fields
from kbroker.admin.records import partition_for
from kbroker.admin.topics import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    check,
    list_offsets,
    metadata,
)
from kbroker.protocol.batch import HEADER_SIZE, Record, decode_records, encode_batch, read_header
from kbroker.protocol.compression import decompress

PRODUCE = 0
FETCH = 1


@dataclass(frozen=True, slots=True)
class Consumed:
    """A record as read back: where it is, when, and what."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def produce_one(
    cluster: Cluster,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    partition: int | None,
    headers: list[tuple[str, bytes | None]],
) -> tuple[int, int]:
    """Write one record with acks=all to its partition's leader; (partition, offset)."""
    md = metadata(cluster, [topic])
    count = len(md.topics[0].partitions)
    if partition is None:
        partition = partition_for(key, count, int(time.time_ns()) % count)
    address = md.leader_address((topic, partition))
    if address is None:
        raise ClientError(f"no leader for {topic}-{partition}")
    batch = encode_batch([Record(key, value, headers=headers)], int(time.time() * 1000))
    response = cluster.connection(*address).call(
        PRODUCE,
        produce_fields(topic, batch, partition=partition, acks=-1, timeout_ms=30_000),
        versions=(3, 11),
    )
    answer = response.responses[0].partition_responses[0]
    check(answer.error_code, f"producing to {topic}-{partition}", answer.error_message)
    return partition, int(answer.base_offset)


def read_all(cluster: Cluster, topic: str, timeout: float) -> list[Consumed]:
    """Every record of `topic` from each partition's start to its end as the call
    begins, ordered by partition then offset (aborted transactions and markers left out)."""
    md = metadata(cluster, [topic])
    tps = [(topic, p.partition) for p in md.topics[0].partitions]
    starts = list_offsets(cluster, tps, EARLIEST_TIMESTAMP)
    ends = list_offsets(cluster, tps, LATEST_TIMESTAMP)
    deadline = time.monotonic() + timeout
    found: list[Consumed] = []
    for tp in tps:
        position = starts[tp]
        while position < ends[tp]:
            address = md.leader_address(tp)
            if address is None:
                raise ClientError(f"no leader for {topic}-{tp[1]}")
            response = cluster.connection(*address).call(
                FETCH,
                fetch_fields(topic, partition=tp[1], offset=position, max_wait=200, min_bytes=1),
                versions=(4, 12),
            )
            answer = response.responses[0].partitions[0]
            check(answer.error_code, f"fetching {topic}-{tp[1]}")
            aborted = {int(a.producer_id) for a in (answer.aborted_transactions or ())}
            moved = False
            for next_position, record in _records(answer.records or b"", aborted):
                if position <= (record.offset or 0) < ends[tp]:
                    found.append(
                        Consumed(
                            topic,
                            tp[1],
                            record.offset or 0,
                            record.timestamp or 0,
                            record.key,
                            record.value,
                            tuple(record.headers),
                        )
                    )
                if next_position > position:
                    position, moved = next_position, True
            if not moved and time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{tp[1]} stopped short of offset {ends[tp]}")
    return found


def _records(data: bytes, aborted: set[int]) -> Iterator[tuple[int, Record]]:
    """(offset after the batch, record) for the data records of the whole batches in
    `data`; a batch skipped (control, aborted) still moves the position past it."""
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        header = read_header(data, pos)
        if pos + header.total_size > len(data):
            return
        after = header.base_offset + header.last_offset_delta + 1
        skip = header.is_control or (header.is_transactional and header.producer_id in aborted)
        if skip:
            yield after, Record(None, None, offset=-1)
        else:
            for record in decode_records(data, pos, decompress):
                yield after, record
        pos += header.total_size
