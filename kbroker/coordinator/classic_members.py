"""Classic consumers inside consumer-protocol groups, and groups moving between the two
protocols while they have members: KIP-848's online migration.

A team rolls its consumers from `group.protocol=classic` to `consumer` one process at a
time. The first consumer-protocol member turns the classic group into a consumer group
(the *upgrade*); the classic members still running stay in it, speaking JoinGroup,
SyncGroup and Heartbeat, and get their partitions from the server-side assignor:

- a classic member's JoinGroup is answered at once, with its member epoch as the
  generation, no leader and no member list: every classic member acts as a follower;
- its SyncGroup returns the partitions it holds now, in the consumer protocol's layout;
- its Heartbeat answers REBALANCE_IN_PROGRESS whenever it has something to give up or to
  take (its epoch is behind the group's target assignment, it must revoke, or what it
  waits for is free), so it rejoins, and each JoinGroup moves it one reconciliation step;
- it commits offsets with its member epoch as generation (or an older one, for the
  partitions it held since, KIP-1251; ILLEGAL_GENERATION otherwise).

When the last consumer-protocol member leaves a group whose other members are all
classic, the group turns classic again (the *downgrade*) and rebalances the classic way.
`group.consumer.migration.policy` says which way a group with members may move; empty
groups always move. The rules, error codes and messages are Kafka's GroupMetadataManager.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode

from kbroker.coordinator.classic_coordinator import JoinRequest, LeaveResult, LeavingMember
from kbroker.coordinator.consumer_group import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    GroupRecord,
    MemberMetadataRecord,
    MemberState,
    TargetEpochRecord,
    TargetMemberRecord,
    normalize,
)
from kbroker.coordinator.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from kbroker.coordinator.consumer_records import encode_records
from kbroker.coordinator.group import (
    ClassicGroup,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    OffsetAndMetadata,
    SyncCallback,
    SyncResult,
)
from kbroker.coordinator.host import log_write_failure
from kbroker.coordinator.member_timers import (
    cancel_member_timer,
    cancel_rebalance_timeout,
    schedule_member_timer,
    schedule_rebalance_timeout,
)
from kbroker.coordinator.persistence import group_record
from kbroker.coordinator.reconciliation import MemberFenced, reconcile
from kbroker.coordinator.records import encode_group_key
from kbroker.coordinator_runtime.internal_topics import write_error
from kbroker.coordinator_runtime.serial import Finish

if TYPE_CHECKING:
    from kbroker.coordinator.consumer_coordinator import ConsumerGroupCoordinator, _Change

log = logging.getLogger("kbroker.coordinator.consumer")

E = ErrorCode
T = TypeVar("T")
Fallback = Callable[[], None]


class ClassicJoinError(Exception):
    def __init__(self, code: ErrorCode, member_id: str = "") -> None:
        super().__init__(code.name)
        self.code = code
        self.member_id = member_id


class UpgradeRefused(Exception):
    """Why a classic group with members cannot become a consumer group (Kafka's
    messages; the heartbeat answers GROUP_ID_NOT_FOUND with it)."""


class ClassicMembers:
    """The classic protocol's four APIs for members of a consumer group, and the two
    conversions. Operations run in the consumer coordinator's per-group queue, so they
    interleave with ConsumerGroupHeartbeats in arrival order."""

    def __init__(self, coordinator: ConsumerGroupCoordinator) -> None:
        self.coordinator = coordinator

    # -- helpers --------------------------------------------------------------------------

    def _topic_ids(self, partitions: TopicPartitions) -> list[tuple[uuid.UUID, list[int]]]:
        """Named partitions as (topic id, partitions); topics that no longer exist drop."""
        topics = self.coordinator.metadata().topics
        out = []
        for name, numbers in partitions:
            info = topics.get(name)
            if info is not None:
                out.append((info.topic_id, list(numbers)))
        return out

    def _named(self, assignment: Assignment) -> TopicPartitions:
        out = []
        for topic_id, numbers in assignment.items():
            name = self.coordinator.topic_name(topic_id)
            if name is not None:
                out.append((name, tuple(sorted(numbers))))
        return tuple(sorted(out))

    def _assignment_bytes(
        self, member: ConsumerMember, assignment: Assignment, protocol: str | None = None
    ) -> bytes:
        """Partitions in the consumer protocol's Assignment, at the version the member's
        subscription speaks."""
        version = 0
        if member.classic is not None:
            try:
                version = decode_subscription(member.classic.metadata(protocol)).version
            except ConsumerProtocolError:
                version = 0
        return encode_assignment(self._named(assignment), version)

    # -- the upgrade ----------------------------------------------------------------------

    def upgrade(self, classic: ClassicGroup) -> ConsumerGroup:
        """Turn a classic group with members into a consumer group of the same members,
        epochs and assignments (Kafka's ConsumerGroup.fromClassicGroup): the group epoch
        and every member's epoch are the classic generation, each member's assignment is
        what its SyncGroup gave it. Parked JoinGroups and SyncGroups are answered
        REBALANCE_IN_PROGRESS. The records go out at once, ahead of the joining member's."""
        c = self.coordinator
        gid = classic.group_id
        prefix = f"Cannot upgrade classic group {gid} to consumer group because"
        if not c.config.upgrade_enabled:
            raise UpgradeRefused(f"{prefix} online upgrade is disabled.")
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise UpgradeRefused(f"{prefix} the group does not use the consumer embedded protocol.")
        if len(classic.members) > c.config.max_size:
            raise UpgradeRefused(
                f"{prefix} the group size exceeds the consumer group maximum size."
            )
        generation = classic.generation_id
        members: list[ConsumerMember] = []
        try:
            for m in classic.members.values():
                metadata = m.metadata_for(classic.protocol_name) or (
                    m.protocols[0][1] if m.protocols else b""
                )
                subscription = decode_subscription(metadata)
                assigned, user_data = decode_assignment(m.assignment)
                if user_data:
                    raise UpgradeRefused(
                        f"{prefix} an unsupported custom assignor is in use. Please refer to "
                        "the documentation or switch to a default assignor before "
                        "re-attempting the upgrade."
                    )
                members.append(
                    ConsumerMember(
                        m.member_id,
                        instance_id=m.group_instance_id,
                        rack_id=subscription.rack_id or None,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=frozenset(subscription.topics),
                        rebalance_timeout_ms=m.rebalance_timeout_ms,
                        classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)),
                        member_epoch=generation,
                        previous_member_epoch=generation,
                        state=MemberState.STABLE,
                        assigned=normalize(dict(self._topic_ids(assigned))),
                    )
                )
        except ConsumerProtocolError:
            raise UpgradeRefused(f"{prefix} the embedded consumer protocol is malformed.") from None
        records: list[GroupRecord] = []
        records.extend(MemberMetadataRecord(gid, m.member_id, m) for m in members)
        records.append(GroupEpochRecord(gid, generation))
        records.extend(TargetMemberRecord(gid, m.member_id, m.assigned) for m in members)
        records.append(TargetEpochRecord(gid, generation))
        records.extend(CurrentAssignmentRecord(gid, m.member_id, m) for m in members)
        c.host.take_over_classic_group(classic)
        group = ConsumerGroup(gid, offsets=dict(classic.offsets))
        c.groups[gid] = group
        for record in records:
            c.replay(record)
        c.host.store.write(
            c.host.partition_for(gid),
            [(encode_group_key(gid), None), *encode_records(records)],
            lambda code: log_write_failure(f"group {gid} upgraded to consumer", code),
        )
        for member in members:
            c.schedule_session_timeout(group, member.member_id)
        log.info(
            "group %s: classic group of %d members at generation %d becomes a consumer group",
            gid,
            len(members),
            generation,
        )
        return group

    # -- the downgrade --------------------------------------------------------------------

    def downgrades(
        self, group: ConsumerGroup, leaving: Iterable[str], joiner: ConsumerMember | None = None
    ) -> bool:
        """Whether removing `leaving` (and adding `joiner`, a classic member taking a
        static member's place) leaves a group of classic members only that should turn
        classic (Kafka's validateOnlineDowngradeWith{FencedMembers,ReplacedMember})."""
        gone = set(leaving)
        remaining = [m.classic for mid, m in group.members.items() if mid not in gone]
        if joiner is not None:
            remaining.append(joiner.classic)
        config = self.coordinator.config
        if not remaining or not config.downgrade_enabled:
            return False
        if len(remaining) > config.classic_max_size:
            return False
        common: set[str] | None = None
        for classic in remaining:
            if classic is None:
                return False
            names = {name for name, _ in classic.protocols}
            common = names if common is None else common & names
        return bool(common)  # a classic group must have a protocol all its members speak

    def downgrade(
        self,
        group: ConsumerGroup,
        leaving: Iterable[str],
        joiner: ConsumerMember | None = None,
        rebalance: bool = True,
    ) -> ClassicGroup:
        """Turn the group, without `leaving`, into a classic group (Kafka's
        ClassicGroup.fromConsumerGroup): generation = group epoch, each member's
        assignment its target, then (with `rebalance`) a classic rebalance so that
        members rejoin. `joiner` is a classic member that takes the place, and the
        target, of the static member it replaces (one of `leaving`)."""
        c = self.coordinator
        gid = group.group_id
        gone = set(leaving)
        now = c.host.scheduler.now_ms()
        classic = ClassicGroup(
            gid,
            state=GroupState.STABLE,
            state_timestamp_ms=now,
            generation_id=group.group_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            offsets=dict(group.offsets),
        )
        targets = dict(group.target)
        members = [m for mid, m in group.members.items() if mid not in gone]
        if joiner is not None:
            replaced = group.static_member(joiner.instance_id or "")
            targets[joiner.member_id] = targets.get(replaced.member_id, {}) if replaced else {}
            members.append(joiner)
        for member in members:
            member_id = member.member_id
            if member.classic is None:
                continue
            classic.add_member(
                Member(
                    member_id=member_id,
                    group_instance_id=member.instance_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    rebalance_timeout_ms=member.rebalance_timeout_ms,
                    session_timeout_ms=member.classic.session_timeout_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocols=list(member.classic.protocols),
                )
            )
        classic.protocol_name = classic.select_protocol()
        by_id = {m.member_id: m for m in members}
        for member_id, m in classic.members.items():
            m.assignment = self._assignment_bytes(
                by_id[member_id], targets.get(member_id, {}), classic.protocol_name
            )
        classic.update_subscriptions()
        records = encode_records(group.tombstones())
        records.append(group_record(classic, {m: v.assignment for m, v in classic.members.items()}))
        c.drop(group)
        c.host.store.write(
            c.host.partition_for(gid),
            records,
            lambda code: log_write_failure(f"group {gid} downgraded to classic", code),
        )
        log.info(
            "group %s: consumer group of %d classic members at epoch %d becomes a classic group",
            gid,
            len(classic.members),
            classic.generation_id,
        )
        if rebalance:
            reason = f"Downgrade group {gid} from consumer to classic for member leaving."
            c.host.adopt_downgraded_group(classic, reason)
        else:
            c.host.adopt_downgraded_group(classic, None)
        return classic

    # -- JoinGroup ------------------------------------------------------------------------

    def join(
        self,
        req: JoinRequest,
        callback: JoinCallback,
        fallback: Callable[[dict[tuple[str, int], OffsetAndMetadata] | None], None],
    ) -> None:
        """A classic JoinGroup for an id a consumer group holds (or is about to). With no
        consumer group when its turn comes, or an empty one (which gives the id up),
        `fallback(offsets)` runs the classic protocol instead."""
        c = self.coordinator
        gid = req.group_id

        def op() -> tuple[_Change | None, Finish]:
            status = c.host.status(gid)
            if status is not None:
                failed = JoinResult(status, req.member_id)
                return None, lambda _code: callback(failed)
            group = c.groups.get(gid)
            if group is None or not group.members:
                offsets = None if group is None else c.release(group)
                return None, lambda _code: fallback(offsets)
            try:
                change, result, after = self._compute_join(group, req)
            except ClassicJoinError as exc:
                refused = JoinResult(exc.code, exc.member_id)
                return None, lambda _code: callback(refused)
            except Exception:
                log.exception("group %s: classic join of %s failed", gid, req.member_id)
                broken = JoinResult(E.unknown_server_error, "")
                return None, lambda _code: callback(broken)

            def finish(code: ErrorCode) -> None:
                if code != E.none:
                    callback(JoinResult(write_error(code), ""))
                    return
                after()
                callback(result)

            return change, finish

        c.submit(gid, op)

    def _compute_join(
        self, group: ConsumerGroup, req: JoinRequest
    ) -> tuple[_Change | None, JoinResult, Callable[[], None]]:
        c = self.coordinator
        gid = group.group_id
        member_id = req.member_id or str(uuid.uuid4())
        if len(group.members) >= c.config.max_size and member_id not in group.members:
            raise ClassicJoinError(E.group_max_size_reached, req.member_id)
        names = [name for name, _ in req.protocols]
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not group.classic_protocols_fit(names):
            raise ClassicJoinError(E.inconsistent_group_protocol, req.member_id)
        if req.require_known_member_id and req.group_instance_id is None and not req.member_id:
            # KIP-394, as for any JoinGroup: the client joins again with this id.
            raise ClassicJoinError(E.member_id_required, member_id)
        change = c.new_change(gid, group)
        view = change.view
        if req.group_instance_id is None:
            member = view.members.get(member_id) or ConsumerMember(member_id)
        elif not req.member_id:
            existing = view.static_member(req.group_instance_id)
            if existing is None:
                member = ConsumerMember(member_id)
            else:
                if existing.classic is None:
                    downgraded = self._downgrade_replacing(group, existing, req, member_id)
                    if downgraded is not None:
                        return None, downgraded, lambda: None
                member = replace(
                    existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
                )
                c.replace_member(change, existing, member)
                log.info(
                    "group %s: static member %s rejoins with JoinGroup as %s, replacing %s",
                    gid,
                    req.group_instance_id,
                    member_id,
                    existing.member_id,
                )
        else:
            existing = view.static_member(req.group_instance_id)
            if existing is None:
                raise ClassicJoinError(E.unknown_member_id, req.member_id)
            if existing.member_id != member_id:
                raise ClassicJoinError(E.fenced_instance_id, req.member_id)
            member = existing
        try:
            subscription = decode_subscription(req.protocols[0][1])
        except ConsumerProtocolError as exc:
            log.warning(
                "group %s: member %s sent a malformed subscription: %s", gid, member_id, exc
            )
            raise ClassicJoinError(E.unknown_server_error, "") from None
        updated = replace(
            member,
            instance_id=req.group_instance_id,
            rack_id=subscription.rack_id or None,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_topic_names=frozenset(subscription.topics),
            subscribed_topic_regex=None,
            client_id=req.client_id,
            client_host=req.client_host,
            classic=ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols)),
        )
        if member_id not in view.members:
            log.info("group %s: classic member %s joins", gid, member_id)
        bump = False
        if member_id not in change.view.members or updated.subscription() != member.subscription():
            change.emit(MemberMetadataRecord(gid, member_id, updated))
            bump = updated.subscribed_topic_names != member.subscribed_topic_names
        c.bump_if_needed(change, member_id, bump)
        if change.view.group_epoch > change.view.assignment_epoch:
            c.compute_target(change)
        view = change.view
        current = view.members[member_id]
        owned = self._topic_ids(subscription.owned_partitions)
        try:
            reconciled = reconcile(
                current,
                view.assignment_epoch,
                view.target.get(member_id, {}),
                view.partition_epoch,
                owned,
                c.subscribed_ids(current),
            )
        except MemberFenced:
            reconciled = current
        if reconciled != current:
            change.emit(CurrentAssignmentRecord(gid, member_id, reconciled))
        result = JoinResult(
            E.none,
            member_id,
            generation_id=reconciled.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=names[0] if names else None,
        )
        refreshed = group.metadata_changes

        def after() -> None:
            live = c.groups.get(gid)
            if live is None or member_id not in live.members:
                return
            if live.metadata_seen < refreshed:
                live.metadata_seen = refreshed
            cancel_rebalance_timeout(live, member_id)  # the join timeout
            c.schedule_session_timeout(live, member_id)
            self._schedule_sync_timeout(live, member_id, req.rebalance_timeout_ms)

        return change, result, after

    def _downgrade_replacing(
        self, group: ConsumerGroup, existing: ConsumerMember, req: JoinRequest, member_id: str
    ) -> JoinResult | None:
        """A classic JoinGroup taking the instance id of a consumer-protocol static member
        whose group is otherwise classic: the group turns classic with the new member in
        the old one's place (Kafka's downgrade on static member replacement); it
        rebalances only if the new member subscribes to other topics. None if the group
        does not turn classic."""
        try:
            subscription = decode_subscription(req.protocols[0][1])
        except (ConsumerProtocolError, IndexError):
            return None
        joiner = replace(
            existing,
            member_id=member_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_topic_names=frozenset(subscription.topics),
            subscribed_topic_regex=None,
            classic=ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols)),
        )
        if not self.downgrades(group, [existing.member_id], joiner):
            return None
        changed = joiner.subscribed_topic_names != existing.subscribed_topic_names
        classic = self.downgrade(group, [existing.member_id], joiner, rebalance=changed)
        log.info(
            "group %s: static member %s rejoins with JoinGroup as %s; the group is classic now",
            group.group_id,
            req.group_instance_id,
            member_id,
        )
        return JoinResult(
            E.none,
            member_id,
            generation_id=classic.generation_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=req.protocols[0][0],
        )

    # -- SyncGroup and Heartbeat ----------------------------------------------------------

    def _validated(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int
    ) -> ConsumerMember:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise ClassicJoinError(E.unknown_member_id)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise ClassicJoinError(E.unknown_member_id)
            if member.member_id != member_id:
                raise ClassicJoinError(E.fenced_instance_id)
        if member.classic is None:
            raise ClassicJoinError(E.unknown_member_id)
        if generation != member.member_epoch:
            raise ClassicJoinError(E.illegal_generation)
        return member

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        protocol: tuple[str | None, str | None],
        callback: SyncCallback,
        fallback: Fallback,
    ) -> None:
        self._answer(
            group_id,
            lambda group: self._compute_sync(group, member_id, generation, instance_id, protocol),
            callback,
            fallback,
        )

    def _answer(
        self,
        group_id: str,
        compute: Callable[[ConsumerGroup], T],
        callback: Callable[[T], None],
        fallback: Fallback,
    ) -> None:
        """Queue a request that writes nothing: answered from the group as its turn
        finds it, or by the classic protocol if the id is no longer a consumer group's."""
        c = self.coordinator

        def op() -> tuple[_Change | None, Finish]:
            group = c.groups.get(group_id)
            if group is None:
                return None, lambda _code: fallback()
            result = compute(group)
            return None, lambda _code: callback(result)

        c.submit(group_id, op)

    def _compute_sync(
        self,
        group: ConsumerGroup,
        member_id: str,
        generation: int,
        instance_id: str | None,
        protocol: tuple[str | None, str | None],
    ) -> SyncResult:
        if not group.members:
            return SyncResult(E.unknown_member_id)
        try:
            member = self._validated(group, member_id, instance_id, generation)
        except ClassicJoinError as exc:
            return SyncResult(exc.code)
        assert member.classic is not None
        protocol_type, protocol_name = protocol
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != member.classic.first_protocol
        ):
            return SyncResult(E.inconsistent_group_protocol)
        if (
            group.assignment_epoch > member.member_epoch
            and member.state != MemberState.UNREVOKED_PARTITIONS
        ):
            self._schedule_join_timeout(group, member)
            return SyncResult(E.rebalance_in_progress)
        cancel_member_timer(group.classic_sync_timers, member_id)
        self.coordinator.schedule_session_timeout(group, member_id)
        return SyncResult(
            E.none,
            self._assignment_bytes(member, member.assigned),
            protocol_type,
            protocol_name,
        )

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        callback: Callable[[ErrorCode], None],
        fallback: Fallback,
    ) -> None:
        self._answer(
            group_id,
            lambda group: self._compute_heartbeat(group, member_id, generation, instance_id),
            callback,
            fallback,
        )

    def _compute_heartbeat(
        self, group: ConsumerGroup, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode:
        try:
            member = self._validated(group, member_id, instance_id, generation)
        except ClassicJoinError as exc:
            return exc.code
        self.coordinator.schedule_session_timeout(group, member_id)
        rejoin = (
            member.member_epoch < group.assignment_epoch
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (
                member.state == MemberState.UNRELEASED_PARTITIONS
                and not self._waits_on_unreleased(group, member)
            )
        )
        if rejoin:
            self._schedule_join_timeout(group, member)
            return E.rebalance_in_progress
        return E.none

    @staticmethod
    def _waits_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target it does not hold yet still has an
        owner (else a rejoin would give it the partition)."""
        for topic_id, partitions in group.target.get(member.member_id, {}).items():
            held = member.assigned.get(topic_id, frozenset())
            for p in partitions:
                if p not in held and group.partition_epoch(topic_id, p) != -1:
                    return True
        return False

    # -- LeaveGroup -----------------------------------------------------------------------

    def leave(
        self,
        group_id: str,
        leaving: list[LeavingMember],
        callback: Callable[[LeaveResult], None],
        fallback: Fallback,
    ) -> None:
        c = self.coordinator

        def op() -> tuple[_Change | None, Finish]:
            group = c.groups.get(group_id)
            if group is None:
                return None, lambda _code: fallback()
            results: list[tuple[str, str | None, ErrorCode]] = []
            gone: list[ConsumerMember] = []
            for identity in leaving:
                if identity.group_instance_id is None:
                    member = group.members.get(identity.member_id)
                    code = E.none if member is not None else E.unknown_member_id
                else:
                    member = group.static_member(identity.group_instance_id)
                    if member is None:
                        code = E.unknown_member_id
                    elif identity.member_id and member.member_id != identity.member_id:
                        code = E.fenced_instance_id
                    else:
                        code = E.none
                if code == E.none and member is not None and member not in gone:
                    gone.append(member)
                results.append((identity.member_id, identity.group_instance_id, code))
            answer = LeaveResult(E.none, tuple(results))
            if not gone:
                return None, lambda _code: callback(answer)
            change = c.new_change(group_id, group)
            c.fence(change, gone)
            for member in gone:
                log.info("group %s: member %s left with LeaveGroup", group_id, member.member_id)

            def finish(code: ErrorCode) -> None:
                callback(answer if code == E.none else LeaveResult(write_error(code)))

            return change, finish

        c.submit(group_id, op)

    # -- timers ---------------------------------------------------------------------------

    def _schedule_join_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A classic member told to rejoin must within its rebalance timeout (set once;
        the next JoinGroup clears it). It shares the slot of the consumer protocol's
        rebalance timer, which classic members never use."""
        if member.member_id in group.rebalance_timers:
            return
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else 300_000
        c = self.coordinator
        schedule_rebalance_timeout(
            c.host.scheduler,
            group,
            member.member_id,
            timeout,
            lambda: c.fence_later(
                group.group_id,
                member.member_id,
                "the classic member failed to join within the rebalance timeout",
            ),
        )

    def _schedule_sync_timeout(self, group: ConsumerGroup, member_id: str, timeout: int) -> None:
        c = self.coordinator
        schedule_member_timer(
            c.host.scheduler,
            group.classic_sync_timers,
            member_id,
            max(timeout, 1),
            lambda: c.fence_later(
                group.group_id, member_id, "the member failed to sync within timeout"
            ),
        )
