"""Share-group APIs (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
ShareAcknowledge, and the admin side (Describe/Alter/DeleteShareGroupOffsets).

Served only while `group.share.enable` is on. The work is the share coordinator's
(`kbroker.share`); these functions turn requests into its calls and its answers into
response dicts.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext, ShareCoordination
from kbroker.handlers.groups import _client_host, group_operations
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.protocol.encoded import EncodedBody
from kbroker.protocol.messages import ZERO_UUID, duration_ms
from kbroker.protocol.share_fetch_response import (
    ShareFetchedTopic,
    SharePartitionData,
    encode_share_fetch_response,
)
from kbroker.security.acl import OPERATIONS_OMITTED, Operation, ResourceType
from kbroker.share.partition import FetchAnswer, PartitionAcks
from kbroker.share.partition_state import AckBatch

SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
ENABLE = "group.share.enable"
BATCH_OPTIMIZED = 0  # ShareFetch v2 share_acquire_mode; 1 is record-limit

E = ErrorCode


def _error(code: int) -> ErrorCode:
    return ErrorCode(code)


# -- ShareGroupHeartbeat ---------------------------------------------------------------


def _service(ctx: RequestContext) -> ShareCoordination:
    service = ctx.broker.shares
    if service is None:  # registered with enabled_by: only served when the service runs
        raise RuntimeError("share groups are not served by this broker")
    return service


def _group_denied(ctx: RequestContext, operation: Operation, group_id: str) -> bool:
    return ctx.broker.authorizer is not None and not ctx.allowed(
        operation, ResourceType.GROUP, group_id
    )


def _topic_denied(ctx: RequestContext, operation: Operation, name: str) -> bool:
    return ctx.broker.authorizer is not None and not ctx.allowed(
        operation, ResourceType.TOPIC, name
    )


def _unreadable_ids(ctx: RequestContext, topic_ids: set[uuid.UUID]) -> set[uuid.UUID]:
    """The topics (by id) this principal may not READ, as Kafka's ShareFetch and
    ShareAcknowledge check them; an unknown id is left to the coordinator's answer."""
    if ctx.broker.authorizer is None:
        return set()
    topics = ctx.broker.controller.state.topics_by_id
    return {
        i for i in topic_ids if i in topics and _topic_denied(ctx, Operation.READ, topics[i].name)
    }


@handles(SHARE_GROUP_HEARTBEAT, 1, 1, enabled_by=ENABLE)
async def share_group_heartbeat(
    ctx: RequestContext, request: requests.ShareGroupHeartbeatRequest
) -> responses.ShareGroupHeartbeatResponse:
    """Kafka's checks first: group READ, then DESCRIBE on every subscribed topic."""
    service = _service(ctx)
    names = request.subscribed_topic_names
    message = None
    if _group_denied(ctx, Operation.READ, request.group_id or ""):
        ready = E.group_authorization_failed
    elif names and any(_topic_denied(ctx, Operation.DESCRIBE, n) for n in names):
        ready = E.topic_authorization_failed
        denied = sorted({n for n in names if _topic_denied(ctx, Operation.DESCRIBE, n)})
        message = f"Unauthorized topics: {', '.join(denied)}"
    else:
        ready = await service.ready(request.group_id or "")
    if ready != E.none:
        return {
            "throttle_time": 0,
            "error_code": ready,
            "error_message": message,
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    result = service.coordinator.membership.heartbeat(
        request.group_id,
        request.member_id,
        request.member_epoch,
        request.rack_id,
        None if names is None else tuple(names),
        ctx.client_id,
        _client_host(ctx),
        int(time.time() * 1000),
    )
    changed = request.group_id in service.coordinator.membership.changed_groups
    stored = service.persist()
    if changed:  # as on Kafka, a change of membership is answered once it is written
        await stored
    assignment: responses.ShareGroupHeartbeatAssignment | None = None
    if result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": sorted(partitions)}
                for topic_id, partitions in sorted(
                    result.assignment.items(), key=lambda kv: str(kv[0])
                )
            ]
        }
    return {
        "throttle_time": 0,
        "error_code": _error(result.error),
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": assignment,
    }


