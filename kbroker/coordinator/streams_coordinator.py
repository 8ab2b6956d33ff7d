"""The streams-group coordinator (KIP-1071): StreamsGroupHeartbeat and friends.

As the consumer protocol's coordinator, the group is driven by heartbeats alone. Each
heartbeat (1) creates or updates the member, and the topology when the group has none,
bumping the group epoch when membership, the topology or the topics it reads changed;
(2) checks the topology against the cluster (`streams_topology.configure`), asking the
broker to create missing internal topics and answering the status codes that say why
the group cannot run yet; (3) computes a new target assignment with the sticky task
assignor when the group epoch is ahead of the assignment epoch; and (4) moves this
member one safe step towards its target: tasks to give up are revoked first (the
member keeps its epoch until it reports them gone), and an active task another member
still holds is handed over only once released.

Every change is a list of `streams_group` records written to `__consumer_offsets`;
only once the write succeeded are they applied to the live group and the member
answered. Operations on one group run one at a time in arrival order.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kbroker.controller.state import MetadataState
from kbroker.coordinator.group import GroupState, OffsetAndMetadata, int_group_config
from kbroker.coordinator.host import (
    GroupHost,
    check_offset_commit,
    check_offset_fetch,
    described_group,
    drop_offsets,
    listed_groups,
)
from kbroker.coordinator.member_timers import (
    cancel_member_timers,
    cancel_rebalance_timeout,
    schedule_rebalance_timeout,
    schedule_session_timeout,
)
from kbroker.coordinator.persistence import offset_tombstones
from kbroker.coordinator.records import RecordFormatError
from kbroker.coordinator.store import KeyValue
from kbroker.coordinator.streams_assignor import AssignmentMember, assign_tasks
from kbroker.coordinator.streams_group import (
    EMPTY_ASSIGNMENT,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberMetadataRecord,
    MemberState,
    StreamsGroup,
    StreamsMember,
    StreamsRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    TaskAssignment,
    Tasks,
    Topology,
    TopologyRecord,
    decode_record,
    encode_records,
    intersect,
    is_streams_record,
    minus,
    task_set,
    tasks_of,
    union,
)
from kbroker.coordinator.streams_topology import (
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    ConfiguredTopology,
    InternalTopic,
    InvalidTopology,
    configure,
    validate_topology,
)
from kbroker.coordinator_runtime.internal_topics import write_error
from kbroker.coordinator_runtime.serial import Change, Finish, SerialWriter

if TYPE_CHECKING:
    from kbroker.config import BrokerConfig

log = logging.getLogger("kbroker.coordinator.streams")

E = ErrorCode
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class StreamsGroupConfig:
    """Kafka's group.streams.* settings, in milliseconds."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    num_standby_replicas: int = 0
    acceptable_recovery_lag: int = 10_000
    task_offset_interval_ms: int = 60_000
    default_replication_factor: int = 1
    enabled: bool = True


def streams_group_config(config: BrokerConfig) -> StreamsGroupConfig:
    """The streams-protocol settings from the broker's (Kafka's names); values outside
    their min/max settings are moved into range with a warning, as for consumer groups."""

    def bounded(name: str, value: int, low: int, high: int) -> int:
        if not low <= value <= high:
            fixed = min(max(value, low), high)
            log.warning("%s=%d is outside [%d, %d]; using %d", name, value, low, high, fixed)
            return fixed
        return value

    session = bounded(
        "group.streams.session.timeout.ms",
        config.group_streams_session_timeout_ms,
        config.group_streams_min_session_timeout_ms,
        config.group_streams_max_session_timeout_ms,
    )
    heartbeat = bounded(
        "group.streams.heartbeat.interval.ms",
        config.group_streams_heartbeat_interval_ms,
        config.group_streams_min_heartbeat_interval_ms,
        config.group_streams_max_heartbeat_interval_ms,
    )
    standby = bounded(
        "group.streams.num.standby.replicas",
        config.group_streams_num_standby_replicas,
        0,
        config.group_streams_max_standby_replicas,
    )
    protocols = {p.strip().lower() for p in config.group_coordinator_rebalance_protocols}
    return StreamsGroupConfig(
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat,
        max_size=config.group_streams_max_size,
        num_standby_replicas=standby,
        default_replication_factor=config.default_replication_factor,
        enabled="streams" in protocols,
    )


@dataclass(frozen=True, slots=True)
class StreamsHeartbeatRequest:
    """A StreamsGroupHeartbeat, version-neutral; None fields did not change."""

    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    active_tasks: Tasks | None = None
    standby_tasks: Tasks | None = None
    warmup_tasks: Tasks | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""

    def owned(self) -> TaskAssignment | None:
        if self.active_tasks is None or self.standby_tasks is None or self.warmup_tasks is None:
            return None
        return TaskAssignment(self.active_tasks, self.standby_tasks, self.warmup_tasks)


