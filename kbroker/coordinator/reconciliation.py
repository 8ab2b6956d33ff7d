"""Moving one member from its current assignment towards its target (KIP-848).

The rule that keeps a partition from having two owners: a member gives up partitions
first (it stays in its epoch, state unrevoked-partitions, until a heartbeat no longer
lists them), and takes partitions only once their previous owner has released them
(state unreleased-partitions while it waits). Each call looks at the member, its
target, who owns what, and what the member reported owning, and returns the next
member value (or the same one when it cannot move yet). Pure: no I/O, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from kbroker.coordinator.consumer_group import (
    NO_OWNER,
    Assignment,
    ConsumerMember,
    MemberState,
)

OwnedPartitions = Sequence[tuple[uuid.UUID, Sequence[int]]] | None
PartitionEpoch = Callable[[uuid.UUID, int], int]


class MemberFenced(Exception):
    """The member is in a state this code cannot reconcile from: it must rejoin."""


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: OwnedPartitions,
    subscribed: Collection[uuid.UUID] | None = None,
) -> ConsumerMember:
    """The member's next state on its way to `target` at `target_epoch`.

    `owned` is what the member's heartbeat reported (None when it did not say);
    `subscribed` the topic ids it subscribes to now (None: trust the target).
    """
    state = member.state
    if state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(
            member, member.member_epoch, target_epoch, target, partition_epoch, owned, subscribed
        )
    if state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # still holds what it must give up
        return _next(
            member, member.member_epoch, target_epoch, target, partition_epoch, owned, subscribed
        )
    if state == MemberState.UNRELEASED_PARTITIONS:
        return _next(
            member, member.member_epoch, target_epoch, target, partition_epoch, owned, subscribed
        )
    # A state written by a newer version: start the member over, without partitions.
    if owned is None or any(partitions for _, partitions in owned):
        raise MemberFenced("the member is in an unknown state; it must rejoin without partitions")
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned, subscribed)


def _owns_any(owned: OwnedPartitions, assignment: Assignment) -> bool:
    """Whether the reported partitions include any of `assignment`; not knowing (None)
    counts as yes, as the member may still be using them."""
    if owned is None:
        return True
    for topic_id, partitions in owned:
        wanted = assignment.get(topic_id)
        if wanted and any(p in wanted for p in partitions):
            return True
    return False


def _next(
    member: ConsumerMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: OwnedPartitions,
    subscribed: Collection[uuid.UUID] | None,
) -> ConsumerMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    to_assign: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        if subscribed is not None and topic_id not in subscribed:
            wanted = frozenset()
        current = member.assigned.get(topic_id, frozenset())
        keep = current & wanted
        give_up = current - keep
        revoking_now = member.pending_revocation.get(topic_id, frozenset())
        take: set[int] = set()
        for p in wanted - keep:
            # Free, or still held only by this member on its way out: it can have it.
            if partition_epoch(topic_id, p) == NO_OWNER or p in revoking_now:
                take.add(p)
            else:
                unreleased = True
        if keep:
            assigned[topic_id] = keep
        if give_up:
            revoking[topic_id] = give_up
        if take:
            to_assign[topic_id] = frozenset(take)
    if revoking and _owns_any(owned, revoking):
        return _transition(
            member, MemberState.UNREVOKED_PARTITIONS, member_epoch, assigned, revoking
        )
    for topic_id, partitions in to_assign.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _transition(member, state, target_epoch, assigned, {})


def _transition(
    member: ConsumerMember,
    state: MemberState,
    epoch: int,
    assigned: Assignment,
    revoking: Assignment,
) -> ConsumerMember:
    # As Kafka: the epoch the member had becomes the previous one, even when unchanged.
    # A partition it held keeps the epoch it was assigned at; a new one gets `epoch`.
    epochs: dict[tuple[uuid.UUID, int], int] = {}
    for held in (assigned, revoking):
        for topic_id, partitions in held.items():
            for p in partitions:
                before = member.assignment_epoch(topic_id, p)
                if before is not None and before != epoch:
                    epochs[(topic_id, p)] = before
    return replace(
        member,
        state=state,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        assigned=assigned,
        pending_revocation=revoking,
        assignment_epochs=epochs,
    )