# -- ShareGroupDescribe ----------------------------------------------------------------


@handles(SHARE_GROUP_DESCRIBE, 1, 1, enabled_by=ENABLE)
def share_group_describe(
    ctx: RequestContext, request: requests.ShareGroupDescribeRequest
) -> responses.ShareGroupDescribeResponse:
    coordinator = _service(ctx).coordinator
    topics = ctx.broker.controller.state.topics_by_id
    groups: list[responses.ShareGroupDescribeDescribedGroup] = []
    for group_id in request.group_ids:
        group = coordinator.membership.groups.get(group_id)
        denied = _group_denied(ctx, Operation.DESCRIBE, group_id)
        if not denied and not coordinator.membership.owns_group(group_id):
            groups.append(
                {
                    "error_code": E.not_coordinator,
                    "error_message": None,
                    "group_id": group_id,
                    "group_state": "",  # Kafka's answer names no state
                    "authorized_operations": OPERATIONS_OMITTED,
                }
            )
            continue
        if group is None or denied:
            groups.append(
                {
                    "error_code": E.group_authorization_failed if denied else E.group_id_not_found,
                    "error_message": None if denied else f"Group {group_id} not found.",
                    "group_id": group_id,
                    "group_state": "",  # Kafka's answer names no state
                    "authorized_operations": OPERATIONS_OMITTED,
                }
            )
            continue
        members: list[responses.ShareGroupDescribeMember] = []
        for m in group.members.values():
            members.append(
                {
                    "member_id": m.member_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed),
                    "assignment": {
                        "topic_partitions": [
                            {
                                "topic_id": topic_id,
                                "topic_name": topics[topic_id].name if topic_id in topics else "",
                                "partitions": sorted(ps),
                            }
                            for topic_id, ps in m.assignment.items()
                        ]
                    },
                }
            )
        groups.append(
            {
                "error_code": E.none,
                "group_id": group_id,
                "group_state": group.state,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": "simple",
                "members": members,
                "authorized_operations": group_operations(
                    ctx, request.include_authorized_operations, group_id
                ),
            }
        )
    return {"throttle_time": 0, "groups": groups}


# -- ShareFetch / ShareAcknowledge -----------------------------------------------------


class _AckBatch(Protocol):
    @property
    def first_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def acknowledge_types(self) -> Sequence[int]: ...


class _AckPartition(Protocol):
    @property
    def partition_index(self) -> int: ...
    @property
    def acknowledgement_batches(self) -> Sequence[_AckBatch]: ...


class _AckTopic(Protocol):
    """A topic of ShareFetch or ShareAcknowledge, with the acknowledgements it carries."""

    @property
    def topic_id(self) -> uuid.UUID | None: ...
    @property
    def partitions(self) -> Sequence[_AckPartition]: ...


def _acks(topics: Iterable[_AckTopic]) -> PartitionAcks:
    acks: PartitionAcks = []
    for topic in topics:
        for p in topic.partitions:
            batches = [
                AckBatch(b.first_offset, b.last_offset, tuple(int(t) for t in b.acknowledge_types))
                for b in p.acknowledgement_batches
            ]
            acks.append((topic.topic_id or ZERO_UUID, p.partition_index, batches))
    return acks


def _leader(
    ctx: RequestContext, topic_id: uuid.UUID, partition: int
) -> responses.ShareAcknowledgeLeaderIdAndEpoch:
    """The partition's leader and epoch from the metadata (-1 when unknown)."""
    info = ctx.broker.controller.state.topics_by_id.get(topic_id)
    if info is None or not 0 <= partition < len(info.partitions):
        return {"leader_id": -1, "leader_epoch": -1}
    p = info.partitions[partition]
    return {"leader_id": p.leader, "leader_epoch": p.leader_epoch}


