"""Kafka's default partitioner and console lines, shared by `kbroker produce` (batched
and pipelined in kbroker.admin.producer; records read back by kbroker.admin.consumer).

Keyed records go where Kafka's default partitioner places them (murmur2 of the key),
unkeyed ones to the partition given or the fallback.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kbroker.admin.client import ClientError


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
