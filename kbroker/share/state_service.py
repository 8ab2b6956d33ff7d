"""The share coordinator's state service: the `__share_group_state` topic's runtime.

Kafka's ShareCoordinatorService: the leader of a share-partition's `__share_group_state`
partition (created on first need, replayed on gaining a partition of it, through the
machinery the group and transaction coordinators use, `InternalTopicService`) stores the
share-partitions' states (`kbroker.share.state_store`), answering ReadShareGroupState,
WriteShareGroupState, InitializeShareGroupState and DeleteShareGroupState from every
broker (`kbroker.share.persister`), and fencing writes of a stale leader epoch. So after
a data partition's leader fails over, its new leader holds what was stored:
acknowledged records stay acknowledged, acquired ones are available again with their
delivery counted.

The service is also where this broker's changes are written from: one writer stores, in
turn, the share-group records changed in `__consumer_offsets` and the share-partitions
changed here (at their share coordinators, wherever they are), and has dead-lettered
records copied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection

from kio.schema.errors import ErrorCode

from kbroker.config import segment_size_config
from kbroker.coordinator.records import RecordFormatError
from kbroker.coordinator.share_group_records import fold_share_groups
from kbroker.coordinator_runtime.internal_topics import (
    InternalTopicService,
    KeyValue,
    TopicLayout,
    acknowledgement,
    append_records,
    read_batches,
    write_error,
)
from kbroker.share.coordinates import STATE_TOPIC, ShareBroker
from kbroker.share.coordinator import ShareCoordinator
from kbroker.share.dead_letters import DeadLetterWriter
from kbroker.share.persister import Initialized, Persister, StoredRead, Written
from kbroker.share.records import StateKey, state_key

log = logging.getLogger("kbroker.share")


class ShareStateService(InternalTopicService):
    """The share coordinator (Kafka's ShareCoordinatorService) over `__share_group_state`,
    and the writer that stores this broker's share-group changes."""

    topic = STATE_TOPIC
    log = log
    coordinator: ShareCoordinator
    broker: ShareBroker

    def __init__(self, broker: ShareBroker, coordinator: ShareCoordinator) -> None:
        super().__init__(broker)
        self.coordinator = coordinator
        self.dead_letters = DeadLetterWriter(
            broker, coordinator.leader, coordinator.configs, self.persist
        )
        self.persister = Persister(broker, self, coordinator.store)
        self._waiting: list[asyncio.Future[ErrorCode]] = []
        self._writing: set[StateKey] = set()  # taken from `dirty`, their write under way
        self._wake = asyncio.Event()
        # The write number each `__share_group_state` partition was last loaded as.
        self._load_numbers: dict[int, int] = {}
        # Told of each `__share_group_state` partition loaded here.
        self.on_loaded: Callable[[int], None] = lambda partition: None

    # -- InternalTopicService --------------------------------------------------------------

    def layout(self) -> TopicLayout:
        config = self.broker.config
        return TopicLayout(
            config.share_coordinator_state_topic_num_partitions,
            config.share_coordinator_state_topic_replication_factor,
            {
                "cleanup.policy": "compact",
                **segment_size_config(config.share_coordinator_state_topic_segment_bytes),
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
        self.on_loaded(partition)
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


def _settle(future: asyncio.Future[ErrorCode]) -> Callable[[ErrorCode], None]:
    def done(code: ErrorCode) -> None:
        if not future.done():
            future.set_result(code)

    return done