def _ack_partitions(
    ctx: RequestContext, answer: FetchAnswer
) -> list[responses.ShareAcknowledgeTopicResponse]:
    by_topic: dict[uuid.UUID, list[responses.ShareAcknowledgePartitionData]] = {}
    for (topic_id, partition), part in sorted(
        answer.partitions.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])
    ):
        by_topic.setdefault(topic_id, []).append(
            {
                "partition_index": partition,
                "error_code": _error(part.ack_error or part.error),
                "error_message": part.ack_message,
                "current_leader": _leader(ctx, topic_id, partition),
            }
        )
    return [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]


def _unreadable_partitions(
    ctx: RequestContext, topics: Iterable[_AckTopic], unreadable: set[uuid.UUID]
) -> list[tuple[uuid.UUID, _AckPartition]]:
    """The requested partitions of topics the principal may not READ."""
    return [
        (t.topic_id or ZERO_UUID, p)
        for t in topics
        if (t.topic_id or ZERO_UUID) in unreadable
        for p in t.partitions
    ]


def _refused_acks(
    ctx: RequestContext, refused: list[tuple[uuid.UUID, _AckPartition]]
) -> list[responses.ShareAcknowledgeTopicResponse]:
    """ShareAcknowledge's TOPIC_AUTHORIZATION_FAILED partitions, one entry per topic."""
    by_topic: dict[uuid.UUID, list[responses.ShareAcknowledgePartitionData]] = {}
    for topic_id, p in refused:
        by_topic.setdefault(topic_id, []).append(
            {
                "partition_index": p.partition_index,
                "error_code": E.topic_authorization_failed,
                "error_message": None,
                "current_leader": _leader(ctx, topic_id, p.partition_index),
            }
        )
    return [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]


def _encode_fetch(
    ctx: RequestContext,
    answer: FetchAnswer,
    refused: list[tuple[uuid.UUID, _AckPartition]],
) -> EncodedBody:
    """The answer with each partition's batches left in their segment file (sent by
    sendfile, as Fetch does), not read and copied through Python; a partition of a topic
    the principal may not READ answers TOPIC_AUTHORIZATION_FAILED, nothing acquired."""
    topics: dict[uuid.UUID, ShareFetchedTopic] = {}
    for (topic_id, partition), part in sorted(
        answer.partitions.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])
    ):
        leader = _leader(ctx, topic_id, partition)
        topic = topics.get(topic_id)
        if topic is None:
            topic = topics[topic_id] = ShareFetchedTopic(topic_id)
        topic.partitions.append(
            SharePartitionData(
                partition,
                part.error,
                None,
                part.ack_error,
                part.ack_message,
                (leader["leader_id"], leader["leader_epoch"]),
                part.records,
                [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired],
            )
        )
    denied = E.topic_authorization_failed
    for topic_id, p in refused:
        leader = _leader(ctx, topic_id, p.partition_index)
        topic = topics.get(topic_id)
        if topic is None:
            topic = topics[topic_id] = ShareFetchedTopic(topic_id)
        topic.partitions.append(
            SharePartitionData(
                p.partition_index,
                denied,
                acknowledge_error_code=denied if p.acknowledgement_batches else 0,
                current_leader=(leader["leader_id"], leader["leader_epoch"]),
            )
        )
    return encode_share_fetch_response(
        list(topics.values()), acquisition_lock_timeout_ms=answer.lock_ms
    )


