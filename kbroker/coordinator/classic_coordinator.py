"""Classic group membership: JoinGroup, SyncGroup, Heartbeat and LeaveGroup over
`ClassicGroup`s, Kafka's classic rebalance protocol.

Everything here is synchronous and event-driven. Requests come in as method calls;
answers that must wait (a JoinGroup until the rebalance completes, a SyncGroup until
the leader's assignment is stored) are callbacks kept on the member and invoked later.
Deadlines are timers from the host's `Scheduler`, writes go to its `GroupStore` whose
completion is a callback too, so the whole state machine runs on the event loop without
a lock, and a test can drive it with a manual clock and an in-memory store.

What it needs of the group coordinator that hosts it (ids, ownership, the store, the
consumer-protocol groups sharing the id space) is `host.GroupHost`; what the host asks
of it beyond the four APIs (offset-commit validation, sessions of loaded groups,
dropping groups) are the public methods below.

The semantics follow Kafka's classic group coordinator; where this file departs from
the obvious, the comment says which Kafka behaviour it reproduces.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kbroker.coordinator.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from kbroker.coordinator.host import (
    CoordinatorConfig,
    GroupHost,
    group_write_error,
    invoke,
    log_write_failure,
)
from kbroker.coordinator.persistence import group_record

log = logging.getLogger("kbroker.coordinator")

E = ErrorCode


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


def _answer_parked(member: Member, error: ErrorCode, join_member_id: str) -> None:
    """Answer the JoinGroup and SyncGroup the member still has parked with `error` (the
    JoinGroup naming `join_member_id`): a fenced, departed or unloaded member's client
    must hear at once, not at its request timeout."""
    if member.awaiting_join is not None:
        join, member.awaiting_join = member.awaiting_join, None
        invoke(join, JoinResult(error, join_member_id))
    if member.awaiting_sync is not None:
        sync, member.awaiting_sync = member.awaiting_sync, None
        invoke(sync, SyncResult(error))


class ClassicGroupCoordinator:
    """The classic protocol's state machine, over the host's classic groups."""

    def __init__(
        self, host: GroupHost, config: CoordinatorConfig, new_id: Callable[[], str] | None = None
    ) -> None:
        self.host = host
        self.config = config
        self.scheduler = host.scheduler
        self.store = host.store
        self.groups = host.groups
        self._new_id = new_id or (lambda: str(uuid.uuid4()))

    def _now(self) -> int:
        return self.scheduler.now_ms()

    # -- JoinGroup ------------------------------------------------------------------------

    def join_group(self, req: JoinRequest, callback: JoinCallback) -> None:
        error = self.host.status(req.group_id)
        if error is None and not (
            self.config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            error = E.invalid_session_timeout
        if error is not None:
            callback(JoinResult(error, req.member_id))
            return
        if self.host.is_consumer_group(req.group_id):
            offsets = self.host.release_consumer_group(req.group_id)
            if offsets is None:
                # A streams group with members: classic members cannot join it. (The
                # group coordinator hands a consumer group's id to `classic_members`.)
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
            self._remove_refused_member(group, req.member_id)
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

    def _remove_refused_member(self, group: ClassicGroup, member_id: str) -> None:
        """A member refused for group.max.size leaves the group, as in Kafka: over capacity
        (the limit lowered while the group lived), the last members to rejoin are the
        ones left out. The rebalance then completes once the others have rejoined."""
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            timer = group.pending_member_timers.pop(member_id, None)
            if timer is not None:
                timer.cancel()
        member = group.members.get(member_id)
        if member is None:
            return
        log.info(
            "group %s: member %s refused, the group is at its size limit %d",
            group.group_id,
            member_id,
            self.config.max_group_size,
        )
        self._drop_member(group, member)
        self._maybe_complete_join_phase(group)

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
        error = self.validate_member(group, member_id, req.group_instance_id)
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

    def validate_member(
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
        self.schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
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
            invoke(stale, JoinResult(E.rebalance_in_progress, member.member_id))
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
        _answer_parked(old, E.fenced_instance_id, old_id)
        member = group.replace_static_member(req.group_instance_id or "", old_id, new_id)
        self.schedule_heartbeat(group, member)
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
                        self.schedule_heartbeat(group, member)
                        invoke(
                            callback,
                            JoinResult(
                                group_write_error(code),
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
                        leader, skip = group.leader_id or "", group.is_leader(new_id)
                    else:
                        # Older clients: report the previous leader id so the new member
                        # never believes it must assign.
                        leader, skip = current_leader or "", False
                    result = JoinResult(
                        E.none,
                        new_id,
                        generation,
                        group.protocol_type,
                        group.protocol_name,
                        leader,
                        skip,
                        group.current_member_metadata() if skip else (),
                    )
                    invoke(callback, result)

                self.store.write(
                    self.host.partition_for(group.group_id),
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
                self.host.partition_for(group.group_id),
                [group_record(group, {})],
                lambda code: log_write_failure(group.group_id, code),
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
                invoke(callback, result)
            member.is_new = False
            self.schedule_heartbeat(group, member)
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
            invoke(
                callback,
                SyncResult(
                    error,
                    member.assignment,
                    group.protocol_type if ok else None,
                    group.protocol_name if ok else None,
                ),
            )
            self.schedule_heartbeat(group, member)

    # -- SyncGroup ------------------------------------------------------------------------

    def sync_group(self, req: SyncRequest, callback: SyncCallback) -> None:
        error = self.host.status(req.group_id)
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
        error = self.validate_member(group, req.member_id, req.group_instance_id)
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
                invoke(stale, SyncResult(E.rebalance_in_progress))
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
                self._reset_and_propagate_assignment_error(group, group_write_error(code))
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
            self.host.partition_for(group.group_id), [group_record(group, assignment)], stored
        )

    # -- Heartbeat ------------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, member_id: str, generation_id: int, instance_id: str | None = None
    ) -> ErrorCode:
        error = self.host.status(group_id)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return E.coordinator_not_available
        error = self.validate_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return E.illegal_generation
        if group.is_in(GroupState.EMPTY):
            return E.unknown_member_id
        self.schedule_heartbeat(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return E.rebalance_in_progress
        # CompletingRebalance counts as fine: members may heartbeat between their join
        # answer and their SyncGroup.
        return E.none

    def schedule_heartbeat(
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
        _answer_parked(member, E.unknown_member_id, UNKNOWN_MEMBER_ID)
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
        error = self.host.status(group_id)
        if error is not None:
            return LeaveResult(error)
        group = self.groups.get(group_id)
        if group is None:
            # As Kafka: the request succeeds and each member named is unknown.
            return LeaveResult(
                E.none,
                tuple((m.member_id, m.group_instance_id, E.unknown_member_id) for m in members),
            )
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
                    self.validate_member(group, leaving.member_id, leaving.group_instance_id)
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

    def _is_current(self, group: ClassicGroup) -> bool:
        return self.groups.get(group.group_id) is group

    def validate_offset_commit(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return E.coordinator_not_available
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None  # a commit from outside group management into an idle group
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self.validate_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return E.illegal_generation
        elif not group.is_in(GroupState.EMPTY):
            return E.unknown_member_id
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return E.rebalance_in_progress
        return None

    def on_group_loaded(self, group: ClassicGroup) -> None:
        """A group just loaded from `__consumer_offsets`: its members get a fresh session,
        and a group above group.max.size (lowered since it was stored) rebalances, so its
        members can commit before the last to rejoin are refused (Kafka's onLoaded)."""
        for member in group.members.values():
            self.schedule_heartbeat(group, member)
        if len(group.members) > self.config.max_group_size:
            self._prepare_rebalance(
                group,
                f"loaded with {len(group.members)} members, over the size limit "
                f"{self.config.max_group_size}",
            )

    def forget_group(self, group: ClassicGroup) -> None:
        group.transition_to(GroupState.DEAD, self._now())
        self._cancel_join_timer(group)
        self._cancel_sync_expiry(group)
        for timer in group.pending_member_timers.values():
            timer.cancel()
        group.pending_member_timers.clear()
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    def adopt(self, group: ClassicGroup, reason: str | None) -> None:
        """Serve a group that was a consumer group (KIP-848's downgrade): stored Stable at
        the consumer group's epoch, it rebalances at once (with a `reason`) so that
        members rejoin."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self.schedule_heartbeat(group, member)
        if reason is not None:
            self._prepare_rebalance(group, reason)

    def fail_waiters(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            self._cancel_heartbeat(member)
            _answer_parked(member, error, member.member_id)
