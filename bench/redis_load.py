"""Workloads for the Redis Streams peer (redis-py, hiredis parser when installed).

Each record is one stream entry with a single field `v` holding the value, which is
the closest Redis Streams equivalent of a Kafka record without a key.
"""

from __future__ import annotations

import os
from time import perf_counter

from bench.results import Latency, Throughput

PIPELINE_BATCH = 1_000  # XADD commands sent per pipeline round trip
READ_CHUNK = 10_000  # entries per XRANGE


def xadd_pipelined(client, key: str, count: int, size: int, time_limit: float) -> Throughput:
    """XADD `count` entries in pipelined batches; timed from the first send to the last reply."""
    client.delete(key)
    value = os.urandom(size)
    fields = {b"v": value}
    sent = 0
    truncated = False
    start = perf_counter()
    deadline = start + time_limit
    while sent < count:
        n = min(PIPELINE_BATCH, count - sent)
        pipe = client.pipeline(transaction=False)
        for _ in range(n):
            pipe.xadd(key, fields)
        pipe.execute()
        sent += n
        if perf_counter() > deadline and sent < count:
            truncated = True
            break
    seconds = perf_counter() - start
    stored = client.xlen(key)
    return Throughput(
        records=stored,
        nbytes=stored * size,
        seconds=seconds,
        errors=sent - stored,
        truncated=truncated,
    )


def xrange_all(client, key: str, count: int, time_limit: float) -> Throughput:
    """Reads the stream back from the start with XRANGE in chunks of READ_CHUNK entries."""
    got = nbytes = 0
    low: bytes | str = "-"
    start = perf_counter()
    deadline = start + time_limit
    while got < count and perf_counter() < deadline:
        entries = client.xrange(key, min=low, max="+", count=READ_CHUNK)
        if not entries:
            break
        for _id, fields in entries:
            nbytes += len(fields[b"v"])
        got += len(entries)
        low = b"(" + entries[-1][0]
    seconds = perf_counter() - start
    return Throughput(records=got, nbytes=nbytes, seconds=seconds, truncated=got < count)


def xadd_one_at_a_time(client, key: str, count: int, size: int, time_limit: float) -> Latency:
    """One XADD at a time; with appendfsync always each reply follows an fsync of the AOF."""
    value = os.urandom(size)
    fields = {b"v": value}
    xadd = client.xadd
    samples: list[float] = []
    start = perf_counter()
    deadline = start + time_limit
    while len(samples) < count and perf_counter() < deadline:
        t0 = perf_counter()
        xadd(key, fields)
        samples.append(perf_counter() - t0)
    return Latency(samples=samples, seconds=perf_counter() - start)
