"""The partitions this broker hosts, found by name: where requests meet `Partition`s.

The manager opens a partition's log when the metadata assigns it here and hands the
partition its role from the controller's record (leader, epochs, replicas, ISR).
Everything a request does with a partition then goes through that `Partition`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from kbroker.controller.state import MetadataState, PartitionInfo
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.partition import Partition
from kbroker.storage.log import LogConfig
from kbroker.storage.manager import LogManager

log = logging.getLogger("kbroker.replica")


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        waiters: DataWaiters,
        metadata: Callable[[], MetadataState] | None = None,
    ) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.logs = logs
        self.waiters = waiters
        self.hosted: dict[tuple[str, int], Partition] = {}

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.hosted.get((topic, partition))

    def leader(
        self, topic: str, partition: int, current_leader_epoch: int = -1
    ) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker leads it (at the client's epoch, if given), else
        None and why: NOT_LEADER_OR_FOLLOWER (also when another broker holds the
        partition), UNKNOWN_TOPIC_OR_PARTITION when no broker does, or an epoch error."""
        found = self.hosted.get((topic, partition))
        if found is None:
            if self.metadata is not None:
                return None, ErrorCode(self.metadata().missing_replica_error(topic, partition))
            return None, ErrorCode.unknown_topic_or_partition
        code = found.check_leader(current_leader_epoch)
        return (None, code) if code else (found, code)

    def ensure(
        self, topic: str, info: PartitionInfo, config: LogConfig, min_insync_replicas: int = 1
    ) -> Partition:
        """Open (or create) the log of a partition assigned to this broker and give the
        partition the role the metadata records."""
        key = (topic, info.partition)
        found = self.hosted.get(key)
        if found is None:
            plog = self.logs.get(topic, info.partition) or self.logs.create(
                topic, info.partition, config
            )
            found = Partition(topic, info.partition, plog, self.node_id, self.waiters)
            self.hosted[key] = found
        found.min_insync_replicas = min_insync_replicas
        self.apply(found, info)
        return found

    def apply(self, found: Partition, info: PartitionInfo) -> bool:
        """Become leader or follower as `info` says; True when the leadership changed."""
        if info.leader == self.node_id:
            return found.become_leader(
                info.leader_epoch, info.partition_epoch, info.replicas, info.isr, _now_ms()
            )
        return found.become_follower(
            info.leader, info.leader_epoch, info.partition_epoch, info.replicas, info.isr
        )

    def drop_topic(self, topic: str) -> None:
        for key in [k for k in self.hosted if k[0] == topic]:
            self.hosted.pop(key).stop()
        self.logs.delete_topic(topic)


def _now_ms() -> int:
    return int(time.time() * 1000)
