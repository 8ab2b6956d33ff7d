"""Initialize/Read/Write/DeleteShareGroupState (KIP-932's inter-broker APIs 83-86).

A share-partition leader on another broker reads the stored state of a share-partition
when it starts to hold it, and writes each change, to this broker as the share
coordinator of the key; a group's coordinator starts states again at another offset
and deletes them. Only a broker (CLUSTER_ACTION) may call them.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeAlias, TypeVar

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext, ShareCoordination
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.protocol.messages import ZERO_UUID
from kbroker.share.partition_state import RecordState
from kbroker.share.persister import (
    DELETE_SHARE_GROUP_STATE,
    INITIALIZE_SHARE_GROUP_STATE,
    READ_SHARE_GROUP_STATE,
    WRITE_SHARE_GROUP_STATE,
    Initialized,
    Written,
    state_batches,
)
from kbroker.share.records import StateKey
from kbroker.share.state_store import (
    from_state_batches,
    leader_epoch_of,
    to_state_batches,
)

ENABLE = "group.share.enable"
E = ErrorCode


def _service(ctx: RequestContext) -> ShareCoordination:
    service = ctx.broker.shares
    if service is None:  # registered with enabled_by: only served when the service runs
        raise RuntimeError("share groups are not served by this broker")
    return service


def _refused(ctx: RequestContext) -> bool:
    return ctx.broker.authorizer is not None and not ctx.is_broker()


@handles(READ_SHARE_GROUP_STATE, 0, 0, enabled_by=ENABLE, unordered_from=0)
async def read_share_group_state(
    ctx: RequestContext, request: requests.ReadShareGroupStateRequest
) -> responses.ReadShareGroupStateResponse:
    service = _service(ctx)
    results: list[responses.ReadStateResult] = []
    for topic in request.topics:
        topic_id = topic.topic_id or ZERO_UUID
        partitions: list[responses.ReadShareGroupStatePartitionResult] = []
        for p in topic.partitions:
            key = (request.group_id, topic_id, p.partition)
            # No leader epoch: not a share-partition leader but a summary (the admin
            # APIs, kbroker's Persister.read_many), answered from committed state.
            code, stored, state_epoch = (
                (E.cluster_authorization_failed, None, 0)
                if _refused(ctx)
                else service.summary_here(key)
                if p.leader_epoch < 0
                else await service.read_here(key, p.leader_epoch)
            )
            start, batches = to_state_batches(stored) if stored is not None else (-1, [])
            partitions.append(
                {
                    "partition": p.partition,
                    "error_code": code,
                    "error_message": None if code == E.none else code.name,
                    "state_epoch": state_epoch,
                    "start_offset": start,
                    "state_batches": [
                        {
                            "first_offset": first,
                            "last_offset": last,
                            "delivery_state": state,
                            "delivery_count": count,
                        }
                        for first, last, state, count in batches
                    ],
                }
            )
        results.append({"topic_id": topic_id, "partitions": partitions})
    return {"results": results}


READ_SHARE_GROUP_STATE_SUMMARY = 87
_COMPLETE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


def _summary_fields(stored: bytes | None) -> responses.ReadShareGroupStateSummaryPartitionResult:
    """Start offset, leader epoch and, from v1, the offsets at or past the start whose
    delivery is complete (acknowledged or archived); Kafka's defaults for no state."""
    if stored is None:
        return {"start_offset": -1, "leader_epoch": 0, "delivery_complete_count": -1}
    start, batches = to_state_batches(stored)
    complete = sum(
        last - max(first, start) + 1
        for first, last, state, _ in batches
        if state in _COMPLETE and last >= start
    )
    return {
        "start_offset": start,
        "leader_epoch": leader_epoch_of(stored),
        "delivery_complete_count": complete,
    }


@handles(READ_SHARE_GROUP_STATE_SUMMARY, 0, 1, enabled_by=ENABLE, unordered_from=0)
def read_share_group_state_summary(
    ctx: RequestContext, request: requests.ReadShareGroupStateSummaryRequest
) -> responses.ReadShareGroupStateSummaryResponse:
    """The committed state of share-partitions, as DescribeShareGroupOffsets reads it from
    Kafka's share coordinator; only a broker may ask."""
    service = _service(ctx)
    refused = _refused(ctx)
    topics = ctx.broker.controller.state.topics_by_id
    results: list[responses.ReadStateSummaryResult] = []
    for topic in request.topics:
        topic_id = topic.topic_id or ZERO_UUID
        info = topics.get(topic_id)
        partitions: list[responses.ReadShareGroupStateSummaryPartitionResult] = []
        for p in topic.partitions:
            if refused:
                code, stored, state_epoch = E.cluster_authorization_failed, None, 0
            elif info is None or not 0 <= p.partition < len(info.partitions):
                code, stored, state_epoch = E.unknown_topic_or_partition, None, 0
            else:
                code, stored, state_epoch = service.summary_here(
                    (request.group_id, topic_id, p.partition)
                )
            partitions.append(
                {
                    "partition": p.partition,
                    "error_code": code,
                    "error_message": None if code == E.none else code.name,
                    "state_epoch": state_epoch,
                    **_summary_fields(stored if code == E.none else None),
                }
            )
        results.append({"topic_id": topic_id, "partitions": partitions})
    return {"results": results}


