"""The group coordinator: classic group membership (Join/Sync/Heartbeat/Leave) and offsets.

Everything here is synchronous and event-driven. Requests come in as method calls;
answers that must wait (a JoinGroup until the rebalance completes, a SyncGroup until
the leader's assignment is stored) are callbacks kept on the member and invoked later.
Deadlines are timers from a `Scheduler`, writes go to a `GroupStore` whose completion
is a callback too, so the whole state machine runs on the event loop without a lock,
and a test can drive it with a manual clock and an in-memory store.

The semantics follow Kafka's classic group coordinator; where this file departs from
the obvious, the comment says which Kafka behaviour it reproduces.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from kio.schema.errors import ErrorCode

from kbroker.coordinator.clock import Scheduler
from kbroker.coordinator.consumer_coordinator import ConsumerGroupConfig, ConsumerGroupCoordinator
from kbroker.coordinator.consumer_group import ConsumerGroup
from kbroker.coordinator.consumer_records import is_consumer_record
from kbroker.coordinator.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    OffsetAndMetadata,
    SyncCallback,
    SyncResult,
)
from kbroker.coordinator.persistence import (
    expired_offsets,
    group_from_record,
    group_record,
    offset_records,
    replay,
    tombstones,
)
from kbroker.coordinator.records import (
    RecordFormatError,
    encode_group_key,
    encode_offset_key,
    fits_in_key,
    partition_for,
)
from kbroker.coordinator.store import GroupStore, KeyValue
from kbroker.internal_topics import write_error

R = TypeVar("R")
log = logging.getLogger("kbroker.coordinator")

E = ErrorCode
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Kafka's broker settings for groups (group.*, offsets.*), in milliseconds."""

    num_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096
    # KIP-394: how long a member that joined without an id may wait for its join answer.
    new_member_join_timeout_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True  # JoinGroup v4+
    supports_skip_assignment: bool = True  # JoinGroup v9+
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: dict[str, bytes] = field(default_factory=dict)
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    members: tuple[tuple[str, str | None, ErrorCode], ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


CommitCallback = Callable[[dict[TopicPartition, ErrorCode]], None]
DeleteGroupsCallback = Callable[[dict[str, ErrorCode]], None]
DeleteOffsetsCallback = Callable[[tuple[ErrorCode, dict[TopicPartition, ErrorCode]]], None]


def _group_write_error(code: ErrorCode) -> ErrorCode:
    """How a failed group-metadata write is reported to members (Kafka's mapping): a
    timeout leaves the rebalance to go on."""
    return write_error(code, timed_out=E.rebalance_in_progress)


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
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.store = store
        self.groups: dict[str, ClassicGroup] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.active = True
        self._new_id = new_id or (lambda: str(uuid.uuid4()))
        # Hooks for the transaction coordinator: told of each loaded partition (to settle
        # offsets of aborted or open transactions), and asked whether an open transaction
        # holds a group's offset (OffsetFetch with require_stable).
        self.load_listeners: list[Callable[[int], None]] = []
        self.pending_offset_check: Callable[[str, TopicPartition], bool] | None = None
        # Consumer-protocol groups (KIP-848) share the id namespace, offsets and partitions.
        self.consumer = ConsumerGroupCoordinator(self, consumer_config)

    # -- ownership ------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def _status(self, group_id: str | None, allow_empty: bool = False) -> ErrorCode | None:
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

    def _is_current(self, group: ClassicGroup) -> bool:
        return self.groups.get(group.group_id) is group

    def _holds(self, group: ClassicGroup | ConsumerGroup) -> bool:
        """Whether the group (of either kind) is still the live one of its id."""
        live = self.consumer.groups if isinstance(group, ConsumerGroup) else self.groups
        return live.get(group.group_id) is group

    # -- JoinGroup ------------------------------------------------------------------------

    def join_group(self, req: JoinRequest, callback: JoinCallback) -> None:
        error = self._status(req.group_id)
        if error is None and not (
            self.config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            error = E.invalid_session_timeout
        if error is not None:
            callback(JoinResult(error, req.member_id))
            return
        if req.group_id in self.consumer.groups:
            offsets = self.consumer.release_to_classic(req.group_id)
            if offsets is None:
                # A consumer-protocol group with members: classic members cannot join it.
                callback(JoinResult(E.inconsistent_group_protocol, req.member_id))
                return
            self.groups[req.group_id] = ClassicGroup(
                req.group_id, state_timestamp_ms=self._now(), offsets=offsets
            )
        is_unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                callback(JoinResult(E.unknown_member_id, req.member_id))
                return
            group = ClassicGroup(req.group_id, state_timestamp_ms=self._now())
            self.groups[req.group_id] = group
        if not self._accepts_joining_member(group, req.member_id):
            callback(JoinResult(E.group_max_size_reached, UNKNOWN_MEMBER_ID))
            return
        if group.is_in(GroupState.DEAD):
            # Just deleted or unloaded: let the client look up the coordinator again.
            callback(JoinResult(E.coordinator_not_available, req.member_id))
            return
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            callback(JoinResult(E.inconsistent_group_protocol, req.member_id))
            return
        if is_unknown:
            self._join_new_member(group, req, callback)
        else:
            self._join_existing_member(group, req, callback)

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.config.max_group_size
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            awaiting = sum(1 for m in group.members.values() if m.awaiting_join is not None)
            return (member is not None and member.awaiting_join is not None) or awaiting < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(
        self, group: ClassicGroup, req: JoinRequest, callback: JoinCallback
    ) -> None:
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_member_id = f"{prefix}-{self._new_id()}"
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                log.info(
                    "group %s: static member %s rejoined with a new id; replacing %s",
                    group.group_id,
                    req.group_instance_id,
                    existing,
                )
                self._replace_static_member(group, req, existing, new_member_id, callback)
            else:
                self._add_member_and_rebalance(group, req, new_member_id, callback)
        elif req.require_known_member_id:
            # KIP-394: hand out an id and wait for the client to join again with it, so a
            # client that retries after a timeout does not leave a ghost member behind.
            group.pending_members.add(new_member_id)
            self._schedule_pending_member_expiry(group, new_member_id, req.session_timeout_ms)
            callback(JoinResult(E.member_id_required, new_member_id))
        else:
            self._add_member_and_rebalance(group, req, new_member_id, callback)

    def _join_existing_member(
        self, group: ClassicGroup, req: JoinRequest, callback: JoinCallback
    ) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            if req.group_instance_id is not None:
                callback(JoinResult(E.fenced_instance_id, member_id))
                return
            timer = group.pending_member_timers.pop(member_id, None)
            if timer is not None:
                timer.cancel()
            self._add_member_and_rebalance(group, req, member_id, callback)
            return
        error = self._validate_member(group, member_id, req.group_instance_id)
        if error is not None:
            callback(JoinResult(error, member_id))
            return
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(
                group, member, req, callback, f"member {member_id} joining during rebalance"
            )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # The member missed our join answer and asks again: repeat it.
                callback(self._join_result(group, member, include_members=True))
            else:
                self._update_member_and_rebalance(
                    group, member, req, callback, f"member {member_id} changed its metadata"
                )
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id):
                # The leader rejoins to trigger a rebalance for changes the members'
                # metadata does not show (new partitions of a subscribed topic, say).
                self._update_member_and_rebalance(
                    group, member, req, callback, f"leader {member_id} rejoining"
                )
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(
                    group, member, req, callback, f"member {member_id} changed its metadata"
                )
            else:
                callback(self._join_result(group, member, include_members=False))
        else:
            callback(JoinResult(E.unknown_member_id, member_id))

    def _validate_member(
        self, group: ClassicGroup, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka's ClassicGroup.validateMember."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return E.unknown_member_id
            if current != member_id:
                return E.fenced_instance_id
        if member_id not in group.members:
            return E.unknown_member_id
        return None

    def _join_result(
        self, group: ClassicGroup, member: Member, include_members: bool
    ) -> JoinResult:
        is_leader = group.is_leader(member.member_id)
        return JoinResult(
            E.none,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            False,
            group.current_member_metadata() if include_members and is_leader else (),
        )

    def _add_member_and_rebalance(
        self, group: ClassicGroup, req: JoinRequest, member_id: str, callback: JoinCallback
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            awaiting_join=callback,
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state == GroupState.EMPTY:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add_member(member)
        # A new member cannot heartbeat before its join answer, and a parked join cannot
        # notice the client leaving; so it gets the new-member timeout instead (KIP-394).
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"adding member {member_id} ({req.reason or 'no reason given'})"
        )

    def _update_member_and_rebalance(
        self,
        group: ClassicGroup,
        member: Member,
        req: JoinRequest,
        callback: JoinCallback,
        reason: str,
    ) -> None:
        self._update_member(member, req, callback)
        self._maybe_prepare_rebalance_or_complete_join(group, reason)

    @staticmethod
    def _update_member(member: Member, req: JoinRequest, callback: JoinCallback | None) -> None:
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        if member.awaiting_join is not None and member.awaiting_join is not callback:
            # A second join from the same member (a client retrying on a new connection)
            # supersedes the first; answer the first so nothing waits on it forever.
            stale = member.awaiting_join
            member.awaiting_join = None
            _invoke(stale, JoinResult(E.rebalance_in_progress, member.member_id))
        member.awaiting_join = callback

    def _replace_static_member(
        self,
        group: ClassicGroup,
        req: JoinRequest,
        old_id: str,
        new_id: str,
        callback: JoinCallback,
    ) -> None:
        current_leader = group.leader_id
        old = group.members[old_id]
        # The old incarnation is fenced: answer anything it still waits for.
        if old.awaiting_join is not None:
            stale, old.awaiting_join = old.awaiting_join, None
            _invoke(stale, JoinResult(E.fenced_instance_id, old_id))
        if old.awaiting_sync is not None:
            stale_sync, old.awaiting_sync = old.awaiting_sync, None
            _invoke(stale_sync, SyncResult(E.fenced_instance_id))
        member = group.replace_static_member(req.group_instance_id or "", old_id, new_id)
        self._schedule_heartbeat(group, member)
        saved = (list(member.protocols), member.rebalance_timeout_ms, member.session_timeout_ms)
        self._update_member(member, req, callback)

        if group.is_in(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # Nothing the assignment depends on changed: persist the new member id and
                # answer at once, without a rebalance (the point of static membership).
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                generation = group.generation_id

                def stored(code: ErrorCode) -> None:
                    if not self._is_current(group) or group.members.get(new_id) is not member:
                        return
                    if code != E.none:
                        log.warning(
                            "group %s: storing static member %s failed (%s); reverting",
                            group.group_id,
                            new_id,
                            code.name,
                        )
                        member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = (
                            saved
                        )
                        member.awaiting_join = None
                        group.replace_static_member(req.group_instance_id or "", new_id, old_id)
                        self._schedule_heartbeat(group, member)
                        _invoke(
                            callback,
                            JoinResult(
                                _group_write_error(code),
                                UNKNOWN_MEMBER_ID,
                                group.generation_id,
                                group.protocol_type,
                                group.protocol_name,
                                current_leader or "",
                            ),
                        )
                        return
                    member.awaiting_join = None
                    if req.supports_skip_assignment:
                        # KIP-814: a rejoining static leader learns it leads but must not
                        # compute a new assignment the stable group would never apply.
                        is_leader = group.is_leader(new_id)
                        result = JoinResult(
                            E.none,
                            new_id,
                            generation,
                            group.protocol_type,
                            group.protocol_name,
                            group.leader_id or "",
                            is_leader,
                            group.current_member_metadata() if is_leader else (),
                        )
                    else:
                        # Older clients: report the previous leader id so the new member
                        # never believes it must assign.
                        result = JoinResult(
                            E.none,
                            new_id,
                            generation,
                            group.protocol_type,
                            group.protocol_name,
                            current_leader or "",
                        )
                    _invoke(callback, result)

                self.store.write(
                    self.partition_for(group.group_id),
                    [group_record(group, assignment)],
                    stored,
                )
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {new_id} changed the selected protocol"
                )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id: start over.
            self._prepare_rebalance(group, f"static member {new_id} replaced {old_id}")
        else:
            self._maybe_complete_join_phase(group)

    # -- rebalancing ----------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.rebalance_in_progress)
        self._cancel_sync_expiry(group)
        initial = group.is_in(GroupState.EMPTY)
        group.previous_state = group.state
        group.transition_to(GroupState.PREPARING_REBALANCE, self._now())
        log.info(
            "group %s: preparing to rebalance from generation %d (%s)",
            group.group_id,
            group.generation_id,
            reason,
        )
        if initial:
            # A new group waits group.initial.rebalance.delay.ms for more members, and
            # again each time one arrives, up to the rebalance timeout.
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            self._schedule_initial_join(group, delay, remaining)
            return
        if group.all_members_joined():
            self._complete_join(group)
        else:
            self._schedule_join_expiry(group)

    def _schedule_initial_join(self, group: ClassicGroup, delay: int, remaining: int) -> None:
        self._cancel_join_timer(group)

        def fire() -> None:
            group.join_timer = None
            if not self._is_current(group) or not group.is_in(GroupState.PREPARING_REBALANCE):
                return
            if group.new_member_added and remaining != 0:
                group.new_member_added = False
                next_delay = min(self.config.initial_rebalance_delay_ms, remaining)
                self._schedule_initial_join(group, next_delay, max(remaining - delay, 0))
            else:
                self._complete_join(group)

        group.join_timer = self.scheduler.call_later(delay, fire)

    def _schedule_join_expiry(self, group: ClassicGroup) -> None:
        self._cancel_join_timer(group)

        def fire() -> None:
            group.join_timer = None
            if self._is_current(group) and group.is_in(GroupState.PREPARING_REBALANCE):
                self._complete_join(group)

        group.join_timer = self.scheduler.call_later(group.rebalance_timeout_ms, fire)

    @staticmethod
    def _cancel_join_timer(group: ClassicGroup) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.previous_state == GroupState.EMPTY:
            return  # the initial rebalance waits out its delay
        if group.all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        self._cancel_join_timer(group)
        # Dynamic members that did not rejoin are gone; static ones keep their place
        # until their session expires, so a restart does not shuffle partitions.
        for member in group.not_yet_rejoined():
            if member.group_instance_id is None:
                self._cancel_heartbeat(member)
                group.remove_member(member.member_id)
                log.info(
                    "group %s: removed member %s, which did not rejoin in time",
                    group.group_id,
                    member.member_id,
                )
        if group.is_in(GroupState.DEAD):
            return
        if not self._elect_joined_leader(group) and group.members:
            log.error(
                "group %s: no member rejoined; waiting for sessions to expire", group.group_id
            )
            self._schedule_join_expiry(group)
            return
        now = self._now()
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.update_subscriptions()
            group.transition_to(GroupState.COMPLETING_REBALANCE, now)
        else:
            group.protocol_name = None
            group.update_subscriptions()
            group.transition_to(GroupState.EMPTY, now)
        group.previous_state = GroupState.PREPARING_REBALANCE
        if group.is_in(GroupState.EMPTY):
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            self.store.write(
                self.partition_for(group.group_id),
                [group_record(group, {})],
                lambda code: _log_write_failure(group.group_id, code),
            )
            return
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        for member in list(group.members.values()):
            result = self._join_result(group, member, include_members=True)
            if member.awaiting_join is not None:
                callback, member.awaiting_join = member.awaiting_join, None
                _invoke(callback, result)
            member.is_new = False
            self._schedule_heartbeat(group, member)
            group.pending_sync_members.add(member.member_id)
        self._schedule_sync_expiry(group)

    @staticmethod
    def _elect_joined_leader(group: ClassicGroup) -> bool:
        """Make sure the leader is a member that rejoined (it must get the member list)."""
        if group.leader_id is None:
            return False
        leader = group.members.get(group.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in group.members.values():
            if member.awaiting_join is not None:
                group.leader_id = member.member_id
                return True
        return False

    def _schedule_sync_expiry(self, group: ClassicGroup) -> None:
        self._cancel_sync_expiry(group, clear=False)
        generation = group.generation_id

        def fire() -> None:
            group.sync_timer = None
            if not self._is_current(group) or group.generation_id != generation:
                return
            if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                return
            if group.pending_sync_members:
                missing = sorted(group.pending_sync_members)
                for member_id in missing:
                    member = group.remove_member(member_id)
                    if member is not None:
                        self._cancel_heartbeat(member)
                self._prepare_rebalance(group, f"members {missing} sent no SyncGroup in time")

        group.sync_timer = self.scheduler.call_later(group.rebalance_timeout_ms, fire)

    @staticmethod
    def _cancel_sync_expiry(group: ClassicGroup, clear: bool = True) -> None:
        if clear:
            group.pending_sync_members.clear()
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members and group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == E.none
        for member in list(group.members.values()):
            if member.awaiting_sync is None:
                continue
            callback, member.awaiting_sync = member.awaiting_sync, None
            _invoke(
                callback,
                SyncResult(
                    error,
                    member.assignment,
                    group.protocol_type if ok else None,
                    group.protocol_name if ok else None,
                ),
            )
            self._schedule_heartbeat(group, member)

    # -- SyncGroup ------------------------------------------------------------------------

    def sync_group(self, req: SyncRequest, callback: SyncCallback) -> None:
        error = self._status(req.group_id)
        if error is not None:
            callback(SyncResult(error))
            return
        group = self.groups.get(req.group_id)
        if group is None or group.is_in(GroupState.EMPTY):
            callback(SyncResult(E.unknown_member_id))
            return
        if group.is_in(GroupState.DEAD):
            callback(SyncResult(E.coordinator_not_available))
            return
        error = self._validate_member(group, req.member_id, req.group_instance_id)
        if error is None and req.generation_id != group.generation_id:
            error = E.illegal_generation
        if error is None and (
            (req.protocol_type is not None and req.protocol_type != group.protocol_type)
            or (req.protocol_name is not None and req.protocol_name != group.protocol_name)
        ):
            error = E.inconsistent_group_protocol
        if error is not None:
            callback(SyncResult(error))
            return
        member = group.members[req.member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            callback(SyncResult(E.rebalance_in_progress))
        elif group.is_in(GroupState.STABLE):
            self._remove_pending_sync_member(group, member.member_id)
            callback(
                SyncResult(E.none, member.assignment, group.protocol_type, group.protocol_name)
            )
        else:  # COMPLETING_REBALANCE
            if member.awaiting_sync is not None:
                stale, member.awaiting_sync = member.awaiting_sync, None
                _invoke(stale, SyncResult(E.rebalance_in_progress))
            member.awaiting_sync = callback
            self._remove_pending_sync_member(group, member.member_id)
            if group.is_leader(member.member_id):
                self._store_assignment(group, req)

    def _store_assignment(self, group: ClassicGroup, req: SyncRequest) -> None:
        assignment = {m: req.assignments.get(m, b"") for m in group.members}
        missing = [m for m in group.members if m not in req.assignments]
        if missing:
            log.warning(
                "group %s: leader sent no assignment for %s; they get an empty one",
                group.group_id,
                missing,
            )
        generation = group.generation_id

        def stored(code: ErrorCode) -> None:
            if not (
                self._is_current(group)
                and group.is_in(GroupState.COMPLETING_REBALANCE)
                and group.generation_id == generation
            ):
                return
            if code != E.none:
                self._reset_and_propagate_assignment_error(group, _group_write_error(code))
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"storing the assignment failed: {code.name}"
                )
                return
            for member in group.members.values():
                member.assignment = assignment.get(member.member_id, b"")
            self._propagate_assignment(group, E.none)
            group.transition_to(GroupState.STABLE, self._now())
            log.info("group %s: generation %d is stable", group.group_id, generation)

        self.store.write(
            self.partition_for(group.group_id), [group_record(group, assignment)], stored
        )

    # -- Heartbeat ------------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, member_id: str, generation_id: int, instance_id: str | None = None
    ) -> ErrorCode:
        error = self._status(group_id)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return E.coordinator_not_available
        error = self._validate_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return E.illegal_generation
        if group.is_in(GroupState.EMPTY):
            return E.unknown_member_id
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return E.rebalance_in_progress
        # CompletingRebalance counts as fine: members may heartbeat between their join
        # answer and their SyncGroup.
        return E.none

    def _schedule_heartbeat(
        self, group: ClassicGroup, member: Member, timeout_ms: int | None = None
    ) -> None:
        """Push the member's session deadline out; one lazily moved timer per member."""
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_deadline_ms = self._now() + timeout
        if member.heartbeat_timer is not None and member.heartbeat_timer_due_ms <= (
            member.heartbeat_deadline_ms
        ):
            return  # the running timer fires first and will re-arm for the new deadline
        self._cancel_heartbeat(member)
        self._arm_heartbeat(group, member, timeout)

    def _arm_heartbeat(self, group: ClassicGroup, member: Member, delay: int) -> None:
        member.heartbeat_timer_due_ms = self._now() + delay
        member_id = member.member_id

        def fire() -> None:
            member.heartbeat_timer = None
            if not self._is_current(group) or group.members.get(member.member_id) is not member:
                return
            now = self._now()
            if now < member.heartbeat_deadline_ms:
                self._arm_heartbeat(group, member, member.heartbeat_deadline_ms - now)
                return
            self._on_session_expired(group, member, member_id)

        member.heartbeat_timer = self.scheduler.call_later(delay, fire)

    @staticmethod
    def _cancel_heartbeat(member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    def _on_session_expired(self, group: ClassicGroup, member: Member, member_id: str) -> None:
        if group.is_in(GroupState.DEAD):
            return
        if not member.is_new and (
            member.awaiting_join is not None or member.awaiting_sync is not None
        ):
            # Members parked in a rebalance cannot heartbeat; the rebalance completing
            # re-arms their session timer.
            return
        log.info("group %s: member %s session expired; removing it", group.group_id, member_id)
        self._remove_member_and_update_group(group, member, "session timeout")

    def _schedule_pending_member_expiry(
        self, group: ClassicGroup, member_id: str, timeout_ms: int
    ) -> None:
        def fire() -> None:
            group.pending_member_timers.pop(member_id, None)
            if not self._is_current(group) or member_id not in group.pending_members:
                return
            log.info("group %s: pending member %s never joined", group.group_id, member_id)
            group.pending_members.discard(member_id)
            self._maybe_complete_join_phase(group)

        old = group.pending_member_timers.pop(member_id, None)
        if old is not None:
            old.cancel()
        group.pending_member_timers[member_id] = self.scheduler.call_later(timeout_ms, fire)

    def _drop_member(self, group: ClassicGroup, member: Member) -> None:
        self._cancel_heartbeat(member)
        # A member may leave while its join is parked: answer it so the client rejoins.
        if member.awaiting_join is not None:
            callback, member.awaiting_join = member.awaiting_join, None
            _invoke(callback, JoinResult(E.unknown_member_id, UNKNOWN_MEMBER_ID))
        if member.awaiting_sync is not None:
            sync_cb, member.awaiting_sync = member.awaiting_sync, None
            _invoke(sync_cb, SyncResult(E.unknown_member_id))
        group.remove_member(member.member_id)

    def _remove_member_and_update_group(
        self, group: ClassicGroup, member: Member, reason: str
    ) -> None:
        self._drop_member(group, member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(
                group, f"member {member.member_id} left ({reason})"
            )
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join_phase(group)

    # -- LeaveGroup -----------------------------------------------------------------------

    def leave_group(self, group_id: str, members: Iterable[LeavingMember]) -> LeaveResult:
        error = self._status(group_id)
        if error is not None:
            return LeaveResult(error)
        group = self.groups.get(group_id)
        if group is None:
            return LeaveResult(E.unknown_member_id)
        if group.is_in(GroupState.DEAD):
            return LeaveResult(E.coordinator_not_available)
        results: list[tuple[str, str | None, ErrorCode]] = []
        left: list[Member] = []
        for leaving in members:
            code = E.none
            if leaving.member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal of a static member by its instance id.
                current = group.static_member_id(leaving.group_instance_id)
                if current is None:
                    code = E.unknown_member_id
                else:
                    left.append(group.members[current])
            elif leaving.member_id in group.pending_members:
                group.pending_members.discard(leaving.member_id)
                timer = group.pending_member_timers.pop(leaving.member_id, None)
                if timer is not None:
                    timer.cancel()
            else:
                code = (
                    self._validate_member(group, leaving.member_id, leaving.group_instance_id)
                    or E.none
                )
                if code == E.none:
                    left.append(group.members[leaving.member_id])
            results.append((leaving.member_id, leaving.group_instance_id, code))
        for member in left:
            if group.members.get(member.member_id) is not member:
                continue  # named twice in one request
            log.info("group %s: member %s left", group.group_id, member.member_id)
            self._drop_member(group, member)
        if any(code == E.none for _, _, code in results):
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, "members left the group")
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return LeaveResult(E.none, tuple(results))

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
    ) -> None:
        """Validate and store committed offsets; the callback gets one code per partition.

        Commit times are stamped here. `retention_ms` (OffsetCommit v2-v4's retention
        time, when not -1) gives the offsets an explicit expiry, as in Kafka.
        `unknown_group_error` is what a member commit to a missing group gets:
        ILLEGAL_GENERATION before OffsetCommit v9, GROUP_ID_NOT_FOUND from v9 on.
        """
        error = self._status(group_id, allow_empty=True)
        group: ClassicGroup | ConsumerGroup | None = None
        consumer_group = self.consumer.groups.get(group_id) if error is None else None
        if consumer_group is not None:
            group = consumer_group
            error = self.consumer.validate_offset_commit(consumer_group, member_id, generation_id)
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
                error = self._validate_offset_commit(group, member_id, instance_id, generation_id)
        if error is not None:
            callback({tp: error for tp in offsets})
            return
        assert group is not None
        if isinstance(group, ClassicGroup) and group.is_in(
            GroupState.STABLE, GroupState.PREPARING_REBALANCE
        ):
            member = group.members.get(member_id)
            if member is not None:
                self._schedule_heartbeat(group, member)
        results: dict[TopicPartition, ErrorCode] = {}
        to_store: dict[TopicPartition, OffsetAndMetadata] = {}
        now = self._now()
        expires = None if retention_ms is None else now + retention_ms
        for tp, value in offsets.items():
            if len(value.metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = E.offset_metadata_too_large
            else:
                to_store[tp] = replace(value, commit_timestamp_ms=now, expire_timestamp_ms=expires)
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

    def _validate_offset_commit(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return E.coordinator_not_available
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None  # a commit from outside group management into an idle group
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return E.illegal_generation
        elif not group.is_in(GroupState.EMPTY):
            return E.unknown_member_id
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return E.rebalance_in_progress
        return None

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
        error = self._status(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        group: ClassicGroup | ConsumerGroup | None = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            error = self.consumer.validate_offset_fetch(consumer_group, member_id, member_epoch)
            if error is not None:
                return error, {}
            group = consumer_group
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return E.none, dict(offsets)
        return E.none, {tp: offsets.get(tp) for tp in partitions}

    def has_pending_offset(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of the group for `tp`."""
        check = self.pending_offset_check
        return check is not None and check(group_id, tp)

    def validate_txn_offset_commit(
        self, group_id: str, member_id: str, generation_id: int, instance_id: str | None
    ) -> ErrorCode:
        """Kafka's checks of a TxnOffsetCommit against the group. Unlike a plain commit it
        is not refused during a rebalance, nor from outside a live group; a missing group
        is created (simple) for a request from no member, else ILLEGAL_GENERATION."""
        error = self._status(group_id)
        if error is not None:
            return error
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return (
                self.consumer.validate_offset_commit(
                    consumer_group, member_id, generation_id, transactional=True
                )
                or E.none
            )
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
            error = self._validate_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return E.illegal_generation
        return E.none

    def apply_committed_offsets(
        self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """Make offsets already in the log visible (a transaction's commit marker landed)."""
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            consumer_group.offsets.update(offsets)
            return
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            group = ClassicGroup(group_id, state_timestamp_ms=self._now())
            self.groups[group_id] = group
        group.offsets.update(offsets)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition], callback: DeleteOffsetsCallback
    ) -> None:
        error = self._status(group_id)
        consumer_group = self.consumer.groups.get(group_id) if error is None else None
        if consumer_group is not None:
            group: ClassicGroup | ConsumerGroup | None = consumer_group
            in_use = consumer_group.is_subscribed_to
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
        records: list[KeyValue] = []
        removed: list[TopicPartition] = []
        for tp in partitions:
            if in_use(tp[0]):
                results[tp] = E.group_subscribed_to_topic
                continue
            results[tp] = E.none
            if tp in group.offsets:
                removed.append(tp)
                records.append((encode_offset_key(group_id, tp[0], tp[1]), None))

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
        error = E.coordinator_load_in_progress if self.loading else E.none
        if not self.active:
            error = E.coordinator_not_available
        return error, listed

    def describe_group(self, group_id: str) -> tuple[ErrorCode, ClassicGroup | None]:
        error = self._status(group_id, allow_empty=True)
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
            error = self._status(group_id, allow_empty=True)
            if error is None and group_id in self.consumer.groups:
                error, consumer_records = self.consumer.delete_group(group_id)
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
            self._forget_group(group)
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
                        results[group_id] = _group_write_error(code)
                pending -= 1
                if pending == 0:
                    callback(results)

            return stored

        for partition, records in by_partition.items():
            ids = {
                g for g in results if results[g] == E.none and self.partition_for(g) == partition
            }
            self.store.write(partition, records, stored_for(ids))

    def _forget_group(self, group: ClassicGroup) -> None:
        group.transition_to(GroupState.DEAD, self._now())
        self._cancel_join_timer(group)
        self._cancel_sync_expiry(group)
        for timer in group.pending_member_timers.values():
            timer.cancel()
        group.pending_member_timers.clear()
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

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
            records: list[KeyValue] = [
                (encode_offset_key(group.group_id, t, p), None) for t, p in expired
            ]
            for tp in expired:
                del group.offsets[tp]
            expired_count += len(expired)
            if group.is_in(GroupState.EMPTY) and not group.offsets:
                records.append((encode_group_key(group.group_id), None))
                self._forget_group(group)
            if records:
                by_partition.setdefault(self.partition_for(group.group_id), []).extend(records)
        consumer_records, consumer_expired = self.consumer.expire_offsets(
            now, retention, self.owned
        )
        for partition, written in consumer_records.items():
            by_partition.setdefault(partition, []).extend(written)
        expired_count += consumer_expired
        for partition, written in by_partition.items():
            self.store.write(partition, written, lambda code: _log_write_failure("expiry", code))
        if expired_count:
            log.info("expired %d committed offsets", expired_count)
        return expired_count

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
        consumer_loaded = self.consumer.load_records(partition, records)
        metadata, offsets = replay((r for r in records if not is_consumer_record(r[0])), skip)
        now = self._now()
        loaded = len(consumer_loaded)
        for group_id in set(metadata) | set(offsets):
            stored = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:
                consumer_group.offsets = group_offsets
                continue
            if stored is None and not group_offsets:
                continue
            group = group_from_record(group_id, stored, now)
            group.offsets = group_offsets
            old = self.groups.get(group_id)
            if old is not None:
                self._fail_waiters(old, E.not_coordinator)
            self.groups[group_id] = group
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
            loaded += 1
        self.loading.discard(partition)
        self.owned.add(partition)
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
        for group in [
            g for g in self.groups.values() if self.partition_for(g.group_id) == partition
        ]:
            self._fail_waiters(group, E.not_coordinator)
            self._forget_group(group)

    def _fail_waiters(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            self._cancel_heartbeat(member)
            if member.awaiting_join is not None:
                callback, member.awaiting_join = member.awaiting_join, None
                _invoke(callback, JoinResult(error, member.member_id))
            if member.awaiting_sync is not None:
                sync_cb, member.awaiting_sync = member.awaiting_sync, None
                _invoke(sync_cb, SyncResult(error))

    def shutdown(self) -> None:
        self.active = False
        for partition in sorted(self.owned | self.loading):
            self.unload_partition(partition)


def _invoke(callback: Callable[[R], None], result: R) -> None:
    """Answer a parked request; a failing callback must not break the state machine."""
    try:
        callback(result)
    except Exception:
        log.exception("group callback failed")


def _log_write_failure(what: str, code: ErrorCode) -> None:
    if code != E.none:
        log.warning("writing coordinator records (%s) failed: %s", what, code.name)


__all__ = [
    "CoordinatorConfig",
    "GroupCoordinator",
    "JoinRequest",
    "LeaveResult",
    "LeavingMember",
    "ListedGroup",
    "SyncRequest",
]
