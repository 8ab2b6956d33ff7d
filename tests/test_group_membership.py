"""The classic group state machine: JoinGroup, SyncGroup, Heartbeat, LeaveGroup."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as E
from test_group_harness import Harness, subscription

from kbroker.coordinator import GroupState, LeavingMember


def state(h: Harness, group: str = "g") -> GroupState:
    return h.c.groups[group].state


# -- joining ---------------------------------------------------------------------------------


def test_join_without_member_id_asks_for_one_from_v4():
    h = Harness()
    box = h.join()
    assert box.value.error == E.member_id_required
    assert box.value.member_id.startswith("client-")
    assert not h.c.groups["g"].members


def test_join_before_v4_adds_the_member_directly():
    h = Harness()
    box = h.join(require_known_member_id=False)
    h.clock.advance(0)
    assert box.value.error == E.none
    assert box.value.generation_id == 1


def test_single_member_becomes_leader_with_its_own_metadata():
    h = Harness()
    box = h.join_new(protocols=[("range", b"meta")])
    assert not box.done  # parked until the initial rebalance delay passes
    h.clock.advance(0)
    result = box.value
    assert result.error == E.none
    assert result.leader_id == result.member_id
    assert result.generation_id == 1
    assert result.protocol_name == "range"
    assert result.members == ((result.member_id, None, b"meta"),)
    assert state(h) == GroupState.COMPLETING_REBALANCE


def test_leader_gets_every_members_metadata_and_followers_none():
    h = Harness()
    a = h.join_new(protocols=[("range", b"a")])
    b = h.join_new(protocols=[("range", b"b")])
    h.clock.advance(0)
    leader, follower = a.value, b.value
    assert leader.leader_id == leader.member_id == follower.leader_id
    assert sorted(m[2] for m in leader.members) == [b"a", b"b"]
    assert follower.members == ()


def test_initial_rebalance_delay_waits_for_more_members():
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join_new()
    h.clock.advance(2000)
    b = h.join_new()  # arrives during the delay: the delay starts again
    h.clock.advance(1500)
    assert not a.done and not b.done
    h.clock.advance(3000)
    assert a.value.error == b.value.error == E.none
    assert a.value.generation_id == 1


def test_initial_rebalance_delay_is_capped_by_the_rebalance_timeout():
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join_new(rebalance_ms=5000)
    for _ in range(5):
        h.clock.advance(2500)
        h.join_new(rebalance_ms=5000)
        if a.done:
            break
    assert a.done
    assert h.clock.now_ms() - 1_000_000 <= 8000


def test_session_timeout_outside_the_brokers_bounds_is_refused():
    h = Harness(min_session_timeout_ms=6000, max_session_timeout_ms=60_000)
    assert h.join(session_ms=5999).value.error == E.invalid_session_timeout
    assert h.join(session_ms=60_001).value.error == E.invalid_session_timeout


def test_empty_group_id_is_invalid():
    h = Harness()
    assert h.join(group="").value.error == E.invalid_group_id


def test_group_id_too_long_to_store_is_invalid():
    h = Harness()
    assert h.join(group="x" * 40_000).value.error == E.invalid_group_id
    assert h.c.classic.heartbeat("x" * 40_000, "m", 1) == E.invalid_group_id


def test_group_of_a_partition_not_led_here_gets_not_coordinator():
    h = Harness()
    partition = h.c.partition_for("g")
    h.c.unload_partition(partition)
    assert h.join().value.error == E.not_coordinator


def test_group_of_a_loading_partition_gets_load_in_progress():
    h = Harness()
    partition = h.c.partition_for("g")
    h.c.unload_partition(partition)
    h.c.begin_loading(partition)
    assert h.join().value.error == E.coordinator_load_in_progress


def test_join_with_unknown_member_id_to_missing_group_is_refused():
    h = Harness()
    assert h.join(member_id="ghost").value.error == E.unknown_member_id


def test_join_with_other_protocol_type_is_inconsistent():
    h = Harness()
    h.stable_group(1)
    box = h.join(protocol_type="connect")
    assert box.value.error == E.inconsistent_group_protocol


def test_join_with_no_protocol_in_common_is_inconsistent():
    h = Harness()
    h.stable_group(1, protocols=[("range", b"")])
    box = h.join(protocols=[("roundrobin", b"")])
    assert box.value.error == E.inconsistent_group_protocol


def test_join_with_no_protocols_to_an_empty_group_is_inconsistent():
    h = Harness()
    assert h.join(protocols=[]).value.error == E.inconsistent_group_protocol


def test_protocol_with_most_first_choices_wins():
    h = Harness()
    a = h.join_new(protocols=[("range", b""), ("roundrobin", b"")])
    b = h.join_new(protocols=[("roundrobin", b""), ("range", b"")])
    c = h.join_new(protocols=[("roundrobin", b""), ("range", b"")])
    h.clock.advance(0)
    assert {x.value.protocol_name for x in (a, b, c)} == {"roundrobin"}


def test_only_protocols_every_member_supports_are_chosen():
    h = Harness()
    a = h.join_new(protocols=[("cooperative-sticky", b""), ("range", b"")])
    b = h.join_new(protocols=[("range", b"")])
    h.clock.advance(0)
    assert a.value.protocol_name == b.value.protocol_name == "range"


def test_group_full_refuses_new_members():
    h = Harness(max_group_size=2)
    h.stable_group(2)
    assert h.join().value.error == E.group_max_size_reached


# -- syncing ---------------------------------------------------------------------------------


def test_sync_hands_each_member_the_leaders_assignment_and_stabilises():
    h = Harness()
    a = h.join_new()
    b = h.join_new()
    h.clock.advance(0)
    leader, follower = a.value, b.value
    gen = leader.generation_id
    follower_sync = h.sync("g", gen, follower.member_id)
    assert not follower_sync.done  # waits for the leader
    leader_sync = h.sync(
        "g", gen, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"}
    )
    assert leader_sync.value.assignment == b"L"
    assert follower_sync.value.assignment == b"F"
    assert follower_sync.value.protocol_name == "range"
    assert state(h) == GroupState.STABLE


def test_member_missing_from_the_assignment_gets_an_empty_one():
    h = Harness()
    a = h.join_new()
    b = h.join_new()
    h.clock.advance(0)
    follower_sync = h.sync("g", b.value.generation_id, b.value.member_id)
    h.sync("g", a.value.generation_id, a.value.member_id, {a.value.member_id: b"L"})
    assert follower_sync.value.error == E.none
    assert follower_sync.value.assignment == b""


def test_sync_is_answered_only_after_the_assignment_is_stored():
    h = Harness()
    (a,) = [h.join_new()]
    h.clock.advance(0)
    h.store.hold = True
    box = h.sync("g", a.value.generation_id, a.value.member_id, {a.value.member_id: b"x"})
    assert not box.done
    assert state(h) == GroupState.COMPLETING_REBALANCE
    h.store.release()
    assert box.value.assignment == b"x"
    assert state(h) == GroupState.STABLE


def test_failed_assignment_write_sends_members_back_to_rejoin():
    h = Harness()
    a = h.join_new()
    h.clock.advance(0)
    h.store.fail_with = E.not_leader_or_follower
    box = h.sync("g", a.value.generation_id, a.value.member_id, {a.value.member_id: b"x"})
    assert box.value.error == E.not_coordinator
    assert state(h) == GroupState.PREPARING_REBALANCE


def test_sync_with_wrong_generation_is_illegal():
    h = Harness()
    (r,) = h.stable_group(1)
    assert h.sync("g", r.generation_id + 1, r.member_id).value.error == E.illegal_generation


def test_sync_from_unknown_member_is_refused():
    h = Harness()
    (r,) = h.stable_group(1)
    assert h.sync("g", r.generation_id, "nobody").value.error == E.unknown_member_id


def test_sync_to_missing_group_is_unknown_member():
    h = Harness()
    assert h.sync("nope", 1, "m").value.error == E.unknown_member_id


def test_sync_naming_another_protocol_is_inconsistent():
    h = Harness()
    (r,) = h.stable_group(1)
    box = h.sync("g", r.generation_id, r.member_id, protocol_name="roundrobin")
    assert box.value.error == E.inconsistent_group_protocol


def test_sync_while_preparing_rebalance_says_rebalance_in_progress():
    h = Harness()
    a, b = h.stable_group(2)
    h.join(member_id=a.member_id, protocols=[("range", subscription("t", "u"))])
    assert state(h) == GroupState.PREPARING_REBALANCE
    box = h.sync("g", b.generation_id, b.member_id)
    assert box.value.error == E.rebalance_in_progress


def test_sync_in_stable_group_returns_the_current_assignment():
    h = Harness()
    a, b = h.stable_group(2)
    box = h.sync("g", b.generation_id, b.member_id)
    assert box.value.assignment == b.member_id.encode()


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    h = Harness()
    a = h.join_new(rebalance_ms=5000)
    b = h.join_new(rebalance_ms=5000)
    h.clock.advance(0)
    leader = a.value
    h.sync("g", leader.generation_id, leader.member_id, {leader.member_id: b"x"})
    assert state(h) == GroupState.STABLE
    h.clock.advance(5001)
    group = h.c.groups["g"]
    assert b.value.member_id not in group.members
    assert group.state == GroupState.PREPARING_REBALANCE


# -- heartbeats ------------------------------------------------------------------------------


def test_heartbeat_of_a_stable_member_is_fine():
    h = Harness()
    (r,) = h.stable_group(1)
    assert h.c.classic.heartbeat("g", r.member_id, r.generation_id) == E.none


def test_heartbeat_with_old_generation_is_illegal():
    h = Harness()
    (r,) = h.stable_group(1)
    assert h.c.classic.heartbeat("g", r.member_id, r.generation_id - 1) == E.illegal_generation


def test_heartbeat_of_unknown_member_is_refused():
    h = Harness()
    (r,) = h.stable_group(1)
    assert h.c.classic.heartbeat("g", "stranger", r.generation_id) == E.unknown_member_id
    assert h.c.classic.heartbeat("other", "stranger", 1) == E.unknown_member_id


def test_heartbeat_during_rebalance_asks_to_rejoin():
    h = Harness()
    a, b = h.stable_group(2)
    h.join(member_id=a.member_id)  # the leader rejoins: a rebalance starts
    assert h.c.classic.heartbeat("g", b.member_id, b.generation_id) == E.rebalance_in_progress


def test_heartbeat_between_join_and_sync_is_fine():
    h = Harness()
    a = h.join_new()
    h.clock.advance(0)
    assert h.c.classic.heartbeat("g", a.value.member_id, a.value.generation_id) == E.none


def test_heartbeats_keep_a_member_alive():
    h = Harness()
    (r,) = h.stable_group(1, session_ms=1000)
    for _ in range(10):
        h.clock.advance(600)
        assert h.c.classic.heartbeat("g", r.member_id, r.generation_id) == E.none
    assert r.member_id in h.c.groups["g"].members


def test_silent_member_is_removed_and_the_rest_rebalance():
    h = Harness()
    a, b = h.stable_group(2, session_ms=1000)
    h.clock.advance(600)
    h.c.classic.heartbeat("g", a.member_id, a.generation_id)
    h.clock.advance(600)  # b has been silent for 1200 ms
    group = h.c.groups["g"]
    assert b.member_id not in group.members
    assert group.state == GroupState.PREPARING_REBALANCE
    assert h.c.classic.heartbeat("g", a.member_id, a.generation_id) == E.rebalance_in_progress
    rejoin = h.join(member_id=a.member_id)
    assert rejoin.value.generation_id == a.generation_id + 1
    assert rejoin.value.leader_id == a.member_id


def test_last_member_expiring_leaves_the_group_empty():
    h = Harness()
    h.stable_group(1, session_ms=1000)
    h.clock.advance(1001)
    group = h.c.groups["g"]
    assert group.state == GroupState.EMPTY
    assert not group.members
    assert group.generation_id == 2


def test_member_not_rejoining_within_rebalance_timeout_is_dropped():
    h = Harness()
    a, b = h.stable_group(2, rebalance_ms=5000, session_ms=60_000)
    rejoin = h.join(member_id=a.member_id, rebalance_ms=5000, session_ms=60_000)
    h.clock.advance(4000)
    h.c.classic.heartbeat("g", b.member_id, b.generation_id)  # alive but not rejoining
    assert not rejoin.done
    h.clock.advance(1001)
    assert rejoin.value.error == E.none
    assert [m[0] for m in rejoin.value.members] == [a.member_id]


def test_pending_member_that_never_joins_is_forgotten():
    h = Harness()
    first = h.join(session_ms=1000)
    pending = first.value.member_id
    assert pending in h.c.groups["g"].pending_members
    h.clock.advance(1001)
    assert pending not in h.c.groups["g"].pending_members


def test_rejoin_with_all_members_completes_without_waiting():
    h = Harness()
    a, b = h.stable_group(2)
    ja = h.join(member_id=a.member_id)
    jb = h.join(member_id=b.member_id)
    assert ja.value.generation_id == jb.value.generation_id == a.generation_id + 1


def test_follower_rejoining_unchanged_in_stable_group_does_not_rebalance():
    h = Harness()
    a, b = h.stable_group(2)
    box = h.join(member_id=b.member_id)
    assert box.value.error == E.none
    assert box.value.generation_id == b.generation_id
    assert state(h) == GroupState.STABLE


def test_member_changing_subscription_triggers_a_rebalance():
    h = Harness()
    a, b = h.stable_group(2)
    h.join(member_id=b.member_id, protocols=[("range", subscription("t", "new"))])
    assert state(h) == GroupState.PREPARING_REBALANCE


def test_rejoin_during_completing_rebalance_with_same_metadata_repeats_the_answer():
    h = Harness()
    a = h.join_new()
    h.clock.advance(0)
    again = h.join(member_id=a.value.member_id)
    assert again.value.generation_id == a.value.generation_id
    assert again.value.members == a.value.members
    assert state(h) == GroupState.COMPLETING_REBALANCE


def test_parked_syncs_are_told_to_rejoin_when_a_rebalance_starts():
    h = Harness()
    h.join_new()
    b = h.join_new()
    h.clock.advance(0)
    follower_sync = h.sync("g", b.value.generation_id, b.value.member_id)
    h.join_new()  # a newcomer: the group rebalances again
    assert follower_sync.value.error == E.rebalance_in_progress


# -- leaving ---------------------------------------------------------------------------------


def test_leave_removes_the_member_and_rebalances_the_rest():
    h = Harness()
    a, b = h.stable_group(2)
    result = h.c.classic.leave_group("g", [LeavingMember(b.member_id)])
    assert result.error == E.none
    assert result.members == ((b.member_id, None, E.none),)
    assert state(h) == GroupState.PREPARING_REBALANCE
    rejoin = h.join(member_id=a.member_id)
    assert rejoin.value.generation_id == a.generation_id + 1


def test_last_member_leaving_empties_the_group():
    h = Harness()
    (a,) = h.stable_group(1)
    h.c.classic.leave_group("g", [LeavingMember(a.member_id)])
    assert state(h) == GroupState.EMPTY


def test_batched_leave_reports_each_member():
    h = Harness()
    a, b = h.stable_group(2)
    result = h.c.classic.leave_group("g", [LeavingMember(a.member_id), LeavingMember("ghost")])
    assert result.members == ((a.member_id, None, E.none), ("ghost", None, E.unknown_member_id))


def test_leave_of_missing_group_is_unknown_member():
    """As Kafka 4: the request itself succeeds, and each member named is unknown."""
    h = Harness()
    result = h.c.classic.leave_group("nope", [LeavingMember("m"), LeavingMember("", "i1")])
    assert result.error == E.none
    assert result.members == (("m", None, E.unknown_member_id), ("", "i1", E.unknown_member_id))


def test_leave_of_a_pending_member_is_accepted():
    h = Harness()
    pending = h.join().value.member_id
    result = h.c.classic.leave_group("g", [LeavingMember(pending)])
    assert result.members == ((pending, None, E.none),)
    assert pending not in h.c.groups["g"].pending_members


def test_member_leaving_while_its_join_is_parked_gets_an_answer():
    h = Harness(initial_rebalance_delay_ms=3000)
    box = h.join_new()
    h.c.classic.leave_group("g", [LeavingMember(h.c.groups["g"].leader_id or "")])
    assert box.value.error == E.unknown_member_id


# -- static membership (KIP-345) -------------------------------------------------------------


def test_static_member_rejoining_in_stable_group_keeps_the_generation():
    h = Harness()
    a, b = h.stable_group(2, instance_id=None)
    s = h.join(instance_id="static-1")
    h.join(member_id=a.member_id)
    h.join(member_id=b.member_id)
    gen = s.value.generation_id
    leader = a.member_id
    h.sync(
        "g",
        gen,
        leader,
        {a.member_id: b"A", b.member_id: b"B", s.value.member_id: b"S"},
    )
    h.sync("g", gen, b.member_id)
    h.sync("g", gen, s.value.member_id, instance_id="static-1")
    assert state(h) == GroupState.STABLE
    again = h.join(instance_id="static-1")
    assert again.value.error == E.none
    assert again.value.generation_id == gen
    assert again.value.member_id != s.value.member_id
    assert state(h) == GroupState.STABLE
    sync = h.sync("g", gen, again.value.member_id, instance_id="static-1")
    assert sync.value.assignment == b"S"


def _lone_static_leader(h: Harness) -> Any:
    """The join answer of static member i1, alone in group g, which led its sync."""
    box = h.join(instance_id="i1")
    h.clock.advance(0)
    old = box.value
    h.sync("g", old.generation_id, old.member_id, {old.member_id: b"x"}, instance_id="i1")
    return old


def test_old_incarnation_of_a_static_member_is_fenced():
    h = Harness()
    old = _lone_static_leader(h)
    new = h.join(instance_id="i1").value
    assert new.member_id != old.member_id
    assert (
        h.c.classic.heartbeat("g", old.member_id, old.generation_id, "i1") == E.fenced_instance_id
    )
    assert h.c.classic.heartbeat("g", new.member_id, new.generation_id, "i1") == E.none


def test_static_member_joins_without_member_id_required():
    h = Harness()
    box = h.join(instance_id="i1")
    h.clock.advance(0)
    assert box.value.error == E.none
    assert box.value.member_id.startswith("i1-")


def test_static_leader_rejoining_is_told_to_skip_assignment():
    h = Harness()
    _lone_static_leader(h)
    new = h.join(instance_id="i1").value
    assert new.leader_id == new.member_id
    assert new.skip_assignment
    assert [m[0] for m in new.members] == [new.member_id]


def test_static_leader_rejoining_on_old_version_sees_the_old_leader_id():
    h = Harness()
    old = _lone_static_leader(h)
    new = h.join(instance_id="i1", supports_skip_assignment=False).value
    assert new.leader_id == old.member_id != new.member_id
    assert not new.skip_assignment


def test_static_member_not_rejoining_keeps_its_place_through_a_rebalance():
    h = Harness()
    s = h.join(instance_id="i1", session_ms=60_000, rebalance_ms=5000)
    d = h.join_new(session_ms=60_000, rebalance_ms=5000)
    h.clock.advance(0)
    gen = s.value.generation_id
    assert s.value.leader_id == s.value.member_id
    h.sync("g", gen, s.value.member_id, {}, instance_id="i1")
    h.sync("g", gen, d.value.member_id)
    assert state(h) == GroupState.STABLE
    rejoin = h.join(
        member_id=d.value.member_id,
        session_ms=60_000,
        rebalance_ms=5000,
        protocols=[("range", subscription("t", "u"))],
    )
    h.clock.advance(5001)  # the static member never rejoins
    assert rejoin.value.error == E.none
    assert rejoin.value.leader_id == d.value.member_id  # a member that did rejoin leads
    assert s.value.member_id in h.c.groups["g"].members


def test_static_member_with_a_wrong_member_id_is_fenced():
    h = Harness()
    box = h.join(instance_id="i1")
    h.clock.advance(0)
    assert h.join(member_id="imposter", instance_id="i1").value.error == E.fenced_instance_id
    assert box.value.error == E.none


def test_leave_by_instance_id_removes_the_static_member():
    h = Harness()
    box = h.join(instance_id="i1")
    h.clock.advance(0)
    result = h.c.classic.leave_group("g", [LeavingMember("", "i1")])
    assert result.members == (("", "i1", E.none),)
    assert box.value.member_id not in h.c.groups["g"].members


# -- unloading -------------------------------------------------------------------------------


def test_unloading_answers_parked_joins_with_not_coordinator():
    h = Harness(initial_rebalance_delay_ms=3000)
    box = h.join_new()
    h.c.unload_partition(h.c.partition_for("g"))
    assert box.value.error == E.not_coordinator
    assert "g" not in h.c.groups


def test_a_rebalancing_group_is_described_with_each_members_last_assignment():
    """DescribeGroups during a rebalance shows what members hold (as Kafka's
    describeNoMetadata); their metadata only once Stable."""
    from kbroker.coordinator.group import describe_members

    h = Harness()
    first, _ = h.stable_group(2)
    group = h.c.groups["g"]
    h.join("g", member_id=first.member_id)  # a rejoin: the group prepares a rebalance
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    described = {m["member_id"]: m for m in describe_members(group)}
    assert described[first.member_id]["member_assignment"] == first.member_id.encode()
    assert described[first.member_id]["member_metadata"] == b""
