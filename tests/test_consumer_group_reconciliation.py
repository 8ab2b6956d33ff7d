"""One member's steps towards its target: revoke first, take only released partitions."""

from __future__ import annotations

import uuid

import pytest

from kbroker.coordinator.consumer_group import NO_OWNER, ConsumerMember, MemberState
from kbroker.coordinator.reconciliation import MemberFenced, reconcile

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)


def member(epoch: int, assigned: set[int], state: MemberState = MemberState.STABLE, **kw):
    return ConsumerMember(
        "m",
        member_epoch=epoch,
        state=state,
        assigned={T: frozenset(assigned)} if assigned else {},
        **kw,
    )


def free(_topic: uuid.UUID, _p: int) -> int:
    return NO_OWNER


def owned_by_other(*partitions: int):
    def epoch(topic: uuid.UUID, p: int) -> int:
        return 3 if p in partitions else NO_OWNER

    return epoch


def test_stable_member_at_target_epoch_stays_as_it_is():
    m = member(5, {0, 1})
    assert reconcile(m, 5, {T: frozenset({0, 1})}, free, ()) is m


def test_free_partitions_are_assigned_at_once_with_the_target_epoch():
    m = member(1, set())
    nxt = reconcile(m, 2, {T: frozenset({0, 1})}, free, ())
    assert nxt.state == MemberState.STABLE
    assert nxt.member_epoch == 2
    assert nxt.previous_member_epoch == 1
    assert nxt.assigned == {T: frozenset({0, 1})}


def test_partitions_still_owned_elsewhere_wait_as_unreleased():
    m = member(1, {0})
    nxt = reconcile(m, 2, {T: frozenset({0, 1})}, owned_by_other(1), ((T, (0,)),))
    assert nxt.state == MemberState.UNRELEASED_PARTITIONS
    assert nxt.member_epoch == 2
    assert nxt.assigned == {T: frozenset({0})}


def test_unreleased_member_takes_the_partition_once_released():
    m = member(2, {0}, MemberState.UNRELEASED_PARTITIONS)
    nxt = reconcile(m, 2, {T: frozenset({0, 1})}, free, ((T, (0,)),))
    assert nxt.state == MemberState.STABLE
    assert nxt.assigned == {T: frozenset({0, 1})}


def test_partitions_to_give_up_keep_the_member_in_its_epoch_until_revoked():
    m = member(1, {0, 1, 2})
    nxt = reconcile(m, 2, {T: frozenset({0})}, free, ((T, (0, 1, 2)),))
    assert nxt.state == MemberState.UNREVOKED_PARTITIONS
    assert nxt.member_epoch == 1
    assert nxt.assigned == {T: frozenset({0})}
    assert nxt.pending_revocation == {T: frozenset({1, 2})}


def test_revocation_is_not_assumed_when_the_member_does_not_report_what_it_owns():
    m = member(1, {0}, MemberState.UNREVOKED_PARTITIONS, pending_revocation={T: frozenset({1})})
    assert reconcile(m, 2, {T: frozenset({0})}, free, None) is m


def test_member_still_reporting_a_revoked_partition_does_not_move():
    m = member(1, {0}, MemberState.UNREVOKED_PARTITIONS, pending_revocation={T: frozenset({1})})
    assert reconcile(m, 2, {T: frozenset({0})}, free, ((T, (0, 1)),)) is m


def test_member_that_revoked_moves_to_the_target_epoch():
    m = member(1, {0}, MemberState.UNREVOKED_PARTITIONS, pending_revocation={T: frozenset({1})})
    nxt = reconcile(m, 2, {T: frozenset({0})}, free, ((T, (0,)),))
    assert nxt.state == MemberState.STABLE
    assert nxt.member_epoch == 2
    assert nxt.pending_revocation == {}


def test_member_that_already_dropped_partitions_skips_the_revocation_step():
    m = member(1, {0, 1})
    nxt = reconcile(m, 2, {T: frozenset({0})}, free, ((T, (0,)),))
    assert nxt.state == MemberState.STABLE
    assert nxt.member_epoch == 2
    assert nxt.assigned == {T: frozenset({0})}


def test_partition_revoked_by_this_member_counts_as_released_for_itself():
    m = member(1, {0}, MemberState.UNREVOKED_PARTITIONS, pending_revocation={T: frozenset({1})})
    # The target gives partition 1 back: the member itself still holds it at its epoch.
    nxt = reconcile(m, 2, {T: frozenset({0, 1})}, owned_by_other(1), ((T, (0,)),))
    assert nxt.assigned == {T: frozenset({0, 1})}
    assert nxt.state == MemberState.STABLE


def test_unsubscribed_topics_are_revoked_even_if_the_target_still_has_them():
    m = ConsumerMember("m", member_epoch=1, assigned={T: frozenset({0}), U: frozenset({0})})
    nxt = reconcile(m, 2, {T: frozenset({0}), U: frozenset({0})}, free, ((T, (0,)), (U, (0,))), {T})
    assert nxt.pending_revocation == {U: frozenset({0})}


def test_unknown_state_with_partitions_fences_the_member():
    m = member(1, {0}, MemberState.UNKNOWN)
    with pytest.raises(MemberFenced):
        reconcile(m, 2, {T: frozenset({0})}, free, ((T, (0,)),))