@handles(SHARE_FETCH, 1, 2, enabled_by=ENABLE)
async def share_fetch(
    ctx: RequestContext, request: requests.ShareFetchRequest
) -> responses.ShareFetchResponse | EncodedBody:
    if _group_denied(ctx, Operation.READ, request.group_id or ""):
        return {
            "throttle_time": 0,
            "error_code": E.group_authorization_failed,
            "error_message": None,
            "acquisition_lock_timeout": 0,
            "responses": [],
            "node_endpoints": [],
        }
    unreadable = _unreadable_ids(ctx, {t.topic_id or ZERO_UUID for t in request.topics})
    readable = [t for t in request.topics if (t.topic_id or ZERO_UUID) not in unreadable]
    added: list[tuple[uuid.UUID, int]] = [
        (t.topic_id or ZERO_UUID, p.partition_index) for t in readable for p in t.partitions
    ]
    forgotten: list[tuple[uuid.UUID, int]] = [
        (t.topic_id or ZERO_UUID, p) for t in request.forgotten_topics_data for p in t.partitions
    ]
    answer = await _service(ctx).fetch_path.share_fetch(
        request.group_id or "",
        request.member_id or "",
        request.share_session_epoch,
        added,
        _acks(readable),
        forgotten,
        duration_ms(request.max_wait) if not ctx.broker.lifecycle.stopping else 0,
        # v2: a request carrying renewals acquires nothing (KIP-1222); the record-limit
        # acquire mode never exceeds max_records for batch alignment.
        0 if request.is_renew_ack else request.max_records,
        request.max_bytes,
        request.share_acquire_mode == BATCH_OPTIMIZED,
        request.batch_size,
    )
    if answer.error:
        return {
            "throttle_time": 0,
            "error_code": _error(answer.error),
            "error_message": answer.message,
            "acquisition_lock_timeout": 0,
            "responses": [],
            "node_endpoints": [],
        }
    return _encode_fetch(ctx, answer, _unreadable_partitions(ctx, request.topics, unreadable))


@handles(SHARE_ACKNOWLEDGE, 1, 2, enabled_by=ENABLE)
async def share_acknowledge(
    ctx: RequestContext, request: requests.ShareAcknowledgeRequest
) -> responses.ShareAcknowledgeResponse:
    if _group_denied(ctx, Operation.READ, request.group_id or ""):
        return {
            "throttle_time": 0,
            "error_code": E.group_authorization_failed,
            "error_message": None,
            "responses": [],
            "node_endpoints": [],
        }
    unreadable = _unreadable_ids(ctx, {t.topic_id or ZERO_UUID for t in request.topics})
    answer = await _service(ctx).fetch_path.share_acknowledge(
        request.group_id or "",
        request.member_id or "",
        request.share_session_epoch,
        _acks([t for t in request.topics if (t.topic_id or ZERO_UUID) not in unreadable]),
    )
    if answer.error:
        return {
            "throttle_time": 0,
            "error_code": _error(answer.error),
            "error_message": answer.message,
            "responses": [],
            "node_endpoints": [],
        }
    return {
        "throttle_time": 0,
        "error_code": E.none,
        "responses": _ack_partitions(ctx, answer)
        + _refused_acks(ctx, _unreadable_partitions(ctx, request.topics, unreadable)),
        "node_endpoints": [],
    }


# -- share-group offsets (admin) -------------------------------------------------------


async def _stored_states(
    ctx: RequestContext,
    service: ShareCoordination,
    group_id: str,
    topics: Sequence[
        requests.DescribeShareGroupOffsetsRequestTopic
        | requests.DeleteShareGroupOffsetsRequestTopic
    ]
    | None,
) -> dict[tuple[str, int], tuple[uuid.UUID, dict[str, Any]]]:
    """(topic, partition) -> (topic id, state snapshot) of the group's share-partitions,
    as committed at their share coordinators (on whichever brokers), as Kafka's group
    coordinator reads them (ReadShareGroupStateSummary): never a write a failover of a
    share coordinator could lose, nor a leader's state not yet stored."""
    state = ctx.broker.controller.state
    if topics is None:
        names = [
            n
            for n in state.topics
            if not n.startswith("__") and not _topic_denied(ctx, Operation.DESCRIBE, n)
        ]
    else:
        names = [t.topic_name for t in topics]
    found: dict[tuple[str, int], tuple[uuid.UUID, dict[str, Any]]] = {}
    for (_, topic_id, partition), (_, stored, _) in (
        await service.admin.stored_states(service.admin.state_keys(group_id, names))
    ).items():
        info = state.topics_by_id.get(topic_id)
        if stored is not None and info is not None:
            found[(info.name, partition)] = (topic_id, json.loads(stored))
    return found


