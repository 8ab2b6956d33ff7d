"""Records from and to the terminal: `kbroker produce` and `kbroker consume`.

Produce sends each line (or `key<sep>value`) as one record of a v2 batch to the leader of
its partition, keyed records placed as Kafka's default partitioner places them
(murmur2 of the key), unkeyed ones on the partition given or round robin. Consume
fetches from each partition's leader and prints what it reads, stopping after a count
or once nothing new has come for a while.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kbroker.admin.client import ClientError, Cluster, fetch_fields, produce_fields
from kbroker.admin.topics import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    TopicPartition,
    check,
    list_offsets,
    metadata,
)
from kbroker.protocol.batch import HEADER_SIZE, Record, decode_records, encode_batch, read_header
from kbroker.protocol.compression import decompress

PRODUCE = 0
FETCH = 1


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's `Utils.murmur2`), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | None, count: int, fallback: int) -> int:
    """Kafka's default partitioner for keyed records: positive murmur2 modulo the count."""
    if key is None:
        return fallback % count
    return (murmur2(key) & 0x7FFFFFFF) % count


@dataclass(frozen=True, slots=True)
class Produced:
    topic: str
    partition: int
    offset: int


def produce(
    cluster: Cluster,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    partition: int | None = None,
    acks: int = -1,
    on_sent: Callable[[Produced], None] | None = None,
) -> list[Produced]:
    """Send each record in its own request (as a console producer with linger 0 does)."""
    md = metadata(cluster, [topic])
    count = len(md.topics[0].partitions)
    if partition is not None and not 0 <= partition < count:
        raise ClientError(f"topic {topic} has no partition {partition}")
    sent: list[Produced] = []
    for i, (key, value) in enumerate(records):
        p = partition if partition is not None else partition_for(key, count, i)
        address = md.leader_address((topic, p))
        if address is None:
            raise ClientError(f"no leader for {topic}-{p}")
        batch = encode_batch([Record(key, value)], int(time.time() * 1000))
        response = cluster.connection(*address).call(
            PRODUCE,
            produce_fields(topic, batch, partition=p, acks=acks, timeout_ms=30_000),
            versions=(3, 9),
        )
        answer = response.responses[0].partition_responses[0]
        check(answer.error_code, f"producing to {topic}-{p}", answer.error_message)
        done = Produced(topic, p, int(answer.base_offset))
        sent.append(done)
        if on_sent is not None:
            on_sent(done)
    return sent


def parse_lines(
    lines: Iterable[str], key_separator: str | None
) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value) of each input line; without a separator the key is null."""
    for line in lines:
        text = line.rstrip("\n")
        if key_separator is not None:
            key, sep, value = text.partition(key_separator)
            if not sep:
                raise ClientError(f"no key separator {key_separator!r} in line {text!r}")
            yield key.encode(), value.encode()
        else:
            yield None, text.encode()


@dataclass(frozen=True, slots=True)
class Consumed:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def start_offsets(
    cluster: Cluster, partitions: list[TopicPartition], from_beginning: bool, offset: int | None
) -> dict[TopicPartition, int]:
    if offset is not None:
        return dict.fromkeys(partitions, offset)
    return list_offsets(
        cluster, partitions, EARLIEST_TIMESTAMP if from_beginning else LATEST_TIMESTAMP
    )


def consume(
    cluster: Cluster,
    topic: str,
    partitions: list[int] | None,
    from_beginning: bool,
    offset: int | None,
    max_messages: int | None,
    idle_timeout_s: float,
    isolation_level: int = 0,
) -> Iterator[Consumed]:
    """Records of the topic from the chosen start, until `max_messages` or idle."""
    md = metadata(cluster, [topic])
    every = [p.partition for p in md.topics[0].partitions]
    chosen = every if partitions is None else partitions
    for p in chosen:
        if p not in every:
            raise ClientError(f"topic {topic} has no partition {p}")
    positions = start_offsets(cluster, [(topic, p) for p in chosen], from_beginning, offset)
    seen = 0
    idle_since = time.monotonic()
    while max_messages is None or seen < max_messages:
        got_any = False
        for (t, p), position in sorted(positions.items()):
            for record in _fetch_once(
                cluster, md.leader_address((t, p)), t, p, position, isolation_level
            ):
                positions[(t, p)] = record.offset + 1
                got_any = True
                yield record
                seen += 1
                if max_messages is not None and seen >= max_messages:
                    return
        if got_any:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= idle_timeout_s:
            return


def _fetch_once(
    cluster: Cluster,
    address: tuple[str, int] | None,
    topic: str,
    partition: int,
    position: int,
    isolation_level: int,
) -> list[Consumed]:
    if address is None:
        raise ClientError(f"no leader for {topic}-{partition}")
    response = cluster.connection(*address).call(
        FETCH,
        fetch_fields(
            topic,
            partition=partition,
            offset=position,
            max_wait=200,
            min_bytes=1,
            isolation_level=isolation_level,
        ),
        versions=(4, 12),
    )
    answer = response.responses[0].partitions[0]
    check(answer.error_code, f"fetching {topic}-{partition}")
    aborted = {int(a.producer_id) for a in (answer.aborted_transactions or ())}
    return [
        Consumed(
            topic, partition, r.offset or 0, r.timestamp or 0, r.key, r.value, tuple(r.headers)
        )
        for r in _records(answer.records or b"", aborted)
        if (r.offset or 0) >= position
    ]


def _records(data: bytes, aborted_producers: set[int]) -> Iterator[Record]:
    """Data records of the whole batches in `data` (a trailing partial batch is skipped)."""
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        header = read_header(data, pos)
        if pos + header.total_size > len(data):
            return
        skip = header.is_control or (
            header.is_transactional and header.producer_id in aborted_producers
        )
        if not skip:
            yield from decode_records(data, pos, decompress)
        pos += header.total_size
