"""The consumer-protocol group coordinator (KIP-848): ConsumerGroupHeartbeat and friends.

The group is driven by heartbeats alone. Each heartbeat (1) creates or updates the
member, bumping the group epoch when a subscription or the subscribed topics changed,
(2) computes a new target assignment with a server-side assignor when the group epoch
is ahead of the assignment epoch, and (3) moves this member one safe step towards its
target (`reconciliation.reconcile`). Other members learn of a new target on their own
next heartbeat.

Every change is a list of records (`consumer_group` records, written to
`__consumer_offsets` in Kafka's layouts). An operation computes its records against a
working copy of the group, the records are written, and only once the write succeeded
are they applied to the live group and the client answered; a failed write changes
nothing. Operations on one group run one at a time in arrival order (a queue per group),
so each is computed from the state its predecessors left, whatever the write latency.

It lives beside the classic `GroupCoordinator` (its `host`): both share the group id
namespace, the offsets store, the clock and the ownership of `__consumer_offsets`
partitions, and the classic coordinator asks this one about consumer groups for the
APIs both kinds answer (offsets, ListGroups, DeleteGroups).
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import re2
from kio.schema.errors import ErrorCode

from kbroker.controller.state import MetadataState
from kbroker.coordinator.assignors import ASSIGNORS, AssignorError, MemberSubscription
from kbroker.coordinator.classic_members import ClassicMembers, UpgradeRefused
from kbroker.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    GroupRecord,
    MemberMetadataRecord,
    MemberState,
    SubscriptionMetadataRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    TopicMetadata,
    normalize,
)
from kbroker.coordinator.consumer_records import (
    decode_record,
    encode_records,
    is_consumer_record,
)
from kbroker.coordinator.group import GroupState, OffsetAndMetadata, int_group_config
from kbroker.coordinator.host import (
    GroupHost,
    check_offset_fetch,
    described_group,
    drop_offsets,
    listed_groups,
)
from kbroker.coordinator.member_timers import (
    cancel_member_timer,
    cancel_member_timers,
    cancel_rebalance_timeout,
    schedule_rebalance_timeout,
    schedule_session_timeout,
)
from kbroker.coordinator.persistence import offset_tombstones
from kbroker.coordinator.reconciliation import MemberFenced, OwnedPartitions, reconcile
from kbroker.coordinator.records import RecordFormatError, encode_group_key
from kbroker.coordinator.store import KeyValue
from kbroker.coordinator_runtime.internal_topics import write_error
from kbroker.coordinator_runtime.serial import Change, Finish, SerialWriter

if TYPE_CHECKING:
    from kbroker.config import BrokerConfig
    from kbroker.coordinator.group import ClassicGroup

log = logging.getLogger("kbroker.coordinator.consumer")

E = ErrorCode
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """Kafka's group.consumer.* settings, in milliseconds."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")
    enabled: bool = True
    # group.consumer.migration.policy: whether a group with members may turn from
    # classic to consumer (upgrade) and back (downgrade).
    migration_policy: str = "bidirectional"
    # group.max.size: a group downgraded to classic must fit the classic limit.
    classic_max_size: int = 2**31 - 1

    @property
    def default_assignor(self) -> str:
        return self.assignors[0] if self.assignors else "uniform"

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")


# Kafka's consumer group configs (GroupConfig): one group's own session timeout and
# heartbeat interval, over the broker's group.consumer.* settings.
CONSUMER_GROUP_CONFIGS = ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms")
# What Kafka checks a group's values against where the group sets only one of them.
_CONSUMER_CONFIG_DEFAULTS = {
    "consumer.session.timeout.ms": 45_000,
    "consumer.heartbeat.interval.ms": 5_000,
}


def consumer_group_config_defaults(config: BrokerConfig) -> dict[str, str]:
    """What a group without its own consumer.* configs runs with: the broker's."""
    return {
        "consumer.session.timeout.ms": str(config.group_consumer_session_timeout_ms),
        "consumer.heartbeat.interval.ms": str(config.group_consumer_heartbeat_interval_ms),
    }


def consumer_group_config_problem(config: BrokerConfig, configs: Mapping[str, str]) -> str | None:
    """Why a group's consumer.* configs, as they would be after a change, are refused
    (Kafka's GroupConfig.validate: each within the broker's group.consumer.min/max
    settings, and the session timeout above the heartbeat interval), or None."""
    values: dict[str, int] = {}
    for name, default in _CONSUMER_CONFIG_DEFAULTS.items():
        raw = configs.get(name)
        if raw is None:
            values[name] = default
            continue
        text = raw.strip()
        if not text.lstrip("-").isdigit() or not -(2**31) <= int(text) < 2**31:
            return f"Invalid value {raw} for configuration {name}: Not a number of type INT"
        values[name] = int(text)
    bounds = {
        "consumer.session.timeout.ms": (
            "group.consumer.min.session.timeout.ms",
            config.group_consumer_min_session_timeout_ms,
            "group.consumer.max.session.timeout.ms",
            config.group_consumer_max_session_timeout_ms,
        ),
        "consumer.heartbeat.interval.ms": (
            "group.consumer.min.heartbeat.interval.ms",
            config.group_consumer_min_heartbeat_interval_ms,
            "group.consumer.max.heartbeat.interval.ms",
            config.group_consumer_max_heartbeat_interval_ms,
        ),
    }
    for name, (low_name, low, high_name, high) in bounds.items():
        if values[name] < low:
            return f"{name} must be greater than or equal to {low_name}"
        if values[name] > high:
            return f"{name} must be less than or equal to {high_name}"
    if values["consumer.heartbeat.interval.ms"] >= values["consumer.session.timeout.ms"]:
        return "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
    return None


