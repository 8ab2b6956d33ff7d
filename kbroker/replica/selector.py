"""Which replica a consumer should read from (KIP-392's `replica.selector.class`).

Kafka's leader answers a consumer's Fetch (v11+, carrying the client's `rack_id`) with
a `preferred_read_replica` instead of records when its selector picks another replica;
the client then fetches from that follower, which serves it up to its high watermark.
Two selectors exist, by Kafka's class names: the default `LeaderSelector` always keeps
the consumer on the leader; `RackAwareReplicaSelector` picks a replica in the client's
rack: the leader if it is there, else the most caught-up in-sync follower there that
holds the fetch offset, else the leader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kbroker.replica.partition import Partition

LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the selector sees it (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    ms_since_caught_up: int


def rack_aware_choice(
    client_rack: str, leader: ReplicaView, followers: list[ReplicaView]
) -> ReplicaView:
    """Kafka's RackAwareReplicaSelector.select."""
    if leader.rack == client_rack:
        return leader
    same_rack = [r for r in followers if r.rack == client_rack]
    if not same_rack:
        return leader
    return max(same_rack, key=lambda r: (r.log_end_offset, -r.ms_since_caught_up))


def preferred_read_replica(
    selector: str | None,
    partition: Partition,
    client_rack: str,
    fetch_offset: int,
    rack_of: Callable[[int], str | None],
    now_ms: int,
) -> int | None:
    """The replica the leader of `partition` sends a consumer in `client_rack` to, or
    None to serve it here. Only in-sync followers whose log reaches `fetch_offset` are
    candidates (one that lags would hold the consumer back); `rack_of` gives a live
    broker's rack, and None for a broker that is not live."""
    if selector != RACK_AWARE_SELECTOR or not client_rack or not partition.is_leader:
        return None
    leader = ReplicaView(partition.node_id, rack_of(partition.node_id), 0, 0)
    followers = []
    for broker_id, state in partition.followers.items():
        if broker_id not in partition.isr or state.log_end_offset < fetch_offset:
            continue
        rack = rack_of(broker_id)
        if rack is None:
            continue
        followers.append(
            ReplicaView(
                broker_id, rack, state.log_end_offset, max(now_ms - state.last_caught_up_ms, 0)
            )
        )
    chosen = rack_aware_choice(client_rack, leader, followers)
    return None if chosen is leader else chosen.broker_id
