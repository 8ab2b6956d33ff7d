"""Server-side assignors of the consumer protocol: uniform (balanced, sticky) and range."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.coordinator.assignors import ASSIGNORS, MemberSubscription, range_, uniform

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
T3 = uuid.UUID(int=3)


def subs(*topics: uuid.UUID, instance: str | None = None) -> MemberSubscription:
    return MemberSubscription(frozenset(topics), instance)


def counts(target: dict) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in target.items()}


def owners(target: dict) -> list[tuple[uuid.UUID, int]]:
    return [(t, p) for a in target.values() for t, ps in a.items() for p in ps]


def test_uniform_spreads_six_partitions_over_three_members_evenly():
    members = {m: subs(T1) for m in ("a", "b", "c")}
    target = uniform(members, {T1: 6}, {})
    assert counts(target) == {"a": 2, "b": 2, "c": 2}
    assert sorted(owners(target)) == [(T1, p) for p in range(6)]


def test_uniform_gives_the_remainder_to_some_members_only():
    target = uniform({m: subs(T1) for m in "abc"}, {T1: 7}, {})
    assert sorted(counts(target).values()) == [2, 2, 3]


def test_uniform_keeps_partitions_where_they_were_when_a_member_joins():
    previous = {"a": {T1: frozenset({0, 1, 2})}, "b": {T1: frozenset({3, 4, 5})}}
    target = uniform({m: subs(T1) for m in "abc"}, {T1: 6}, previous)
    assert target["a"][T1] < previous["a"][T1]
    assert target["b"][T1] < previous["b"][T1]
    assert counts(target) == {"a": 2, "b": 2, "c": 2}


def test_uniform_moves_only_the_leavers_partitions_when_a_member_leaves():
    previous = {
        "a": {T1: frozenset({0, 1})},
        "b": {T1: frozenset({2, 3})},
        "c": {T1: frozenset({4, 5})},
    }
    target = uniform({m: subs(T1) for m in "ab"}, {T1: 6}, previous)
    assert target["a"][T1] >= previous["a"][T1]
    assert target["b"][T1] >= previous["b"][T1]
    assert counts(target) == {"a": 3, "b": 3}


def test_uniform_drops_partitions_of_topics_no_longer_subscribed():
    previous = {"a": {T1: frozenset({0}), T2: frozenset({0})}}
    target = uniform({"a": subs(T2)}, {T1: 1, T2: 1}, previous)
    assert target == {"a": {T2: frozenset({0})}}


def test_uniform_ignores_previous_partitions_beyond_the_topic_size():
    previous = {"a": {T1: frozenset({0, 1, 5})}}
    target = uniform({"a": subs(T1)}, {T1: 2}, previous)
    assert target == {"a": {T1: frozenset({0, 1})}}


def test_uniform_gives_a_topic_only_to_its_subscribers():
    members = {"a": subs(T1), "b": subs(T1, T2), "c": subs(T2)}
    target = uniform(members, {T1: 4, T2: 4}, {})
    assert T2 not in target["a"]
    assert T1 not in target["c"]
    assert sorted(owners(target)) == sorted(
        [(T1, p) for p in range(4)] + [(T2, p) for p in range(4)]
    )
    assert max(counts(target).values()) - min(counts(target).values()) <= 1


def test_uniform_member_subscribed_to_nothing_gets_nothing():
    target = uniform({"a": subs(T1), "b": subs()}, {T1: 3}, {})
    assert target["b"] == {}
    assert counts(target)["a"] == 3


def test_range_gives_contiguous_ranges_in_member_order():
    target = range_({m: subs(T1) for m in "abc"}, {T1: 7}, {})
    assert target["a"][T1] == frozenset({0, 1, 2})
    assert target["b"][T1] == frozenset({3, 4})
    assert target["c"][T1] == frozenset({5, 6})


def test_range_co_partitions_topics_of_equal_size():
    target = range_({m: subs(T1, T2) for m in "ab"}, {T1: 3, T2: 3}, {})
    for member in "ab":
        assert target[member][T1] == target[member][T2]


def test_range_orders_static_members_by_instance_id():
    members = {"z-member": subs(T1, instance="i-1"), "a-member": subs(T1, instance="i-2")}
    target = range_(members, {T1: 2}, {})
    assert target["z-member"][T1] == frozenset({0})
    assert target["a-member"][T1] == frozenset({1})


def test_assignors_are_registered_by_kafkas_names():
    assert set(ASSIGNORS) == {"uniform", "range"}


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict, dict, dict]:
    topic_ids = [T1, T2, T3][: draw(st.integers(1, 3))]
    topics = {t: draw(st.integers(0, 12)) for t in topic_ids}
    names = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    members = {
        m: MemberSubscription(frozenset(draw(st.sets(st.sampled_from(topic_ids), min_size=1))))
        for m in names
    }
    previous: dict = {}
    for m in names:
        if draw(st.booleans()):
            previous[m] = {
                t: frozenset(draw(st.sets(st.integers(0, 14), max_size=6))) for t in topic_ids
            }
    return members, topics, previous


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(sorted(ASSIGNORS)))
def test_every_subscribed_partition_has_exactly_one_subscribed_owner(group, name):
    members, topics, previous = group
    target = ASSIGNORS[name](members, topics, previous)
    assigned = owners(target)
    assert len(assigned) == len(set(assigned))
    wanted = {
        (t, p)
        for t, n in topics.items()
        if any(t in s.topic_ids for s in members.values())
        for p in range(n)
    }
    assert set(assigned) == wanted
    for member, assignment in target.items():
        assert set(assignment) <= members[member].topic_ids


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(groups())
def test_uniform_is_balanced_when_subscriptions_are_identical(group):
    members, topics, previous = group
    same = {m: MemberSubscription(frozenset(topics)) for m in members}
    sizes = counts(uniform(same, topics, previous)).values()
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(groups())
def test_uniform_leaves_no_partition_that_could_move_to_a_much_emptier_subscriber(group):
    members, topics, previous = group
    target = uniform(members, topics, previous)
    sizes = counts(target)
    for member, assignment in target.items():
        for topic in assignment:
            for other, subscription in members.items():
                if topic in subscription.topic_ids:
                    assert sizes[member] - sizes[other] <= 1, (member, other, target)