def consumer_group_config(config: BrokerConfig) -> ConsumerGroupConfig:
    """The consumer-protocol settings from the broker's (Kafka's names).

    Kafka refuses to start when the session timeout or heartbeat interval lies outside
    its min/max settings, or the interval is not below the session timeout; here the
    value is moved into range with a warning instead, so a typo does not stop a broker.
    """

    def bounded(name: str, value: int, low: int, high: int) -> int:
        if not low <= value <= high:
            fixed = min(max(value, low), high)
            log.warning("%s=%d is outside [%d, %d]; using %d", name, value, low, high, fixed)
            return fixed
        return value

    session = bounded(
        "group.consumer.session.timeout.ms",
        config.group_consumer_session_timeout_ms,
        config.group_consumer_min_session_timeout_ms,
        config.group_consumer_max_session_timeout_ms,
    )
    heartbeat = bounded(
        "group.consumer.heartbeat.interval.ms",
        config.group_consumer_heartbeat_interval_ms,
        config.group_consumer_min_heartbeat_interval_ms,
        config.group_consumer_max_heartbeat_interval_ms,
    )
    if heartbeat >= session:
        fixed = max(session // 3, 1)
        log.warning(
            "group.consumer.heartbeat.interval.ms=%d is not below the session timeout %d; using %d",
            heartbeat,
            session,
            fixed,
        )
        heartbeat = fixed
    assignors = tuple(a for a in config.group_consumer_assignors if a in ASSIGNORS)
    protocols = {p.strip().lower() for p in config.group_coordinator_rebalance_protocols}
    return ConsumerGroupConfig(
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat,
        max_size=int(config.group_consumer_max_size),
        assignors=assignors or ("uniform",),
        enabled="consumer" in protocols,
        migration_policy=config.group_consumer_migration_policy.strip().lower(),
        classic_max_size=int(config.group_max_size),
    )


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, version-neutral; None fields did not change."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


HeartbeatCallback = Callable[[HeartbeatResult], None]


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class _Change(Change[ConsumerGroup, GroupRecord]):
    __slots__ = ()

    def __init__(self, group_id: str, base: ConsumerGroup | None) -> None:
        super().__init__(group_id, base, ConsumerGroup)


def _new_member_id() -> str:
    """As Kafka's Uuid.toString: url-safe base64 of 16 random bytes, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad pattern is its error, not ours to log


def topic_regex(pattern: str) -> Any:
    """Compile a subscription regex as Kafka does: RE2 syntax (Kafka uses RE2/J), matched
    in linear time, so no pattern a client sends can stall the coordinator."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _updated_member(member: ConsumerMember, req: HeartbeatRequest) -> ConsumerMember:
    """The member with what the heartbeat says of it (a None field: unchanged). The
    member itself when the heartbeat changes nothing, as nearly every one of a stable
    member does."""
    if (
        (req.instance_id is None or req.instance_id == member.instance_id)
        and (req.rack_id is None or req.rack_id == member.rack_id)
        and (
            req.rebalance_timeout_ms == -1
            or req.rebalance_timeout_ms == member.rebalance_timeout_ms
        )
        and (req.server_assignor is None or req.server_assignor == member.server_assignor)
        and (
            req.subscribed_topic_names is None
            or frozenset(req.subscribed_topic_names) == member.subscribed_topic_names
        )
        and (
            req.subscribed_topic_regex is None
            or (req.subscribed_topic_regex or None) == member.subscribed_topic_regex
        )
        and req.client_id == member.client_id
        and req.client_host == member.client_host
        and member.classic is None
    ):
        return member
    return replace(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms
        if req.rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        server_assignor=req.server_assignor
        if req.server_assignor is not None
        else member.server_assignor,
        subscribed_topic_names=frozenset(req.subscribed_topic_names)
        if req.subscribed_topic_names is not None
        else member.subscribed_topic_names,
        subscribed_topic_regex=(req.subscribed_topic_regex or None)
        if req.subscribed_topic_regex is not None
        else member.subscribed_topic_regex,
        client_id=req.client_id,
        client_host=req.client_host,
        classic=None,  # a classic member that heartbeats speaks the consumer protocol now
    )


def _is_subset(owned: OwnedPartitions, assignment: Assignment) -> bool:
    if owned is None:
        return False
    for topic_id, partitions in owned:
        have = assignment.get(topic_id)
        if have is None:
            if partitions:
                return False
            continue
        if any(p not in have for p in partitions):
            return False
    return True


class ConsumerGroupCoordinator:
    def __init__(
        self,
        host: GroupHost,
        config: ConsumerGroupConfig | None = None,
        new_member_id: Callable[[], str] | None = None,
    ) -> None:
        self.host = host
        self.config = config or ConsumerGroupConfig()
        self.groups: dict[str, ConsumerGroup] = {}
        # The latest cluster metadata, as the broker's controller holds it.
        self.metadata: Callable[[], MetadataState] = MetadataState
        # A group's own configs (IncrementalAlterConfigs on the GROUP resource).
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}
        self._new_member_id = new_member_id or _new_member_id
        self._ops: SerialWriter[_Change, list[KeyValue]] = SerialWriter(
            label="group",
            logger=log,
            encode=encode_records,
            encode_errors=(RecordFormatError,),
            write=lambda partition, records, done: self.host.store.write(partition, records, done),
            apply=self._apply,
            partition_for=lambda group_id: self.host.partition_for(group_id),
            owned=lambda: self.host.owned,
            callback_failed="consumer group callback failed",
        )
        self._regexes: dict[str, Any] = {}
        self._regex_matches: dict[str, tuple[int, frozenset[str]]] = {}
        # JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members in these
        # groups, and groups moving between the protocols (KIP-848's migration).
        self.classic_members = ClassicMembers(self)

    # -- small helpers --------------------------------------------------------------------

    def _now(self) -> int:
        return self.host.scheduler.now_ms()

    def is_busy(self, group_id: str) -> bool:
        return self._ops.busy(group_id)

    def holds(self, group_id: str) -> bool:
        """Whether the id is a consumer group's, or an operation on it is queued (its
        outcome decides which protocol serves the id next)."""
        return group_id in self.groups or self._ops.busy(group_id)

    def new_change(self, group_id: str, group: ConsumerGroup | None) -> _Change:
        return _Change(group_id, group)

    def submit(self, group_id: str, op: Callable[[], tuple[_Change | None, Finish]]) -> None:
        """Queue an operation on the group behind those already queued."""
        self._ops.submit(group_id, op)

    def _compiled(self, pattern: str) -> Any:
        if pattern not in self._regexes:
            try:
                self._regexes[pattern] = topic_regex(pattern)
            except re2.error:
                self._regexes[pattern] = None
            if len(self._regexes) > 10_000:
                self._regexes.clear()
                self._regex_matches.clear()
        return self._regexes[pattern]

    def _regex_topics(self, pattern: str) -> frozenset[str]:
        """Topics the whole pattern matches, as Kafka's matches(). Internal topics too:
        Kafka's coordinator resolves a regex against every topic of its metadata image
        (a client that wants them left out, as the classic protocol's clients did, says
        so in its pattern)."""
        metadata = self.metadata()
        version = metadata.version
        cached = self._regex_matches.get(pattern)
        if cached is not None and cached[0] == version:
            return cached[1]
        compiled = self._compiled(pattern)
        found = frozenset(
            name for name in metadata.topics if compiled is not None and compiled.fullmatch(name)
        )
        self._regex_matches[pattern] = (version, found)
        return found

    def _member_topics(self, member: ConsumerMember) -> set[str]:
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            topics |= self._regex_topics(member.subscribed_topic_regex)
        return topics

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, TopicMetadata]:
        """The subscribed topics that exist now, as the group would assign from them."""
        topics = self.metadata().topics
        wanted: set[str] = set()
        for member in group.members.values():
            wanted |= self._member_topics(member)
        found = {}
        for name in wanted:
            info = topics.get(name)
            if info is not None:
                found[name] = TopicMetadata(info.topic_id, name, len(info.partitions))
        return found

    def subscribed_ids(self, member: ConsumerMember) -> set[uuid.UUID]:
        topics = self.metadata().topics
        return {topics[name].topic_id for name in self._member_topics(member) if name in topics}

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = self.metadata().topics_by_id.get(topic_id)
        return None if info is None else info.name

    # -- running operations one group at a time -------------------------------------------

    def _apply(self, group_id: str, change: _Change) -> None:
        """Apply a change whose records were written to the live groups."""
        for record in change.records:
            self.replay(record)

    def replay(self, record: GroupRecord) -> None:
        """Apply one record to the live groups (the write path and the loader both)."""
        gid = record.group_id
        group = self.groups.get(gid)
        if isinstance(record, GroupEpochRecord) and record.epoch is None:
            if group is not None:
                self.drop(group)
            return
        if group is None:
            if _is_tombstone(record):
                return
            group = ConsumerGroup(gid)
            self.groups[gid] = group
        if isinstance(record, MemberMetadataRecord) and record.member is None:
            cancel_member_timers(group, record.member_id)
            cancel_member_timer(group.classic_sync_timers, record.member_id)
        group.apply(record, on_conflict=lambda msg: log.warning("group %s: %s", gid, msg))

    def drop(self, group: ConsumerGroup) -> None:
        for member_id in list(group.session_timers) + list(group.rebalance_timers):
            cancel_member_timers(group, member_id)
        for member_id in list(group.classic_sync_timers):
            cancel_member_timer(group.classic_sync_timers, member_id)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, callback: HeartbeatCallback) -> None:
        if not self.config.enabled:
            callback(HeartbeatResult(E.unsupported_version, "The consumer protocol is disabled."))
            return
        try:
            self._validate(req)
        except HeartbeatError as exc:
            callback(HeartbeatResult(exc.code, exc.message))
            return
        status = self.host.status(req.group_id)
        if status is not None:
            callback(HeartbeatResult(status))
            return

        # An operation submitted to an idle group runs within submit, where the status
        # just read still holds; one that waits in line reads it again when it runs.
        waits = self._ops.busy(req.group_id)

        def op() -> tuple[_Change | None, Finish]:
            status = self.host.status(req.group_id) if waits else None
            if status is not None:  # the partition moved while this waited in line
                lost = HeartbeatResult(status)
                return None, lambda _code: callback(lost)
            try:
                if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    change, result, after = self._compute_leave(req)
                else:
                    change, result, after = self._compute_heartbeat(req)
            except HeartbeatError as exc:
                failed = HeartbeatResult(exc.code, exc.message)
                return None, lambda _code: callback(failed)
            except Exception:
                log.exception("group %s: heartbeat of %s failed", req.group_id, req.member_id)
                broken = HeartbeatResult(E.unknown_server_error)
                return None, lambda _code: callback(broken)

            def finish(code: ErrorCode) -> None:
                if code != E.none:
                    callback(HeartbeatResult(write_error(code)))
                    return
                after()
                callback(result)

            return change, finish

        self._ops.submit(req.group_id, op)

    def _validate(self, req: HeartbeatRequest) -> None:
        """Kafka's request checks, before anything is looked up."""

        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(E.invalid_request, message)

        if not req.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id.strip():
            raise invalid("RackId can't be empty.")
        # KIP-1082: from version 1 the client names itself; version 0 may leave it to us.
        if req.version >= 1 and not req.member_id.strip():
            raise invalid("MemberId can't be empty.")
        epoch = req.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not req.member_id.strip():
                raise invalid("MemberId can't be empty.")
        elif epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or any(partitions for _, partitions in req.owned):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                    "when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not req.member_id.strip():
                raise invalid("MemberId can't be empty.")
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid("MemberEpoch is invalid.")
        if req.subscribed_topic_regex and self._compiled(req.subscribed_topic_regex) is None:
            raise HeartbeatError(
                E.invalid_regular_expression,
                f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular "
                "expression.",
            )
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise HeartbeatError(
                E.unsupported_assignor,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.assignors)}.",
            )

    def _existing_group(self, group_id: str, create: bool) -> ConsumerGroup | None:
        """The consumer group, None for a new one. A classic group of the same id becomes
        a consumer group when a member joins it with ConsumerGroupHeartbeat: an empty one
        always, one with members as group.consumer.migration.policy allows (KIP-848's
        online upgrade, `classic_members.ClassicMembers.upgrade`)."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if self.host.is_streams_group(group_id):
            raise HeartbeatError(E.group_id_not_found, f"Group {group_id} is not a consumer group.")
        classic = self.host.groups.get(group_id)
        if classic is not None and not classic.is_in(GroupState.DEAD):
            if create and classic.is_in(GroupState.EMPTY) and not classic.members:
                return self._adopt_classic(classic)
            if create:
                try:
                    return self.classic_members.upgrade(classic)
                except UpgradeRefused as exc:
                    raise HeartbeatError(E.group_id_not_found, str(exc)) from None
            raise HeartbeatError(E.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if not create:
            raise HeartbeatError(E.group_id_not_found, f"Consumer group {group_id} not found.")
        return None

    def _compute_heartbeat(
        self, req: HeartbeatRequest
    ) -> tuple[_Change, HeartbeatResult, Callable[[], None]]:
        gid = req.group_id
        create = req.member_epoch == 0
        change = _Change(gid, self._existing_group(gid, create))
        view = change.view
        if len(view.members) >= self.config.max_size and (
            not req.member_id or req.member_id not in view.members
        ):
            raise HeartbeatError(
                E.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.max_size} members.",
            )
        member_id = req.member_id or self._new_member_id()
        member = self._member_for(change, req, member_id)

        # 1. The member's subscription; a changed subscription bumps the group epoch.
        updated = _updated_member(member, req)
        bump = False
        if member_id not in change.view.members or (
            updated is not member and updated.subscription() != member.subscription()
        ):
            change.emit(MemberMetadataRecord(gid, member_id, updated))
            bump = (
                updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex
            )
        base = change.base
        refreshed = base.metadata_changes if base is not None else None
        self.bump_if_needed(change, member_id, bump)

        # 2. A new target assignment when the group epoch moved past it.
        if change.view.group_epoch > change.view.assignment_epoch:
            self.compute_target(change)

        # 3. One step of this member towards its target.
        view = change.view
        target_epoch = view.assignment_epoch
        current = view.members[member_id]
        reconciled = current
        moved = False
        if not current.is_reconciled_to(target_epoch):
            try:
                reconciled = reconcile(
                    current,
                    target_epoch,
                    view.target.get(member_id, {}),
                    view.partition_epoch,
                    req.owned,
                    self.subscribed_ids(current),
                )
            except MemberFenced as exc:
                raise HeartbeatError(E.fenced_member_epoch, str(exc)) from None
            moved = reconciled != current
            if moved:
                change.emit(CurrentAssignmentRecord(gid, member_id, reconciled))

        full_request = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.owned is not None
        )
        send_assignment = full_request or reconciled.assigned != member.assigned
        result = HeartbeatResult(
            E.none,
            member_id=member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(gid),
            assignment=reconciled.assigned if send_assignment else None,
        )

        def after() -> None:
            group = self.groups.get(gid)
            if group is None:
                return
            if refreshed is not None and group.metadata_seen < refreshed:
                group.metadata_seen = refreshed
            live = group.members.get(member_id)
            if live is None:
                return
            self.schedule_session_timeout(group, member_id)
            if moved:
                if live.state == MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(group, live)
                else:
                    cancel_rebalance_timeout(group, member_id)
                log.debug(
                    "group %s: member %s now %s at epoch %d (%d partitions, %d to revoke)",
                    gid,
                    member_id,
                    live.state.label,
                    live.member_epoch,
                    sum(len(p) for p in live.assigned.values()),
                    sum(len(p) for p in live.pending_revocation.values()),
                )

        return change, result, after

    def _member_for(self, change: _Change, req: HeartbeatRequest, member_id: str) -> ConsumerMember:
        """The member the heartbeat speaks for (new, existing, or a static member's new
        incarnation), after Kafka's epoch and instance-id checks."""
        view = change.view
        create = req.member_epoch == 0
        if req.instance_id is None:
            member = view.members.get(member_id)
            if member is None:
                if not create:
                    raise HeartbeatError(
                        E.unknown_member_id,
                        f"Member {member_id} is not a member of group {change.group_id}.",
                    )
                member = ConsumerMember(member_id)
            self._check_epoch(member, req.member_epoch, req.owned)
            if create and member_id not in view.members:
                log.info("group %s: member %s joins", change.group_id, member_id)
            return member
        existing = view.static_member(req.instance_id)
        if create:
            if existing is None:
                log.info(
                    "group %s: static member %s (instance %s) joins",
                    change.group_id,
                    member_id,
                    req.instance_id,
                )
                return view.members.get(member_id) or ConsumerMember(member_id)
            if (
                existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
                and existing.classic is None
            ):
                # Kafka says it at INFO too: the usual cause is a member killed without
                # leaving, whose replacement waits for the session timeout to free the id.
                log.info(
                    "group %s: static member %s with instance id %s cannot join: the "
                    "instance id is owned by member %s",
                    change.group_id,
                    member_id,
                    req.instance_id,
                    existing.member_id,
                )
                raise HeartbeatError(
                    E.unreleased_instance_id,
                    f"Static member {member_id} with instance id {req.instance_id} cannot join "
                    f"the group because the instance id is owned by {existing.member_id} member.",
                )
            replacement = replace(
                existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
            )
            self.replace_member(change, existing, replacement)
            log.info(
                "group %s: static member with instance id %s rejoins as %s, replacing %s",
                change.group_id,
                req.instance_id,
                member_id,
                existing.member_id,
            )
            return replacement
        if existing is None:
            raise HeartbeatError(E.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(
                E.fenced_instance_id,
                f"Static member {member_id} with instance id {req.instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        self._check_epoch(existing, req.member_epoch, req.owned)
        return existing

    @staticmethod
    def _check_epoch(member: ConsumerMember, received: int, owned: OwnedPartitions) -> None:
        """A heartbeat's epoch must be the member's, or its previous one when the member
        only owns part of its current assignment (the answer that bumped it was lost)."""
        if received > member.member_epoch:
            raise HeartbeatError(
                E.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its partitions and rejoin.",
            )
        if received < member.member_epoch and (
            received != member.previous_member_epoch or not _is_subset(owned, member.assigned)
        ):
            raise HeartbeatError(
                E.fenced_member_epoch,
                f"The consumer group member has a smaller member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its partitions and rejoin.",
            )

    def bump_if_needed(self, change: _Change, member_id: str, bump: bool) -> None:
        """Bump the group epoch when the member's subscribed topics changed (`bump`) or
        topics changed under the group since it last looked, and they change what it
        assigns from."""
        base = change.base
        if bump or (base is not None and base.needs_metadata_refresh):
            bump = self._refresh_subscription_metadata(change) or bump
            if bump:
                change.emit(GroupEpochRecord(change.group_id, change.view.group_epoch + 1))
                log.info(
                    "group %s: epoch %d after member %s (subscriptions or topics changed)",
                    change.group_id,
                    change.view.group_epoch,
                    member_id,
                )

    def replace_member(self, change: _Change, old: ConsumerMember, new: ConsumerMember) -> None:
        gid = change.group_id
        target = change.view.target.get(old.member_id, {})
        change.emit(CurrentAssignmentRecord(gid, old.member_id, None))
        change.emit(TargetMemberRecord(gid, old.member_id, None))
        change.emit(MemberMetadataRecord(gid, old.member_id, None))
        change.emit(MemberMetadataRecord(gid, new.member_id, new))
        change.emit(TargetMemberRecord(gid, new.member_id, target))
        change.emit(CurrentAssignmentRecord(gid, new.member_id, new))

    def _refresh_subscription_metadata(self, change: _Change) -> bool:
        """Record the subscribed topics as they are now; True if that changed them."""
        metadata = self._subscription_metadata(change.view)
        if metadata == change.view.subscription_metadata:
            return False
        topics = tuple(sorted(metadata.values(), key=lambda t: t.name))
        change.emit(SubscriptionMetadataRecord(change.group_id, topics))
        return True

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members asked for, else the first configured one."""
        counts: dict[str, int] = {}
        for member in group.members.values():
            if member.server_assignor in self.config.assignors:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return self.config.default_assignor
        order = {name: i for i, name in enumerate(self.config.assignors)}
        return max(counts, key=lambda name: (counts[name], -order[name]))

    def compute_target(self, change: _Change) -> None:
        view = change.view
        gid = change.group_id
        by_name = view.subscription_metadata
        topics = {t.topic_id: t.num_partitions for t in by_name.values()}
        members = {}
        for member_id, member in view.members.items():
            names = member.subscribed_topic_names
            pattern = self._compiled(member.subscribed_topic_regex or "")
            ids = frozenset(
                t.topic_id
                for name, t in by_name.items()
                if name in names
                or (
                    member.subscribed_topic_regex
                    and pattern is not None
                    and pattern.fullmatch(name)
                )
            )
            members[member_id] = MemberSubscription(ids, member.instance_id, member.rack_id)
        name = self.preferred_assignor(view)
        try:
            target = ASSIGNORS[name](members, topics, view.target)
        except AssignorError as exc:
            raise HeartbeatError(
                E.unknown_server_error,
                f"Failed to compute a new target assignment for epoch {view.group_epoch}: {exc}",
            ) from None
        for member_id in sorted(view.members):
            assignment = normalize(target.get(member_id, {}))
            if assignment != dict(view.target.get(member_id, {})):
                change.emit(TargetMemberRecord(gid, member_id, assignment))
        change.emit(TargetEpochRecord(gid, view.group_epoch))
        log.info(
            "group %s: target assignment for epoch %d by %s over %d members, %d partitions",
            gid,
            view.group_epoch,
            name,
            len(members),
            sum(topics.values()),
        )

    # -- leaving and fencing --------------------------------------------------------------

    def _compute_leave(
        self, req: HeartbeatRequest
    ) -> tuple[_Change, HeartbeatResult, Callable[[], None]]:
        gid = req.group_id
        group = self._existing_group(gid, create=False)
        change = _Change(gid, group)
        view = change.view
        if req.instance_id is None:
            member = view.members.get(req.member_id)
            if member is None:
                raise HeartbeatError(
                    E.unknown_member_id, f"Member {req.member_id} is not a member of group {gid}."
                )
        else:
            member = view.static_member(req.instance_id)
            if member is None:
                raise HeartbeatError(
                    E.unknown_member_id, f"Instance id {req.instance_id} is unknown."
                )
            if member.member_id != req.member_id:
                raise HeartbeatError(
                    E.fenced_instance_id,
                    f"Static member {req.member_id} with instance id {req.instance_id} was "
                    f"fenced by member {member.member_id}.",
                )
        member_id = member.member_id
        result = HeartbeatResult(E.none, member_id=req.member_id, member_epoch=req.member_epoch)
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # The static member will be back: it keeps its partitions until its session
            # expires, marked by the epoch -2 that lets its next incarnation take over.
            # Its partitions' assignment epochs drop to 0, as Kafka resets them, so that
            # the next incarnation, joining at epoch 0, commits for them.
            away = replace(
                member,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                pending_revocation={},
                assignment_epochs={
                    (topic_id, p): 0 for topic_id, ps in member.assigned.items() for p in ps
                },
            )
            change.emit(CurrentAssignmentRecord(gid, member_id, away))
            log.info("group %s: static member %s left for now", gid, member_id)

            def after_static() -> None:
                group = self.groups.get(gid)
                if group is not None:
                    cancel_rebalance_timeout(group, member_id)

            return change, result, after_static
        self.fence(change, [member])
        log.info("group %s: member %s left", gid, member_id)
        return change, result, lambda: None

    def fence(self, change: _Change, members: list[ConsumerMember]) -> None:
        """Remove members and bump the group epoch so the rest take over their partitions;
        or, when only classic members would remain, turn the group classic (at once: the
        change then holds no records)."""
        gid = change.group_id
        ids = [m.member_id for m in members]
        base = change.base
        if change.work is None and base is not None and self.classic_members.downgrades(base, ids):
            self.classic_members.downgrade(base, ids)
            return
        for member in members:
            change.emit(CurrentAssignmentRecord(gid, member.member_id, None))
            change.emit(TargetMemberRecord(gid, member.member_id, None))
            change.emit(MemberMetadataRecord(gid, member.member_id, None))
        self._refresh_subscription_metadata(change)
        change.emit(GroupEpochRecord(gid, change.view.group_epoch + 1))
        if change.view.classic_members():
            # Classic members learn of a new target only once it exists (their heartbeat
            # compares with the assignment epoch, as Kafka's), and they make none
            # themselves but by rejoining: make it now, not at the next heartbeat of a
            # consumer-protocol member that may not come.
            self.compute_target(change)

    def fence_later(
        self,
        group_id: str,
        member_id: str,
        reason: str,
        epoch: int | None = None,
        session: bool = False,
    ) -> None:
        """Fence the member when its turn in the group's queue comes: unless its epoch
        moved past `epoch` meanwhile or, for a session expiry, it heartbeated."""

        def op() -> tuple[_Change | None, Finish]:
            group = self.groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None:
                return None, _ignore
            if epoch is not None and member.member_epoch != epoch:
                return None, _ignore
            if session:
                deadline = group.session_deadlines.get(member_id)
                if deadline is not None and self._now() < deadline:
                    return None, _ignore  # it heartbeated while this waited in line
            change = _Change(group_id, group)
            self.fence(change, [member])

            def finish(code: ErrorCode) -> None:
                if code == E.none:
                    log.info("group %s: member %s fenced: %s", group_id, member_id, reason)

            return change, finish

        self._ops.submit(group_id, op)

    # -- timers ---------------------------------------------------------------------------

    def _group_setting(self, group_id: str, name: str, default: int) -> int:
        return int_group_config(self.group_configs(group_id), name, default)

    def session_timeout_ms(self, group_id: str) -> int:
        return self._group_setting(
            group_id, "consumer.session.timeout.ms", self.config.session_timeout_ms
        )

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_setting(
            group_id, "consumer.heartbeat.interval.ms", self.config.heartbeat_interval_ms
        )

    def schedule_session_timeout(self, group: ConsumerGroup, member_id: str) -> None:
        """A classic member's session is the timeout of its JoinGroup, others' the
        group's consumer.session.timeout.ms."""
        member = group.members.get(member_id)
        if member is not None and member.classic is not None:
            timeout = member.classic.session_timeout_ms
        else:
            timeout = self.session_timeout_ms(group.group_id)
        schedule_session_timeout(
            self.host.scheduler,
            group,
            member_id,
            timeout,
            live=lambda: self.groups.get(group.group_id) is group,
            expire=lambda: self.fence_later(
                group.group_id, member_id, "its session expired", session=True
            ),
        )

    def _schedule_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
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
            lambda: self.fence_later(
                group.group_id,
                member_id,
                f"it did not revoke its partitions of epoch {epoch} within {timeout}ms",
                epoch=epoch,
            ),
        )

    # -- metadata changes -----------------------------------------------------------------

    def on_topics_changed(self, names: Iterable[str]) -> None:
        """Topics were created, deleted or grew partitions: groups that subscribe to them
        (or may, by a regex, when topics appear) recompute on their next heartbeat."""
        changed = set(names)
        for group in self.groups.values():
            affected = bool(changed & group.subscribed_topic_names())
            if not affected:
                affected = any(m.subscribed_topic_regex for m in group.members.values())
            if affected:
                group.metadata_changes += 1

    # -- loading and unloading ------------------------------------------------------------

    def load_records(self, partition: int, records: Iterable[KeyValue]) -> set[str]:
        """Replay the consumer-group records of a partition (oldest first); returns the
        ids of the groups loaded. Members get a fresh session, as after any failover."""
        touched: set[str] = set()
        for key, value in records:
            if not is_consumer_record(key):
                continue
            try:
                record = decode_record(key, value)
            except RecordFormatError as exc:
                log.warning("skipping unreadable record in partition %d: %s", partition, exc)
                continue
            touched.add(record.group_id)
            self.replay(record)
        loaded = set()
        for group_id in touched:
            group = self.groups.get(group_id)
            if group is None:
                continue
            loaded.add(group_id)
            group.metadata_changes += 1  # topics may have changed while nobody watched
            for member_id, member in group.members.items():
                self.schedule_session_timeout(group, member_id)
                if member.state == MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(group, member)
        return loaded

    def unload_partition(self, partition: int) -> None:
        for group in [
            g for g in self.groups.values() if self.host.partition_for(g.group_id) == partition
        ]:
            self.drop(group)
        # Operations still queued for these groups answer NOT_COORDINATOR when they run.

    # -- what the classic coordinator asks ------------------------------------------------

    def _adopt_classic(self, classic: ClassicGroup) -> ConsumerGroup:
        """Turn an empty classic group (offsets only) into a consumer group, keeping its
        offsets; its metadata record is deleted."""
        gid = classic.group_id
        group = ConsumerGroup(gid, offsets=dict(classic.offsets))
        self.host.forget_classic_group(classic)
        self.groups[gid] = group
        self.host.store.write(
            self.host.partition_for(gid),
            [(encode_group_key(gid), None)],
            lambda code: _log_failure(gid, "deleting the classic group", code),
        )
        log.info("group %s: empty classic group becomes a consumer group", gid)
        return group

    def release_to_classic(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata] | None:
        """Give an empty consumer group's id to a classic JoinGroup: delete its records
        and return its offsets; None if the group has members (it stays consumer)."""
        group = self.groups.get(group_id)
        if group is None:
            return {}
        if group.members or self.is_busy(group_id):
            return None
        return self.release(group)

    def release(self, group: ConsumerGroup) -> dict[TopicPartition, OffsetAndMetadata]:
        """Delete an empty group's records and return its offsets (for a classic group
        taking the id)."""
        group_id = group.group_id
        records = encode_records(group.tombstones())
        self.drop(group)
        self.host.store.write(
            self.host.partition_for(group_id),
            records,
            lambda code: _log_failure(group_id, "deleting the consumer group", code),
        )
        log.info("group %s: empty consumer group becomes a classic group", group_id)
        return dict(group.offsets)

    def validate_offset_commit(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, transactional: bool = False
    ) -> ErrorCode | None:
        """Kafka's check of a commit against the group as a whole: from outside it only
        while it is empty; from a member at its epoch, or at an older one for the
        partitions it has held since (KIP-1251: `stale_partitions` checks each); a newer
        epoch is refused. A classic member (whose generation is its member epoch) and a
        transactional commit are told ILLEGAL_GENERATION, the error their clients know."""
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if member_epoch > member.member_epoch:
            legacy = transactional or member.classic is not None
            return E.illegal_generation if legacy else E.stale_member_epoch
        return None

    def stale_partitions(
        self,
        group: ConsumerGroup,
        member_id: str,
        member_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """The partitions a member's commit at an epoch older than its own may not write
        (KIP-1251): those it does not hold, or got after that epoch."""
        member = group.members.get(member_id)
        if member is None or member_epoch >= member.member_epoch:
            return {}
        error = E.illegal_generation if member.classic is not None else E.stale_member_epoch
        topics = self.metadata().topics
        stale = {}
        for tp in partitions:
            info = topics.get(tp[0])
            epoch = None if info is None else member.assignment_epoch(info.topic_id, tp[1])
            if epoch is None or member_epoch < epoch:
                stale[tp] = error
        return stale

    def validate_offset_fetch(
        self, group: ConsumerGroup, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        return check_offset_fetch(group.members, member_id, member_epoch)

    def delete_group(self, group_id: str) -> tuple[ErrorCode, list[KeyValue]]:
        """DeleteGroups for a consumer group: tombstones for all it wrote, offsets too."""
        group = self.groups.get(group_id)
        if group is None:
            return E.group_id_not_found, []
        if group.members or self.is_busy(group_id):
            return E.non_empty_group, []
        records = offset_tombstones(group_id, group.offsets)
        records.extend(encode_records(group.tombstones()))
        self.drop(group)
        return E.none, records

    def expire_offsets(
        self, now: int, retention_ms: int, owned: set[int]
    ) -> tuple[dict[int, list[KeyValue]], int]:
        """Offsets past retention of topics no member reads; empty groups left without
        offsets are deleted (Kafka's rules for consumer groups)."""
        by_partition: dict[int, list[KeyValue]] = {}
        count = 0
        for group in list(self.groups.values()):
            partition = self.host.partition_for(group.group_id)
            if partition not in owned:
                continue
            expired = [
                tp
                for tp, value in group.offsets.items()
                if not group.is_subscribed_to(tp[0]) and value.expired(now, retention_ms)
            ]
            records = drop_offsets(group.group_id, group.offsets, expired)
            count += len(expired)
            if not group.members and not group.offsets and not self.is_busy(group.group_id):
                records.extend(encode_records(group.tombstones()))
                self.drop(group)
            if records:
                by_partition.setdefault(partition, []).extend(records)
        return by_partition, count

    # -- describing -----------------------------------------------------------------------

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe's lookup: the group, or why not."""
        return described_group(
            self.host, self.groups, group_id, "consumer", self.host.is_streams_group(group_id)
        )

    def listed(self, states: set[str]) -> list[tuple[str, str]]:
        """(group id, state) of the groups ListGroups shows, filtered by lower-case state."""
        return listed_groups(self.groups, states)


def _is_tombstone(record: GroupRecord) -> bool:
    if isinstance(record, GroupEpochRecord | TargetEpochRecord):
        return record.epoch is None
    if isinstance(record, SubscriptionMetadataRecord):
        return record.topics is None
    if isinstance(record, TargetMemberRecord):
        return record.assignment is None
    return record.member is None


def _ignore(_code: ErrorCode) -> None:
    return None


def _log_failure(group_id: str, what: str, code: ErrorCode) -> None:
    if code != E.none:
        log.warning("group %s: %s failed: %s", group_id, what, code.name)


__all__ = [
    "ConsumerGroupConfig",
    "ConsumerGroupCoordinator",
    "ConsumerGroupState",
    "HeartbeatError",
    "HeartbeatRequest",
    "HeartbeatResult",
    "consumer_group_config",
    "topic_regex",
]