@handles(DESCRIBE_SHARE_GROUP_OFFSETS, 0, enabled_by=ENABLE)
async def describe_share_group_offsets(
    ctx: RequestContext, request: requests.DescribeShareGroupOffsetsRequest
) -> responses.DescribeShareGroupOffsetsResponse:
    service = _service(ctx)
    coordinator = service.coordinator
    state = ctx.broker.controller.state
    groups: list[responses.DescribeShareGroupOffsetsResponseGroup] = []
    for g in request.groups:
        if _group_denied(ctx, Operation.DESCRIBE, g.group_id):
            groups.append(
                {
                    "group_id": g.group_id,
                    "topics": [],
                    "error_code": E.group_authorization_failed,
                    "error_message": None,
                }
            )
            continue
        if not coordinator.membership.owns_group(g.group_id):
            groups.append(
                {
                    "group_id": g.group_id,
                    "topics": [],
                    "error_code": E.not_coordinator,
                    "error_message": None,
                }
            )
            continue
        offsets = await _stored_states(ctx, service, g.group_id, g.topics)
        if g.group_id not in coordinator.share_group_ids() and not offsets:
            groups.append(
                {
                    "group_id": g.group_id,
                    "topics": [],
                    "error_code": E.group_id_not_found,
                    "error_message": f"Group {g.group_id} is not a share group.",
                }
            )
            continue
        wanted: list[tuple[str, list[int]]]
        if g.topics is None:  # every topic the principal may describe, as Kafka lists them
            names = sorted({t for t, _ in offsets if not _topic_denied(ctx, Operation.DESCRIBE, t)})
            wanted = [(t, sorted(p for tt, p in offsets if tt == t)) for t in names]
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in g.topics]
        described = {(t, p) for t, ps in wanted for p in ps}
        lags = await service.admin.lags(
            g.group_id, {tp: data for tp, (_, data) in offsets.items() if tp in described}
        )
        topics: list[responses.DescribeShareGroupOffsetsResponseTopic] = []
        for name, partitions in wanted:
            info = state.topics.get(name)
            parts: list[responses.DescribeShareGroupOffsetsResponsePartition] = []
            denied = _topic_denied(ctx, Operation.DESCRIBE, name)
            for p in partitions:
                found = offsets.get((name, p))
                if denied:
                    parts.append(
                        {
                            "partition_index": p,
                            "start_offset": -1,
                            "leader_epoch": -1,
                            "error_code": E.topic_authorization_failed,
                            "error_message": None,
                        }
                    )
                elif info is None or not 0 <= p < len(info.partitions):
                    parts.append(
                        {
                            "partition_index": p,
                            "start_offset": -1,
                            "leader_epoch": -1,
                            "error_code": E.unknown_topic_or_partition,
                            "error_message": "This server does not host this topic-partition.",
                        }
                    )
                else:
                    parts.append(
                        {
                            "partition_index": p,
                            "start_offset": int(found[1]["start"]) if found else -1,
                            "leader_epoch": 0,
                            "lag": lags.get((name, p), -1),
                            "error_code": E.none,
                        }
                    )
            topics.append(
                {
                    "topic_name": name,
                    "topic_id": info.topic_id if info and not denied else ZERO_UUID,
                    "partitions": parts,
                }
            )
        groups.append({"group_id": g.group_id, "topics": topics, "error_code": E.none})
    return {"throttle_time": 0, "groups": groups}