class _StatePartition(Protocol):
    @property
    def partition(self) -> int: ...


P = TypeVar("P", bound=_StatePartition)
P_co = TypeVar("P_co", bound=_StatePartition, covariant=True)
T = TypeVar("T")


class _StateTopic(Protocol[P_co]):
    @property
    def topic_id(self) -> uuid.UUID | None: ...

    @property
    def partitions(self) -> Sequence[P_co]: ...


async def _by_state_partition(
    ctx: RequestContext,
    group_id: str,
    topics: Iterable[_StateTopic[P]],
    item: Callable[[StateKey, str | None, P], T | None],
    apply: Callable[[int, list[T]], Awaitable[dict[StateKey, ErrorCode]]],
) -> StateAnswer:
    """Answer a write/initialize/delete: each requested state's item (None: its topic is
    unknown here) goes, grouped by the share-state partition holding its key, to `apply`;
    a caller that is not a broker is refused every state."""
    service = _service(ctx)
    outcome: dict[StateKey, ErrorCode] = {}
    by_partition: dict[int, list[T]] = {}
    names = ctx.broker.controller.state.topics_by_id
    for topic in topics:
        topic_id = topic.topic_id or ZERO_UUID
        info = names.get(topic_id)
        for p in topic.partitions:
            key = (group_id, topic_id, p.partition)
            if _refused(ctx):
                outcome[key] = E.cluster_authorization_failed
                continue
            value = item(key, None if info is None else info.name, p)
            if value is None:
                outcome[key] = E.unknown_topic_or_partition
                continue
            partition = service.coordinator.store.partition_of(key)
            by_partition.setdefault(partition, []).append(value)
    for partition, items in sorted(by_partition.items()):
        outcome.update(await apply(partition, items))
    return _answer(outcome)


@handles(WRITE_SHARE_GROUP_STATE, 0, 0, enabled_by=ENABLE, unordered_from=0)
async def write_share_group_state(
    ctx: RequestContext, request: requests.WriteShareGroupStateRequest
) -> responses.WriteShareGroupStateResponse:
    def written(
        key: StateKey, name: str | None, p: requests.WriteShareGroupStatePartitionData
    ) -> Written | None:
        if name is None:
            return None
        batches = state_batches(p.state_batches)
        value = from_state_batches(name, p.start_offset, batches, p.leader_epoch, p.state_epoch)
        return (key, value, p.leader_epoch)

    return await _by_state_partition(
        ctx, request.group_id, request.topics, written, _service(ctx).write_here
    )


StateAnswer: TypeAlias = "responses.WriteShareGroupStateResponse"
"""Write, Initialize and DeleteShareGroupState answer in one shape (mypy checks the other
two TypedDicts take it)."""


def _answer(outcome: dict[StateKey, ErrorCode]) -> StateAnswer:
    results: dict[uuid.UUID, list[responses.WriteShareGroupStatePartitionResult]] = {}
    for (_, topic_id, partition), code in outcome.items():
        results.setdefault(topic_id, []).append(
            {
                "partition": partition,
                "error_code": code,
                "error_message": None if code == E.none else code.name,
            }
        )
    return {"results": [{"topic_id": t, "partitions": ps} for t, ps in results.items()]}


@handles(INITIALIZE_SHARE_GROUP_STATE, 0, 0, enabled_by=ENABLE, unordered_from=0)
async def initialize_share_group_state(
    ctx: RequestContext, request: requests.InitializeShareGroupStateRequest
) -> responses.InitializeShareGroupStateResponse:
    """A group's coordinator starts share-partitions again (AlterShareGroupOffsets)."""

    def initialized(
        key: StateKey, name: str | None, p: requests.InitializeShareGroupStatePartitionData
    ) -> Initialized | None:
        return None if name is None else (key, name, p.state_epoch, p.start_offset)

    return await _by_state_partition(
        ctx, request.group_id, request.topics, initialized, _service(ctx).initialize_here
    )


@handles(DELETE_SHARE_GROUP_STATE, 0, 0, enabled_by=ENABLE, unordered_from=0)
async def delete_share_group_state(
    ctx: RequestContext, request: requests.DeleteShareGroupStateRequest
) -> responses.DeleteShareGroupStateResponse:
    """A group's coordinator deletes states (DeleteGroups, DeleteShareGroupOffsets): a
    state is deleted whether or not its topic still exists."""

    def deleted(
        key: StateKey, name: str | None, p: requests.DeleteShareGroupStatePartitionData
    ) -> StateKey:
        return key

    return await _by_state_partition(
        ctx, request.group_id, request.topics, deleted, _service(ctx).delete_here
    )
