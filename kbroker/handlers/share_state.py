"""Initialize/Read/Write/DeleteShareGroupState (KIP-932's inter-broker APIs 83-86).

A share-partition leader on another broker reads the stored state of a share-partition
when it starts to hold it, and writes each change, to this broker as the share
coordinator of the key; a group's coordinator starts states again at another offset
and deletes them. Only a broker (CLUSTER_ACTION) may call them.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext, ShareCoordination
from kbroker.handlers.registry import handles
from kbroker.protocol import requests
from kbroker.protocol.messages import ZERO_UUID
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
    state_batch_fields,
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


@handles(READ_SHARE_GROUP_STATE, 0, 0, enabled_by=ENABLE)
def read_share_group_state(
    ctx: RequestContext, request: requests.ReadShareGroupStateRequest
) -> dict[str, Any]:
    service = _service(ctx)
    results = []
    for topic in request.topics:
        topic_id = topic.topic_id or ZERO_UUID
        partitions = []
        for p in topic.partitions:
            code, stored, state_epoch = (
                (E.cluster_authorization_failed, None, 0)
                if _refused(ctx)
                else service.read_here((request.group_id, topic_id, p.partition), p.leader_epoch)
            )
            start, batches = to_state_batches(stored) if stored is not None else (-1, [])
            partitions.append(
                {
                    "partition": p.partition,
                    "error_code": code,
                    "error_message": None if code == E.none else code.name,
                    "state_epoch": state_epoch,
                    "start_offset": start,
                    "state_batches": state_batch_fields(batches),
                }
            )
        results.append({"topic_id": topic_id, "partitions": partitions})
    return {"results": results}


@handles(WRITE_SHARE_GROUP_STATE, 0, 0, enabled_by=ENABLE)
async def write_share_group_state(
    ctx: RequestContext, request: requests.WriteShareGroupStateRequest
) -> dict[str, Any]:
    service = _service(ctx)
    outcome: dict[StateKey, ErrorCode] = {}
    by_partition: dict[int, list[Written]] = {}
    names = ctx.broker.controller.state.topics_by_id
    for topic in request.topics:
        topic_id = topic.topic_id or ZERO_UUID
        info = names.get(topic_id)
        for p in topic.partitions:
            key = (request.group_id, topic_id, p.partition)
            if _refused(ctx):
                outcome[key] = E.cluster_authorization_failed
                continue
            if info is None:
                outcome[key] = E.unknown_topic_or_partition
                continue
            batches = state_batches(p.state_batches)
            value = from_state_batches(
                info.name, p.start_offset, batches, p.leader_epoch, p.state_epoch
            )
            partition = service.coordinator.store.partition_of(key)
            by_partition.setdefault(partition, []).append((key, value, p.leader_epoch))
    for partition, writes in sorted(by_partition.items()):
        outcome.update(await service.write_here(partition, writes))
    return _answer(outcome)


def _answer(outcome: dict[StateKey, ErrorCode]) -> dict[str, Any]:
    results: dict[Any, list[dict[str, Any]]] = {}
    for (_, topic_id, partition), code in outcome.items():
        results.setdefault(topic_id, []).append(
            {
                "partition": partition,
                "error_code": code,
                "error_message": None if code == E.none else code.name,
            }
        )
    return {"results": [{"topic_id": t, "partitions": ps} for t, ps in results.items()]}


@handles(INITIALIZE_SHARE_GROUP_STATE, 0, 0, enabled_by=ENABLE)
async def initialize_share_group_state(
    ctx: RequestContext, request: requests.InitializeShareGroupStateRequest
) -> dict[str, Any]:
    """A group's coordinator starts share-partitions again (AlterShareGroupOffsets)."""
    service = _service(ctx)
    outcome: dict[StateKey, ErrorCode] = {}
    by_partition: dict[int, list[Initialized]] = {}
    names = ctx.broker.controller.state.topics_by_id
    for topic in request.topics:
        topic_id = topic.topic_id or ZERO_UUID
        info = names.get(topic_id)
        for p in topic.partitions:
            key = (request.group_id, topic_id, p.partition)
            if _refused(ctx):
                outcome[key] = E.cluster_authorization_failed
            elif info is None:
                outcome[key] = E.unknown_topic_or_partition
            else:
                partition = service.coordinator.store.partition_of(key)
                item = (key, info.name, p.state_epoch, p.start_offset)
                by_partition.setdefault(partition, []).append(item)
    for partition, items in sorted(by_partition.items()):
        outcome.update(await service.initialize_here(partition, items))
    return _answer(outcome)


@handles(DELETE_SHARE_GROUP_STATE, 0, 0, enabled_by=ENABLE)
async def delete_share_group_state(
    ctx: RequestContext, request: requests.DeleteShareGroupStateRequest
) -> dict[str, Any]:
    """A group's coordinator deletes states (DeleteGroups, DeleteShareGroupOffsets)."""
    service = _service(ctx)
    outcome: dict[StateKey, ErrorCode] = {}
    by_partition: dict[int, list[StateKey]] = {}
    for topic in request.topics:
        topic_id = topic.topic_id or ZERO_UUID
        for p in topic.partitions:
            key = (request.group_id, topic_id, p.partition)
            if _refused(ctx):
                outcome[key] = E.cluster_authorization_failed
            else:
                partition = service.coordinator.store.partition_of(key)
                by_partition.setdefault(partition, []).append(key)
    for partition, keys in sorted(by_partition.items()):
        outcome.update(await service.delete_here(partition, keys))
    return _answer(outcome)
