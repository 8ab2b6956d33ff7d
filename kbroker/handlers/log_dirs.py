"""DescribeLogDirs and AlterReplicaLogDirs: this broker's log directories (JBOD).

DescribeLogDirs answers per configured directory, by its absolute path: the replicas
in it with their size and lag, a replica being moved into it as a "future" replica
(`is_future_key`), the file system's total and usable bytes, or KAFKA_STORAGE_ERROR
for a directory that is offline. AlterReplicaLogDirs starts moving replicas between
directories and answers at once, as Kafka does: the move goes on in the background
(kbroker.storage.log_move) and DescribeLogDirs shows when it is done.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.replica.partition import Partition
from kbroker.security.acl import CLUSTER_NAME, Operation, ResourceType
from kbroker.storage.log import PartitionLog
from kbroker.storage.log_move import FUTURE_SUFFIX

ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35
MAX_FILE_NAME = 255
_FUTURE_NAME_EXTRA = len(".") + 32 + len(FUTURE_SUFFIX)  # `<tp>.<uuid hex>-future`


def _absolute(directory: Path) -> str:
    """A log directory as Kafka names it: its absolute path (symlinks kept)."""
    return os.path.abspath(directory)


def _log_dir_of(replica: Partition, log_dirs: Sequence[Path]) -> Path | None:
    """The configured log dir holding the replica's partition directory."""
    parent = os.path.dirname(os.path.abspath(replica.log.directory))
    for directory in log_dirs:
        if _absolute(directory) == parent:
            return directory
    return None


def _wanted_partitions(request: requests.DescribeLogDirsRequest) -> set[tuple[str, int]] | None:
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


# -- DescribeLogDirs -----------------------------------------------------------------------


@handles(DESCRIBE_LOG_DIRS, 0)  # v0 through protocol.legacy_messages
def describe_log_dirs(
    ctx: RequestContext, request: requests.DescribeLogDirsRequest
) -> responses.DescribeLogDirsResponse:
    broker = ctx.broker
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # Kafka answers this request with the error at the top (v3+) and no directories.
        denied = ErrorCode.cluster_authorization_failed
        return {"throttle_time": 0, "error_code": denied, "results": []}
    wanted = _wanted_partitions(request)
    storage = broker.storage
    log_dirs = list(broker.log_dirs)
    by_dir: dict[str, dict[str, list[responses.DescribeLogDirsPartition]]] = {
        _absolute(d): {} for d in log_dirs
    }
    for (topic, partition), replica in sorted(broker.partitions.hosted.items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        directory = _log_dir_of(replica, log_dirs)
        if directory is None:
            continue
        plog = replica.log
        by_dir[_absolute(directory)].setdefault(topic, []).append(
            {
                "partition_index": partition,
                "partition_size": plog.size_bytes(),
                "offset_lag": max(replica.high_watermark - plog.log_end_offset, 0),
                "is_future_key": False,
            }
        )
        move = storage.moves.get((topic, partition))
        if move is not None and _absolute(move.dest_root) in by_dir:
            by_dir[_absolute(move.dest_root)].setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "partition_size": move.copied_bytes,
                    "offset_lag": max(plog.log_end_offset - move.copied_offset(), 0),
                    "is_future_key": True,
                }
            )
    offline = {_absolute(Path(d)) for d in storage.offline_dirs}
    results: list[responses.DescribeLogDirsResult] = []
    for directory in log_dirs:
        path = _absolute(directory)
        result: responses.DescribeLogDirsResult = {
            "error_code": ErrorCode.none,
            "log_dir": path,
            "topics": [
                {"name": topic, "partitions": partitions}
                for topic, partitions in sorted(by_dir[path].items())
            ],
            "total_bytes": -1,
            "usable_bytes": -1,
        }
        try:
            if path in offline:
                raise OSError(f"log directory {path} is offline")
            usage = shutil.disk_usage(directory)
        except OSError:
            result["error_code"] = ErrorCode.kafka_storage_error
            result["topics"] = []
        else:
            result["total_bytes"], result["usable_bytes"] = usage.total, usage.free
        results.append(result)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": results}


# -- AlterReplicaLogDirs --------------------------------------------------------------------


def _log_swapper(replica: Partition) -> Callable[[PartitionLog], None]:
    """What a finished move calls: the replica is served from the moved log from then on."""

    def swapped(plog: PartitionLog) -> None:
        replica.log = plog

    return swapped


def _alter_one(
    ctx: RequestContext, destination: Path | None, topic: str, partition: int
) -> ErrorCode:
    """Kafka's ReplicaManager.alterReplicaLogDirs for one replica."""
    storage = ctx.broker.storage
    if len(f"{topic}-{partition}") + _FUTURE_NAME_EXTRA > MAX_FILE_NAME:
        return ErrorCode.invalid_topic_exception
    if destination is None:
        return ErrorCode.log_dir_not_found
    if str(destination) in storage.offline_dirs:
        return ErrorCode.kafka_storage_error
    if (topic, partition) in storage.failed:
        return ErrorCode.kafka_storage_error
    replica = ctx.broker.partitions.get(topic, partition)
    if replica is None:
        # Kafka remembers the directory for when the replica is created here, and
        # answers REPLICA_NOT_AVAILABLE for now.
        storage.preferred_dirs[(topic, partition)] = destination
        return ErrorCode.replica_not_available
    current = storage.log_dir_of(replica.log)
    if current is not None and str(current) in storage.offline_dirs:
        return ErrorCode.kafka_storage_error
    storage.start_move(topic, partition, destination, _log_swapper(replica))
    return ErrorCode.none


@handles(ALTER_REPLICA_LOG_DIRS, 0)  # v0 through protocol.legacy_messages
def alter_replica_log_dirs(
    ctx: RequestContext, request: requests.AlterReplicaLogDirsRequest
) -> responses.AlterReplicaLogDirsResponse:
    allowed = ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    by_path: dict[str, Path] = {}
    for directory in ctx.broker.log_dirs:
        by_path[_absolute(directory)] = directory
        by_path.setdefault(os.path.realpath(directory), directory)
    results: dict[str, list[responses.AlterReplicaLogDirPartitionResult]] = {}
    for alteration in request.dirs:
        destination = by_path.get(os.path.normpath(alteration.path))
        for t in alteration.topics:
            for partition in t.partitions:
                if allowed:
                    code = _alter_one(ctx, destination, t.name, partition)
                else:
                    code = ErrorCode.cluster_authorization_failed
                results.setdefault(t.name, []).append(
                    {"partition_index": partition, "error_code": code}
                )
    return {
        "throttle_time": 0,
        "results": [
            {"topic_name": name, "partitions": partitions} for name, partitions in results.items()
        ],
    }
