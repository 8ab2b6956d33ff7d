"""Partitions this broker holds: where produce appends and fetch reads meet the logs.

The replica manager owns the high watermark. On a single node every replica is the
leader and the ISR is just itself, so an append is committed once written; the
cluster issue adds followers, whose fetch offsets will move the high watermark here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kbroker.server.waiters import DataWaiters
from kbroker.storage.log import AppendResult, LogConfig, PartitionLog
from kbroker.storage.manager import LogManager
from kbroker.storage.producer_state import CLIENT

log = logging.getLogger("kbroker.replica")


@dataclass(slots=True)
class Replica:
    """This broker's copy of one partition."""

    topic: str
    partition: int
    log: PartitionLog
    leader_epoch: int
    is_leader: bool = True
    # The broker leading the partition as this broker last heard from the controller.
    leader_id: int = -1


class ReplicaManager:
    def __init__(self, logs: LogManager, waiters: DataWaiters) -> None:
        self.logs = logs
        self.waiters = waiters
        self.replicas: dict[tuple[str, int], Replica] = {}

    def get(self, topic: str, partition: int) -> Replica | None:
        return self.replicas.get((topic, partition))

    def ensure(self, topic: str, partition: int, leader_epoch: int, config: LogConfig) -> Replica:
        """Open (or create) the log of a partition assigned to this broker."""
        key = (topic, partition)
        replica = self.replicas.get(key)
        if replica is None:
            plog = self.logs.get(topic, partition) or self.logs.create(topic, partition, config)
            plog.high_watermark = max(plog.high_watermark, plog.log_end_offset)
            replica = Replica(topic, partition, plog, leader_epoch)
            self.replicas[key] = replica
        else:
            replica.leader_epoch = leader_epoch
        return replica

    def become_leader(
        self, topic: str, partition: int, leader_id: int, leader_epoch: int, config: LogConfig
    ) -> Replica:
        """The controller made this broker the partition's leader at `leader_epoch`."""
        replica = self.ensure(topic, partition, leader_epoch, config)
        replica.is_leader = True
        replica.leader_id = leader_id
        return replica

    def become_follower(
        self, topic: str, partition: int, leader_id: int, leader_epoch: int, config: LogConfig
    ) -> Replica:
        """The controller made another broker (or nobody: -1) the leader at
        `leader_epoch`; produce and consume requests here get NOT_LEADER_OR_FOLLOWER."""
        replica = self.ensure(topic, partition, leader_epoch, config)
        replica.is_leader = False
        replica.leader_id = leader_id
        self.waiters.wake((topic, partition))  # parked fetches answer with the new role
        return replica

    def drop_topic(self, topic: str) -> None:
        for key in [k for k in self.replicas if k[0] == topic]:
            del self.replicas[key]
            self.waiters.wake(key)
        self.logs.delete_topic(topic)

    def append(
        self,
        replica: Replica,
        records: bytearray | memoryview,
        now_ms: int,
        origin: int = CLIENT,
        issued_producer_ids: int | None = None,
    ) -> AppendResult:
        """Append as leader; with no followers the write is committed at once. `origin`
        (storage.producer_state) is CLIENT for produce, COORDINATOR for markers;
        `issued_producer_ids` is the first producer id never handed out."""
        plog = replica.log
        result = plog.append(records, replica.leader_epoch, now_ms, origin, issued_producer_ids)
        plog.high_watermark = plog.log_end_offset
        self.waiters.wake((replica.topic, replica.partition))
        return result


def leader_epoch_error(replica: Replica, requested: int) -> int:
    """Kafka's check of a client's current_leader_epoch: 0 if it matches or is unset (-1),
    FENCED_LEADER_EPOCH (74) if the client is behind, UNKNOWN_LEADER_EPOCH (75) if ahead."""
    if requested < 0 or requested == replica.leader_epoch:
        return 0
    return 74 if requested < replica.leader_epoch else 75