@handles(ALTER_SHARE_GROUP_OFFSETS, 0, enabled_by=ENABLE)
async def alter_share_group_offsets(
    ctx: RequestContext, request: requests.AlterShareGroupOffsetsRequest
) -> responses.AlterShareGroupOffsetsResponse:
    service = _service(ctx)
    coordinator = service.coordinator
    state = ctx.broker.controller.state
    if _group_denied(ctx, Operation.READ, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": E.group_authorization_failed,
            "error_message": None,
            "responses": [],
        }
    if not request.group_id:  # Kafka's coordinator refuses an empty group id first
        return {
            "throttle_time": 0,
            "error_code": E.invalid_group_id,
            "error_message": "The group id must not be empty.",
            "responses": [],
        }
    group = coordinator.membership.groups.get(request.group_id)
    if group is not None and group.members:
        return {
            "throttle_time": 0,
            "error_code": E.non_empty_group,
            "error_message": "The group is not empty.",
            "responses": [],
        }
    topic_answers: list[responses.AlterShareGroupOffsetsResponseTopic] = []
    # Each share-partition starts again at its share coordinator (wherever that is),
    # fencing the state its leader holds.
    altered: list[tuple[tuple[str, uuid.UUID, int], str, int]] = []
    answers: list[
        tuple[responses.AlterShareGroupOffsetsResponsePartition, tuple[str, uuid.UUID, int]]
    ] = []
    for t in request.topics:
        denied = _topic_denied(ctx, Operation.READ, t.topic_name)
        info = None if denied else state.topics.get(t.topic_name)
        parts: list[responses.AlterShareGroupOffsetsResponsePartition] = []
        for p in t.partitions:
            part: responses.AlterShareGroupOffsetsResponsePartition = {
                "partition_index": p.partition_index,
                "error_code": E.none,
            }
            if denied:
                part["error_code"] = E.topic_authorization_failed
            elif info is None or not 0 <= p.partition_index < len(info.partitions):
                part["error_code"] = E.unknown_topic_or_partition
            else:
                key = (str(request.group_id), info.topic_id, int(p.partition_index))
                altered.append((key, t.topic_name, p.start_offset))
                answers.append((part, key))
            parts.append(part)
        topic_answers.append(
            {
                "topic_name": t.topic_name,
                "topic_id": info.topic_id if info else ZERO_UUID,
                "partitions": parts,
            }
        )
    outcome = await service.admin.alter_start_offsets(altered)
    for part, key in answers:
        part["error_code"] = outcome.get(key, E.unknown_server_error)
    return {"throttle_time": 0, "error_code": E.none, "responses": topic_answers}


@handles(DELETE_SHARE_GROUP_OFFSETS, 0, enabled_by=ENABLE)
async def delete_share_group_offsets(
    ctx: RequestContext, request: requests.DeleteShareGroupOffsetsRequest
) -> responses.DeleteShareGroupOffsetsResponse:
    service = _service(ctx)
    coordinator = service.coordinator
    state = ctx.broker.controller.state
    if _group_denied(ctx, Operation.DELETE, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": E.group_authorization_failed,
            "error_message": None,
            "responses": [],
        }
    if not request.group_id:  # Kafka's coordinator refuses an empty group id first
        return {
            "throttle_time": 0,
            "error_code": E.invalid_group_id,
            "error_message": "The group id must not be empty.",
            "responses": [],
        }
    if request.group_id not in coordinator.share_group_ids() and not (
        await _stored_states(ctx, service, request.group_id, request.topics)
    ):
        return {
            "throttle_time": 0,
            "error_code": E.group_id_not_found,
            "error_message": f"Group {request.group_id} is not a share group.",
            "responses": [],
        }
    topic_answers: list[responses.DeleteShareGroupOffsetsResponseTopic] = []
    for t in request.topics:
        denied = _topic_denied(ctx, Operation.READ, t.topic_name)
        info = None if denied else state.topics.get(t.topic_name)
        if denied:
            code = E.topic_authorization_failed
        elif info is None:
            code = E.unknown_topic_or_partition
        else:
            code = _error(coordinator.delete_topic_state(request.group_id, info.topic_id))
        if code == E.non_empty_group:
            return {
                "throttle_time": 0,
                "error_code": code,
                "error_message": "The group is not empty.",
                "responses": [],
            }
        topic_answers.append(
            {
                "topic_name": t.topic_name,
                "topic_id": info.topic_id if info else ZERO_UUID,
                "error_code": code,
            }
        )
    await service.persist()
    # States stored by share coordinators on other brokers go too.
    for answer in topic_answers:
        if answer["error_code"] == E.none:
            keys = service.admin.state_keys(request.group_id, [answer["topic_name"]])
            failed = [c for c in (await service.admin.delete_states(keys)).values() if c != E.none]
            if failed:
                answer["error_code"] = failed[0]
    return {"throttle_time": 0, "error_code": E.none, "responses": topic_answers}
