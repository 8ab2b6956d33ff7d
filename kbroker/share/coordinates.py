"""The data partitions and the broker as every part of the share coordinator reads them.

`Coordinates` answers `kbroker.share.partition`'s ShareLog and Topics over this
broker's replicas and the controller's metadata (Kafka's share-partition reads the
partition's log through its ReplicaManager the same way); `leader_epoch` is the one
question each part asks of leadership: whether, and at which epoch, a data partition is
led here.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

from kbroker.coordinator_runtime.internal_topics import ServiceBroker
from kbroker.protocol.batch import BatchHeader
from kbroker.share.partition import TopicRef
from kbroker.storage.errors import LogClosedError, OffsetOutOfRangeError
from kbroker.storage.file_slice import FileSlice
from kbroker.storage.producer_state import AbortedTxn
from kbroker.storage.segment import scan_batches

if TYPE_CHECKING:
    from kbroker.coordinator.service import GroupCoordinatorService
    from kbroker.replica.delayed import DataWaiters


class ShareBroker(ServiceBroker, Protocol):
    """What the share-group parts use of the broker beyond any coordinator service."""

    group_coordinator: GroupCoordinatorService  # share and consumer groups share ids
    waiters: DataWaiters
    stopping: bool  # shutting down: a parked ShareFetch answers with what it has


STATE_TOPIC = "__share_group_state"


class Coordinates:
    """ShareLog and Topics over the broker's replicas and the controller's metadata."""

    def __init__(self, broker: ServiceBroker) -> None:
        self._broker = broker

    def by_name(self, name: str) -> TopicRef | None:
        info = self._broker.controller.state.topics.get(name)
        return None if info is None else TopicRef(info.name, info.topic_id, len(info.partitions))

    def by_id(self, topic_id: uuid.UUID) -> TopicRef | None:
        info = self._broker.controller.state.topics_by_id.get(topic_id)
        return None if info is None else TopicRef(info.name, info.topic_id, len(info.partitions))

    def bounds(self, topic: str, partition: int, committed: bool) -> tuple[int, int] | None:
        replica, _ = self._broker.replicas.leader(topic, partition)
        if replica is None:
            return None
        end = replica.last_stable_offset if committed else replica.high_watermark
        return replica.log.log_start_offset, end

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        replica = self._broker.replicas.get(topic, partition)
        if replica is None:
            return None
        found = replica.log.offset_for_timestamp(timestamp_ms)
        return None if found is None else found[0]

    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        end: int,
        committed: bool,
        stop_offset: int,
    ) -> tuple[FileSlice | None, list[tuple[int, int, int]]]:
        """Whole batches from `offset`, as a file range the answer sends from (no bytes
        pass through Python); only their headers are read, up to the first batch at or
        past `stop_offset`, beyond which nothing could be acquired."""
        replica = self._broker.replicas.get(topic, partition)
        if replica is None:
            return None, []
        try:
            region = replica.log.read(offset, max(max_bytes, 1), end)
        except (OffsetOutOfRangeError, LogClosedError):
            return None, []
        if region is None:
            return None, []
        aborted = replica.log.aborted_transactions(offset, end) if committed else []
        batches: list[tuple[int, int, int]] = []
        start = region.position
        used = 0
        for header in scan_batches(region.file.fileno(), start, start + region.length):
            if header.base_offset >= stop_offset and batches:
                break
            if not header.is_control and not (
                aborted and header.is_transactional and _aborted(header, aborted)
            ):
                batches.append((header.base_offset, header.last_offset, header.position - start))
            used = header.position - start + header.total_size
        with region:
            return (region.narrow(0, used) if used else None), batches


def _aborted(header: BatchHeader, aborted: list[AbortedTxn]) -> bool:
    """Whether a transactional batch belongs to an aborted transaction: its records are
    never delivered under read_committed (the share-partition archives their offsets)."""
    return any(
        t.producer_id == header.producer_id and t.first_offset <= header.base_offset < t.last_offset
        for t in aborted
    )


def leader_epoch(broker: ServiceBroker, topic: str, partition: int) -> int:
    """The leader epoch of a data partition led here, -1 if it is not led here."""
    replica, _ = broker.replicas.leader(topic, partition)
    return -1 if replica is None else replica.leader_epoch
