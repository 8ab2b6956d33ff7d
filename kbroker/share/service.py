"""The share coordinator inside a running broker.

Hosts `ShareCoordinator` over the broker's logs and metadata: it reads data partitions
for ShareFetch, writes share-partition state to `__share_group_state` (created on
first need, replayed on gaining a partition of it, through the machinery the group and
transaction coordinators use), runs the clock that expires members and acquisition
locks, parks a ShareFetch that found nothing until records arrive or come back, and
copies dead-lettered records to the group's dead-letter topic.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode
from prometheus_client.core import GaugeMetricFamily, Metric

from kbroker.controller.events import TopicDeleted
from kbroker.internal_topics import (
    InternalTopicService,
    KeyValue,
    ServiceBroker,
    TopicLayout,
    append_records,
)
from kbroker.protocol.batch import BatchHeader
from kbroker.share.coordinator import (
    FetchAnswer,
    PartitionAcks,
    ShareCoordinator,
    TopicRef,
)
from kbroker.share.dead_letters import DeadLetterWriter
from kbroker.share.group_configs import ShareConfig
from kbroker.storage.errors import LogClosedError, OffsetOutOfRangeError
from kbroker.storage.file_slice import FileSlice
from kbroker.storage.producer_state import AbortedTxn
from kbroker.storage.segment import scan_batches

if TYPE_CHECKING:
    from kbroker.coordinator.service import GroupCoordinatorService
    from kbroker.replica.delayed import DataWaiters

log = logging.getLogger("kbroker.share")


class ShareBroker(ServiceBroker, Protocol):
    """What the share-group service uses of the broker beyond any coordinator service."""

    group_coordinator: GroupCoordinatorService  # share and consumer groups share ids
    waiters: DataWaiters


STATE_TOPIC = "__share_group_state"
TICK_MS = 100


def share_config(config: Any) -> ShareConfig:
    return ShareConfig(
        session_timeout_ms=config.get("group.share.session.timeout.ms"),
        min_session_timeout_ms=config.get("group.share.min.session.timeout.ms"),
        max_session_timeout_ms=config.get("group.share.max.session.timeout.ms"),
        heartbeat_interval_ms=config.get("group.share.heartbeat.interval.ms"),
        min_heartbeat_interval_ms=config.get("group.share.min.heartbeat.interval.ms"),
        max_heartbeat_interval_ms=config.get("group.share.max.heartbeat.interval.ms"),
        record_lock_ms=config.get("group.share.record.lock.duration.ms"),
        min_record_lock_ms=config.get("group.share.min.record.lock.duration.ms"),
        max_record_lock_ms=config.get("group.share.max.record.lock.duration.ms"),
        delivery_count_limit=config.get("group.share.delivery.count.limit"),
        max_record_locks=config.get("group.share.partition.max.record.locks"),
        max_size=config.get("group.share.max.size"),
        max_groups=config.get("group.share.max.groups"),
        max_share_sessions=config.get("group.share.max.share.sessions"),
        num_partitions=config.get("share.coordinator.state.topic.num.partitions"),
    )


class _Coordinates:
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


class ShareService(InternalTopicService):
    topic = STATE_TOPIC
    log = log
    coordinator: ShareCoordinator
    broker: ShareBroker

    def __init__(self, broker: ShareBroker) -> None:
        super().__init__(broker)
        self.enabled: bool = broker.config.get("group.share.enable")
        coordinates = _Coordinates(broker)
        self.coordinator = ShareCoordinator(share_config(broker.config), coordinates, coordinates)
        self.dead_letters = DeadLetterWriter(broker, self)
        self._flush: asyncio.Future[ErrorCode] | None = None

    # -- InternalTopicService --------------------------------------------------------------

    def layout(self) -> TopicLayout:
        config = self.broker.config
        return TopicLayout(
            config.get("share.coordinator.state.topic.num.partitions"),
            config.get("share.coordinator.state.topic.replication.factor"),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.get("share.coordinator.state.topic.segment.bytes")),
            },
        )

    def held_partitions(self) -> Collection[int]:
        return self.coordinator.owned | self.coordinator.loading

    def begin_loading(self, partition: int, leader_epoch: int) -> None:
        self.coordinator.loading.add(partition)

    async def load_records(self, partition: int, records: list[KeyValue], started: float) -> None:
        loaded = self.coordinator.load(records)
        self.coordinator.loading.discard(partition)
        self.coordinator.owned.add(partition)
        log.log(
            logging.INFO if records else logging.DEBUG,
            "loaded %d share-partitions from %s-%d in %.3fs",
            loaded,
            STATE_TOPIC,
            partition,
            time.monotonic() - started,
        )
        self.dead_letters.kick()

    async def start(self) -> None:
        if not self.enabled:
            return
        self.coordinator.is_other_group = self._is_other_group
        self.publish_metrics(self._metrics_now)
        await super().start()
        self.every(TICK_MS, self._tick, "share group clock")

    def _metrics_now(self) -> list[Metric]:
        """Per share-partition: records in flight (acquired, not yet acknowledged) and
        lag (not yet acknowledged up to the high watermark)."""
        in_flight = GaugeMetricFamily(
            "kbroker_share_partition_in_flight_records",
            "Records acquired by a share-group member and not yet acknowledged.",
            labels=["group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "kbroker_share_partition_lag",
            "Records of the partition the share group has not yet acknowledged.",
            labels=["group", "topic", "partition"],
        )
        coordinator = self.coordinator
        for (group_id, topic_id, partition), held in sorted(
            coordinator.partitions.items(), key=lambda kv: (kv[0][0], kv[1].topic, kv[0][2])
        ):
            labels = [group_id, held.topic, str(partition)]
            in_flight.add_metric(labels, held.state.in_flight())
            value = coordinator.lag(group_id, topic_id, partition)
            if value >= 0:
                lag.add_metric(labels, value)
        return [in_flight, lag]

    async def ready(self, group_id: str, wait_s: float = 1.0) -> ErrorCode:
        """Whether this node holds the group's state, creating `__share_group_state` on
        first need and waiting (briefly) while its partition loads: nothing about a
        group may be decided before its stored state is known."""
        if self.topic not in self.broker.controller.state.topics:
            error = await self.ensure_topic()
            if error != ErrorCode.none:
                return error
        partition = self.coordinator.partition_for(group_id)
        deadline = time.monotonic() + wait_s
        while partition not in self.coordinator.owned:
            if time.monotonic() >= deadline:
                if partition in self.coordinator.loading:
                    return ErrorCode.coordinator_load_in_progress
                return ErrorCode.not_coordinator
            await asyncio.sleep(0.02)
        return ErrorCode.none

    async def stop(self) -> None:
        if not self.enabled:
            return
        self.dead_letters.stop()
        await super().stop()

    def _on_metadata_event(self, event: Any) -> None:
        if isinstance(event, TopicDeleted):
            self.coordinator.forget_topic(event.topic_id)
            self.persist()
        super()._on_metadata_event(event)

    def _is_other_group(self, group_id: str) -> bool:
        """Whether the id is taken by a classic or consumer-protocol group."""
        coordinator = self.broker.group_coordinator.coordinator
        return group_id in coordinator.groups or group_id in coordinator.consumer.groups

    def _tick(self) -> None:
        self.coordinator.tick(int(time.time() * 1000))
        self.persist()

    # -- persistence -------------------------------------------------------------------

    def persist(self) -> asyncio.Future[ErrorCode]:
        """Write every changed share-partition; the future settles when stored.

        The write happens at the end of the loop iteration, once for every change made
        in it: under load, many requests' acknowledgements share one snapshot and one
        append (group commit, as the log does for fsyncs)."""
        if self._flush is None:
            loop = asyncio.get_running_loop()
            self._flush = loop.create_future()
            loop.call_soon(self._write_dirty)
        return self._flush

    def _write_dirty(self) -> None:
        done, self._flush = self._flush, None
        assert done is not None
        writes = self.coordinator.take_dirty()
        if not writes:
            done.set_result(ErrorCode.none)
            return
        now = int(time.time() * 1000)
        by_partition: dict[int, list[KeyValue]] = {}
        for group_id, records in writes.items():
            partition = self.coordinator.partition_for(group_id)
            by_partition.setdefault(partition, []).extend(records)
        waits = []
        failed = ErrorCode.none
        for partition, records in by_partition.items():
            error, acknowledgement = append_records(
                self.broker, STATE_TOPIC, partition, records, now
            )
            if error != ErrorCode.none:
                log.error("cannot store share state in %s-%d: %s", STATE_TOPIC, partition, error)
                failed = error
            elif acknowledgement is not None:
                waits.append(acknowledgement)
        if self.coordinator.pending_dead_letters():
            self.dead_letters.kick()
        if not waits:
            done.set_result(failed)
            return

        async def settle() -> None:
            results = await asyncio.gather(*waits, return_exceptions=True)
            errors = [r for r in results if r != ErrorCode.none]
            done.set_result(ErrorCode.kafka_storage_error if errors else failed)

        asyncio.ensure_future(settle())

    # -- ShareFetch ----------------------------------------------------------------------

    async def share_fetch(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: list[tuple[uuid.UUID, int]],
        acks: PartitionAcks,
        forgotten: list[tuple[uuid.UUID, int]],
        max_wait_ms: int,
        max_records: int,
        max_bytes: int,
        batch_aligned: bool = True,
    ) -> FetchAnswer:
        coordinator = self.coordinator
        answer = FetchAnswer(lock_ms=coordinator.lock_ms(group_id))
        if group_id and await self.ready(group_id, max_wait_ms / 1000) != ErrorCode.none:
            return answer  # nothing is acquired before the group's state is loaded
        has_acks = any(batches for _, _, batches in acks)
        now = int(time.time() * 1000)
        session = coordinator.open_session(
            group_id, member_id, epoch, added, forgotten, has_acks, answer, now
        )
        if session is None:
            return answer
        coordinator.acknowledge(group_id, member_id, acks, now, answer)
        coordinator.forget(group_id, member_id, forgotten)
        if epoch == -1:
            coordinator.close_session(group_id, member_id)
        elif max_records > 0:
            coordinator.acquire(
                group_id, member_id, session, max_records, max_bytes, now, answer, batch_aligned
            )
            if not answer.acquired_any and not answer.acknowledged and max_wait_ms > 0:
                await self._wait_for_records(session.partitions, max_wait_ms / 1000)
                if self.coordinator.sessions.get((group_id, member_id)) is session:
                    now = int(time.time() * 1000)
                    coordinator.acquire(
                        group_id,
                        member_id,
                        session,
                        max_records,
                        max_bytes,
                        now,
                        answer,
                        batch_aligned,
                    )
        stored = self.persist()
        if answer.acknowledged:
            error = await stored
            if error != ErrorCode.none:
                for part in answer.partitions.values():
                    if not part.ack_error:
                        part.ack_error = int(ErrorCode.kafka_storage_error)
        return answer

    async def share_acknowledge(
        self, group_id: str, member_id: str, epoch: int, acks: PartitionAcks
    ) -> FetchAnswer:
        coordinator = self.coordinator
        answer = FetchAnswer()
        if group_id:
            error = await self.ready(group_id)
            if error != ErrorCode.none:
                answer.error, answer.message = int(error), None
                return answer
        if epoch == 0:
            answer.error = int(ErrorCode.invalid_share_session_epoch)
            answer.message = "ShareAcknowledge cannot open a share session."
            return answer
        now = int(time.time() * 1000)
        session = coordinator.open_session(group_id, member_id, epoch, [], [], False, answer, now)
        if session is None:
            return answer
        coordinator.acknowledge(group_id, member_id, acks, now, answer)
        if epoch == -1:
            coordinator.close_session(group_id, member_id)
        error = await self.persist()
        if error != ErrorCode.none:
            for part in answer.partitions.values():
                if not part.ack_error:
                    part.ack_error = int(ErrorCode.kafka_storage_error)
        return answer

    async def _wait_for_records(
        self, partitions: Collection[tuple[uuid.UUID, int]], timeout: float
    ) -> None:
        """Until a session partition grows, records come back, or the wait runs out."""
        keys = []
        for topic_id, partition in partitions:
            info = self.broker.controller.state.topics_by_id.get(topic_id)
            if info is not None:
                keys.append((info.name, partition))
        loop = asyncio.get_running_loop()
        data = self.broker.waiters.new_waiter(keys)
        released: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not released.done():
                released.set_result(None)

        self.coordinator.on_available.append(wake)
        try:
            await asyncio.wait([data, released], timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            data.cancel()
            wake()
