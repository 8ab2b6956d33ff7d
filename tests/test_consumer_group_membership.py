"""The consumer-protocol group state machine on a manual clock: joining, epochs,
incremental revocation, leaving, fencing, static members, topic changes, persistence."""

from __future__ import annotations

import logging
import time

import pytest
from kio.schema.errors import ErrorCode as E
from test_consumer_group_harness import (
    HEARTBEAT_MS,
    SESSION_MS,
    ConsumerHarness,
    Member,
    assert_exclusive,
    settle,
)
from test_group_harness import Box

from kbroker.coordinator import CoordinatorConfig, GroupCoordinator
from kbroker.coordinator.consumer_coordinator import HeartbeatRequest
from kbroker.coordinator.consumer_group import ConsumerGroupState, MemberState


@pytest.fixture
def h() -> ConsumerHarness:
    harness = ConsumerHarness()
    harness.create_topic("t", 6)
    return harness


def beat_all_checking(members: list[Member], rounds: int = 10) -> None:
    """Heartbeat round after round; after every single heartbeat no partition may be
    owned by two members (what the clients hold, as they hold it)."""
    for _ in range(rounds):
        for m in members:
            if m.left:
                continue
            m.beat()
            owned = [tp for x in members for tp in x.partitions()]
            assert len(owned) == len(set(owned)), f"two owners: {sorted(owned)}"
        members[0].h.clock.advance(HEARTBEAT_MS)


# -- joining ------------------------------------------------------------------------------


def test_first_member_gets_every_partition_at_epoch_one(h):
    a = h.member()
    result = a.beat()
    assert result.error == E.none
    assert result.member_epoch == 1
    assert result.heartbeat_interval_ms == HEARTBEAT_MS
    assert a.partitions() == {(h.topic_id("t"), p) for p in range(6)}
    assert h.group().state == ConsumerGroupState.STABLE


def test_version_0_member_without_id_gets_one(h):
    result = h.heartbeat(member_id="", version=0)
    assert result.error == E.none
    assert result.member_id
    assert result.member_id in h.group().members


def test_version_1_member_must_name_itself(h):
    result = h.heartbeat(member_id="", version=1)
    assert result.error == E.invalid_request


def test_three_members_split_six_partitions_two_each(h):
    members = [h.member() for _ in range(3)]
    settle(members)
    assert_exclusive(members, 6)
    assert sorted(len(m.partitions()) for m in members) == [2, 2, 2]
    assert h.group().state == ConsumerGroupState.STABLE
    assert {m.epoch for m in members} == {h.group().group_epoch}


def test_no_partition_ever_has_two_owners_while_members_come_and_go(h):
    members = [h.member() for _ in range(3)]
    beat_all_checking(members, rounds=3)
    members.append(h.member())
    beat_all_checking(members, rounds=3)
    members[1].leave()
    beat_all_checking(members, rounds=4)
    assert_exclusive([m for m in members if not m.left], 6)


def test_joiner_waits_until_the_previous_owner_revokes(h):
    a, b = h.member(), h.member()
    a.beat()
    b.beat()
    assert b.partitions() == set()
    assert h.group().members[b.member_id].state == MemberState.UNRELEASED_PARTITIONS
    a.beat()  # told to give up three partitions; it does at once
    owner = h.group().members[a.member_id]
    assert owner.state == MemberState.UNREVOKED_PARTITIONS
    assert owner.member_epoch == 1  # stays in its epoch until it has revoked
    assert len(a.partitions()) == 3
    b.beat()
    assert b.partitions() == set()  # not released yet: a has not confirmed
    a.beat()  # reports it owns only three now
    assert h.group().members[a.member_id].member_epoch == 2
    b.beat()
    assert len(b.partitions()) == 3
    assert h.group().state == ConsumerGroupState.STABLE


def test_group_state_goes_through_reconciling(h):
    a, b = h.member(), h.member()
    a.beat()
    b.beat()
    assert h.group().state == ConsumerGroupState.RECONCILING
    settle([a, b])
    assert h.group().state == ConsumerGroupState.STABLE


def test_unchanged_heartbeat_writes_nothing(h):
    a = h.member()
    settle([a], rounds=2)
    written = len(h.store.batches.get(h.c.partition_for("g"), []))
    a.beat()
    assert len(h.store.batches.get(h.c.partition_for("g"), [])) == written


def test_full_heartbeat_gets_the_assignment_again(h):
    a = h.member()
    settle([a], rounds=2)
    assert a.beat().assignment is None
    assert a.beat(full=True).assignment is not None


