"""The share coordinator inside a running broker.

Hosts `ShareCoordinator` over the broker's logs and metadata, in Kafka's three parts:
- group coordinator: ShareGroupHeartbeat and ShareGroupDescribe are served by the
  leader of the group's `__consumer_offsets` partition (where FindCoordinator with key
  type GROUP sends them), NOT_COORDINATOR elsewhere;
- share-partition leader: ShareFetch and ShareAcknowledge are served, per partition,
  by the leader of the data partition (NOT_LEADER_OR_FOLLOWER elsewhere, with the
  current leader). Before acquiring from a share-partition it first holds, it reads
  the stored state from the share coordinator; each change is written back there
  before an acknowledgement is answered. Losing the data partition drops it unwritten;
- share coordinator: the leader of the share-partition's `__share_group_state`
  partition (created on first need, replayed on gaining a partition of it, through the
  machinery the group and transaction coordinators use) stores the states, answering
  ReadShareGroupState and WriteShareGroupState from other brokers
  (`kbroker.share.persister`), and fencing writes of a stale leader epoch.
So after the data partition's leader fails over, its new leader holds what was stored:
acknowledged records stay acknowledged, acquired ones are available again with their
delivery counted. The service also runs the clock that expires members and locks,
parks a ShareFetch that found nothing until records arrive or come back, and copies
dead-lettered records to the group's dead-letter topic.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from prometheus_client.core import GaugeMetricFamily, Metric

from kbroker.controller.events import GroupConfigsChanged, TopicDeleted
from kbroker.coordinator.records import RecordFormatError
from kbroker.coordinator.share_group_records import fold_share_groups
from kbroker.coordinator_runtime.internal_topics import (
    InternalTopicService,
    KeyValue,
    ServiceBroker,
    TopicLayout,
    acknowledgement,
    append_records,
    read_batches,
    write_error,
)
from kbroker.protocol.batch import BatchHeader
from kbroker.protocol.messages import build
from kbroker.replica.broker_link import BrokerLinks
from kbroker.share.coordinator import ShareCoordinator
from kbroker.share.dead_letters import DeadLetterWriter
from kbroker.share.group_configs import ShareConfig
from kbroker.share.partition import (
    INVALID_REQUEST,
    FetchAnswer,
    PartitionAcks,
    ShareSession,
    TopicRef,
)
from kbroker.share.partition_state import SharePartitionState
from kbroker.share.persister import Initialized, Persister, StoredRead, Written
from kbroker.share.records import StateKey, state_key
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
    stopping: bool  # shutting down: a parked ShareFetch answers with what it has


STATE_TOPIC = "__share_group_state"
TICK_MS = 100
LIST_OFFSETS = 2
LATEST_TIMESTAMP = -1
# A lag's high watermark is asked of the partition's leader within this, retry included,
# so that DescribeShareGroupOffsets answers (the lag unknown only if the leader cannot be
# asked) before its client's request times out (the kbroker CLI waits 10 s).
LAG_TIMEOUT_S = 5.0


def share_config(config: Any) -> ShareConfig:
    return ShareConfig(
        session_timeout_ms=config.group_share_session_timeout_ms,
        min_session_timeout_ms=config.group_share_min_session_timeout_ms,
        max_session_timeout_ms=config.group_share_max_session_timeout_ms,
        heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
        min_heartbeat_interval_ms=config.group_share_min_heartbeat_interval_ms,
        max_heartbeat_interval_ms=config.group_share_max_heartbeat_interval_ms,
        record_lock_ms=config.group_share_record_lock_duration_ms,
        min_record_lock_ms=config.group_share_min_record_lock_duration_ms,
        max_record_lock_ms=config.group_share_max_record_lock_duration_ms,
        delivery_count_limit=config.group_share_delivery_count_limit,
        max_record_locks=config.group_share_partition_max_record_locks,
        max_size=config.group_share_max_size,
        max_groups=config.group_share_max_groups,
        max_share_sessions=config.group_share_max_share_sessions,
        num_partitions=config.share_coordinator_state_topic_num_partitions,
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
        self.enabled: bool = broker.config.group_share_enable
        coordinates = _Coordinates(broker)
        self.coordinator = ShareCoordinator(share_config(broker.config), coordinates, coordinates)
        self.coordinator.membership.owns_group = self._owns_group
        self.coordinator.leader.may_initialize = lambda key: False  # `_hold` starts them
        self.coordinator.leader.leader_epoch = self._leader_epoch
        self.dead_letters = DeadLetterWriter(
            broker, self.coordinator.leader, self.coordinator.configs, self.persist
        )
        self.persister = Persister(broker, self, self.coordinator.store)
        self._offset_links = BrokerLinks(broker, "share-lag", "share lag", log)
        self._waiting: list[asyncio.Future[ErrorCode]] = []
        self._writing: set[StateKey] = set()  # taken from `dirty`, their write under way
        self._wake = asyncio.Event()
        self._holding: dict[StateKey, asyncio.Future[ErrorCode]] = {}
        self._unheld_dead_letters: set[StateKey] = set()
        self._led: dict[tuple[str, int], int] = {}  # data partitions led here: epochs
        # The write number each `__share_group_state` partition was last loaded as.
        self._load_numbers: dict[int, int] = {}
        self._peeking: asyncio.Task[None] | None = None
        if self.enabled:
            groups = broker.group_coordinator.coordinator
            groups.share_loaders.append(self._load_groups)
            groups.share_unloaders.append(
                lambda partition: self.coordinator.membership.unload_groups(
                    lambda group_id: groups.partition_for(group_id) == partition
                )
            )

    # -- InternalTopicService --------------------------------------------------------------

    def layout(self) -> TopicLayout:
        config = self.broker.config
        return TopicLayout(
            config.share_coordinator_state_topic_num_partitions,
            config.share_coordinator_state_topic_replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.share_coordinator_state_topic_segment_bytes),
                "min.insync.replicas": str(config.share_coordinator_state_topic_min_isr),
            },
        )

    def held_partitions(self) -> Collection[int]:
        return self.coordinator.owned | self.coordinator.loading

    def begin_loading(self, partition: int, leader_epoch: int) -> None:
        self.coordinator.loading.add(partition)

    async def load_records(self, partition: int, records: list[KeyValue], started: float) -> None:
        replica = self.broker.replicas.get(STATE_TOPIC, partition)
        unreplicated = 0
        if replica is not None:  # records from the high watermark on: not committed yet
            tail = read_batches(replica.log, replica.high_watermark)
            unreplicated = sum(len(batch) for _, batch in tail)
        store = self.coordinator.store
        loaded, pending = store.load(partition, records, len(records) - unreplicated)
        self._load_numbers[partition] = number = store.stage()
        if pending and replica is not None:
            self._commit_when_replicated(partition, number, pending, replica.log.log_end_offset)
        self._unheld_dead_letters.update(self.coordinator.store.with_dead_letters(partition))
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

    def _commit_when_replicated(
        self, partition: int, number: int, states: dict[StateKey, bytes | None], end: int
    ) -> None:
        """Commit states loaded from records past the high watermark (as the write
        `number`) once the high watermark reaches `end`, unless the partition was unloaded
        or loaded again meanwhile."""

        async def commit() -> None:
            replica = self.broker.replicas.get(STATE_TOPIC, partition)
            if replica is None:
                return
            pending = acknowledgement(self.broker, replica, end)
            try:
                error = ErrorCode.none if pending is None else await pending
            except OSError:
                return
            # The high watermark passed them even when the ISR is now too small.
            replicated = (ErrorCode.none, ErrorCode.not_enough_replicas_after_append)
            if (
                error in replicated
                and partition in self.coordinator.owned
                and self._load_numbers.get(partition) == number
            ):
                self.coordinator.store.commit(number, states)

        task = asyncio.create_task(commit())
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def start(self) -> None:
        if not self.enabled:
            return
        self.coordinator.membership.is_other_group = self._is_other_group
        self._sync_group_configs(self.broker.controller.state.group_configs)
        self.publish_metrics(self._metrics_now)
        await super().start()
        self.every(TICK_MS, self._tick, "share group clock")
        self._tasks.append(asyncio.create_task(self._writer()))

    def _metrics_now(self) -> list[Metric]:
        """Per share-partition: records in flight (acquired, not yet acknowledged) and
        lag (not yet acknowledged up to the high watermark); and how many share-partitions
        have a change their share coordinator has not yet stored."""
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
            coordinator.leader.partitions.items(), key=lambda kv: (kv[0][0], kv[1].topic, kv[0][2])
        ):
            labels = [group_id, held.topic, str(partition)]
            in_flight.add_metric(labels, held.state.in_flight())
            value = coordinator.lag(group_id, topic_id, partition)
            if value >= 0:
                lag.add_metric(labels, value)
        unstored = GaugeMetricFamily(
            "kbroker_share_partition_unstored_states",
            "Share-partitions led here whose latest change is not yet stored by their "
            "share coordinator.",
        )
        unstored.add_metric([], len(coordinator.leader.dirty | self._writing))
        return [in_flight, lag, unstored]

    async def ready(self, group_id: str, wait_s: float = 1.0) -> ErrorCode:
        """Whether this node coordinates the group (leads its `__consumer_offsets`
        partition, as FindCoordinator with key type GROUP says), waiting (briefly) while
        that partition loads."""
        groups = self.broker.group_coordinator
        if groups.topic not in self.broker.controller.state.topics:
            error = await groups.ensure_topic()
            if error != ErrorCode.none:
                return error
        coordinator = groups.coordinator
        partition = coordinator.partition_for(group_id)
        deadline = time.monotonic() + wait_s
        while partition not in coordinator.owned:
            if time.monotonic() >= deadline:
                if partition in coordinator.loading:
                    return ErrorCode.coordinator_load_in_progress
                return ErrorCode.not_coordinator
            await asyncio.sleep(0.02)
        return ErrorCode.none

    def _owns_group(self, group_id: str) -> bool:
        coordinator = self.broker.group_coordinator.coordinator
        return coordinator.partition_for(group_id) in coordinator.owned

    def _leader_epoch(self, topic: str, partition: int) -> int:
        replica, _ = self.broker.replicas.leader(topic, partition)
        return -1 if replica is None else replica.leader_epoch

    def _sync_group_configs(self, every: dict[str, dict[str, str]]) -> None:
        """Group configs live in the cluster metadata; the coordinator keeps a copy."""
        for group_id in set(self.coordinator.configs.values) | set(every):
            self._group_configs_changed(group_id, every.get(group_id, {}))

    def _group_configs_changed(self, group_id: str, configs: dict[str, str]) -> None:
        held = self.coordinator.configs.values.get(group_id, {})
        changes: dict[str, str | None] = {k: None for k in held if k not in configs}
        changes.update({k: v for k, v in configs.items() if held.get(k) != v})
        if changes:
            self.coordinator.set_group_configs(group_id, changes)
        if not self.coordinator.configs.values.get(group_id, True):
            del self.coordinator.configs.values[group_id]

    async def stop(self) -> None:
        if not self.enabled:
            return
        self.dead_letters.stop()
        if self._peeking is not None:
            self._peeking.cancel()
        self.persister.close()
        self._offset_links.close()
        await super().stop()

    def _on_metadata_event(self, event: Any) -> None:
        if isinstance(event, TopicDeleted):
            self.coordinator.forget_topic(event.topic_id)
            self.persist()
        elif isinstance(event, GroupConfigsChanged):
            self._group_configs_changed(event.group_id, event.configs)
        super()._on_metadata_event(event)

    def _is_other_group(self, group_id: str) -> bool:
        """Whether the id is taken by a classic, consumer- or streams-protocol group."""
        coordinator = self.broker.group_coordinator.coordinator
        return group_id in coordinator.groups or coordinator.is_consumer_group(group_id)

    def _tick(self) -> None:
        self._drop_lost()
        self._peek_for_dead_letters()
        self._hold_dead_letters()
        self.coordinator.tick(int(time.time() * 1000))
        self.persist()

    def _drop_lost(self) -> None:
        """Forget share-partitions whose data partition this node no longer leads (or
        leads at a newer epoch: another broker led it in between)."""
        for key, held in list(self.coordinator.leader.partitions.items()):
            if self._leader_epoch(held.topic, key[2]) != held.leader_epoch:
                log.info(
                    "no longer leading share-partition %s of %s-%d", key[0], held.topic, key[2]
                )
                self.coordinator.leader.drop(key)

    def _peek_for_dead_letters(self) -> None:
        """On becoming a data partition's leader, read the stored states of the groups
        that name a dead-letter topic: one with dead letters still to write (its former
        leader died before writing them) is then held and written, as after a restart,
        without waiting for a consumer to fetch here. A group without a stored state
        for the partition is left alone (nothing is created)."""
        led = {
            p.key: p.leader_epoch
            for p in self.broker.replicas.hosted.values()
            if p.is_leader and not p.topic.startswith("__")
        }
        gained = [(k, e) for k, e in led.items() if self._led.get(k) != e]
        self._led = led
        groups = [
            g
            for g in self.coordinator.configs.values
            if self.coordinator.configs.dead_letter_topic(g)
        ]
        if not gained or not groups or STATE_TOPIC not in self.broker.controller.state.topics:
            return
        keys: list[tuple[StateKey, int]] = []
        for (topic, partition), epoch in gained:
            ref = self.coordinator.topics.by_name(topic)
            if ref is not None:
                keys += [((g, ref.topic_id, partition), epoch) for g in groups]
        previous = self._peeking
        self._peeking = asyncio.ensure_future(self._peek(keys, previous))

    async def _peek(
        self, keys: list[tuple[StateKey, int]], previous: asyncio.Task[None] | None
    ) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        for key, epoch in keys:
            if key in self.coordinator.leader.partitions:
                continue
            try:
                error, stored, _ = await self.persister.read(key, epoch)
            except Exception:  # noqa: BLE001 - left to a consumer's fetch
                log.exception("reading the share state of %s failed", key)
                continue
            if error == ErrorCode.none and stored is not None and json.loads(stored).get("dlq"):
                await self._start_holding(key)

    def _hold_dead_letters(self) -> None:
        """Hold the share-partitions led here whose stored state (loaded at start or on
        becoming their share coordinator) has dead letters still to write: they are
        written without waiting for a consumer to fetch there. The writer searches the
        dead-letter topic before its first copy, so one made before a crash is not
        made again."""
        for key in list(self._unheld_dead_letters):
            ref = self.coordinator.topics.by_id(key[1])
            if (
                ref is None
                or key in self.coordinator.leader.partitions
                or key not in self.coordinator.store.entries
            ):
                self._unheld_dead_letters.discard(key)  # held (the writer takes them) or gone
            elif self._leader_epoch(ref.name, key[2]) >= 0:
                self._start_holding(key)

    # -- persistence -------------------------------------------------------------------

    def persist(self) -> asyncio.Future[ErrorCode]:
        """Write every changed share-partition to its share coordinator; the future
        settles when stored.

        One writer writes in turn, each round everything changed since the last: under
        load, many requests' acknowledgements share one write (group commit, as the log
        does for fsyncs), and a share-partition's states are stored in the order made."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self._wake.set()
        return future

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            waiting, self._waiting = self._waiting, []
            try:
                error = await self._write_dirty()
            except asyncio.CancelledError:
                for future in waiting:
                    future.cancel()
                raise
            except Exception:
                log.exception("storing share state failed")
                error = ErrorCode.unknown_server_error
            for future in waiting:
                if not future.done():
                    future.set_result(error)

    def _load_groups(self, partition: int, records: list[KeyValue]) -> None:
        def skip(error: RecordFormatError) -> None:
            log.warning(
                "skipping unreadable share-group record in partition %d: %s", partition, error
            )

        now = int(time.time() * 1000)
        self.coordinator.membership.load_groups(fold_share_groups(records, skip), now)

    async def _write_groups(self) -> ErrorCode:
        """Write changed groups' records to their offsets partitions (Kafka's share group
        records), each partition's as one batch; wait until stored."""
        changed = self.coordinator.membership.take_group_records()
        if not changed:
            return ErrorCode.none
        groups = self.broker.group_coordinator.coordinator
        by_partition: dict[int, list[str]] = {}
        for group_id in changed:
            by_partition.setdefault(groups.partition_for(group_id), []).append(group_id)
        loop = asyncio.get_running_loop()
        outcomes: list[tuple[list[str], asyncio.Future[ErrorCode]]] = []
        for partition, group_ids in by_partition.items():
            future: asyncio.Future[ErrorCode] = loop.create_future()
            records = [r for g in group_ids for r in changed[g]]
            groups.store.write(partition, records, _settle(future))
            outcomes.append((group_ids, future))
        failed = ErrorCode.none
        for group_ids, future in outcomes:
            code = await future
            if code != ErrorCode.none:
                log.warning("storing share-group records failed: %s", code.name)
                failed = code
            self.coordinator.membership.group_records_stored(group_ids, code == ErrorCode.none)
        return failed

    async def _write_dirty(self) -> ErrorCode:
        group_error = await self._write_groups()
        writes = self.coordinator.leader.take_dirty()
        lost = self.coordinator.leader.lost_acknowledgements()
        if lost:
            # Their leadership moved on before they were stored: answered as failed,
            # like a write the next leader fenced.
            log.info("acknowledgements of share-partitions %s not stored: leader moved", lost)
            group_error = ErrorCode.kafka_storage_error
        if self.coordinator.leader.pending_dead_letters():
            self.dead_letters.kick()
        if not writes:
            return group_error
        self._writing.update(writes)
        try:
            outcome = await self.persister.write(writes)
        finally:
            self._writing.difference_update(writes)
        failed = ErrorCode.none
        for key, code in outcome.items():
            if code == ErrorCode.none:
                continue
            failed = code
            if code in (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch):
                # Another leader took it over, or its group's coordinator started it
                # again elsewhere (AlterShareGroupOffsets): read again when next fetched.
                log.info("share-partition %s is fenced: %s", key, code.name)
                self.coordinator.leader.drop(key)
            elif key in self.coordinator.leader.partitions:
                self.coordinator.leader.dirty.add(key)  # written again with the next round
        if failed != ErrorCode.none:
            return ErrorCode.kafka_storage_error
        return group_error

    # -- share coordinator: the stored states (ReadShareGroupState, WriteShareGroupState) --

    async def read_here(self, key: StateKey, leader_epoch: int) -> StoredRead:
        """The state stored for a share-partition, if this node is its share coordinator.
        A reader with a newer leader epoch (the data partition's new leader) is answered
        once that epoch is stored: older writers stay fenced after a failover of this
        coordinator too."""
        store = self.coordinator.store
        partition = store.partition_of(key)
        refused = self._not_here(partition)
        if refused is not None:
            return refused, None, 0
        raised = store.raise_leader_epoch(key, leader_epoch)
        if raised is not None:
            stored = await self._append(partition, {key: raised}, {key: ErrorCode.none})
            if stored[key] != ErrorCode.none:
                return stored[key], None, 0
        return ErrorCode.none, *store.read(key, leader_epoch)

    def summary_here(self, key: StateKey) -> StoredRead:
        """The committed state of a share-partition, if this node is its share
        coordinator: what DescribeShareGroupOffsets shows (Kafka's share coordinator reads
        ReadShareGroupStateSummary at its last committed offset)."""
        store = self.coordinator.store
        refused = self._not_here(store.partition_of(key))
        if refused is not None:
            return refused, None, 0
        return ErrorCode.none, *store.summary(key)

    def _not_here(self, partition: int) -> ErrorCode | None:
        """Why this node cannot answer for a `__share_group_state` partition, if so."""
        coordinator = self.coordinator
        if partition in coordinator.owned:
            return None
        if partition in coordinator.loading:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    async def write_here(self, partition: int, writes: list[Written]) -> dict[StateKey, ErrorCode]:
        """Store states in a `__share_group_state` partition this node leads: answered
        once the write is as durable as an acks=all produce."""
        refused = self._not_here(partition)
        if refused is not None:
            return {key: refused for key, _, _ in writes}
        outcome: dict[StateKey, ErrorCode] = {}
        states: dict[StateKey, bytes | None] = {}
        for key, value, leader_epoch in writes:
            code = ErrorCode(self.coordinator.store.write(key, value, leader_epoch))
            outcome[key] = code
            if code == ErrorCode.none:
                states[key] = value
        return await self._append(partition, states, outcome)

    async def initialize_here(
        self, partition: int, items: list[Initialized]
    ) -> dict[StateKey, ErrorCode]:
        """Start states again (InitializeShareGroupState) in a partition led here."""
        refused = self._not_here(partition)
        if refused is not None:
            return {item[0]: refused for item in items}
        store = self.coordinator.store
        outcome: dict[StateKey, ErrorCode] = {}
        states: dict[StateKey, bytes | None] = {}
        for key, topic, state_epoch, start in items:
            code = ErrorCode(store.initialize(key, topic, state_epoch, start))
            outcome[key] = code
            if code == ErrorCode.none:
                states[key] = store.entries[key].value
        return await self._append(partition, states, outcome)

    async def delete_here(self, partition: int, keys: list[StateKey]) -> dict[StateKey, ErrorCode]:
        """Delete states (DeleteShareGroupState) in a partition led here."""
        refused = self._not_here(partition)
        if refused is not None:
            return dict.fromkeys(keys, refused)
        states: dict[StateKey, bytes | None] = {}
        for key in keys:
            if key in self.coordinator.store.entries:
                self.coordinator.store.delete(key)
                states[key] = None
        return await self._append(partition, states, dict.fromkeys(keys, ErrorCode.none))

    async def _append(
        self,
        partition: int,
        states: dict[StateKey, bytes | None],
        outcome: dict[StateKey, ErrorCode],
    ) -> dict[StateKey, ErrorCode]:
        """Append the states' records; the outcome of those that were fine so far is the
        write's. Once the ISR has them, they are the committed states."""
        if not states:
            return outcome
        now = int(time.time() * 1000)
        records = [(state_key(key), value) for key, value in states.items()]
        number = self.coordinator.store.stage()
        error, acknowledgement = append_records(self.broker, STATE_TOPIC, partition, records, now)
        if error == ErrorCode.none and acknowledgement is not None:
            try:
                error = await acknowledgement
            except OSError:
                error = ErrorCode.kafka_storage_error
        if error == ErrorCode.none:
            self.coordinator.store.commit(number, states)
        else:
            log.warning("cannot store share state in %s-%d: %s", STATE_TOPIC, partition, error)
            error = write_error(error)
            for key, code in outcome.items():
                if code == ErrorCode.none:
                    outcome[key] = error
        return outcome

    # -- group coordinator: the group's stored states (the admin APIs) --------------------

    def state_keys(self, group_id: str, topics: Iterable[str] | None = None) -> list[StateKey]:
        """The share-partitions of a group on `topics` (None: every topic but the
        internal ones), whether or not they have a state."""
        state = self.broker.controller.state
        names = [n for n in state.topics if not n.startswith("__")] if topics is None else topics
        return [
            (group_id, info.topic_id, p.partition)
            for name in names
            if (info := state.topics.get(name)) is not None
            for p in info.partitions
        ]

    async def stored_states(self, keys: list[StateKey]) -> dict[StateKey, StoredRead]:
        """What the share coordinators store for the share-partitions, wherever they are."""
        if not keys or STATE_TOPIC not in self.broker.controller.state.topics:
            return dict.fromkeys(keys, (ErrorCode.none, None, 0))
        return await self.persister.read_many(keys)

    async def lags(
        self, group_id: str, states: dict[tuple[str, int], dict[str, Any]]
    ) -> dict[tuple[str, int], int]:
        """KIP-1226's lag of share-partitions, as Kafka's group coordinator works it out:
        the data partition's high watermark, asked of its leader wherever it is, less the
        share-partition start offset and the records past it whose delivery is complete
        (acknowledged or archived), from the stored state (`states`, snapshots by topic
        and partition). A partition whose leader does not answer has no lag (-1)."""
        ends = await self.high_watermarks(list(states))
        coordinator = self.coordinator
        lags: dict[tuple[str, int], int] = {}
        for tp, data in states.items():
            end = ends.get(tp)
            if end is None:
                lags[tp] = -1
                continue
            state = SharePartitionState.from_snapshot(
                data,
                coordinator.configs.delivery_limit(group_id),
                coordinator.config.max_record_locks,
            )
            lags[tp] = state.lag(end)
        return lags

    async def high_watermarks(
        self, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """The high watermark of each partition, from this broker's replica where it leads
        the partition, else asked of its leader (ListOffsets, latest, read uncommitted);
        a partition whose leader cannot be asked is left out."""
        state = self.broker.controller.state
        found: dict[tuple[str, int], int] = {}
        elsewhere: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            replica, _ = self.broker.replicas.leader(topic, partition)
            if replica is not None:
                found[(topic, partition)] = replica.high_watermark
                continue
            info = state.topics.get(topic)
            if info is None or not 0 <= partition < len(info.partitions):
                continue
            leader = info.partitions[partition].leader
            if leader >= 0 and leader != self.broker.node_id:
                elsewhere.setdefault(leader, {}).setdefault(topic, []).append(partition)
        answers = await asyncio.gather(
            *(self._list_latest(leader, topics) for leader, topics in elsewhere.items())
        )
        for answer in answers:
            found.update(answer)
        return found

    async def _list_latest(
        self, leader: int, topics: dict[str, list[int]]
    ) -> dict[tuple[str, int], int]:
        request = build(
            load_request_schema(LIST_OFFSETS, 7),
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "current_leader_epoch": -1,
                                "timestamp": LATEST_TIMESTAMP,
                            }
                            for p in partitions
                        ],
                    }
                    for topic, partitions in topics.items()
                ],
            },
        )
        response = None
        deadline = time.monotonic() + LAG_TIMEOUT_S
        # A link that broke since it was last used (the leader restarted) fails at once
        # and is dropped: ask again over a new connection, within the same deadline.
        for _ in range(2):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            response = await self._offset_links.call(leader, request, left)
            if response is not None:
                break
        if response is None:
            return {}
        return {
            (t.name, int(p.partition_index)): int(p.offset)
            for t in response.topics
            for p in t.partitions
            if int(p.error_code) == 0 and int(p.offset) >= 0
        }

    async def alter_start_offsets(
        self, items: list[tuple[StateKey, str, int]]
    ) -> dict[StateKey, ErrorCode]:
        """Start share-partitions again at offsets (key, topic, offset), under a newer
        state epoch: the leader of each, if it holds one, is fenced and reads it again."""
        if STATE_TOPIC not in self.broker.controller.state.topics:
            error = await self.ensure_topic()
            if error != ErrorCode.none:
                return {key: error for key, _, _ in items}
        read = await self.stored_states([key for key, _, _ in items])
        outcome: dict[StateKey, ErrorCode] = {}
        initialized: list[Initialized] = []
        for key, topic, offset in items:
            code, stored, state_epoch = read[key]
            if code != ErrorCode.none:
                outcome[key] = code
            else:
                next_epoch = state_epoch + 1 if stored is not None else state_epoch
                initialized.append((key, topic, next_epoch, offset))
        outcome.update(await self.persister.initialize(initialized))
        for key in outcome:
            self.coordinator.leader.drop(key)  # a state held here is read again when next fetched
        return outcome

    async def delete_states(self, keys: list[StateKey]) -> dict[StateKey, ErrorCode]:
        """Delete the stored states among `keys`, wherever their share coordinators are."""
        read = await self.stored_states(keys)
        existing = [k for k, (code, stored, _) in read.items() if stored is not None]
        outcome = {k: code for k, (code, _, _) in read.items()}
        outcome.update(await self.persister.delete(existing))
        for key in keys:
            self.coordinator.leader.drop(key)
        return outcome

    # -- share-partition leader: holding a share-partition --------------------------------

    async def _hold(
        self, group_id: str, partitions: Collection[tuple[uuid.UUID, int]], wait_s: float
    ) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Hold each share-partition led here that is not held yet, from the state its
        share coordinator stored; the partitions whose state could not be read, why."""
        waits: dict[tuple[uuid.UUID, int], asyncio.Future[ErrorCode]] = {}
        for topic_id, partition in partitions:
            key = (group_id, topic_id, partition)
            if key in self.coordinator.leader.partitions:
                continue
            waits[(topic_id, partition)] = self._start_holding(key)
        if not waits:
            return {}
        await asyncio.wait([asyncio.shield(w) for w in waits.values()], timeout=max(wait_s, 0.5))
        return {
            tp: w.result() if w.done() else ErrorCode.coordinator_not_available
            for tp, w in waits.items()
            if not w.done() or w.result() != ErrorCode.none
        }

    def _start_holding(self, key: StateKey) -> asyncio.Future[ErrorCode]:
        """Read the share-partition's stored state and hold it, once at a time."""
        pending = self._holding.get(key)
        if pending is None:
            pending = self._holding[key] = asyncio.ensure_future(self._read_and_hold(key))
            pending.add_done_callback(functools.partial(self._holding_done, key))
        return pending

    def _holding_done(self, key: StateKey, future: asyncio.Future[ErrorCode]) -> None:
        if self._holding.get(key) is future:
            del self._holding[key]

    async def _read_and_hold(self, key: StateKey) -> ErrorCode:
        group_id, topic_id, partition = key
        ref = self.coordinator.topics.by_id(topic_id)
        if ref is None:
            return ErrorCode.none  # acquiring answers UNKNOWN_TOPIC_ID
        epoch = self._leader_epoch(ref.name, partition)
        if epoch < 0:
            return ErrorCode.none  # not led here: acquiring answers NOT_LEADER_OR_FOLLOWER
        if STATE_TOPIC not in self.broker.controller.state.topics:
            error = await self.ensure_topic()
            if error != ErrorCode.none:
                return error
        try:
            error, stored, state_epoch = await self.persister.read(key, epoch)
        except Exception:
            log.exception("reading the share state of %s failed", key)
            return ErrorCode.unknown_server_error
        if error != ErrorCode.none:
            log.info("cannot read share state of %s: %s", key, error.name)
            return error
        committed = self.coordinator.configs.get(group_id, "share.isolation.level")
        bounds = _Coordinates(self.broker).bounds(
            ref.name, partition, committed == "read_committed"
        )
        if (
            bounds is None
            or self._leader_epoch(ref.name, partition) != epoch
            or key in self.coordinator.leader.partitions
        ):
            return ErrorCode.none  # leadership moved on meanwhile, or held already
        now = int(time.time() * 1000)
        self.coordinator.leader.hold(group_id, ref, partition, bounds, now, stored, state_epoch)
        held = self.coordinator.leader.partitions.get(key)
        if held is not None and held.state.pending_dead_letters:
            self.dead_letters.forget_copies()  # a former leader may have written some
        return ErrorCode.none

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
        batch_size: int = 0,
    ) -> FetchAnswer:
        coordinator = self.coordinator
        answer = FetchAnswer(lock_ms=coordinator.configs.lock_ms(group_id))
        has_acks = any(batches for _, _, batches in acks)
        now = int(time.time() * 1000)
        session = coordinator.leader.open_session(
            group_id, member_id, epoch, added, forgotten, has_acks, answer, now
        )
        if session is None:
            return answer
        if epoch == 0:
            coordinator.leader.refresh_unshared(group_id, member_id, session.partitions)
        acks = self._led_here(acks, answer)
        wanted = set(session.partitions) | {(t, p) for t, p, _ in acks}
        await self._hold(group_id, wanted, max_wait_ms / 1000)
        now = int(time.time() * 1000)
        coordinator.leader.acknowledge(group_id, member_id, acks, now, answer)
        coordinator.leader.forget(group_id, member_id, forgotten)
        if epoch == -1:
            coordinator.leader.close_session(group_id, member_id)
        elif max_records > 0:
            await self._acquire_or_wait(
                group_id,
                member_id,
                session,
                max_records,
                max_bytes,
                max_wait_ms,
                answer,
                batch_aligned,
                batch_size,
            )
        stored = self.persist()
        if answer.acknowledged:
            error = await stored
            if error != ErrorCode.none:
                for part in answer.partitions.values():
                    if not part.ack_error:
                        part.ack_error = int(ErrorCode.kafka_storage_error)
        return answer

    async def _acquire_or_wait(
        self,
        group_id: str,
        member_id: str,
        session: ShareSession,
        max_records: int,
        max_bytes: int,
        max_wait_ms: int,
        answer: FetchAnswer,
        batch_aligned: bool,
        batch_size: int,
    ) -> None:
        """Acquire; when nothing could be, stay parked until something can be or the
        wait runs out, as Kafka's delayed share fetch does. Every acknowledgement wakes
        the parked fetches (the window may have moved), and while one member holds the
        records the window allows, answering the others empty at each wake-up would
        only have them ask again: with many consumers on a partition that was most of
        the requests, the broker's and the clients' time."""
        coordinator = self.coordinator
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            now = int(time.time() * 1000)
            coordinator.leader.acquire(
                group_id,
                member_id,
                session,
                max_records,
                max_bytes,
                now,
                answer,
                batch_aligned,
                batch_size,
            )
            if answer.acquired_any or answer.acknowledged or answer.failed_any:
                return
            left = deadline - time.monotonic()
            if left <= 0 or self.broker.stopping:
                return
            await self._wait_for_records(session.partitions, left)
            if coordinator.leader.sessions.get((group_id, member_id)) is not session:
                return

    async def share_acknowledge(
        self, group_id: str, member_id: str, epoch: int, acks: PartitionAcks
    ) -> FetchAnswer:
        coordinator = self.coordinator
        answer = FetchAnswer()
        if not group_id or not member_id:  # as ShareFetch, before the session is looked up
            answer.error, answer.message = INVALID_REQUEST, "GroupId and MemberId must be set."
            return answer
        if epoch == 0:
            answer.error = int(ErrorCode.invalid_share_session_epoch)
            answer.message = "ShareAcknowledge cannot open a share session."
            return answer
        now = int(time.time() * 1000)
        session = coordinator.leader.open_session(
            group_id, member_id, epoch, [], [], False, answer, now
        )
        if session is None:
            return answer
        acks = self._led_here(acks, answer)
        await self._hold(group_id, {(t, p) for t, p, _ in acks}, 5.0)
        now = int(time.time() * 1000)
        coordinator.leader.acknowledge(group_id, member_id, acks, now, answer)
        if epoch == -1:
            coordinator.leader.close_session(group_id, member_id)
        error = await self.persist()
        if error != ErrorCode.none:
            for part in answer.partitions.values():
                if not part.ack_error:
                    part.ack_error = int(ErrorCode.kafka_storage_error)
        return answer

    def _led_here(self, acks: PartitionAcks, answer: FetchAnswer) -> PartitionAcks:
        """The acknowledgements for partitions led here; the others are answered
        NOT_LEADER_OR_FOLLOWER (the response names the current leader)."""
        kept: PartitionAcks = []
        for topic_id, partition, batches in acks:
            ref = self.coordinator.topics.by_id(topic_id)
            if ref is not None and self._leader_epoch(ref.name, partition) < 0:
                part = answer.part(topic_id, partition)
                part.error = int(ErrorCode.not_leader_or_follower)
                if batches:
                    part.ack_error = part.error
                continue
            kept.append((topic_id, partition, batches))
        return kept

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

        self.coordinator.leader.on_available.append(wake)
        try:
            await asyncio.wait([data, released], timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            data.cancel()
            wake()


def _settle(future: asyncio.Future[ErrorCode]) -> Callable[[ErrorCode], None]:
    def done(code: ErrorCode) -> None:
        if not future.done():
            future.set_result(code)

    return done
