"""Fetch: byte ranges of segment files for each partition, parked until min_bytes arrive.

A partition's answer starts at the batch holding the requested offset and ends at
whole batches below the high watermark; the bytes are not read here but sent from
the file by the connection.
"""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.handlers.registry import handles
from kbroker.protocol.fetch_response import (
    FetchedPartition,
    FetchedTopic,
    NodeEndpoint,
    encode_fetch_response,
)
from kbroker.replica.manager import leader_epoch_error
from kbroker.storage.errors import LogClosedError, OffsetOutOfRangeError

FETCH = 1
READ_COMMITTED = 1
_I64 = struct.Struct(">q")


@handles(FETCH, 4)
def fetch(ctx: Any, request: Any) -> Any:
    topics, total, errors = _read_all(ctx, request)
    max_wait_ms = request.max_wait.total_seconds() * 1000
    if total >= request.min_bytes or errors or max_wait_ms <= 0 or ctx.broker.stopping:
        return _encode(ctx, topics)
    return _delayed_fetch(ctx, request, max_wait_ms / 1000)


async def _delayed_fetch(ctx: Any, request: Any, max_wait_s: float) -> Any:
    """Park until an append to one of the partitions (or the wait runs out), then read again."""
    keys = [(t.name, p.partition) for t in _wanted(ctx, request) for p in t.partitions]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        waiter = ctx.broker.waiters.new_waiter(keys)
        try:
            await asyncio.wait_for(waiter, remaining)
        except TimeoutError:
            break
        topics, total, errors = _read_all(ctx, request)
        if total >= request.min_bytes or errors or ctx.broker.stopping:
            return _encode(ctx, topics)
    topics, _, _ = _read_all(ctx, request)
    return _encode(ctx, topics)


def _encode(ctx: Any, topics: list[FetchedTopic]) -> Any:
    endpoints = None
    if ctx.version >= 16 and any(p.error_code for t in topics for p in t.partitions):
        endpoints = [
            NodeEndpoint(b.node_id, b.host, b.port, b.rack)
            for b in ctx.broker.controller.state.brokers.values()
        ]
    return encode_fetch_response(ctx.version, topics, session_id=0, node_endpoints=endpoints)


class _Wanted:
    __slots__ = ("name", "topic_id", "partitions", "known")

    def __init__(self, name: str | None, topic_id: Any, partitions: Any, known: bool) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions = partitions
        self.known = known


def _wanted(ctx: Any, request: Any) -> list[_Wanted]:
    state = ctx.broker.controller.state
    out = []
    for t in request.topics:
        if ctx.version >= 13:
            info = state.topics_by_id.get(t.topic_id)
            out.append(
                _Wanted(info.name if info else None, t.topic_id, t.partitions, info is not None)
            )
        else:
            info = state.topics.get(t.topic)
            out.append(
                _Wanted(t.topic, info.topic_id if info else None, t.partitions, info is not None)
            )
    return out


def _read_all(ctx: Any, request: Any) -> tuple[list[FetchedTopic], int, bool]:
    """Read every requested partition within max_bytes; (topics, bytes found, any error)."""
    broker = ctx.broker
    budget = request.max_bytes
    total = 0
    errors = False
    committed_only = request.isolation_level == READ_COMMITTED
    topics: list[FetchedTopic] = []
    for wanted in _wanted(ctx, request):
        fetched = FetchedTopic(wanted.name or "", wanted.topic_id)
        topics.append(fetched)
        for p in wanted.partitions:
            if not wanted.known:
                code = (
                    ErrorCode.unknown_topic_id
                    if ctx.version >= 13
                    else ErrorCode.unknown_topic_or_partition
                )
                fetched.partitions.append(FetchedPartition(p.partition, code))
                errors = True
                continue
            result = _read_partition(broker, wanted.name, p, budget, committed_only, total == 0)
            fetched.partitions.append(result)
            if result.error_code:
                errors = True
            size = result.records_size
            total += size
            budget = max(0, budget - size)
    return topics, total, errors


def _read_partition(
    broker: Any, topic: str, p: Any, budget: int, committed_only: bool, first: bool
) -> FetchedPartition:
    replica = broker.replicas.get(topic, p.partition)
    if replica is None:
        return FetchedPartition(p.partition, ErrorCode.unknown_topic_or_partition)
    plog = replica.log
    high_watermark = plog.high_watermark
    stable = plog.last_stable_offset
    out = FetchedPartition(
        p.partition,
        0,
        high_watermark,
        stable,
        plog.log_start_offset,
        [] if committed_only else None,
    )
    out.error_code = leader_epoch_error(replica, getattr(p, "current_leader_epoch", -1))
    if out.error_code:
        return out
    max_bytes = min(p.partition_max_bytes, budget)
    if max_bytes <= 0 and not first:
        return out
    try:
        out.records = plog.read(
            p.fetch_offset, max(max_bytes, 1), stable if committed_only else high_watermark
        )
    except OffsetOutOfRangeError:
        out.error_code = ErrorCode.offset_out_of_range
    except LogClosedError:  # the topic was deleted while this fetch was parked
        out.error_code = ErrorCode.unknown_topic_or_partition
        return out
    if committed_only and out.records is not None and plog.producer_state.aborted:
        upper = _offset_after(out.records, stable)
        out.aborted_transactions = [
            (t.producer_id, t.first_offset)
            for t in plog.aborted_transactions(p.fetch_offset, upper)
        ]
    return out


def _offset_after(region: Any, default: int) -> int:
    """The base offset of the batch after a file region (its 8 first bytes), or `default`
    when the region ends its file: the upper end of the aborted transactions to list."""
    try:
        head = os.pread(region.file.fileno(), 8, region.position + region.length)
    except (OSError, ValueError, AttributeError):
        return default
    if len(head) < 8:
        return default
    return min(_I64.unpack(head)[0], default)
