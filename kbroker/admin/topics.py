"""Topics as an operator sees them: list, describe, create, alter, delete, reassign;
offsets by time.

Each function asks the cluster over the wire (Metadata, CreateTopics, CreatePartitions,
DeleteTopics, ListOffsets, AlterPartitionReassignments, ListPartitionReassignments) and
returns plain dataclasses; the commands print them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.admin.client import ClientError, Cluster

LIST_OFFSETS = 2
METADATA = 3
CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

TopicPartition = tuple[str, int]


def error_of(code: Any) -> ErrorCode:
    return code if isinstance(code, ErrorCode) else ErrorCode(int(code))


def check(code: Any, what: str, message: str | None = None) -> None:
    """Raise ClientError naming Kafka's error (and the broker's message) unless NONE."""
    error = error_of(code)
    if error != ErrorCode.none:
        detail = f" ({message})" if message else ""
        raise ClientError(f"{what}: {error.name.upper()}{detail}")


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    def under_replicated_during(self, move: Reassignment | None) -> bool:
        """Short of in-sync replicas as kafka-topics counts it: a partition being moved
        only against the replicas it started with (its adding ones are still catching
        up), as the broker's UnderReplicatedPartitions metric counts it."""
        expected = len(self.replicas) - (len(move.adding) if move else 0)
        return len(self.isr) < expected


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo] = field(default_factory=list)
    topics: list[TopicInfo] = field(default_factory=list)

    def leader_address(self, tp: TopicPartition) -> tuple[str, int] | None:
        nodes = {b.node_id: (b.host, b.port) for b in self.brokers}
        for t in self.topics:
            if t.name == tp[0]:
                for p in t.partitions:
                    if p.partition == tp[1]:
                        return nodes.get(p.leader)
        return None


def metadata(cluster: Cluster, topics: Sequence[str] | None = None) -> ClusterMetadata:
    """Brokers and topics (all of them when `topics` is None); unknown topics raise."""
    body = {
        "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    md = cluster.any().call(METADATA, body, versions=(1, 12))
    found = []
    for t in md.topics:
        check(t.error_code, f"topic {t.name}")
        partitions = tuple(
            sorted(
                (
                    PartitionInfo(
                        int(p.partition_index),
                        int(p.leader_id),
                        int(getattr(p, "leader_epoch", -1)),
                        tuple(int(r) for r in p.replica_nodes),
                        tuple(int(r) for r in p.isr_nodes),
                        tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                    )
                    for p in t.partitions
                ),
                key=lambda p: p.partition,
            )
        )
        topic_id = str(getattr(t, "topic_id", "") or "")
        found.append(TopicInfo(t.name, topic_id, bool(t.is_internal), partitions))
    return ClusterMetadata(
        cluster_id=getattr(md, "cluster_id", None),
        controller_id=int(getattr(md, "controller_id", -1)),
        brokers=sorted(
            (BrokerInfo(int(b.node_id), b.host, int(b.port), b.rack) for b in md.brokers),
            key=lambda b: b.node_id,
        ),
        topics=sorted(found, key=lambda t: t.name),
    )


def topic_as_dict(topic: TopicInfo) -> dict[str, Any]:
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "internal": topic.internal,
        "partition_count": len(topic.partitions),
        "replication_factor": topic.replication_factor,
        "partitions": [
            {**asdict(p), "replicas": list(p.replicas), "isr": list(p.isr)}
            for p in topic.partitions
        ],
    }


def create_topic(
    cluster: Cluster,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    if_not_exists: bool = False,
    validate_only: bool = False,
    timeout_ms: int = 30_000,
) -> bool:
    """CreateTopics on the controller's behalf; False if it existed and `if_not_exists`."""
    response = cluster.any().call(
        CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout": timeout_ms,
            "validate_only": validate_only,
        },
        versions=(2, 7),
    )
    result = response.topics[0]
    if if_not_exists and error_of(result.error_code) == ErrorCode.topic_already_exists:
        return False
    check(result.error_code, f"creating topic {name}", getattr(result, "error_message", None))
    return True


def delete_topics(cluster: Cluster, names: Sequence[str], timeout_ms: int = 30_000) -> None:
    response = cluster.any().call(
        DELETE_TOPICS,
        {
            "topic_names": list(names),
            "topics": [{"name": n, "topic_id": None} for n in names],
            "timeout": timeout_ms,
        },
        versions=(1, 6),
    )
    for result in response.responses:
        check(
            result.error_code,
            f"deleting topic {result.name}",
            getattr(result, "error_message", None),
        )


def add_partitions(cluster: Cluster, name: str, count: int, timeout_ms: int = 30_000) -> None:
    """CreatePartitions: grow `name` to `count` partitions in all."""
    response = cluster.any().call(
        CREATE_PARTITIONS,
        {
            "topics": [{"name": name, "count": count, "assignments": None}],
            "timeout": timeout_ms,
            "validate_only": False,
        },
        versions=(0, 3),
    )
    result = response.results[0]
    check(result.error_code, f"adding partitions to {name}", result.error_message)


