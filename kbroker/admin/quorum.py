"""The metadata quorum as an operator sees it (kafka-metadata-quorum describe --status and
--replication): DescribeQuorum asked of any broker, which answers with the active
controller's view, and the lags the Kafka tool derives from it.
"""

from __future__ import annotations

import base64
import uuid
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


# -- changing a dynamic quorum's voters (kafka-metadata-quorum add-controller and
# remove-controller, KIP-853) -----------------------------------------------------------

ADD_RAFT_VOTER = 80
REMOVE_RAFT_VOTER = 81


@dataclass(frozen=True, slots=True)
class ControllerKey:
    """A controller as a voter: node id, metadata directory id, CONTROLLER listeners."""

    node_id: int
    directory_id: str
    listeners: tuple[tuple[str, str, int], ...] = ()  # (name, host, port)


def controller_from_config(path: str) -> ControllerKey:
    """The controller a server.properties describes, as add-controller reads it from
    --command-config: its node.id, the directory.id in its metadata directory's
    meta.properties, and its CONTROLLER listener. ClientError says what is missing."""
    from kbroker.admin.client import ClientError
    from kbroker.config import ConfigError, load_broker_config
    from kbroker.storage.meta_properties import MetaPropertiesError, read_meta_properties

    try:
        config = load_broker_config(path)
    except ConfigError as exc:
        raise ClientError(f"{path}: {exc}") from None
    quorum = config.quorum
    if not quorum.dynamic or quorum.self_address is None:
        raise ClientError(
            f"{path} is not a controller of a dynamic quorum "
            "(controller.quorum.bootstrap.servers, cluster.secret, a CONTROLLER listener)"
        )
    try:
        meta = read_meta_properties(config.metadata_dir)
    except (MetaPropertiesError, OSError) as exc:
        raise ClientError(str(exc)) from None
    if meta is None:
        raise ClientError(f"{config.metadata_dir} is not formatted (kbroker format)")
    host, _, port = quorum.self_address.rpartition(":")
    name = sorted(config.controller_listeners or {"CONTROLLER"})[0]
    return ControllerKey(quorum.node_id, meta.directory_id, ((name, host.strip("[]"), int(port)),))


def _uuid(directory_id: str) -> uuid.UUID:
    from kbroker.admin.client import ClientError

    try:
        raw = base64.urlsafe_b64decode(directory_id + "=" * (-len(directory_id) % 4))
        return uuid.UUID(bytes=raw)
    except ValueError:
        raise ClientError(f"{directory_id!r} is not a directory id (a Kafka Uuid)") from None


def add_controller(cluster: Cluster, controller: ControllerKey) -> None:
    """AddRaftVoter: make the controller (an observer that has caught up) a voter."""
    response = cluster.any().call(
        ADD_RAFT_VOTER,
        {
            "cluster_id": None,
            "timeout": 30_000,
            "voter_id": controller.node_id,
            "voter_directory_id": _uuid(controller.directory_id),
            "listeners": [
                {"name": name, "host": host, "port": port}
                for name, host, port in controller.listeners
            ],
        },
        versions=(0, 0),
    )
    check(response.error_code, f"adding controller {controller.node_id}", response.error_message)


def remove_controller(cluster: Cluster, node_id: int, directory_id: str) -> None:
    """RemoveRaftVoter: take the voter (node id and directory id) out of the quorum."""
    response = cluster.any().call(
        REMOVE_RAFT_VOTER,
        {"cluster_id": None, "voter_id": node_id, "voter_directory_id": _uuid(directory_id)},
        versions=(0, 0),
    )
    check(response.error_code, f"removing controller {node_id}", response.error_message)
