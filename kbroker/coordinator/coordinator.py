"""The group coordinator: which groups this node coordinates, their committed offsets,
group administration, expiry and loading from `__consumer_offsets`.

Membership is each protocol's own: `classic` (JoinGroup/SyncGroup/Heartbeat/
LeaveGroup, classic_coordinator.py) and `consumer` (ConsumerGroupHeartbeat, KIP-848,
consumer_coordinator.py). Both reach this host through `host.GroupHost` only; it calls
them through their public methods. Like them, it is synchronous and event-driven: a
test drives it with a manual clock and an in-memory store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.errors import ErrorCode

from kbroker.coordinator.classic_coordinator import (
    ClassicGroupCoordinator,
    JoinRequest,
    LeaveResult,
    LeavingMember,
    SyncRequest,
)
from kbroker.coordinator.clock import Scheduler
from kbroker.coordinator.consumer_coordinator import ConsumerGroupConfig, ConsumerGroupCoordinator
from kbroker.coordinator.consumer_group import ConsumerGroup
from kbroker.coordinator.consumer_records import is_consumer_record
from kbroker.coordinator.group import (
    ClassicGroup,
    GroupState,
    JoinCallback,
    OffsetAndMetadata,
    SyncCallback,
)
from kbroker.coordinator.host import (
    CoordinatorConfig,
    drop_offsets,
    group_write_error,
    log_write_failure,
)
from kbroker.coordinator.persistence import (
    expired_offsets,
    group_from_record,
    offset_records,
    offset_tombstones,
    replay,
    tombstones,
)
from kbroker.coordinator.records import (
    RecordFormatError,
    encode_group_key,
    fits_in_key,
    partition_for,
)
from kbroker.coordinator.share_group_records import is_share_group_record
from kbroker.coordinator.store import GroupStore, KeyValue
from kbroker.coordinator.streams_coordinator import StreamsGroupConfig, StreamsGroupCoordinator
from kbroker.coordinator.streams_group import StreamsGroup, is_streams_record
from kbroker.coordinator_runtime.internal_topics import write_error

R = TypeVar("R")
log = logging.getLogger("kbroker.coordinator")

E = ErrorCode
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


CommitCallback = Callable[[dict[TopicPartition, ErrorCode]], None]
DeleteGroupsCallback = Callable[[dict[str, ErrorCode]], None]
DeleteOffsetsCallback = Callable[[tuple[ErrorCode, dict[TopicPartition, ErrorCode]]], None]


def _offset_write_error(code: ErrorCode) -> ErrorCode:
    return write_error(code, too_large=E.invalid_commit_offset_size)


class GroupCoordinator:
    def __init__(
        self,
        config: CoordinatorConfig,
        scheduler: Scheduler,
        store: GroupStore,
        new_id: Callable[[], str] | None = None,
        consumer_config: ConsumerGroupConfig | None = None,
        streams_config: StreamsGroupConfig | None = None,
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.store = store
        self.groups: dict[str, ClassicGroup] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.active = True
        # Hooks for the transaction coordinator: told of each loaded partition (to settle
        # offsets of aborted or open transactions), and asked whether an open transaction
        # holds a group's offset (OffsetFetch with require_stable).
        self.load_listeners: list[Callable[[int], object]] = []
        # Share groups' records of a loaded partition go to the share-group coordinator.
        self.share_loaders: list[Callable[[int, list[KeyValue]], object]] = []
        # ...and are told when this node no longer leads a partition.
        self.share_unloaders: list[Callable[[int], object]] = []
        self.pending_offset_check: Callable[[str, TopicPartition], bool] | None = None
        # The two protocols' groups share the id namespace, offsets and partitions.
        self.classic = ClassicGroupCoordinator(self, config, new_id)
        self.consumer = ConsumerGroupCoordinator(self, consumer_config)
        self.streams = StreamsGroupCoordinator(self, streams_config)

    # -- ownership ------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def status(self, group_id: str | None, allow_empty: bool = False) -> ErrorCode | None:
        """Kafka's validateGroupStatus: is the id usable and is this node its coordinator?"""
        if group_id is None or (not group_id and not allow_empty) or not fits_in_key(group_id):
            return E.invalid_group_id
        if not self.active:
            return E.coordinator_not_available
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return E.coordinator_load_in_progress
        if partition not in self.owned:
            return E.not_coordinator
        return None

    def _now(self) -> int:
        return self.scheduler.now_ms()

    def is_consumer_group(self, group_id: str) -> bool:
        """Whether a heartbeat-driven group (consumer or streams protocol) holds the id."""
        return group_id in self.consumer.groups or group_id in self.streams.groups

    def is_streams_group(self, group_id: str) -> bool:
        return group_id in self.streams.groups

    def release_consumer_group(
        self, group_id: str
    ) -> dict[TopicPartition, OffsetAndMetadata] | None:
        if group_id in self.streams.groups:
            return self.streams.release_to_classic(group_id)
        return self.consumer.release_to_classic(group_id)

    def _protocol_group(
        self, group_id: str
    ) -> tuple[ConsumerGroupCoordinator | StreamsGroupCoordinator, ConsumerGroup | StreamsGroup]:
        """The consumer or streams group of the id, with its coordinator; KeyError if none."""
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            return self.consumer, consumer
        return self.streams, self.streams.groups[group_id]

    def forget_classic_group(self, group: ClassicGroup) -> None:
        self.classic.forget_group(group)

    def take_over_classic_group(self, group: ClassicGroup) -> None:
        self.classic.fail_waiters(group, E.rebalance_in_progress)
        self.classic.forget_group(group)

    def adopt_downgraded_group(self, group: ClassicGroup, reason: str | None) -> None:
        self.classic.adopt(group, reason)

    # -- the classic protocol's APIs ------------------------------------------------------
    # A classic consumer may be a member of a consumer group (KIP-848's migration): an id
    # a consumer group holds goes to its coordinator, which falls back to the classic
    # protocol when, by the request's turn, the id is no longer a consumer group's.

    def join_group(self, req: JoinRequest, callback: JoinCallback) -> None:
        gid = req.group_id
        error = self.status(gid)
        if error is None and not (
            self.config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            error = E.invalid_session_timeout
        if error is not None or not self.consumer.holds(gid):
            self.classic.join_group(req, callback)
            return

        def fallback(offsets: dict[TopicPartition, OffsetAndMetadata] | None) -> None:
            if offsets is not None and gid not in self.groups:
                self.groups[gid] = ClassicGroup(
                    gid, state_timestamp_ms=self._now(), offsets=offsets
                )
            self.classic.join_group(req, callback)

        self.consumer.classic_members.join(req, callback, fallback)

    def sync_group(self, req: SyncRequest, callback: SyncCallback) -> None:
        if self.status(req.group_id) is not None or not self.consumer.holds(req.group_id):
            self.classic.sync_group(req, callback)
            return
        self.consumer.classic_members.sync(
            req.group_id,
            req.member_id,
            req.generation_id,
            req.group_instance_id,
            (req.protocol_type, req.protocol_name),
            callback,
            lambda: self.classic.sync_group(req, callback),
        )

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        instance_id: str | None,
        callback: Callable[[ErrorCode], None],
    ) -> None:
        def classic() -> None:
            callback(self.classic.heartbeat(group_id, member_id, generation_id, instance_id))

        if self.status(group_id) is not None or not self.consumer.holds(group_id):
            classic()
            return
        self.consumer.classic_members.heartbeat(
            group_id, member_id, generation_id, instance_id, callback, classic
        )

    def leave_group(
        self, group_id: str, members: list[LeavingMember], callback: Callable[[LeaveResult], None]
    ) -> None:
        def classic() -> None:
            callback(self.classic.leave_group(group_id, members))

        if self.status(group_id) is not None or not self.consumer.holds(group_id):
            classic()
            return
        self.consumer.classic_members.leave(group_id, members, callback, classic)

    def _holds(self, group: ClassicGroup | ConsumerGroup | StreamsGroup) -> bool:
        """Whether the group (of any kind) is still the live one of its id."""
        live: dict[str, ClassicGroup] | dict[str, ConsumerGroup] | dict[str, StreamsGroup]
        if isinstance(group, ConsumerGroup):
            live = self.consumer.groups
        elif isinstance(group, StreamsGroup):
            live = self.streams.groups
        else:
            live = self.groups
        return live.get(group.group_id) is group

    # -- offsets --------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
        instance_id: str | None = None,
        unknown_group_error: ErrorCode = E.illegal_generation,
        retention_ms: int | None = None,
        commit_timestamps: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """Validate and store committed offsets; the callback gets one code per partition.

        Commit times are stamped here, but for those OffsetCommit v1 gives in
        `commit_timestamps` (Kafka 3.9 stores them, and an offset without an explicit
        expiry expires `offsets.retention.minutes` after its commit time). `retention_ms` (OffsetCommit v2-v4's retention
        time, when not -1) gives the offsets an explicit expiry, as in Kafka.
        `unknown_group_error` is what a member commit to a missing group gets:
        ILLEGAL_GENERATION before OffsetCommit v9, GROUP_ID_NOT_FOUND from v9 on.
        """
        error = self.status(group_id, allow_empty=True)
        group: ClassicGroup | ConsumerGroup | StreamsGroup | None = None
        if error is None and self.is_consumer_group(group_id):
            protocol, protocol_group = self._protocol_group(group_id)
            group = protocol_group
            error = protocol.validate_offset_commit(protocol_group, member_id, generation_id)  # type: ignore[arg-type]
        elif error is None:
            group = self.groups.get(group_id)
            if group is None:
                if generation_id < 0:
                    # A "simple" group: offsets only, no membership (admin tools, assign()).
                    group = ClassicGroup(group_id, state_timestamp_ms=self._now())
                    self.groups[group_id] = group
                else:
                    error = unknown_group_error
            if group is not None:
                error = self.classic.validate_offset_commit(
                    group, member_id, instance_id, generation_id
                )
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        assert group is not None
        if isinstance(group, ConsumerGroup):
            # As Kafka 4.3: one partition the member may not write at its older epoch
            # fails the whole request (the validator's error escapes the commit).
            stale = self.consumer.stale_partitions(group, member_id, generation_id, offsets)
            if stale:
                error = next(iter(stale.values()))
                callback({tp: error for tp in offsets})
                return
        if isinstance(group, ClassicGroup) and group.is_in(
            GroupState.STABLE, GroupState.PREPARING_REBALANCE
        ):
            member = group.members.get(member_id)
            if member is not None:
                self.classic.schedule_heartbeat(group, member)
        results: dict[TopicPartition, ErrorCode] = {}
        to_store: dict[TopicPartition, OffsetAndMetadata] = {}
        now = self._now()
        expires = None if retention_ms is None else now + retention_ms
        for tp, value in offsets.items():
            if len(value.metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = E.offset_metadata_too_large
            else:
                at = now if commit_timestamps is None else commit_timestamps.get(tp, now)
                to_store[tp] = value.stamped(at, expires)
        if not to_store:
            callback(results)
            return
        records = offset_records(group_id, to_store)

        def stored(code: ErrorCode) -> None:
            if code == E.none:
                if self._holds(group):
                    group.offsets.update(to_store)
                results.update(dict.fromkeys(to_store, E.none))
            else:
                results.update(dict.fromkeys(to_store, _offset_write_error(code)))
            callback(results)

        self.store.write(self.partition_for(group_id), records, stored)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets of the group; None for partitions with none committed.

        `partitions=None` asks for every committed offset of the group. A member of a
        consumer-protocol group names itself (OffsetFetch v9+) and must be at its epoch.
        """
        error = self.status(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        group: ClassicGroup | ConsumerGroup | StreamsGroup | None = self.groups.get(group_id)
        if self.is_consumer_group(group_id):
            protocol, protocol_group = self._protocol_group(group_id)
            error = protocol.validate_offset_fetch(protocol_group, member_id, member_epoch)  # type: ignore[arg-type]
            if error is not None:
                return error, {}
            group = protocol_group
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return E.none, dict(offsets)
        return E.none, {tp: offsets.get(tp) for tp in partitions}

    def has_pending_offset(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of the group for `tp`."""
        check = self.pending_offset_check
        return check is not None and check(group_id, tp)

    def validate_txn_offset_commit(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        instance_id: str | None,
        partitions: Iterable[TopicPartition] = (),
    ) -> ErrorCode:
        """Kafka's checks of a TxnOffsetCommit against the group. Unlike a plain commit it
        is not refused during a rebalance, nor from outside a live group; a missing group
        is created (simple) for a request from no member, else ILLEGAL_GENERATION. A
        member of a consumer group at an older epoch commits only partitions it has held
        since (KIP-1251), else the whole request is ILLEGAL_GENERATION."""
        error = self.status(group_id)
        if error is not None:
            return error
        if self.is_consumer_group(group_id):
            protocol, protocol_group = self._protocol_group(group_id)
            error = protocol.validate_offset_commit(
                protocol_group,  # type: ignore[arg-type]
                member_id,
                generation_id,
                transactional=True,
            )
            if error is None and isinstance(protocol_group, ConsumerGroup):
                stale = self.consumer.stale_partitions(
                    protocol_group, member_id, generation_id, partitions
                )
                error = E.illegal_generation if stale else None
            return error or E.none
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return E.illegal_generation
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=self._now())
            return E.none
        if group.is_in(GroupState.DEAD):
            return E.coordinator_not_available
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return E.none
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self.classic.validate_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return E.illegal_generation
        return E.none

    def apply_committed_offsets(
        self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """Make offsets already in the log visible (a transaction's commit marker landed)."""
        if self.is_consumer_group(group_id):
            self._protocol_group(group_id)[1].offsets.update(offsets)
            return
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            group = ClassicGroup(group_id, state_timestamp_ms=self._now())
            self.groups[group_id] = group
        group.offsets.update(offsets)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition], callback: DeleteOffsetsCallback
    ) -> None:
        error = self.status(group_id)
        consumer_group = self.consumer.groups.get(group_id) if error is None else None
        streams_group = self.streams.groups.get(group_id) if error is None else None
        in_use: Callable[[str], bool]
        if consumer_group is not None:
            group: ClassicGroup | ConsumerGroup | StreamsGroup | None = consumer_group
            in_use = consumer_group.is_subscribed_to
        elif streams_group is not None:
            group = streams_group
            # A streams group with members reads its source topics: their offsets stay.
            sources = streams_group.source_topics() if streams_group.members else set()

            def in_use(topic: str) -> bool:
                return topic in sources

        else:
            classic = self.groups.get(group_id) if error is None else None
            if error is None and (classic is None or classic.is_in(GroupState.DEAD)):
                error = E.group_id_not_found
            if (
                error is None
                and classic is not None
                and not classic.is_in(GroupState.EMPTY)
                and classic.protocol_type != "consumer"
            ):
                # Only the consumer protocol tells which topics a live group still uses.
                error = E.non_empty_group
            group = classic

            def in_use(topic: str) -> bool:
                return (
                    classic is not None
                    and not classic.is_in(GroupState.EMPTY)
                    and classic.is_subscribed_to(topic)
                )

        if error is not None or group is None:
            callback((error or E.group_id_not_found, {}))
            return
        results: dict[TopicPartition, ErrorCode] = {}
        removed: list[TopicPartition] = []
        for tp in partitions:
            if in_use(tp[0]):
                results[tp] = E.group_subscribed_to_topic
                continue
            results[tp] = E.none
            if tp in group.offsets:
                removed.append(tp)
        records = offset_tombstones(group_id, removed)

        def stored(code: ErrorCode) -> None:
            if code != E.none:
                callback((_offset_write_error(code), {}))
                return
            for tp in removed:
                group.offsets.pop(tp, None)
            callback((E.none, results))

        self.store.write(self.partition_for(group_id), records, stored)

    # -- admin ----------------------------------------------------------------------------

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[ListedGroup]]:
        wanted_states = {s.strip().lower() for s in states}
        wanted_types = {t.strip().lower() for t in types}
        listed = []
        for group in self.groups.values():
            if group.is_in(GroupState.DEAD):
                continue
            if wanted_states and group.state.value.lower() not in wanted_states:
                continue
            if wanted_types and "classic" not in wanted_types:
                continue
            listed.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value))
        if not wanted_types or "consumer" in wanted_types:
            listed.extend(
                ListedGroup(group_id, "consumer", state, "consumer")
                for group_id, state in self.consumer.listed(wanted_states)
            )
        if not wanted_types or "streams" in wanted_types:
            listed.extend(
                ListedGroup(group_id, "streams", state, "streams")
                for group_id, state in self.streams.listed(wanted_states)
            )
        error = E.coordinator_load_in_progress if self.loading else E.none
        if not self.active:
            error = E.coordinator_not_available
        return error, listed

    def describe_group(self, group_id: str) -> tuple[ErrorCode, ClassicGroup | None]:
        error = self.status(group_id, allow_empty=True)
        if error is not None:
            return error, None
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return E.group_id_not_found, None
        return E.none, group

    def delete_groups(self, group_ids: list[str], callback: DeleteGroupsCallback) -> None:
        results: dict[str, ErrorCode] = {}
        by_partition: dict[int, list[KeyValue]] = {}
        for group_id in group_ids:
            error = self.status(group_id, allow_empty=True)
            if error is None and self.is_consumer_group(group_id):
                protocol = self._protocol_group(group_id)[0]
                error, consumer_records = protocol.delete_group(group_id)
                results[group_id] = error
                if error == E.none:
                    by_partition.setdefault(self.partition_for(group_id), []).extend(
                        consumer_records
                    )
                continue
            group = self.groups.get(group_id) if error is None else None
            if error is None and (group is None or group.is_in(GroupState.DEAD)):
                error = E.group_id_not_found
            if error is None and group is not None and not group.is_in(GroupState.EMPTY):
                error = E.non_empty_group
            if error is not None or group is None:
                results[group_id] = error or E.group_id_not_found
                continue
            records = by_partition.setdefault(self.partition_for(group_id), [])
            records.extend(tombstones(group))
            self.classic.forget_group(group)
            results[group_id] = E.none
        if not by_partition:
            callback(results)
            return
        pending = len(by_partition)

        def stored_for(ids: set[str]) -> Callable[[ErrorCode], None]:
            def stored(code: ErrorCode) -> None:
                nonlocal pending
                if code != E.none:
                    for group_id in ids:
                        results[group_id] = group_write_error(code)
                pending -= 1
                if pending == 0:
                    callback(results)

            return stored

        for partition, records in by_partition.items():
            ids = {
                g for g in results if results[g] == E.none and self.partition_for(g) == partition
            }
            self.store.write(partition, records, stored_for(ids))

    # -- offset expiry --------------------------------------------------------------------

    def expire_offsets(self) -> int:
        """Drop offsets past retention and empty groups with nothing left; returns how
        many offsets went. Kafka's rules: an Empty consumer group's offsets age from
        when it became empty; a Stable consumer group loses only offsets of topics it no
        longer subscribes to; a simple group's age from their commit."""
        now = self._now()
        retention = self.config.offsets_retention_ms
        by_partition: dict[int, list[KeyValue]] = {}
        expired_count = 0
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) not in self.owned:
                continue
            expired = expired_offsets(group, now, retention)
            records = drop_offsets(group.group_id, group.offsets, expired)
            expired_count += len(expired)
            if group.is_in(GroupState.EMPTY) and not group.offsets:
                records.append((encode_group_key(group.group_id), None))
                self.classic.forget_group(group)
            if records:
                by_partition.setdefault(self.partition_for(group.group_id), []).extend(records)
        consumer_records, consumer_expired = self.consumer.expire_offsets(
            now, retention, self.owned
        )
        for partition, written in consumer_records.items():
            by_partition.setdefault(partition, []).extend(written)
        expired_count += consumer_expired
        streams_records, streams_expired = self.streams.expire_offsets(now, retention, self.owned)
        for partition, written in streams_records.items():
            by_partition.setdefault(partition, []).extend(written)
        expired_count += streams_expired
        for partition, written in by_partition.items():
            self.store.write(partition, written, lambda code: log_write_failure("expiry", code))
        if expired_count:
            log.info("expired %d committed offsets", expired_count)
        return expired_count

    def forget_topic_offsets(self, topic: str) -> int:
        """A deleted topic's committed offsets leave every group this coordinator owns,
        tombstoned in __consumer_offsets, as Kafka's coordinator does when partitions
        are deleted: a topic created again under that name starts with no committed
        position, and OffsetFetch no longer lists the old one. An Empty classic group
        left with no offsets is deleted, as in Kafka's cleanup. Returns how many went."""
        by_partition: dict[int, list[KeyValue]] = {}
        count = 0
        groups: list[ClassicGroup | ConsumerGroup | StreamsGroup] = [
            *self.groups.values(),
            *self.consumer.groups.values(),
            *self.streams.groups.values(),
        ]
        for group in groups:
            partition = self.partition_for(group.group_id)
            if partition not in self.owned:
                continue
            gone = [tp for tp in group.offsets if tp[0] == topic]
            if not gone:
                continue
            count += len(gone)
            records = drop_offsets(group.group_id, group.offsets, gone)
            if (
                isinstance(group, ClassicGroup)
                and not group.offsets
                and group.is_in(GroupState.EMPTY)
            ):
                records.append((encode_group_key(group.group_id), None))
                self.classic.forget_group(group)
            by_partition.setdefault(partition, []).extend(records)
        for partition, written in by_partition.items():
            self.store.write(
                partition, written, lambda code: log_write_failure("topic deletion", code)
            )
        return count

    # -- persistence ----------------------------------------------------------------------

    def begin_loading(self, partition: int) -> None:
        self.loading.add(partition)

    def load_partition(self, partition: int, records: Iterable[KeyValue]) -> int:
        """Rebuild the groups of one partition from its records (oldest first).

        The latest record per key wins and a tombstone removes; offsets of a group
        with no metadata record make a simple (Empty) group, as in Kafka. Members of
        loaded groups get a fresh session: if they are gone, their sessions expire.
        Returns the number of groups loaded.
        """

        def skip(error: RecordFormatError) -> None:
            log.warning("skipping unreadable record in partition %d: %s", partition, error)

        records = list(records)
        shares = [r for r in records if is_share_group_record(r[0])]
        records = [r for r in records if not is_share_group_record(r[0])]
        consumer_loaded = self.consumer.load_records(partition, records)
        streams_loaded = self.streams.load_records(partition, records)
        metadata, offsets = replay(
            (r for r in records if not is_consumer_record(r[0]) and not is_streams_record(r[0])),
            skip,
        )
        now = self._now()
        loaded = len(consumer_loaded) + len(streams_loaded)
        for group_id in set(metadata) | set(offsets):
            stored = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if self.is_consumer_group(group_id):
                self._protocol_group(group_id)[1].offsets = group_offsets
                continue
            if stored is None and not group_offsets:
                continue
            group = group_from_record(group_id, stored, now)
            group.offsets = group_offsets
            old = self.groups.get(group_id)
            if old is not None:
                self.classic.fail_waiters(old, E.not_coordinator)
            self.groups[group_id] = group
            self.classic.on_group_loaded(group)
            loaded += 1
        self.loading.discard(partition)
        self.owned.add(partition)
        for loader in self.share_loaders:
            try:
                loader(partition, shares)
            except Exception:
                log.exception("share-group loader failed for partition %d", partition)
        for listener in self.load_listeners:
            try:
                listener(partition)
            except Exception:
                log.exception("load listener failed for partition %d", partition)
        return loaded

    def unload_partition(self, partition: int) -> None:
        """Drop this partition's groups (leadership moved away, or shutdown)."""
        self.loading.discard(partition)
        self.owned.discard(partition)
        self.consumer.unload_partition(partition)
        self.streams.unload_partition(partition)
        for group in [
            g for g in self.groups.values() if self.partition_for(g.group_id) == partition
        ]:
            self.classic.fail_waiters(group, E.not_coordinator)
            self.classic.forget_group(group)
        for unloader in self.share_unloaders:
            try:
                unloader(partition)
            except Exception:
                log.exception("share-group unloader failed for partition %d", partition)

    def shutdown(self) -> None:
        self.active = False
        for partition in sorted(self.owned | self.loading):
            self.unload_partition(partition)


__all__ = [
    "GroupCoordinator",
    "ListedGroup",
]