def test_subscription_change_bumps_the_group_epoch(h):
    h.create_topic("u", 2)
    a = h.member()
    settle([a], rounds=2)
    epoch = h.group().group_epoch
    a.topics = ("t", "u")
    a.beat(full=True)
    assert h.group().group_epoch == epoch + 1
    settle([a], rounds=2)
    assert len(a.partitions()) == 8


def test_members_may_name_the_range_assignor(h):
    a = h.member(assignor="range")
    b = h.member(assignor="range")
    settle([a, b])
    assert h.cc.preferred_assignor(h.group()) == "range"
    ranges = sorted(sorted(p for _, p in m.partitions()) for m in (a, b))
    assert ranges == [[0, 1, 2], [3, 4, 5]]


# -- leaving and fencing ------------------------------------------------------------------


def test_leaving_member_partitions_go_to_the_others(h):
    members = [h.member() for _ in range(3)]
    settle(members)
    result = members[0].leave()
    assert result.error == E.none
    assert result.member_epoch == -1
    settle(members[1:])
    assert_exclusive(members[1:], 6)
    assert members[0].member_id not in h.group().members


def test_silent_member_is_fenced_after_the_session_timeout(h):
    a, b = h.member(), h.member()
    settle([a, b])
    for _ in range(SESSION_MS // HEARTBEAT_MS + 2):
        a.beat()
        h.clock.advance(HEARTBEAT_MS)
    assert list(h.group().members) == [a.member_id]
    assert len(a.partitions()) == 6
    assert b.beat().error == E.unknown_member_id


def test_a_groups_own_session_timeout_and_heartbeat_interval_apply_to_its_members(h):
    """consumer.session.timeout.ms and consumer.heartbeat.interval.ms set on the group
    (IncrementalAlterConfigs) beat the broker's settings for that group alone."""
    own = {"g": {"consumer.session.timeout.ms": str(3 * SESSION_MS)}}
    own["g"]["consumer.heartbeat.interval.ms"] = str(2 * HEARTBEAT_MS)
    h.cc.group_configs = lambda group_id: own.get(group_id, {})
    a, b = h.member(), h.member()
    assert a.beat().heartbeat_interval_ms == 2 * HEARTBEAT_MS
    settle([a, b])
    for _ in range(2 * SESSION_MS // HEARTBEAT_MS):  # past the broker's session timeout
        a.beat()
        h.clock.advance(HEARTBEAT_MS)
    assert set(h.group().members) == {a.member_id, b.member_id}
    for _ in range(2 * SESSION_MS // HEARTBEAT_MS):  # and past the group's
        a.beat()
        h.clock.advance(HEARTBEAT_MS)
    assert list(h.group().members) == [a.member_id]


def test_heartbeats_keep_a_member_alive_past_the_session_timeout(h):
    a = h.member()
    for _ in range(3 * SESSION_MS // HEARTBEAT_MS):
        a.beat()
        h.clock.advance(HEARTBEAT_MS)
    assert a.member_id in h.group().members


def test_member_that_never_revokes_is_fenced_after_its_rebalance_timeout(h):
    a, b = h.member(), h.member()
    a.beat()
    b.beat()
    a.beat()  # asked to revoke
    stubborn = tuple((t, tuple(range(6))) for t in a.owned)
    for _ in range(40):
        h.heartbeat(
            member_id=a.member_id,
            member_epoch=1,
            subscribed_topic_names=None,
            rebalance_timeout_ms=-1,
            owned=stubborn,
        )
        b.beat()
        h.clock.advance(HEARTBEAT_MS)
    assert a.member_id not in h.group().members
    assert len(b.partitions()) == 6


def test_epoch_ahead_of_the_coordinator_is_fenced(h):
    a = h.member()
    a.beat()
    result = h.heartbeat(member_id=a.member_id, member_epoch=5, owned=None)
    assert result.error == E.fenced_member_epoch


def test_epoch_behind_the_coordinator_is_fenced(h):
    a, b = h.member(), h.member()
    settle([a, b])
    # Neither the current epoch nor the previous one (as Kafka, even a rejoin at 0).
    result = h.heartbeat(member_id=a.member_id, member_epoch=0, owned=())
    assert result.error == E.fenced_member_epoch


def test_previous_epoch_is_accepted_when_the_answer_was_lost(h):
    a = h.member()
    a.beat()
    h.create_topic("u", 1)
    a.topics = ("t", "u")
    a.beat(full=True)  # epoch 2 reached; pretend the answer never arrived
    member = h.group().members[a.member_id]
    assert member.member_epoch == 2
    owned = tuple((t, tuple(ps)) for t, ps in member.assigned.items())
    result = h.heartbeat(
        member_id=a.member_id, member_epoch=1, owned=owned, subscribed_topic_names=None
    )
    assert result.error == E.none
    assert result.member_epoch == 2


def test_unknown_member_is_told_so(h):
    h.member().beat()
    result = h.heartbeat(member_id="ghost", member_epoch=3, subscribed_topic_names=None)
    assert result.error == E.unknown_member_id


def test_heartbeat_to_a_missing_group_with_an_epoch_is_group_id_not_found(h):
    result = h.heartbeat(group_id="nope", member_id="m", member_epoch=2)
    assert result.error == E.group_id_not_found


def test_group_max_size_refuses_one_more(h):
    h.cc.config = h.consumer_config.__class__(max_size=2, heartbeat_interval_ms=HEARTBEAT_MS)
    h.member().beat()
    h.member().beat()
    assert h.member().beat().error == E.group_max_size_reached


# -- request checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"group_id": ""},
        {"rebalance_timeout_ms": -1},
        {"owned": None},
        {"subscribed_topic_names": None},
        {"member_epoch": -7},
        {"instance_id": ""},
        {"member_epoch": -2},  # a static leave needs an instance id
    ],
    ids=["group", "rebalance", "owned", "subscription", "epoch", "instance", "static-leave"],
)
def test_malformed_heartbeats_are_invalid_requests(h, fields):
    result = h.heartbeat(member_id="m", **fields)
    assert result.error == E.invalid_request
    assert result.message


def test_unknown_server_assignor_is_refused(h):
    assert h.heartbeat(member_id="m", server_assignor="sticky").error == E.unsupported_assignor


def test_bad_regex_is_refused(h):
    result = h.heartbeat(member_id="m", subscribed_topic_regex="(unclosed")
    assert result.error == E.invalid_regular_expression


def test_not_coordinator_for_a_partition_it_does_not_own(h):
    h.c.unload_partition(h.c.partition_for("g"))
    assert h.heartbeat(member_id="m").error == E.not_coordinator


def test_disabled_protocol_answers_unsupported_version(h):
    h.cc.config = h.consumer_config.__class__(enabled=False)
    assert h.heartbeat(member_id="m").error == E.unsupported_version


# -- topics -------------------------------------------------------------------------------


def test_regex_subscription_picks_up_topics_created_later(h):
    h.create_topic("logs-a", 2)
    a = h.member(topics=(), regex="logs-.*")
    settle([a], rounds=2)
    assert {t for t, _ in a.partitions()} == {h.topic_id("logs-a")}
    h.create_topic("logs-b", 3)
    h.create_topic("other", 3)
    settle([a], rounds=2)
    assert len(a.partitions()) == 5


def test_regex_matches_internal_topics_as_kafkas_coordinator_does(h):
    """Kafka resolves a member's regex against every topic of the metadata image, the
    internal ones included (franz-go's Test848RegexBrokerResolves relies on it)."""
    h.create_topic("__consumer_offsets", 2)
    h.create_topic("orders", 1)
    a = h.member(topics=(), regex="orders|__consumer_offsets")
    settle([a], rounds=2)
    assert {t for t, _ in a.partitions()} == {
        h.topic_id("orders"),
        h.topic_id("__consumer_offsets"),
    }


def test_added_partitions_are_assigned(h):
    a, b = h.member(), h.member()
    settle([a, b])
    h.grow_topic("t", 10)
    settle([a, b])
    assert_exclusive([a, b], 10)
    assert sorted(len(m.partitions()) for m in (a, b)) == [5, 5]


def test_deleted_topic_is_revoked(h):
    h.create_topic("u", 2)
    a = h.member(topics=("t", "u"))
    settle([a], rounds=2)
    h.delete_topic("u")
    settle([a], rounds=3)
    assert {t for t, _ in a.partitions()} == {h.topic_id("t")}


# -- static members -----------------------------------------------------------------------


def test_static_member_keeps_its_partitions_across_a_restart(h):
    a = h.member(instance_id="i-a")
    b = h.member(instance_id="i-b")
    settle([a, b])
    before = a.partitions()
    assert a.leave(static=True).member_epoch == -2
    assert h.group().members[a.member_id].member_epoch == -2
    settle([b], rounds=2)
    assert b.partitions().isdisjoint(before)  # nobody took them meanwhile
    again = h.member(instance_id="i-a")
    settle([again, b], rounds=3)
    assert again.partitions() == before
    assert a.member_id not in h.group().members


def test_static_instance_in_use_cannot_be_taken(h, caplog):
    """Refused, and said once in the log, as Kafka says it: the usual cause is a member
    killed without leaving, whose instance id is held until its session times out."""
    a = h.member(instance_id="i-a")
    a.beat()
    with caplog.at_level(logging.INFO, logger="kbroker"):
        assert h.member(instance_id="i-a").beat().error == E.unreleased_instance_id
    refusals = [r.getMessage() for r in caplog.records if "cannot join" in r.getMessage()]
    assert len(refusals) == 1 and a.member_id in refusals[0] and "i-a" in refusals[0]


def test_replaced_static_member_is_fenced_by_its_instance_id(h):
    a = h.member(instance_id="i-a")
    a.beat()
    a.leave(static=True)
    h.member(instance_id="i-a").beat()
    result = h.heartbeat(member_id=a.member_id, member_epoch=1, instance_id="i-a", owned=None)
    assert result.error == E.fenced_instance_id


def test_static_member_that_does_not_come_back_is_removed_after_its_session(h):
    a, b = h.member(instance_id="i-a"), h.member()
    settle([a, b])
    a.leave(static=True)
    for _ in range(SESSION_MS // HEARTBEAT_MS + 2):
        b.beat()
        h.clock.advance(HEARTBEAT_MS)
    assert a.member_id not in h.group().members
    assert len(b.partitions()) == 6


# -- writes and persistence ---------------------------------------------------------------


def test_failed_write_changes_nothing(h):
    h.store.fail_with = E.not_leader_or_follower
    result = h.heartbeat(member_id="m")
    assert result.error == E.not_coordinator
    assert "g" not in h.cc.groups


def joins_behind_a_held_write(h) -> list[Box]:
    """Members a and b join while the group's writes are held: their answers wait."""
    h.store.hold = True
    boxes = []
    for member_id in ("a", "b"):
        box = Box()
        h.cc.heartbeat(
            HeartbeatRequest(
                group_id="g",
                member_id=member_id,
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=("t",),
                owned=(),
            ),
            box,
        )
        boxes.append(box)
    return boxes


def test_heartbeats_wait_in_line_behind_a_pending_write(h):
    boxes = joins_behind_a_held_write(h)
    assert not boxes[0].done and not boxes[1].done
    h.store.hold = False
    h.store.release()
    h.store.release()
    assert boxes[0].value.member_epoch == 1
    assert boxes[1].value.member_epoch == 2


def test_a_heartbeat_waiting_in_line_sees_the_partition_it_lost_meanwhile(h):
    boxes = joins_behind_a_held_write(h)
    partition = h.c.partition_for("g")
    h.c.unload_partition(partition)
    h.store.hold = False
    h.store.release()
    assert boxes[0].value.error == E.not_coordinator  # its write ended after the move
    assert boxes[1].value.error == E.not_coordinator  # it ran after the move
    assert len(h.store.batches[partition]) == 1  # and wrote nothing


def test_a_reloaded_group_is_the_group_that_was_running(h):
    members = [h.member() for _ in range(3)]
    settle(members)
    partition = h.c.partition_for("g")
    fresh = GroupCoordinator(CoordinatorConfig(num_partitions=4), h.clock, h.store)
    fresh.consumer.metadata = lambda: h.state
    fresh.consumer.config = h.consumer_config
    assert fresh.load_partition(partition, h.store.records(partition)) == 1
    before, after = h.group(), fresh.consumer.groups["g"]
    assert after.group_epoch == before.group_epoch
    assert after.assignment_epoch == before.assignment_epoch
    assert after.members == before.members
    assert after.target == before.target
    assert after.partition_epochs == before.partition_epochs
    # Members carry on with their epochs against the reloaded coordinator.
    h.coordinator = fresh
    for m in members:
        assert m.beat().error == E.none


def test_reloaded_members_that_stay_away_are_fenced(h):
    a = h.member()
    settle([a], rounds=2)
    partition = h.c.partition_for("g")
    fresh = GroupCoordinator(CoordinatorConfig(num_partitions=4), h.clock, h.store)
    fresh.consumer.metadata = lambda: h.state
    fresh.consumer.config = h.consumer_config
    fresh.load_partition(partition, h.store.records(partition))
    h.clock.advance(SESSION_MS + 1)
    assert fresh.consumer.groups["g"].members == {}


def test_pathological_regex_is_matched_in_linear_time(h):
    h.create_topic("a" * 200 + "c", 1)
    started = time.monotonic()
    result = h.heartbeat(member_id="m", subscribed_topic_names=(), subscribed_topic_regex="(a+)+b")
    assert result.error == E.none
    assert time.monotonic() - started < 1.0  # a backtracking engine takes ages here


def test_regex_takes_java_named_groups(h):
    h.create_topic("orders-eu", 1)
    result = h.heartbeat(
        member_id="m", subscribed_topic_names=(), subscribed_topic_regex="(?<kind>orders)-.*"
    )
    assert result.error == E.none
    assert result.assignment == {h.topic_id("orders-eu"): frozenset({0})}
