"""The metadata quorum as an operator sees it (kafka-metadata-quorum describe --status and
--replication): DescribeQuorum asked of any broker, which answers with the active
controller's view, and the lags the Kafka tool derives from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbroker.admin.client import Cluster
from kbroker.admin.topics import check

DESCRIBE_QUORUM = 55
METADATA_TOPIC = "__cluster_metadata"


@dataclass(frozen=True, slots=True)
class QuorumReplica:
    """One replica of the metadata log; -1 where the leader does not know."""

    node_id: int
    status: str  # Leader, Follower or Observer, as kafka-metadata-quorum names them
    log_end_offset: int
    lag: int  # behind the leader's log end offset
    last_fetch_timestamp: int
    last_caught_up_timestamp: int


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    replicas: tuple[QuorumReplica, ...]

    @property
    def voters(self) -> list[int]:
        return [r.node_id for r in self.replicas if r.status != "Observer"]

    @property
    def observers(self) -> list[int]:
        return [r.node_id for r in self.replicas if r.status == "Observer"]

    def max_follower_lag(self) -> tuple[int, int]:
        """kafka-metadata-quorum's MaxFollowerLag and MaxFollowerLagTimeMs: how far the
        voter furthest behind trails the leader, in offsets and in caught-up time (-1
        when a time is not known)."""
        voters = [r for r in self.replicas if r.status != "Observer"]
        leader = next((r for r in voters if r.status == "Leader"), None)
        if leader is None or not voters:
            return -1, -1
        furthest = min(voters, key=lambda r: r.log_end_offset)
        if furthest is leader:
            return 0, 0
        if leader.last_caught_up_timestamp < 0 or furthest.last_caught_up_timestamp < 0:
            return furthest.lag, -1
        return furthest.lag, leader.last_caught_up_timestamp - furthest.last_caught_up_timestamp


def describe_quorum(cluster: Cluster) -> QuorumInfo:
    """DescribeQuorum for KRaft's metadata partition, as Admin.describeMetadataQuorum asks."""
    response = cluster.any().call(
        DESCRIBE_QUORUM,
        {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]},
        versions=(2, 2),
    )
    check(response.error_code, "describing the quorum", response.error_message)
    (partition,) = response.topics[0].partitions
    check(partition.error_code, "describing the quorum", partition.error_message)
    leader_end = next(
        (v.log_end_offset for v in partition.current_voters if v.replica_id == partition.leader_id),
        -1,
    )

    def replica(state: Any, status: str) -> QuorumReplica:
        end = int(state.log_end_offset)
        return QuorumReplica(
            node_id=int(state.replica_id),
            status=status,
            log_end_offset=end,
            lag=leader_end - end if end >= 0 and leader_end >= 0 else -1,
            last_fetch_timestamp=int(state.last_fetch_timestamp),
            last_caught_up_timestamp=int(state.last_caught_up_timestamp),
        )

    voters = [
        replica(v, "Leader" if v.replica_id == partition.leader_id else "Follower")
        for v in partition.current_voters
    ]
    observers = [replica(o, "Observer") for o in partition.observers]
    return QuorumInfo(
        leader_id=int(partition.leader_id),
        leader_epoch=int(partition.leader_epoch),
        high_watermark=int(partition.high_watermark),
        replicas=(*voters, *observers),
    )
