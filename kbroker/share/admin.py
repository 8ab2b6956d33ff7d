"""The group coordinator's admin operations over share groups' stored states.

Kafka's GroupCoordinator serves DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets (and DeleteGroups of a share group) by asking the share
coordinators, through the persister, for what they store; the lag it reports needs each
data partition's high watermark, asked of its leader wherever it is. Those paths are
here, apart from the share coordinator that stores the states
(`kbroker.share.state_service`) and the share-partition leader that changes them
(`kbroker.share.fetch_path`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.protocol.messages import build
from kbroker.replica.broker_link import BrokerLinks
from kbroker.share.coordinates import STATE_TOPIC, ShareBroker
from kbroker.share.partition_state import SharePartitionState
from kbroker.share.persister import Initialized, StoredRead
from kbroker.share.records import StateKey

if TYPE_CHECKING:
    from kbroker.share.state_service import ShareStateService

log = logging.getLogger("kbroker.share")

LIST_OFFSETS = 2
LATEST_TIMESTAMP = -1
# A lag's high watermark is asked of the partition's leader within this, retry included,
# so that DescribeShareGroupOffsets answers (the lag unknown only if the leader cannot be
# asked) before its client's request times out (the kbroker CLI waits 10 s).
LAG_TIMEOUT_S = 5.0


class ShareAdmin:
    """What the group coordinator's share-group admin APIs ask of stored states: which
    share-partitions a group has, what is stored for them, their lag, and starting them
    again or deleting them at their share coordinators."""

    def __init__(self, broker: ShareBroker, state: ShareStateService) -> None:
        self.broker = broker
        self.state = state
        self.coordinator = state.coordinator
        self._offset_links = BrokerLinks(broker, "share-lag", "share lag", log)

    def close(self) -> None:
        self._offset_links.close()

    def state_keys(self, group_id: str, topics: Iterable[str] | None = None) -> list[StateKey]:
        """The share-partitions of a group on `topics` (None: every topic but the
        internal ones), whether or not they have a state."""
        state = self.broker.controller.state
        names = [n for n in state.topics if not n.startswith("__")] if topics is None else topics
        return [
            (group_id, info.topic_id, p.partition)
            for name in names
            if (info := state.topics.get(name)) is not None
            for p in info.partitions
        ]

    async def stored_states(self, keys: list[StateKey]) -> dict[StateKey, StoredRead]:
        """What the share coordinators store for the share-partitions, wherever they are."""
        if not keys or STATE_TOPIC not in self.broker.controller.state.topics:
            return dict.fromkeys(keys, (ErrorCode.none, None, 0))
        return await self.state.persister.read_many(keys)

    async def lags(
        self, group_id: str, states: dict[tuple[str, int], dict[str, Any]]
    ) -> dict[tuple[str, int], int]:
        """KIP-1226's lag of share-partitions, as Kafka's group coordinator works it out:
        the data partition's high watermark, asked of its leader wherever it is, less the
        share-partition start offset and the records past it whose delivery is complete
        (acknowledged or archived), from the stored state (`states`, snapshots by topic
        and partition). A partition whose leader does not answer has no lag (-1)."""
        ends = await self.high_watermarks(list(states))
        coordinator = self.coordinator
        lags: dict[tuple[str, int], int] = {}
        for tp, data in states.items():
            end = ends.get(tp)
            if end is None:
                lags[tp] = -1
                continue
            state = SharePartitionState.from_snapshot(
                data,
                coordinator.configs.delivery_limit(group_id),
                coordinator.configs.max_record_locks(group_id),
            )
            lags[tp] = state.lag(end)
        return lags

    async def high_watermarks(
        self, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """The high watermark of each partition, from this broker's replica where it leads
        the partition, else asked of its leader (ListOffsets, latest, read uncommitted);
        a partition whose leader cannot be asked is left out."""
        state = self.broker.controller.state
        found: dict[tuple[str, int], int] = {}
        elsewhere: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            replica, _ = self.broker.replicas.leader(topic, partition)
            if replica is not None:
                found[(topic, partition)] = replica.high_watermark
                continue
            info = state.topics.get(topic)
            if info is None or not 0 <= partition < len(info.partitions):
                continue
            leader = info.partitions[partition].leader
            if leader >= 0 and leader != self.broker.node_id:
                elsewhere.setdefault(leader, {}).setdefault(topic, []).append(partition)
        answers = await asyncio.gather(
            *(self._list_latest(leader, topics) for leader, topics in elsewhere.items())
        )
        for answer in answers:
            found.update(answer)
        return found

    async def _list_latest(
        self, leader: int, topics: dict[str, list[int]]
    ) -> dict[tuple[str, int], int]:
        request = build(
            load_request_schema(LIST_OFFSETS, 7),
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "current_leader_epoch": -1,
                                "timestamp": LATEST_TIMESTAMP,
                            }
                            for p in partitions
                        ],
                    }
                    for topic, partitions in topics.items()
                ],
            },
        )
        response = None
        deadline = time.monotonic() + LAG_TIMEOUT_S
        # A link that broke since it was last used (the leader restarted) fails at once
        # and is dropped: ask again over a new connection, within the same deadline.
        for _ in range(2):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            response = await self._offset_links.call(leader, request, left)
            if response is not None:
                break
        if response is None:
            return {}
        return {
            (t.name, int(p.partition_index)): int(p.offset)
            for t in response.topics
            for p in t.partitions
            if int(p.error_code) == 0 and int(p.offset) >= 0
        }

    async def alter_start_offsets(
        self, items: list[tuple[StateKey, str, int]]
    ) -> dict[StateKey, ErrorCode]:
        """Start share-partitions again at offsets (key, topic, offset), under a newer
        state epoch: the leader of each, if it holds one, is fenced and reads it again."""
        if STATE_TOPIC not in self.broker.controller.state.topics:
            error = await self.state.ensure_topic()
            if error != ErrorCode.none:
                return {key: error for key, _, _ in items}
        read = await self.stored_states([key for key, _, _ in items])
        outcome: dict[StateKey, ErrorCode] = {}
        initialized: list[Initialized] = []
        for key, topic, offset in items:
            code, stored, state_epoch = read[key]
            if code != ErrorCode.none:
                outcome[key] = code
            else:
                next_epoch = state_epoch + 1 if stored is not None else state_epoch
                initialized.append((key, topic, next_epoch, offset))
        outcome.update(await self.state.persister.initialize(initialized))
        for key in outcome:
            self.coordinator.leader.drop(key)  # a state held here is read again when next fetched
        return outcome

    async def delete_states(self, keys: list[StateKey]) -> dict[StateKey, ErrorCode]:
        """Delete the stored states among `keys`, wherever their share coordinators are."""
        read = await self.stored_states(keys)
        existing = [k for k, (code, stored, _) in read.items() if stored is not None]
        outcome = {k: code for k, (code, _, _) in read.items()}
        outcome.update(await self.state.persister.delete(existing))
        for key in keys:
            self.coordinator.leader.drop(key)
        return outcome
