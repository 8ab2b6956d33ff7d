"""Log directories as an operator sees them (Kafka's kafka-log-dirs --describe, and moving
a replica to another directory of its broker).

DescribeLogDirs and AlterReplicaLogDirs are answered by each broker about itself, so
these functions send them to the brokers Metadata names, one connection each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kbroker.admin.client import ClientError, Cluster
from kbroker.admin.topics import BrokerInfo, check, error_of, metadata

ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35


@dataclass(frozen=True, slots=True, order=True)
class ReplicaInDir:
    topic: str
    partition: int
    size: int
    offset_lag: int
    future: bool  # the copy a move is making in this directory


@dataclass(frozen=True, slots=True)
class LogDir:
    broker: int
    path: str
    error: str | None  # Kafka's error name, e.g. KAFKA_STORAGE_ERROR for an offline one
    total_bytes: int
    usable_bytes: int
    replicas: tuple[ReplicaInDir, ...]


def _broker(brokers: Sequence[BrokerInfo], node_id: int) -> BrokerInfo:
    for b in brokers:
        if b.node_id == node_id:
            return b
    raise ClientError(f"broker {node_id} is not in the cluster's metadata")


def describe_log_dirs(
    cluster: Cluster, brokers: Sequence[int] | None = None, topics: Sequence[str] | None = None
) -> list[LogDir]:
    """Every log directory of the named brokers (all when None), with the replicas of
    `topics` (all when None) each holds."""
    md = metadata(cluster, topics)
    wanted = None
    if topics is not None:
        wanted = [
            {"topic": t.name, "partitions": [p.partition for p in t.partitions]} for t in md.topics
        ]
    targets = md.brokers if brokers is None else [_broker(md.brokers, b) for b in brokers]
    found: list[LogDir] = []
    for broker in targets:
        conn = cluster.connection(broker.host, broker.port)
        response = conn.call(DESCRIBE_LOG_DIRS, {"topics": wanted}, versions=(1, 4))
        check(getattr(response, "error_code", 0), f"describing log dirs of broker {broker.node_id}")
        for result in response.results:
            error = error_of(result.error_code)
            found.append(
                LogDir(
                    broker.node_id,
                    result.log_dir,
                    None if error == ErrorCode.none else error.name.upper(),
                    int(getattr(result, "total_bytes", -1)),
                    int(getattr(result, "usable_bytes", -1)),
                    tuple(
                        sorted(
                            ReplicaInDir(
                                t.name,
                                int(p.partition_index),
                                int(p.partition_size),
                                int(p.offset_lag),
                                bool(p.is_future_key),
                            )
                            for t in result.topics
                            for p in t.partitions
                        )
                    ),
                )
            )
    return sorted(found, key=lambda d: (d.broker, d.path))


def move_replica(cluster: Cluster, topic: str, partition: int, broker: int, path: str) -> None:
    """AlterReplicaLogDirs: ask `broker` to move its replica of `topic`-`partition` into
    its log directory `path` (an absolute path). The broker starts the copy and answers
    at once; describe_log_dirs shows the future replica until it takes over."""
    target = _broker(metadata(cluster, [topic]).brokers, broker)
    conn = cluster.connection(target.host, target.port)
    response = conn.call(
        ALTER_REPLICA_LOG_DIRS,
        {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [partition]}]}]},
        versions=(1, 2),
    )
    for t in response.results:
        for p in t.partitions:
            check(p.error_code, f"moving {t.topic_name}-{p.partition_index} on broker {broker}")
