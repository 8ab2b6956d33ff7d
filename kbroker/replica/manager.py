"""The partitions this broker hosts, found by name: where requests meet `Partition`s.

The manager opens a partition's log when the metadata assigns it here and hands the
partition its role from the controller's record (leader, epochs, replicas, ISR).
Everything a request does with a partition then goes through that `Partition`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kbroker.controller.state import MetadataState, PartitionInfo
from kbroker.replica.append import RecordValidation, TransactionVerifier, append_records
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.fetcher import ReplicaFetchers
from kbroker.replica.partition import Partition
from kbroker.replica.replication_quota import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    ReplicationQuota,
)
from kbroker.storage.log import LogConfig, PartitionLog
from kbroker.storage.manager import LogManager

log = logging.getLogger("kbroker.replica")
# Partitions of a deleted topic stopped in one loop step (drop_topic); Partition.stop is
# a few microseconds.
_STOP_SLICE = 1024

IsrChanges = Callable[[Partition, tuple[int, ...]], Awaitable[PartitionInfo]]
"""Proposes a leader's new ISR to the controller (AlterPartition); the committed partition."""


@dataclass(slots=True)
class IsrChangeCounts:
    """Kafka's ReplicaManager meters IsrShrinksPerSec, IsrExpandsPerSec and
    FailedIsrUpdatesPerSec: changes to the ISR of partitions this broker leads, whoever
    made them (its own AlterPartition, or the controller fencing a dead follower, as
    Kafka's documentation describes: "if a broker goes down, ISR for some of the
    partitions will shrink"), and its AlterPartition proposals that were not committed."""

    shrinks: int = 0
    expands: int = 0
    failed_updates: int = 0

    def count(self, before: tuple[int, ...], after: tuple[int, ...]) -> None:
        if any(r not in after for r in before):
            self.shrinks += 1
        if any(r not in before for r in after):
            self.expands += 1


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
        # Set by a broker in a cluster: the followers' fetchers and the controller's
        # AlterPartition. Without them (a test's bare manager) roles still apply.
        self.fetchers: ReplicaFetchers | None = None
        self.isr_changes: IsrChanges | None = None
        self._proposals: set[asyncio.Task[None]] = set()
        # Partitions of deleted topics, no longer hosted, not yet stopped (drop_topic).
        self._to_stop: deque[Partition] = deque()
        self._stopping: set[asyncio.Task[None]] = set()
        self.logs = logs
        self.waiters = waiters
        self.hosted: dict[tuple[str, int], Partition] = {}
        logs.dir_failure_listeners.append(self._logs_lost)
        self.isr_changes_seen = IsrChangeCounts()
        # The produce-path policies above this layer, set by the broker: broker-side
        # schema validation and KIP-890's verification of transactional batches.
        self.record_validation: RecordValidation | None = None
        self.transaction_verifier: TransactionVerifier | None = None
        # Replication throttling (KIP-73): what this broker sends to followers, and what
        # its fetchers take, for the replicas its topics list; bounds set by the broker.
        self.leader_quota = ReplicationQuota(node_id, LEADER_REPLICAS, self._topic_configs)
        self.follower_quota = ReplicationQuota(node_id, FOLLOWER_REPLICAS, self._topic_configs)

    def leader_throttled(self, topic: str, index: int, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle but the rate: a follower out of the partition's
        ISR fetching a replica its topic lists for leader throttling."""
        partition = self.hosted.get((topic, index))
        return (
            partition is not None
            and replica_id not in partition.isr
            and self.leader_quota.is_throttled(topic, index)
        )

    def _topic_configs(self, topic: str) -> Mapping[str, str]:
        info = self.metadata().topics.get(topic) if self.metadata is not None else None
        return info.configs if info is not None else {}

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
        if current_leader_epoch < 0 and found.leader_id == found.node_id:
            return found, ErrorCode.none  # check_leader's answer, without its call
        code = found.check_leader(current_leader_epoch)
        return (None, code) if code else (found, code)

    # The one way to append as leader (Kafka's appendRecords): kbroker/replica/append.py.
    append_records = append_records

    def ensure(
        self,
        topic: str,
        info: PartitionInfo,
        config: LogConfig,
        min_insync_replicas: int = 1,
        is_new: bool = True,
    ) -> Partition:
        """Open (or create) the log of a partition assigned to this broker and give the
        partition the role the metadata records (`is_new`: assigned since this start)."""
        key = (topic, info.partition)
        found = self.hosted.get(key)
        if found is None:
            plog = self.logs.get(topic, info.partition) or self.logs.create(
                topic, info.partition, config, is_new=is_new
            )
            found = Partition(topic, info.partition, plog, self.node_id, self.waiters)
            self.hosted[key] = found
        found.min_insync_replicas = min_insync_replicas
        self.apply(found, info)
        return found

    def apply(self, found: Partition, info: PartitionInfo) -> bool:
        """Become leader or follower as `info` says (Kafka's makeLeader / makeFollower);
        True when the leadership changed. A new follower fetches from its leader,
        truncating first; a leader proposes ISR changes to the controller."""
        if info.leader == self.node_id:
            if self.fetchers is not None:
                self.fetchers.unfollow(found.key)
            found.isr_proposer = self._propose_isr if self.isr_changes is not None else None
            led, epoch, before = found.is_leader, found.leader_epoch, found.isr
            new = found.become_leader(
                info.leader_epoch, info.partition_epoch, info.replicas, info.isr, _now_ms()
            )
            if led and not new and found.leader_epoch == epoch:
                self.isr_changes_seen.count(before, found.isr)
            return new
        changed = found.become_follower(
            info.leader, info.leader_epoch, info.partition_epoch, info.replicas, info.isr
        )
        # A role taken before the fetchers existed (metadata applied while this broker was
        # still registering at start) has no fetcher yet: it gets one now, else it would
        # never fetch (nor rejoin the ISR) until its leader or epoch changed.
        if self.fetchers is not None and (changed or not self.fetchers.fetching(found)):
            self.fetchers.follow(found)
        return changed

    def remove(self, topic: str, partition: int) -> None:
        """This broker is no longer a replica of the partition (a reassignment moved it
        away): stop fetching, fail what waits on it, and delete its log, as Kafka
        deletes the partition's directory on a removed replica."""
        key = (topic, partition)
        found = self.hosted.pop(key, None)
        if found is None:
            return
        if self.fetchers is not None:
            self.fetchers.unfollow(key)
        found.stop()
        self.logs.delete_log(topic, partition)
        log.info("%s-%d is no longer assigned here; its log is deleted", topic, partition)

    def _logs_lost(self, keys: list[tuple[str, int]]) -> None:
        """A failing log directory took these partitions' logs: they are hosted here no
        more (requests waiting on them are answered; a follower stops fetching)."""
        for key in keys:
            if self.fetchers is not None:
                self.fetchers.unfollow(key)
            found = self.hosted.pop(key, None)
            if found is not None:
                found.stop()

    def drop_topic(self, topic: str) -> None:
        """The topic was deleted: its partitions are neither hosted nor followed from this
        step on, since a topic of the same name may come back in the next. A large topic's
        partitions are then stopped (their waiting requests answered) a slice at a time,
        as its logs are retired: deleting 10,000 partitions in one step held the loop for
        some 70-110 ms. A stop reads nothing by its key but the waiters it wakes, which
        a new partition of that key would only see as a spurious wake-up."""
        hosted = self.hosted
        keys = [k for k in hosted if k[0] == topic]
        dropped = [hosted.pop(key) for key in keys]
        if self.fetchers is not None:
            for key in keys:
                self.fetchers.unfollow(key)
        if len(dropped) <= _STOP_SLICE:
            for partition in dropped:
                partition.stop()
            self.logs.delete_topic(topic)
            return
        self.logs.delete_topic(topic)
        self._to_stop.extend(dropped)
        try:
            task = asyncio.get_running_loop().create_task(self._stop_slices())
        except RuntimeError:  # no loop (tools, tests): all at once
            self._stop_dropped(len(self._to_stop))
            return
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stop_slices(self) -> None:
        while self._to_stop:
            self._stop_dropped(_STOP_SLICE)
            await asyncio.sleep(0)

    def _stop_dropped(self, count: int) -> None:
        to_stop = self._to_stop
        for _ in range(min(count, len(to_stop))):
            to_stop.popleft().stop()

    # -- the ISR --------------------------------------------------------------------------

    def _propose_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        task = asyncio.get_running_loop().create_task(self._send_isr(partition, isr))
        self._proposals.add(task)
        task.add_done_callback(self._proposals.discard)

    async def _send_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        assert self.isr_changes is not None
        epoch = partition.leader_epoch
        try:
            info = await self.isr_changes(partition, isr)
        except Exception as exc:  # refused or not committed: the next check tries again
            log.info("ISR %s for %s-%d not committed: %s", isr, *partition.key, exc)
            self.isr_changes_seen.failed_updates += 1
            partition.isr_proposal_failed()
            return
        if partition.is_leader and partition.leader_epoch == epoch:
            log.info("%s-%d ISR is now %s", partition.topic, partition.index, list(info.isr))
            before = partition.isr
            partition.update_isr(info.isr, info.partition_epoch)
            self.isr_changes_seen.count(before, partition.isr)

    async def run_isr_checks(self, lag_time_max_ms: int) -> None:
        """Kafka's isr-expiration task: every half of replica.lag.time.max.ms, each led
        partition drops the followers that have not caught up within it."""
        while True:
            await asyncio.sleep(lag_time_max_ms / 2000)
            now = _now_ms()
            for partition in list(self.hosted.values()):
                if partition.is_leader and len(partition.isr) > 1:
                    partition.maybe_shrink_isr(now, lag_time_max_ms)

    async def run_high_watermark_checkpoints(self, interval_ms: int) -> None:
        """Kafka's replica.high.watermark.checkpoint.interval.ms task: each replicated
        partition whose high watermark moved writes it to its checkpoint, so a restarted
        broker neither exposes nor assumes records that were never committed. A single
        replica needs none: as leader its high watermark is its log end.

        The files are written in a worker thread: replacing a file may wait for the disk
        (ext4 writes the new file's data before the rename), tens of milliseconds on a
        busy one, which on the event loop would hold every request behind it."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            logs = [p.log for p in list(self.hosted.values()) if len(p.replicas) > 1]
            await asyncio.to_thread(_checkpoint_high_watermarks, logs)

    async def stop(self) -> None:
        if self.fetchers is not None:
            await self.fetchers.stop()
        for task in list(self._proposals):
            task.cancel()
        for task in list(self._stopping):
            task.cancel()
        self._stop_dropped(len(self._to_stop))


def _checkpoint_high_watermarks(logs: list[PartitionLog]) -> None:
    for partition_log in logs:
        try:
            partition_log.checkpoint_high_watermark()
        except OSError as exc:
            log.warning(
                "high watermark checkpoint of %s-%d: %s",
                partition_log.topic,
                partition_log.partition,
                exc,
            )


def _now_ms() -> int:
    return int(time.time() * 1000)
