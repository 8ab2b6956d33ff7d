"""The fields of one-shot Produce, Fetch and ListOffsets requests: one partition, no
session, no retries. What an operator's command, the dead-letter writer and tests send to see the
broker's own answer, as plain dicts for `messages.build`."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kbroker.protocol.fetch_request import fetch_partition, sessionless_fetch


def produce_fields(
    topic: str,
    records: bytes | bytearray | None,
    *,
    partition: int = 0,
    acks: int = -1,
    timeout_ms: int = 10_000,
    transactional_id: str | None = None,
) -> dict[str, Any]:
    """Produce fields writing `records` (whole encoded batches) to one partition of
    `topic`, named as Produce v3-12 name it: the one-shot write a test or operator sends
    to see the broker's own answer, where a stock client would retry."""
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout": timeout_ms,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": partition, "records": None if records is None else bytes(records)}
                ],
            }
        ],
    }


def fetch_fields(
    topic: str | None,
    *,
    max_wait: datetime.timedelta | int,
    min_bytes: int,
    partition: int = 0,
    offset: int = 0,
    isolation_level: int = 0,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int | None = None,
    topic_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """Fetch fields reading one partition of `topic` from `offset`, up to `max_bytes`
    (and `partition_max_bytes`, by default the same), outside any fetch session: the
    one-shot read a test or operator sends to see what is stored. Versions up to 12 name
    the topic; from 13 (KIP-516) it is named by `topic_id`, which a v13+ request needs."""
    size = max_bytes if partition_max_bytes is None else partition_max_bytes
    return sessionless_fetch(
        [
            {
                "topic": topic,
                "topic_id": topic_id,
                "partitions": [fetch_partition(partition, offset, size)],
            }
        ],
        max_wait=max_wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
    )


def list_offsets_fields(
    topic: str, timestamp: int, *, partition: int = 0, isolation_level: int = 0
) -> dict[str, Any]:
    """ListOffsets fields asking one partition of `topic` for the offset at `timestamp`
    (-2 the log start, -1 the end), as a consumer asks, for any leader epoch."""
    return {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "timestamp": timestamp,
                        "current_leader_epoch": -1,
                    }
                ],
            }
        ],
    }
