"""Share-group membership and the assignment of partitions to members.

A share group has no rebalance protocol: the coordinator assigns and the member takes
what it is given at its next heartbeat, with no revocation step, because records are
handed out one by one and any number of members may read a partition at once. Members
are kept alive by heartbeats within the session timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[uuid.UUID, int]
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    previous_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    last_seen_ms: int
    assignment: Assignment = field(default_factory=dict)
    sent_assignment: Assignment | None = None  # what the member was last told


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's ShareGroup states as ListGroups and describe show them."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


def assign(
    members: Mapping[str, Iterable[str]], partitions: Mapping[str, tuple[uuid.UUID, int]]
) -> dict[str, Assignment]:
    """Spread each topic's partitions over the members subscribed to it.

    `members` maps member id to subscribed topic names; `partitions` maps topic name to
    (topic id, partition count). With at least as many partitions as members each
    partition goes to one member, round-robin; with fewer, each member gets one
    partition and a partition is shared by several members, as Kafka's share-group
    SimpleAssignor spreads them.
    """
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic, (topic_id, count) in sorted(partitions.items()):
        readers = sorted(m for m, topics in members.items() if topic in set(topics))
        if not readers or count <= 0:
            continue
        if count >= len(readers):
            for p in range(count):
                result[readers[p % len(readers)]].setdefault(topic_id, set()).add(p)
        else:
            for i, member in enumerate(readers):
                result[member].setdefault(topic_id, set()).add(i % count)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in result.items()}
