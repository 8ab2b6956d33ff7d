"""Reading and writing share-partition states at their share coordinator (KIP-932's
persister).

The leader of a data partition holds its share-partitions; their states are stored by
the share coordinator, the leader of the `__share_group_state` partition the key
"group:topicId:partition" hashes to. When that is this broker, the call is local;
otherwise it goes to that broker with ReadShareGroupState (API 84) or
WriteShareGroupState (API 85), as Kafka's brokers send them. While the coordinator
moves (its broker died, or is loading the partition), a call is tried again for a few
seconds against the leader the metadata names next.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.coordinator_runtime.internal_topics import ServiceBroker
from kbroker.protocol.messages import build
from kbroker.replica.broker_link import BrokerLinks
from kbroker.share.records import StateKey
from kbroker.share.state_store import (
    ShareStateStore,
    from_state_batches,
    state_batch_fields,
    state_epoch_of,
    to_state_batches,
)

log = logging.getLogger("kbroker.share.persister")

INITIALIZE_SHARE_GROUP_STATE = 83
READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
DELETE_SHARE_GROUP_STATE = 86
STATE_TOPIC = "__share_group_state"
RETRY_S = 5.0
BACKOFF_S = 0.1
CALL_TIMEOUT_S = 10.0
RETRIABLE = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_leader_or_follower,
        ErrorCode.request_timed_out,
    }
)

# (error, stored state or None when there is none, its state epoch)
StoredRead = tuple[ErrorCode, bytes | None, int]
# (share-partition, its state or None to delete it, leader epoch of its data partition)
Written = tuple[StateKey, bytes | None, int]
StateBatch = tuple[int, int, int, int]  # first offset, last offset, state, deliveries
# (share-partition, its topic's name, the new state epoch, the offset it starts at)
Initialized = tuple[StateKey, str, int, int]
T = TypeVar("T", bound=tuple[Any, ...])


class StateHost(Protocol):
    """The share coordinator of this broker (kbroker.share.state_service.ShareStateService)."""

    def read_here(self, key: StateKey, leader_epoch: int) -> Awaitable[StoredRead]: ...

    def summary_here(self, key: StateKey) -> StoredRead: ...

    def write_here(
        self, partition: int, writes: list[Written]
    ) -> Awaitable[dict[StateKey, ErrorCode]]: ...

    def initialize_here(
        self, partition: int, items: list[Initialized]
    ) -> Awaitable[dict[StateKey, ErrorCode]]: ...

    def delete_here(
        self, partition: int, keys: list[StateKey]
    ) -> Awaitable[dict[StateKey, ErrorCode]]: ...


class Persister:
    def __init__(self, broker: ServiceBroker, host: StateHost, store: ShareStateStore) -> None:
        self.broker = broker
        self.host = host
        self.store = store
        self._links = BrokerLinks(broker, "share-persister", "share state", log, one_at_a_time=True)

    def close(self) -> None:
        self._links.close()

    # -- reading --------------------------------------------------------------------------

    async def read(self, key: StateKey, leader_epoch: int) -> StoredRead:
        """The stored state of a share-partition (None when it has none yet) and its
        state epoch."""
        return await _retrying(lambda: self._read_once(key, leader_epoch))

    async def _read_once(self, key: StateKey, leader_epoch: int) -> StoredRead:
        leader = self._coordinator_of(key)
        if leader is None:
            return ErrorCode.coordinator_not_available, None, 0
        if leader == self.broker.node_id:
            return await self.host.read_here(key, leader_epoch)
        group_id, topic_id, partition = key
        request = build(
            load_request_schema(READ_SHARE_GROUP_STATE, 0),
            {
                "group_id": group_id,
                "topics": [
                    {
                        "topic_id": topic_id,
                        "partitions": [{"partition": partition, "leader_epoch": leader_epoch}],
                    }
                ],
            },
        )
        response = await self._links.call(leader, request, CALL_TIMEOUT_S)
        if response is None:
            return ErrorCode.coordinator_not_available, None, 0
        for result in response.results:
            for p in result.partitions:
                if result.topic_id != topic_id or p.partition != partition:
                    continue
                code = ErrorCode(p.error_code)
                if code != ErrorCode.none:
                    return code, None, 0
                if p.start_offset < 0:
                    return ErrorCode.none, None, p.state_epoch  # not initialized yet
                topic = self.broker.controller.state.topics_by_id.get(topic_id)
                batches = state_batches(p.state_batches)
                name = topic.name if topic is not None else ""
                value = from_state_batches(
                    name, p.start_offset, batches, leader_epoch, p.state_epoch
                )
                return ErrorCode.none, value, p.state_epoch
        return ErrorCode.unknown_server_error, None, 0

    # -- writing --------------------------------------------------------------------------

    async def write(
        self, writes: dict[StateKey, tuple[bytes | None, int]]
    ) -> dict[StateKey, ErrorCode]:
        """Store the states at their share coordinators; each one's outcome."""
        items = [(key, value, epoch) for key, (value, epoch) in writes.items()]
        return await self._by_partition(items, self._write_once)

    async def initialize(self, items: list[Initialized]) -> dict[StateKey, ErrorCode]:
        """Start states again at an offset under a newer state epoch (the group's
        coordinator does, for AlterShareGroupOffsets)."""
        return await self._by_partition(items, self._initialize_once)

    async def delete(self, keys: list[StateKey]) -> dict[StateKey, ErrorCode]:
        """Delete stored states (DeleteGroups, DeleteShareGroupOffsets)."""
        return await self._by_partition([(k,) for k in keys], self._delete_once)

    async def read_many(self, keys: list[StateKey]) -> dict[StateKey, StoredRead]:
        """Stored states as committed (fencing no leader), one request per coordinator:
        asked with no leader epoch (-1), ReadShareGroupState is answered so."""
        by_leader: dict[int | None, list[StateKey]] = {}
        for key in keys:
            by_leader.setdefault(self._coordinator_of(key), []).append(key)
        found: dict[StateKey, StoredRead] = {}
        for leader, wanted in by_leader.items():
            if leader is None:
                found.update(dict.fromkeys(wanted, (ErrorCode.coordinator_not_available, None, 0)))
            elif leader == self.broker.node_id:
                found.update({key: self.host.summary_here(key) for key in wanted})
            else:
                found.update(await self._send_reads(leader, wanted))
        return found

    async def _send_reads(self, leader: int, keys: list[StateKey]) -> dict[StateKey, StoredRead]:
        found: dict[StateKey, StoredRead] = {}
        by_group: dict[str, dict[Any, list[int]]] = {}
        for group_id, topic_id, partition in keys:
            by_group.setdefault(group_id, {}).setdefault(topic_id, []).append(partition)
        names = self.broker.controller.state.topics_by_id
        for group_id, topics in by_group.items():
            request = build(
                load_request_schema(READ_SHARE_GROUP_STATE, 0),
                {
                    "group_id": group_id,
                    "topics": [
                        {
                            "topic_id": t,
                            "partitions": [{"partition": p, "leader_epoch": -1} for p in ps],
                        }
                        for t, ps in topics.items()
                    ],
                },
            )
            response = await self._links.call(leader, request, CALL_TIMEOUT_S)
            for result in response.results if response is not None else ():
                info = names.get(result.topic_id)
                for p in result.partitions:
                    key = (group_id, result.topic_id, p.partition)
                    value = None
                    if p.error_code == 0 and p.start_offset >= 0:
                        value = from_state_batches(
                            info.name if info is not None else "",
                            p.start_offset,
                            state_batches(p.state_batches),
                            -1,
                            p.state_epoch,
                        )
                    found[key] = (ErrorCode(p.error_code), value, p.state_epoch)
        missing = (ErrorCode.coordinator_not_available, None, 0)
        return {key: found.get(key, missing) for key in keys}

    async def _by_partition(
        self,
        items: list[T],
        once: Callable[[int, list[T]], Awaitable[dict[StateKey, ErrorCode]]],
    ) -> dict[StateKey, ErrorCode]:
        """Each item (its key first) sent to its partition's coordinator, tried again
        while the answer is retriable and the time allows; each key's outcome."""
        by_partition: dict[int, list[T]] = {}
        for item in items:
            key: StateKey = item[0]
            by_partition.setdefault(self.store.partition_of(key), []).append(item)

        async def one(partition: int, pending: list[T]) -> dict[StateKey, ErrorCode]:
            outcome: dict[StateKey, ErrorCode] = {}
            deadline = time.monotonic() + RETRY_S
            while True:
                got = await once(partition, pending)
                outcome.update(got)
                pending = [i for i in pending if got.get(i[0]) in RETRIABLE]
                if not pending or time.monotonic() >= deadline:
                    return outcome
                await asyncio.sleep(BACKOFF_S)

        outcomes = await asyncio.gather(*(one(p, its) for p, its in sorted(by_partition.items())))
        return {key: code for outcome in outcomes for key, code in outcome.items()}

    async def _initialize_once(
        self, partition: int, items: list[Initialized]
    ) -> dict[StateKey, ErrorCode]:
        leader = self._leader(partition)
        if leader is None:
            return {i[0]: ErrorCode.coordinator_not_available for i in items}
        if leader == self.broker.node_id:
            return await self.host.initialize_here(partition, items)
        outcome: dict[StateKey, ErrorCode] = {}
        by_group: dict[str, list[Initialized]] = {}
        for item in items:
            by_group.setdefault(item[0][0], []).append(item)
        for group_id, its in by_group.items():
            topics: dict[Any, list[dict[str, Any]]] = {}
            for (_, topic_id, p), _, state_epoch, start in its:
                topics.setdefault(topic_id, []).append(
                    {"partition": p, "state_epoch": state_epoch, "start_offset": start}
                )
            request = build(
                load_request_schema(INITIALIZE_SHARE_GROUP_STATE, 0),
                {
                    "group_id": group_id,
                    "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
                },
            )
            outcome.update(await self._outcomes(leader, group_id, request, [i[0] for i in its]))
        return outcome

    async def _delete_once(
        self, partition: int, items: list[tuple[StateKey]]
    ) -> dict[StateKey, ErrorCode]:
        keys = [k for (k,) in items]
        leader = self._leader(partition)
        if leader is None:
            return dict.fromkeys(keys, ErrorCode.coordinator_not_available)
        if leader == self.broker.node_id:
            return await self.host.delete_here(partition, keys)
        outcome: dict[StateKey, ErrorCode] = {}
        by_group: dict[str, dict[Any, list[int]]] = {}
        for group_id, topic_id, p in keys:
            by_group.setdefault(group_id, {}).setdefault(topic_id, []).append(p)
        for group_id, topics in by_group.items():
            request = build(
                load_request_schema(DELETE_SHARE_GROUP_STATE, 0),
                {
                    "group_id": group_id,
                    "topics": [
                        {"topic_id": t, "partitions": [{"partition": p} for p in ps]}
                        for t, ps in topics.items()
                    ],
                },
            )
            wanted = [k for k in keys if k[0] == group_id]
            outcome.update(await self._outcomes(leader, group_id, request, wanted))
        return outcome

    async def _outcomes(
        self, leader: int, group_id: str, request: Any, keys: list[StateKey]
    ) -> dict[StateKey, ErrorCode]:
        """Send a request answered per (topic id, partition); each key's error code."""
        response = await self._links.call(leader, request, CALL_TIMEOUT_S)
        if response is None:
            return dict.fromkeys(keys, ErrorCode.coordinator_not_available)
        answered = {
            (group_id, r.topic_id, p.partition): ErrorCode(p.error_code)
            for r in response.results
            for p in r.partitions
        }
        return {key: answered.get(key, ErrorCode.unknown_server_error) for key in keys}

    async def _write_once(self, partition: int, writes: list[Written]) -> dict[StateKey, ErrorCode]:
        leader = self._leader(partition)
        if leader is None:
            return {key: ErrorCode.coordinator_not_available for key, _, _ in writes}
        if leader == self.broker.node_id:
            return await self.host.write_here(partition, writes)
        outcome: dict[StateKey, ErrorCode] = {}
        by_group: dict[str, list[Written]] = {}
        for written in writes:
            if written[1] is None:
                # Deleting is the share coordinator's own business (it hears of deleted
                # topics and groups itself); nothing to send.
                outcome[written[0]] = ErrorCode.none
            else:
                by_group.setdefault(written[0][0], []).append(written)
        for group_id, group_writes in by_group.items():
            outcome.update(await self._send_writes(leader, group_id, group_writes))
        return outcome

    async def _send_writes(
        self, leader: int, group_id: str, writes: list[Written]
    ) -> dict[StateKey, ErrorCode]:
        topics: dict[Any, list[dict[str, Any]]] = {}
        for (_, topic_id, partition), value, epoch in writes:
            assert value is not None
            start, batches = to_state_batches(value)
            topics.setdefault(topic_id, []).append(
                {
                    "partition": partition,
                    "state_epoch": state_epoch_of(value),
                    "leader_epoch": epoch,
                    "start_offset": start,
                    "state_batches": state_batch_fields(batches),
                }
            )
        request = build(
            load_request_schema(WRITE_SHARE_GROUP_STATE, 0),
            {
                "group_id": group_id,
                "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        return await self._outcomes(leader, group_id, request, [key for key, _, _ in writes])

    # -- where, and how ------------------------------------------------------------------

    def _coordinator_of(self, key: StateKey) -> int | None:
        return self._leader(self.store.partition_of(key))

    def _leader(self, partition: int) -> int | None:
        """The broker leading a `__share_group_state` partition, if any is known live."""
        state = self.broker.controller.state
        topic = state.topics.get(STATE_TOPIC)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        leader = topic.partitions[partition].leader
        node = state.brokers.get(leader)
        return None if node is None or node.fenced else leader


async def _retrying(once: Callable[[], Awaitable[StoredRead]]) -> StoredRead:
    deadline = time.monotonic() + RETRY_S
    while True:
        read = await once()
        if read[0] not in RETRIABLE or time.monotonic() >= deadline:
            return read
        await asyncio.sleep(BACKOFF_S)


def state_batches(batches: Iterable[Any]) -> list[StateBatch]:
    """Kafka's StateBatch entries as tuples."""
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches]
