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
from typing import Any, Protocol

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.internal_topics import ServiceBroker
from kbroker.protocol.messages import build
from kbroker.replica.broker_link import BrokerLink
from kbroker.share.records import StateKey
from kbroker.share.state_store import (
    ShareStateStore,
    from_state_batches,
    state_batch_fields,
    to_state_batches,
)

log = logging.getLogger("kbroker.share.persister")

READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
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

# (share-partition, its state or None to delete it, leader epoch of its data partition)
Written = tuple[StateKey, bytes | None, int]
StateBatch = tuple[int, int, int, int]  # first offset, last offset, state, deliveries


class StateHost(Protocol):
    """The share coordinator of this broker (kbroker.share.service.ShareService)."""

    def read_here(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, bytes | None]: ...

    def write_here(
        self, partition: int, writes: list[Written]
    ) -> Awaitable[dict[StateKey, ErrorCode]]: ...


class Persister:
    def __init__(self, broker: ServiceBroker, host: StateHost, store: ShareStateStore) -> None:
        self.broker = broker
        self.host = host
        self.store = store
        self._links: dict[int, BrokerLink] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()

    # -- reading --------------------------------------------------------------------------

    async def read(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, bytes | None]:
        """The stored state of a share-partition (None when it has none yet)."""
        return await _retrying(lambda: self._read_once(key, leader_epoch))

    async def _read_once(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, bytes | None]:
        leader = self._coordinator_of(key)
        if leader is None:
            return ErrorCode.coordinator_not_available, None
        if leader == self.broker.node_id:
            return self.host.read_here(key, leader_epoch)
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
        response = await self._call(leader, request)
        if response is None:
            return ErrorCode.coordinator_not_available, None
        for result in response.results:
            for p in result.partitions:
                if result.topic_id != topic_id or p.partition != partition:
                    continue
                code = ErrorCode(p.error_code)
                if code != ErrorCode.none:
                    return code, None
                if p.start_offset < 0:
                    return ErrorCode.none, None  # not initialized yet
                topic = self.broker.controller.state.topics_by_id.get(topic_id)
                batches = state_batches(p.state_batches)
                name = topic.name if topic is not None else ""
                return ErrorCode.none, from_state_batches(
                    name, p.start_offset, batches, leader_epoch
                )
        return ErrorCode.unknown_server_error, None

    # -- writing --------------------------------------------------------------------------

    async def write(
        self, writes: dict[StateKey, tuple[bytes | None, int]]
    ) -> dict[StateKey, ErrorCode]:
        """Store the states at their share coordinators; each one's outcome."""
        by_partition: dict[int, list[Written]] = {}
        for key, (value, epoch) in writes.items():
            by_partition.setdefault(self.store.partition_of(key), []).append((key, value, epoch))
        outcomes = await asyncio.gather(
            *(self._write_partition(p, ws) for p, ws in sorted(by_partition.items()))
        )
        return {key: code for outcome in outcomes for key, code in outcome.items()}

    async def _write_partition(
        self, partition: int, writes: list[Written]
    ) -> dict[StateKey, ErrorCode]:
        outcome: dict[StateKey, ErrorCode] = {}
        pending = writes
        deadline = time.monotonic() + RETRY_S
        while True:
            got = await self._write_once(partition, pending)
            outcome.update(got)
            pending = [w for w in pending if got.get(w[0]) in RETRIABLE]
            if not pending or time.monotonic() >= deadline:
                return outcome
            await asyncio.sleep(BACKOFF_S)

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
                    "state_epoch": 0,
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
        response = await self._call(leader, request)
        if response is None:
            return {key: ErrorCode.coordinator_not_available for key, _, _ in writes}
        answered = {
            (group_id, r.topic_id, p.partition): ErrorCode(p.error_code)
            for r in response.results
            for p in r.partitions
        }
        return {key: answered.get(key, ErrorCode.unknown_server_error) for key, _, _ in writes}

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

    async def _call(self, node_id: int, request: Any) -> Any | None:
        """One request to another broker, one at a time per broker; None when it cannot
        be reached (the caller tries again, perhaps elsewhere)."""
        node = self.broker.controller.state.brokers.get(node_id)
        security = self.broker.inter_broker
        address = node.endpoint(security.listener) if node is not None else None
        if node is None or address is None:
            return None
        lock = self._locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            link = self._links.get(node_id)
            if link is None or (link.host, link.port) != address:
                if link is not None:
                    link.close()
                link = self._links[node_id] = BrokerLink(
                    *address, f"share-persister-{self.broker.node_id}", security
                )
            try:
                return await link.call(request, CALL_TIMEOUT_S)
            except (OSError, EOFError, TimeoutError) as exc:
                log.info("share state call to broker %d failed: %s", node_id, exc)
                link.close()
                self._links.pop(node_id, None)
                return None


async def _retrying(
    once: Callable[[], Awaitable[tuple[ErrorCode, bytes | None]]],
) -> tuple[ErrorCode, bytes | None]:
    deadline = time.monotonic() + RETRY_S
    while True:
        code, value = await once()
        if code not in RETRIABLE or time.monotonic() >= deadline:
            return code, value
        await asyncio.sleep(BACKOFF_S)


def state_batches(batches: Iterable[Any]) -> list[StateBatch]:
    """Kafka's StateBatch entries as tuples."""
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches]