@dataclass(frozen=True, slots=True)
class StreamsHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    acceptable_recovery_lag: int = 0
    task_offset_interval_ms: int = 0
    statuses: tuple[tuple[int, str], ...] = ()
    assignment: TaskAssignment | None = None
    endpoint_information_epoch: int = 0
    # Per member endpoint (interactive queries): the topic partitions of its active and
    # of its standby tasks; None when the member's endpoint information is current.
    endpoints: (
        tuple[tuple[tuple[str, int], dict[str, list[int]], dict[str, list[int]]], ...] | None
    ) = None


StreamsCallback = Callable[[StreamsHeartbeatResult], None]


class StreamsError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class _Change(Change[StreamsGroup, StreamsRecord]):
    __slots__ = ()

    def __init__(self, group_id: str, base: StreamsGroup | None) -> None:
        super().__init__(group_id, base, StreamsGroup)


def _subset(owned: TaskAssignment | None, assigned: TaskAssignment) -> bool:
    if owned is None:
        return False
    return (
        not minus(owned.active, assigned.active)
        and not minus(owned.standby, assigned.standby)
        and not minus(owned.warmup, assigned.warmup)
    )


class StreamsGroupCoordinator:
    def __init__(self, host: GroupHost, config: StreamsGroupConfig | None = None) -> None:
        self.host = host
        self.config = config or StreamsGroupConfig()
        self.groups: dict[str, StreamsGroup] = {}
        self.metadata: Callable[[], MetadataState] = MetadataState
        # Asked to create internal topics (the broker does, through its controller).
        self.create_topics: Callable[[list[InternalTopic]], None] = lambda _topics: None
        # Why the last attempt to create an internal topic failed, by topic name.
        self.creation_errors: dict[str, str] = {}
        # A group's own configs (streams.*), set by IncrementalAlterConfigs.
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}
        self._ops: SerialWriter[_Change, list[KeyValue]] = SerialWriter(
            label="streams group",
            logger=log,
            encode=encode_records,
            encode_errors=(RecordFormatError,),
            write=lambda partition, records, done: self.host.store.write(partition, records, done),
            apply=self._apply,
            partition_for=lambda group_id: self.host.partition_for(group_id),
            owned=lambda: self.host.owned,
            callback_failed="streams group callback failed",
        )

    def _now(self) -> int:
        return self.host.scheduler.now_ms()

    def is_busy(self, group_id: str) -> bool:
        return self._ops.busy(group_id)

    # -- one operation per group at a time --------------------------------------------

    def _apply(self, group_id: str, change: _Change) -> None:
        """Apply a change whose records were written to the live groups."""
        for record in change.records:
            self._replay(record)
        live = self.groups.get(group_id)
        if live is not None and change.work is not None:
            live.configured = change.work.configured

    def _replay(self, record: StreamsRecord) -> None:
        gid = record.group_id
        group = self.groups.get(gid)
        if isinstance(record, GroupEpochRecord) and record.epoch is None:
            if group is not None:
                self._drop(group)
            return
        if group is None:
            if _is_tombstone(record):
                return
            group = StreamsGroup(gid)
            self.groups[gid] = group
        if isinstance(record, MemberMetadataRecord) and record.member is None:
            cancel_member_timers(group, record.member_id)
        group.apply(record)

    def _drop(self, group: StreamsGroup) -> None:
        for member_id in list(group.session_timers) + list(group.rebalance_timers):
            cancel_member_timers(group, member_id)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # -- StreamsGroupHeartbeat ----------------------------------------------------------

    def heartbeat(self, req: StreamsHeartbeatRequest, callback: StreamsCallback) -> None:
        if not self.config.enabled:
            callback(
                StreamsHeartbeatResult(E.unsupported_version, "The streams protocol is disabled.")
            )
            return
        try:
            self._validate(req)
        except StreamsError as exc:
            callback(StreamsHeartbeatResult(exc.code, exc.message))
            return
        status = self.host.status(req.group_id)
        if status is not None:
            callback(StreamsHeartbeatResult(status))
            return

        def op() -> tuple[_Change | None, Finish]:
            status = self.host.status(req.group_id)
            if status is not None:
                lost = StreamsHeartbeatResult(status)
                return None, lambda _code: callback(lost)
            try:
                if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    change, result, after = self._compute_leave(req)
                else:
                    change, result, after = self._compute_heartbeat(req)
            except StreamsError as exc:
                failed = StreamsHeartbeatResult(exc.code, exc.message)
                return None, lambda _code: callback(failed)
            except Exception:
                log.exception(
                    "streams group %s: heartbeat of %s failed", req.group_id, req.member_id
                )
                broken = StreamsHeartbeatResult(E.unknown_server_error)
                return None, lambda _code: callback(broken)

            def finish(code: ErrorCode) -> None:
                if code != E.none:
                    callback(StreamsHeartbeatResult(write_error(code)))
                    return
                after()
                callback(result)

            return change, finish

        self._ops.submit(req.group_id, op)

    def _validate(self, req: StreamsHeartbeatRequest) -> None:
        def invalid(message: str) -> StreamsError:
            return StreamsError(E.invalid_request, message)

        if not req.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if not req.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if req.instance_id is not None and not req.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id.strip():
            raise invalid("RackId can't be empty.")
        epoch = req.member_epoch
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topology is None:
                raise invalid("Topology must be non-null when (re-)joining.")
            if req.process_id is None:
                raise invalid("ProcessId can't be null.")
            owned = req.owned()
            if owned is None or not owned.is_empty():
                raise invalid(
                    "ActiveTasks, StandbyTasks and WarmupTasks must be empty when (re-)joining."
                )
            try:
                validate_topology(req.topology)
            except InvalidTopology as exc:
                raise StreamsError(E.streams_invalid_topology, str(exc)) from None
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
        if req.process_id is not None and not req.process_id.strip():
            raise invalid("ProcessId can't be empty.")

    def _existing_group(self, group_id: str, create: bool) -> StreamsGroup | None:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.host.groups.get(group_id)
        if (
            classic is not None and not classic.is_in(GroupState.DEAD)
        ) or self.host.is_consumer_group(group_id):
            if (
                create
                and classic is not None
                and classic.is_in(GroupState.EMPTY)
                and not classic.members
                and not self.host.is_consumer_group(group_id)
            ):
                return self._adopt_classic(group_id)
            raise StreamsError(E.group_id_not_found, f"Group {group_id} is not a streams group.")
        if not create:
            raise StreamsError(E.group_id_not_found, f"Streams group {group_id} not found.")
        return None

    def _adopt_classic(self, group_id: str) -> StreamsGroup:
        """An empty classic group (offsets only, as left by a classic-protocol Streams
        application) becomes a streams group with its offsets."""
        from kbroker.coordinator.records import encode_group_key

        classic = self.host.groups[group_id]
        group = StreamsGroup(group_id)
        group.offsets = dict(classic.offsets)
        self.host.forget_classic_group(classic)
        self.groups[group_id] = group
        self.host.store.write(
            self.host.partition_for(group_id),
            [(encode_group_key(group_id), None)],
            lambda code: _log_failure(group_id, "deleting the classic group", code),
        )
        log.info("group %s: empty classic group becomes a streams group", group_id)
        return group

    @staticmethod
    def _named_topics(topology: Topology) -> set[str]:
        names: set[str] = set()
        for s in topology.subtopologies:
            names.update(s.source_topics)
            names.update(t.name for t in s.repartition_source_topics)
            names.update(t.name for t in s.state_changelog_topics)
        return names

    def _topic_sizes(self, names: Iterable[str]) -> dict[str, int]:
        """Partition counts of the named topics that exist (a heartbeat looks at its own
        topology's topics only, however many the cluster has)."""
        topics = self.metadata().topics
        return {n: len(topics[n].partitions) for n in names if n in topics}

    def _metadata_hash(self, group: StreamsGroup, sizes: dict[str, int]) -> int:
        """A hash of the topics the topology names, as they are now, and of the number
        of standby replicas (a changed group config assigns again, as Kafka does)."""
        if group.topology is None:
            return 0
        names = self._named_topics(group.topology)
        text = ";".join(f"{n}:{sizes.get(n, -1)}" for n in sorted(names))
        text += f";standby={self.num_standby_replicas(group.group_id)}"
        digest = hashlib.sha256(text.encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    def _configured(self, group: StreamsGroup) -> tuple[ConfiguredTopology, int]:
        if group.topology is None:
            return ConfiguredTopology(), 0
        sizes = self._topic_sizes(self._named_topics(group.topology))
        return configure(group.topology, sizes, group.group_id), self._metadata_hash(group, sizes)

    def _compute_heartbeat(
        self, req: StreamsHeartbeatRequest
    ) -> tuple[_Change, StreamsHeartbeatResult, Callable[[], None]]:
        gid = req.group_id
        create = req.member_epoch == 0
        change = _Change(gid, self._existing_group(gid, create))
        view = change.view
        if len(view.members) >= self.config.max_size and req.member_id not in view.members:
            raise StreamsError(
                E.group_max_size_reached,
                f"The streams group has reached its maximum capacity of "
                f"{self.config.max_size} members.",
            )
        member_id = req.member_id
        member = self._member_for(change, req)
        new_member = member_id not in view.members
        bump = new_member

        # 1. The topology: the first member's initializes it.
        statuses: list[tuple[int, str]] = []
        topology_epoch = member.topology_epoch
        if req.topology is not None:
            topology_epoch = req.topology.epoch
            current = view.topology
            others = [m for m in view.members.values() if m.member_id != member_id]
            if current is None or (not others and current != req.topology):
                # The first member's topology is the group's; with nobody running the old
                # one, a changed topology (a new version of the application) replaces it.
                change.emit(TopologyRecord(gid, req.topology))
                bump = True
            elif req.topology.epoch > current.epoch:
                raise StreamsError(
                    E.streams_invalid_topology_epoch, "Topology updates are not supported yet."
                )
            # A lower epoch joins and hears STALE_TOPOLOGY (below), as on Kafka.
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            topology_epoch=topology_epoch,
            process_id=req.process_id if req.process_id is not None else member.process_id,
            user_endpoint=req.user_endpoint
            if req.user_endpoint is not None
            else member.user_endpoint,
            client_tags=req.client_tags if req.client_tags is not None else member.client_tags,
            client_id=req.client_id,
            client_host=req.client_host,
        )
        if new_member or updated.metadata() != member.metadata():
            change.emit(MemberMetadataRecord(gid, member_id, updated))
            if updated.process_id != member.process_id or updated.rack_id != member.rack_id:
                bump = True
        if change.view.topology is not None and change.view.topology.epoch != topology_epoch:
            statuses.append(
                (
                    STALE_TOPOLOGY,
                    f"The member's topology epoch {topology_epoch} is behind the group's "
                    f"topology epoch {change.view.topology.epoch}.",
                )
            )

        # 2. The topology against the cluster; a changed picture bumps the epoch.
        configured, metadata_hash = self._configured(change.view)
        if configured.to_create:
            self.create_topics(configured.to_create)
        if metadata_hash != change.view.metadata_hash:
            bump = True
        if bump:
            change.emit(GroupEpochRecord(gid, change.view.group_epoch + 1, metadata_hash))
            log.info(
                "streams group %s: epoch %d after member %s's heartbeat",
                gid,
                change.view.group_epoch,
                member_id,
            )
        change.view.configured = configured.ready
        statuses.extend(configured.statuses)
        failed = [
            f"{t.name}: {self.creation_errors[t.name]}"
            for t in configured.to_create
            if t.name in self.creation_errors
        ]
        if failed:
            code, detail = statuses[-1]
            statuses[-1] = (code, f"{detail} Creating them failed: {'; '.join(failed)}")
        if req.shutdown_application:
            change.view.shutdown_requested = True
        if change.view.shutdown_requested or (
            change.base is not None and change.base.shutdown_requested
        ):
            statuses.append(
                (
                    SHUTDOWN_APPLICATION,
                    "A KafkaStreams instance encountered a fatal error and requested a "
                    "shutdown for the entire application.",
                )
            )

        # 3. A new target assignment when the group epoch moved past it.
        if change.view.group_epoch > change.view.assignment_epoch:
            self._compute_target(change, configured)

        # 4. One step of this member towards its target.
        view = change.view
        current_member = view.members[member_id]
        reconciled = self._reconcile(view, current_member, req.owned())
        if reconciled.current() != current_member.current():
            change.emit(CurrentAssignmentRecord(gid, member_id, reconciled))
        moved = reconciled.current() != current_member.current()

        full = req.member_epoch == 0 or req.owned() is not None and req.topology is not None
        send = full or reconciled.assigned != member.assigned or new_member
        result = StreamsHeartbeatResult(
            E.none,
            member_id=member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(gid),
            acceptable_recovery_lag=self.config.acceptable_recovery_lag,
            task_offset_interval_ms=self.config.task_offset_interval_ms,
            statuses=tuple(statuses),
            assignment=reconciled.assigned if send else None,
            endpoint_information_epoch=view.group_epoch,
            endpoints=self._endpoints(change.view, configured)
            if req.endpoint_information_epoch != view.group_epoch
            else None,
        )

        def after() -> None:
            group = self.groups.get(gid)
            if group is None:
                return
            if req.shutdown_application:
                group.shutdown_requested = True
            live = group.members.get(member_id)
            if live is None:
                return
            self._schedule_session_timeout(group, member_id)
            if moved:
                if live.state == MemberState.UNREVOKED_TASKS:
                    self._schedule_rebalance_timeout(group, live)
                else:
                    cancel_rebalance_timeout(group, member_id)
                log.debug(
                    "streams group %s: member %s now %s at epoch %d",
                    gid,
                    member_id,
                    live.state.label,
                    live.member_epoch,
                )

        return change, result, after

    def _endpoints(
        self, group: StreamsGroup, configured: ConfiguredTopology
    ) -> tuple[tuple[tuple[str, int], dict[str, list[int]], dict[str, list[int]]], ...]:
        """Each member endpoint's partitions, as Kafka's EndpointToPartitionsManager: a
        task stands for its partition of every source and repartition source topic of
        its subtopology."""
        topics: dict[str, tuple[str, ...]] = {}
        if group.topology is not None:
            for s in group.topology.subtopologies:
                topics[s.subtopology_id] = (
                    *s.source_topics,
                    *(t.name for t in s.repartition_source_topics),
                )

        def partitions(tasks: Tasks) -> dict[str, list[int]]:
            out: dict[str, set[int]] = {}
            for subtopology, parts in tasks.items():
                for topic in topics.get(subtopology, ()):
                    out.setdefault(topic, set()).update(parts)
            return {t: sorted(p) for t, p in sorted(out.items())}

        found = []
        for member in sorted(group.members.values(), key=lambda m: m.member_id):
            if member.user_endpoint is None:
                continue
            found.append(
                (
                    member.user_endpoint,
                    partitions(member.assigned.active),
                    partitions(member.assigned.standby),
                )
            )
        return tuple(found)

    def _member_for(self, change: _Change, req: StreamsHeartbeatRequest) -> StreamsMember:
        view = change.view
        member_id = req.member_id
        create = req.member_epoch == 0
        if req.instance_id is None:
            member = view.members.get(member_id)
            if member is None:
                if not create:
                    raise StreamsError(
                        E.unknown_member_id,
                        f"Member {member_id} is not a member of group {change.group_id}.",
                    )
                log.info("streams group %s: member %s joins", change.group_id, member_id)
                return StreamsMember(member_id)
            self._check_epoch(member, req.member_epoch, req.owned())
            return member
        existing = view.static_member(req.instance_id)
        if create:
            if existing is None or existing.member_id == member_id:
                return existing or StreamsMember(member_id, instance_id=req.instance_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise StreamsError(
                    E.unreleased_instance_id,
                    f"Static member {member_id} with instance id {req.instance_id} cannot join "
                    f"the group because the instance id is owned by {existing.member_id} member.",
                )
            replacement = replace(
                existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
            )
            gid = change.group_id
            target = view.target.get(existing.member_id, EMPTY_ASSIGNMENT)
            change.emit(CurrentAssignmentRecord(gid, existing.member_id, None))
            change.emit(TargetMemberRecord(gid, existing.member_id, None))
            change.emit(MemberMetadataRecord(gid, existing.member_id, None))
            change.emit(MemberMetadataRecord(gid, member_id, replacement))
            change.emit(TargetMemberRecord(gid, member_id, target))
            change.emit(CurrentAssignmentRecord(gid, member_id, replacement))
            return replacement
        if existing is None:
            raise StreamsError(E.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise StreamsError(
                E.fenced_instance_id,
                f"Static member {member_id} with instance id {req.instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        self._check_epoch(existing, req.member_epoch, req.owned())
        return existing

    @staticmethod
    def _check_epoch(member: StreamsMember, received: int, owned: TaskAssignment | None) -> None:
        if received > member.member_epoch:
            raise StreamsError(
                E.fenced_member_epoch,
                f"The streams group member has a greater member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its tasks and rejoin.",
            )
        if received < member.member_epoch and (
            received != member.previous_member_epoch or not _subset(owned, member.assigned)
        ):
            raise StreamsError(
                E.fenced_member_epoch,
                f"The streams group member has a smaller member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its tasks and rejoin.",
            )

    def _compute_target(self, change: _Change, configured: ConfiguredTopology) -> None:
        view = change.view
        gid = change.group_id
        members = {
            m.member_id: AssignmentMember(
                m.process_id or m.member_id, view.target.get(m.member_id, EMPTY_ASSIGNMENT)
            )
            for m in view.members.values()
        }
        tasks = configured.tasks if configured.ready else {}
        target = assign_tasks(members, tasks, self.num_standby_replicas(gid))
        for member_id in sorted(view.members):
            assignment = target.get(member_id, EMPTY_ASSIGNMENT)
            if assignment != view.target.get(member_id):
                change.emit(TargetMemberRecord(gid, member_id, assignment))
        change.emit(TargetEpochRecord(gid, view.group_epoch))
        log.info(
            "streams group %s: target assignment for epoch %d over %d members, %d tasks",
            gid,
            view.group_epoch,
            len(members),
            sum(tasks.values()),
        )

    def _reconcile(
        self, group: StreamsGroup, member: StreamsMember, owned: TaskAssignment | None
    ) -> StreamsMember:
        """One step of Kafka's CurrentAssignmentBuilder for a streams member."""
        target_epoch = group.assignment_epoch
        target = group.target.get(member.member_id, EMPTY_ASSIGNMENT)
        if member.state == MemberState.UNREVOKED_TASKS:
            if owned is None or not _subset(owned, member.assigned):
                return member  # still holds tasks it must give up
            member = replace(member, state=MemberState.STABLE, pending_revocation=EMPTY_ASSIGNMENT)
        elif member.member_epoch == target_epoch and member.state == MemberState.STABLE:
            return member
        # Tasks to give up first: the member keeps its epoch until they are gone.
        if member.member_epoch != target_epoch or member.state != MemberState.UNRELEASED_TASKS:
            revoke = TaskAssignment(
                minus(member.assigned.active, target.active),
                minus(member.assigned.standby, target.standby),
                minus(member.assigned.warmup, target.warmup),
            )
            if not revoke.is_empty():
                return replace(
                    member,
                    state=MemberState.UNREVOKED_TASKS,
                    assigned=TaskAssignment(
                        intersect(member.assigned.active, target.active),
                        intersect(member.assigned.standby, target.standby),
                        intersect(member.assigned.warmup, target.warmup),
                    ),
                    pending_revocation=revoke,
                )
        # Then take the target's tasks no other member still holds.
        held_active: set[tuple[str, int]] = set()
        held_on_process: set[tuple[str, int]] = set()
        for other in group.members.values():
            if other.member_id == member.member_id:
                continue
            other_active = task_set(union(other.assigned.active, other.pending_revocation.active))
            held_active |= other_active
            if other.process_id == member.process_id:
                held_on_process |= other_active | task_set(
                    union(other.assigned.standby, other.pending_revocation.standby)
                )
        active = tasks_of(
            (s, [p for p in parts if (s, p) not in held_active])
            for s, parts in target.active.items()
        )
        standby = tasks_of(
            (s, [p for p in parts if (s, p) not in held_on_process])
            for s, parts in target.standby.items()
        )
        warmup = tasks_of(
            (s, [p for p in parts if (s, p) not in held_on_process])
            for s, parts in target.warmup.items()
        )
        assigned = TaskAssignment(active, standby, warmup)
        complete = assigned == TaskAssignment(
            tasks_of(target.active.items()),
            tasks_of(target.standby.items()),
            tasks_of(target.warmup.items()),
        )
        previous = (
            member.member_epoch
            if member.member_epoch != target_epoch
            else member.previous_member_epoch
        )
        return replace(
            member,
            member_epoch=target_epoch,
            previous_member_epoch=previous,
            state=MemberState.STABLE if complete else MemberState.UNRELEASED_TASKS,
            assigned=assigned,
            pending_revocation=EMPTY_ASSIGNMENT,
        )

    # -- leaving and fencing ------------------------------------------------------------

    def _compute_leave(
        self, req: StreamsHeartbeatRequest
    ) -> tuple[_Change, StreamsHeartbeatResult, Callable[[], None]]:
        gid = req.group_id
        change = _Change(gid, self._existing_group(gid, create=False))
        view = change.view
        if req.instance_id is None:
            member = view.members.get(req.member_id)
            if member is None:
                raise StreamsError(
                    E.unknown_member_id, f"Member {req.member_id} is not a member of group {gid}."
                )
        else:
            member = view.static_member(req.instance_id)
            if member is None:
                raise StreamsError(
                    E.unknown_member_id, f"Instance id {req.instance_id} is unknown."
                )
            if member.member_id != req.member_id:
                raise StreamsError(
                    E.fenced_instance_id,
                    f"Static member {req.member_id} with instance id {req.instance_id} was "
                    f"fenced by member {member.member_id}.",
                )
        result = StreamsHeartbeatResult(
            E.none, member_id=req.member_id, member_epoch=req.member_epoch
        )
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            away = replace(
                member,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                pending_revocation=EMPTY_ASSIGNMENT,
            )
            change.emit(CurrentAssignmentRecord(gid, member.member_id, away))
            return change, result, lambda: None
        self._fence(change, member)
        log.info("streams group %s: member %s left", gid, member.member_id)
        return change, result, lambda: None

    def _fence(self, change: _Change, member: StreamsMember) -> None:
        gid = change.group_id
        change.emit(CurrentAssignmentRecord(gid, member.member_id, None))
        change.emit(TargetMemberRecord(gid, member.member_id, None))
        change.emit(MemberMetadataRecord(gid, member.member_id, None))
        change.emit(GroupEpochRecord(gid, change.view.group_epoch + 1, change.view.metadata_hash))

    def _fence_later(
        self, group_id: str, member_id: str, reason: str, epoch: int | None = None
    ) -> None:
        def op() -> tuple[_Change | None, Finish]:
            group = self.groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None:
                return None, _ignore
            if epoch is not None and member.member_epoch != epoch:
                return None, _ignore
            if epoch is None:
                deadline = group.session_deadlines.get(member_id)
                if deadline is not None and self._now() < deadline:
                    return None, _ignore
            change = _Change(group_id, group)
            self._fence(change, member)

            def finish(code: ErrorCode) -> None:
                if code == E.none:
                    log.info("streams group %s: member %s fenced: %s", group_id, member_id, reason)

            return change, finish

        self._ops.submit(group_id, op)

    # -- timers -------------------------------------------------------------------------

    def _group_setting(self, group_id: str, name: str, default: int) -> int:
        return int_group_config(self.group_configs(group_id), name, default)

    def session_timeout_ms(self, group_id: str) -> int:
        return self._group_setting(
            group_id, "streams.session.timeout.ms", self.config.session_timeout_ms
        )

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_setting(
            group_id, "streams.heartbeat.interval.ms", self.config.heartbeat_interval_ms
        )

    def num_standby_replicas(self, group_id: str) -> int:
        return self._group_setting(
            group_id, "streams.num.standby.replicas", self.config.num_standby_replicas
        )

    def _schedule_session_timeout(self, group: StreamsGroup, member_id: str) -> None:
        schedule_session_timeout(
            self.host.scheduler,
            group,
            member_id,
            self.session_timeout_ms(group.group_id),
            live=lambda: self.groups.get(group.group_id) is group,
            expire=lambda: self._fence_later(group.group_id, member_id, "its session expired"),
        )

    def _schedule_rebalance_timeout(self, group: StreamsGroup, member: StreamsMember) -> None:
        """A member asked to revoke must do so within its rebalance timeout."""
        timeout = member.rebalance_timeout_ms
        if timeout <= 0:
            timeout = self.session_timeout_ms(group.group_id)
        epoch = member.member_epoch
        member_id = member.member_id
        schedule_rebalance_timeout(
            self.host.scheduler,
            group,
            member_id,
            timeout,
            lambda: self._fence_later(
                group.group_id,
                member_id,
                f"it did not revoke its tasks of epoch {epoch} within {timeout}ms",
                epoch=epoch,
            ),
        )

    # -- loading and unloading ----------------------------------------------------------

    def load_records(self, partition: int, records: Iterable[KeyValue]) -> set[str]:
        touched: set[str] = set()
        for key, value in records:
            if not is_streams_record(key):
                continue
            try:
                record = decode_record(key, value)
            except RecordFormatError as exc:
                log.warning("skipping unreadable record in partition %d: %s", partition, exc)
                continue
            touched.add(record.group_id)
            self._replay(record)
        loaded = set()
        for group_id in touched:
            group = self.groups.get(group_id)
            if group is None:
                continue
            loaded.add(group_id)
            group.configured = self._configured(group)[0].ready
            for member_id, member in group.members.items():
                self._schedule_session_timeout(group, member_id)
                if member.state == MemberState.UNREVOKED_TASKS:
                    self._schedule_rebalance_timeout(group, member)
        return loaded

    def unload_partition(self, partition: int) -> None:
        for group in [
            g for g in self.groups.values() if self.host.partition_for(g.group_id) == partition
        ]:
            self._drop(group)

    def on_topics_changed(self, names: Iterable[str]) -> None:
        """Groups whose topology names a changed topic look again on their next heartbeat
        (the metadata hash tells them whether anything moved)."""
        changed = set(names)
        for group in self.groups.values():
            if group.topology is None:
                continue
            if changed & self._named_topics(group.topology):
                group.configured = self._configured(group)[0].ready

    # -- what the group coordinator asks ------------------------------------------------

    def validate_offset_commit(
        self, group: StreamsGroup, member_id: str, member_epoch: int, transactional: bool = False
    ) -> ErrorCode | None:
        return check_offset_commit(group.members, member_id, member_epoch, transactional)

    def validate_offset_fetch(
        self, group: StreamsGroup, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        return check_offset_fetch(group.members, member_id, member_epoch)

    def delete_group(self, group_id: str) -> tuple[ErrorCode, list[KeyValue]]:
        group = self.groups.get(group_id)
        if group is None:
            return E.group_id_not_found, []
        if group.members or self.is_busy(group_id):
            return E.non_empty_group, []
        records = offset_tombstones(group_id, group.offsets)
        records.extend(encode_records(group.tombstones()))
        self._drop(group)
        return E.none, records

    def expire_offsets(
        self, now: int, retention_ms: int, owned: set[int]
    ) -> tuple[dict[int, list[KeyValue]], int]:
        """Offsets of an empty streams group age from their commit; a group left with
        no members and no offsets is deleted."""
        by_partition: dict[int, list[KeyValue]] = {}
        total = 0
        for group in list(self.groups.values()):
            partition = self.host.partition_for(group.group_id)
            if partition not in owned or group.members:
                continue
            expired = [tp for tp, v in group.offsets.items() if v.expired(now, retention_ms)]
            records = drop_offsets(group.group_id, group.offsets, expired)
            total += len(expired)
            if not group.offsets and not self.is_busy(group.group_id):
                records.extend(encode_records(group.tombstones()))
                self._drop(group)
            if records:
                by_partition.setdefault(partition, []).extend(records)
        return by_partition, total

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, StreamsGroup | None]:
        return described_group(
            self.host, self.groups, group_id, "streams", self.host.is_consumer_group(group_id)
        )

    def listed(self, states: set[str]) -> list[tuple[str, str]]:
        return listed_groups(self.groups, states)

    def release_to_classic(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata] | None:
        """Give an empty streams group's id to a classic JoinGroup: delete its records and
        return its offsets; None while it has members."""
        group = self.groups.get(group_id)
        if group is None:
            return {}
        if group.members or self.is_busy(group_id):
            return None
        records = encode_records(group.tombstones())
        self._drop(group)
        self.host.store.write(
            self.host.partition_for(group_id),
            records,
            lambda code: _log_failure(group_id, "deleting the streams group", code),
        )
        log.info("group %s: empty streams group becomes a classic group", group_id)
        return dict(group.offsets)


def _is_tombstone(record: StreamsRecord) -> bool:
    if isinstance(record, GroupEpochRecord | TargetEpochRecord):
        return record.epoch is None
    if isinstance(record, TopologyRecord):
        return record.topology is None
    if isinstance(record, TargetMemberRecord):
        return record.assignment is None
    return record.member is None


def _ignore(_code: ErrorCode) -> None:
    return None


def _log_failure(group_id: str, what: str, code: ErrorCode) -> None:
    if code != E.none:
        log.warning("group %s: %s failed: %s", group_id, what, code.name)


# -- group configs (IncrementalAlterConfigs on a GROUP resource) ------------------------------

# Kafka 4.3's streams group configs. The first three override the broker's settings for
# one group; the others are accepted and, as their broker settings, inert.
STREAMS_GROUP_CONFIGS = (
    "streams.session.timeout.ms",
    "streams.heartbeat.interval.ms",
    "streams.num.standby.replicas",
    "streams.initial.rebalance.delay.ms",
    "streams.assignment.interval.ms",
    "streams.assignor.offload.enable",
)


def streams_group_config_defaults(config: BrokerConfig) -> dict[str, str]:
    return {
        "streams.session.timeout.ms": str(config.group_streams_session_timeout_ms),
        "streams.heartbeat.interval.ms": str(config.group_streams_heartbeat_interval_ms),
        "streams.num.standby.replicas": str(config.group_streams_num_standby_replicas),
        # Inert, as their broker settings: Kafka's defaults are shown.
        "streams.initial.rebalance.delay.ms": "3000",
        "streams.assignment.interval.ms": "1000",
        "streams.assignor.offload.enable": "false",
    }


def validate_streams_group_config(config: BrokerConfig, name: str, value: str | None) -> str | None:
    """Why a streams group config is refused (Kafka's bounds: the broker's min/max
    settings), or None when it is fine; None deletes it."""
    if name not in STREAMS_GROUP_CONFIGS:
        return f"Unknown group config name: {name}"
    if value is None:
        return None
    if name == "streams.assignor.offload.enable":
        ok = value.strip().lower() in ("true", "false")
    else:
        bounds = {
            "streams.session.timeout.ms": (
                config.group_streams_min_session_timeout_ms,
                config.group_streams_max_session_timeout_ms,
            ),
            "streams.heartbeat.interval.ms": (
                config.group_streams_min_heartbeat_interval_ms,
                config.group_streams_max_heartbeat_interval_ms,
            ),
            "streams.num.standby.replicas": (0, config.group_streams_max_standby_replicas),
            "streams.initial.rebalance.delay.ms": (0, 2**31 - 1),
            # Kafka's default bounds (group.streams.{min,max}.assignment.interval.ms are
            # inert here, so they bound nothing).
            "streams.assignment.interval.ms": (0, 15_000),
        }
        low, high = bounds[name]
        ok = value.strip().lstrip("-").isdigit() and low <= int(value) <= high
    return None if ok else f"Invalid value {value} for configuration {name}"
