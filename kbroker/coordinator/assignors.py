"""Server-side partition assignors of the consumer protocol: "uniform" and "range".

An assignor sees each member's subscribed topic ids, each topic's partition count and
the previous target assignment, and returns the new target: every partition of a
subscribed topic goes to exactly one member subscribed to it. Pure functions; the
group coordinator chooses which one runs (group.consumer.assignors, or the assignor
most members ask for in their heartbeats).

- uniform: balanced (member partition counts differ by at most one among members that
  could take each other's partitions) and sticky (a member keeps what it had whenever
  balance allows, so a rebalance moves as few partitions as possible).
- range: per topic, contiguous ranges in member order, so members subscribed to
  co-partitioned topics get the same partition numbers of each (joins).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbroker.coordinator.consumer_group import Assignment

TopicPartitionId = tuple[uuid.UUID, int]
Target = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    topic_ids: frozenset[uuid.UUID]
    instance_id: str | None = None
    rack_id: str | None = None


Assignor = Callable[
    [Mapping[str, MemberSubscription], Mapping[uuid.UUID, int], Mapping[str, Assignment]],
    Target,
]


class AssignorError(Exception):
    """The assignor cannot produce an assignment from these inputs."""


def _result(owner: Mapping[TopicPartitionId, str], members: Mapping[str, object]) -> Target:
    sets: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for (topic_id, p), m in owner.items():
        sets[m].setdefault(topic_id, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in sets.items()}


def uniform(
    members: Mapping[str, MemberSubscription],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> Target:
    """Balanced and sticky; a shortcut for the common case of identical subscriptions."""
    if not members:
        return {}
    subscriptions = {m.topic_ids for m in members.values()}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, topics, previous, next(iter(subscriptions)))
    return _uniform_heterogeneous(members, topics, previous)


def _valid_previous(
    member_id: str,
    subscribed: frozenset[uuid.UUID],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
    taken: set[TopicPartitionId],
) -> list[TopicPartitionId]:
    kept = []
    for topic_id, partitions in previous.get(member_id, {}).items():
        if topic_id not in subscribed or topic_id not in topics:
            continue
        for p in sorted(partitions):
            tp = (topic_id, p)
            if p < topics[topic_id] and tp not in taken:
                kept.append(tp)
                taken.add(tp)
    return kept


def _uniform_homogeneous(
    members: Mapping[str, MemberSubscription],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
    subscribed: frozenset[uuid.UUID],
) -> Target:
    order = sorted(members)
    all_partitions = [
        (t, p)
        for t in sorted((t for t in subscribed if t in topics), key=str)
        for p in range(topics[t])
    ]
    min_quota, extra = divmod(len(all_partitions), len(order))
    taken: set[TopicPartitionId] = set()
    kept = {m: _valid_previous(m, subscribed, topics, previous, taken) for m in order}
    owner: dict[TopicPartitionId, str] = {}
    counts: dict[str, int] = {}
    # Members that had more than the minimum keep one extra while extra slots last;
    # those that had the most go first, so the fewest partitions move.
    extra_left = extra
    for m in sorted(order, key=lambda m: (-len(kept[m]), m)):
        cap = min_quota
        if extra_left and len(kept[m]) > min_quota:
            cap += 1
            extra_left -= 1
        for tp in kept[m][:cap]:
            owner[tp] = m
        counts[m] = min(len(kept[m]), cap)
    free = [tp for tp in all_partitions if tp not in owner]
    position = 0
    # First everyone up to the minimum, then the remaining extra slots, round robin.
    for limit in (min_quota, min_quota + 1):
        progressed = True
        while position < len(free) and progressed:
            progressed = False
            for m in order:
                if position >= len(free):
                    break
                if counts[m] < limit and (limit == min_quota or extra_left > 0):
                    owner[free[position]] = m
                    counts[m] += 1
                    position += 1
                    progressed = True
                    if limit == min_quota + 1:
                        extra_left -= 1
    if position < len(free):
        raise AssignorError(f"{len(free) - position} partitions left over by the uniform assignor")
    return _result(owner, members)


def _uniform_heterogeneous(
    members: Mapping[str, MemberSubscription],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> Target:
    order = sorted(members)
    rank = {m: i for i, m in enumerate(order)}
    subscribers = {
        t: [m for m in order if t in members[m].topic_ids] for t in sorted(topics, key=str)
    }
    taken: set[TopicPartitionId] = set()
    owner: dict[TopicPartitionId, str] = {}
    owned: dict[str, list[TopicPartitionId]] = {m: [] for m in order}
    for m in order:
        for tp in _valid_previous(m, members[m].topic_ids, topics, previous, taken):
            owner[tp] = m
            owned[m].append(tp)
    counts = {m: len(owned[m]) for m in order}
    # The most constrained topics (fewest subscribers) first.
    for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), str(t))):
        subs = subscribers[t]
        if not subs:
            continue
        for p in range(topics[t]):
            if (t, p) in owner:
                continue
            m = min(subs, key=lambda s: (counts[s], rank[s]))
            owner[(t, p)] = m
            owned[m].append((t, p))
            counts[m] += 1
    # Balance: move a partition from a fuller member to an emptier one that subscribes
    # to its topic while that narrows the gap, fullest members first.
    moved = True
    while moved:
        moved = False
        for a in sorted(order, key=lambda m: (-counts[m], rank[m])):
            best: tuple[int, int, TopicPartitionId, str] | None = None
            for tp in owned[a]:
                for b in subscribers[tp[0]]:
                    if b != a and counts[b] + 1 < counts[a]:
                        candidate = (counts[b], rank[b], tp, b)
                        if best is None or candidate[:2] < best[:2]:
                            best = candidate
            if best is not None:
                _, _, tp, b = best
                owned[a].remove(tp)
                owned[b].append(tp)
                owner[tp] = b
                counts[a] -= 1
                counts[b] += 1
                moved = True
                break
    return _result(owner, members)


def range_(
    members: Mapping[str, MemberSubscription],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> Target:
    """Per topic: subscribers in order (instance id, else member id), contiguous ranges,
    the first `partitions % members` of them one partition more."""
    owner: dict[TopicPartitionId, str] = {}

    def order_key(m: str) -> tuple[str, str]:
        return (members[m].instance_id or m, m)

    for t, count in topics.items():
        subs = sorted((m for m in members if t in members[m].topic_ids), key=order_key)
        if not subs:
            continue
        quota, extra = divmod(count, len(subs))
        start = 0
        for i, m in enumerate(subs):
            size = quota + (1 if i < extra else 0)
            for p in range(start, start + size):
                owner[(t, p)] = m
            start += size
    return _result(owner, members)


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
