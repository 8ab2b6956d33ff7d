"""Where the coordinator's records go: the interface, and the `__consumer_offsets` log.

The coordinator hands a list of (key, value) records for one partition to `write` and
learns the outcome through a callback, so the state machine itself stays synchronous
and testable with an in-memory store. The log-backed store appends the records as one v2
batch through `kbroker.coordinator_runtime.internal_topics`, like any produced batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from kio.schema.errors import ErrorCode

from kbroker.coordinator_runtime.internal_topics import KeyValue, ServiceBroker, append_records

log = logging.getLogger("kbroker.coordinator.store")

OFFSETS_TOPIC = "__consumer_offsets"

WriteDone = Callable[[ErrorCode], None]


class GroupStore(Protocol):
    def write(self, partition: int, records: list[KeyValue], done: WriteDone) -> None:
        """Append `records` to the partition as one batch; report the outcome to `done`."""
        ...


class LogGroupStore:
    """Writes coordinator records to this broker's replicas of `__consumer_offsets`."""

    def __init__(self, broker: ServiceBroker, now_ms: Callable[[], int]) -> None:
        self._broker = broker
        self._now_ms = now_ms
        # Kafka's codec ids (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd) are the batch's.
        self._codec: int = broker.config.offsets_topic_compression_codec

    def write(self, partition: int, records: list[KeyValue], done: WriteDone) -> None:
        if not records:
            done(ErrorCode.none)
            return
        error, acknowledgement = append_records(
            self._broker, OFFSETS_TOPIC, partition, records, self._now_ms(), self._codec
        )
        if acknowledgement is None:
            done(error)
            return
        task = asyncio.ensure_future(acknowledgement)
        task.add_done_callback(lambda t: done(_outcome(t)))


def _outcome(task: asyncio.Future[ErrorCode]) -> ErrorCode:
    if task.cancelled():
        return ErrorCode.request_timed_out
    exc = task.exception()
    if exc is not None:
        log.error("waiting for coordinator records to replicate failed: %r", exc)
        return ErrorCode.request_timed_out
    return task.result()