@dataclass(frozen=True, slots=True, order=True)
class Reassignment:
    """A partition reassignment in flight: the full replica set and what moves."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def reassign_partitions(
    cluster: Cluster,
    name: str,
    targets: Mapping[int, Sequence[int] | None],
    timeout_ms: int = 30_000,
) -> None:
    """AlterPartitionReassignments: move each partition of `name` to its replicas, or
    cancel its reassignment in flight (None). The call returns once the controller has
    recorded the targets; the replicas then catch up and the old ones are removed."""
    response = cluster.any().call(
        ALTER_PARTITION_REASSIGNMENTS,
        {
            "timeout": timeout_ms,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": p, "replicas": None if r is None else list(r)}
                        for p, r in sorted(targets.items())
                    ],
                }
            ],
        },
        versions=(0, 1),
    )
    check(response.error_code, f"reassigning {name}", response.error_message)
    for topic in response.responses:
        for result in topic.partitions:
            check(
                result.error_code,
                f"reassigning {topic.name}-{result.partition_index}",
                result.error_message,
            )


def list_reassignments(cluster: Cluster, names: Sequence[str] | None = None) -> list[Reassignment]:
    """ListPartitionReassignments: every partition being moved, or those of `names`."""
    wanted = None
    if names:
        md = metadata(cluster, names)
        wanted = [
            {"name": t.name, "partition_indexes": [p.partition for p in t.partitions]}
            for t in md.topics
        ]
    response = cluster.any().call(
        LIST_PARTITION_REASSIGNMENTS, {"timeout": 30_000, "topics": wanted}, versions=(0, 0)
    )
    check(response.error_code, "listing reassignments", response.error_message)
    return sorted(
        Reassignment(
            t.name,
            p.partition_index,
            tuple(p.replicas),
            tuple(p.adding_replicas),
            tuple(p.removing_replicas),
        )
        for t in response.topics
        for p in t.partitions
    )


def reassignments_by_partition(
    cluster: Cluster, names: Sequence[str] | None = None
) -> dict[tuple[str, int], Reassignment]:
    """The reassignments in flight (of `names`, or all), by (topic, partition)."""
    return {(r.topic, r.partition): r for r in list_reassignments(cluster, names)}


def list_offsets(
    cluster: Cluster, partitions: Sequence[TopicPartition], timestamp: int
) -> dict[TopicPartition, int]:
    """ListOffsets of each partition at `timestamp` (or EARLIEST/LATEST), asked of its
    leader. A partition with no offset at or after the time maps to its log end, as
    kafka-consumer-groups resets to the end when a datetime is past the last record."""
    if not partitions:
        return {}
    md = metadata(cluster, sorted({t for t, _ in partitions}))
    by_leader: dict[tuple[str, int], dict[str, list[int]]] = {}
    for tp in partitions:
        address = md.leader_address(tp)
        if address is None:
            raise ClientError(f"no leader for {tp[0]}-{tp[1]}")
        by_leader.setdefault(address, {}).setdefault(tp[0], []).append(tp[1])
    found: dict[TopicPartition, int] = {}
    missing: list[TopicPartition] = []
    for (host, port), grouped in by_leader.items():
        response = cluster.connection(host, port).call(
            LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": t,
                        "partitions": [
                            {
                                "partition_index": p,
                                "current_leader_epoch": -1,
                                "timestamp": timestamp,
                            }
                            for p in ps
                        ],
                    }
                    for t, ps in grouped.items()
                ],
            },
            versions=(1, 7),
        )
        for t in response.topics:
            for p in t.partitions:
                check(p.error_code, f"ListOffsets of {t.name}-{p.partition_index}")
                if int(p.offset) < 0:
                    missing.append((t.name, int(p.partition_index)))
                else:
                    found[(t.name, int(p.partition_index))] = int(p.offset)
    if missing:
        found.update(list_offsets(cluster, missing, LATEST_TIMESTAMP))
    return found


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """What a partition's leader holds: None where no leader answers."""

    start_offset: int | None
    end_offset: int | None
    size: int | None


def partition_stats(
    cluster: Cluster, shown: Sequence[TopicInfo]
) -> dict[TopicPartition, PartitionStats]:
    """Each partition's log start and end offsets (ListOffsets of its leader) and the size
    of the leader's replica (DescribeLogDirs), as kafka-topics and kafka-log-dirs show them."""
    from kbroker.admin.log_dirs import describe_log_dirs

    led = [(t.name, p.partition) for t in shown for p in t.partitions if p.leader >= 0]
    leader_of = {(t.name, p.partition): p.leader for t in shown for p in t.partitions}
    starts: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    sizes: dict[TopicPartition, int] = {}
    if led:
        try:
            starts = list_offsets(cluster, led, EARLIEST_TIMESTAMP)
            ends = list_offsets(cluster, led, LATEST_TIMESTAMP)
        except ClientError:
            pass  # a leader moving or down: its offsets are shown as unknown
        brokers = sorted({leader_of[tp] for tp in led})
        try:
            dirs = describe_log_dirs(cluster, brokers, sorted({t for t, _ in led}))
        except ClientError:
            dirs = []
        for d in dirs:
            for r in d.replicas:
                if leader_of.get((r.topic, r.partition)) == d.broker and not r.future:
                    sizes[(r.topic, r.partition)] = r.size
    return {tp: PartitionStats(starts.get(tp), ends.get(tp), sizes.get(tp)) for tp in leader_of}
