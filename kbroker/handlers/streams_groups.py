"""Streams-protocol group APIs (KIP-1071): StreamsGroupHeartbeat and StreamsGroupDescribe.

The heartbeat goes to the streams-group coordinator beside the classic and consumer
ones; its answer comes through a callback once the records it wrote are stored.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.coordinator.streams_coordinator import (
    StreamsHeartbeatRequest,
    StreamsHeartbeatResult,
)
from kbroker.coordinator.streams_group import (
    CopartitionGroup,
    StreamsGroup,
    StreamsMember,
    Subtopology,
    TaskAssignment,
    Tasks,
    TopicInfo,
    Topology,
    tasks_of,
)
from kbroker.handlers.context import RequestContext
from kbroker.handlers.groups import (
    _client_host,
    _coordinator,
    _Reply,
    group_operations,
)
from kbroker.handlers.registry import handles
from kbroker.protocol import requests
from kbroker.protocol import responses as r
from kbroker.protocol.messages import duration_ms
from kbroker.security.acl import OPERATIONS_OMITTED, Operation, ResourceType

STREAMS_GROUP_HEARTBEAT = 88
STREAMS_GROUP_DESCRIBE = 89

E = ErrorCode


def _tasks(items: Any) -> Tasks | None:
    if items is None:
        return None
    return tasks_of((t.subtopology_id, t.partitions) for t in items)


def _topic_info(info: Any) -> TopicInfo:
    return TopicInfo(
        info.name,
        int(info.partitions),
        int(info.replication_factor),
        tuple((kv.key, kv.value) for kv in info.topic_configs),
    )


def _topology(topology: Any) -> Topology | None:
    if topology is None:
        return None
    return Topology(
        int(topology.epoch),
        tuple(
            Subtopology(
                s.subtopology_id,
                tuple(s.source_topics),
                tuple(s.source_topic_regex),
                tuple(_topic_info(t) for t in s.state_changelog_topics),
                tuple(s.repartition_sink_topics),
                tuple(_topic_info(t) for t in s.repartition_source_topics),
                tuple(
                    CopartitionGroup(
                        tuple(int(i) for i in g.source_topics),
                        tuple(int(i) for i in g.source_topic_regex),
                        tuple(int(i) for i in g.repartition_source_topics),
                    )
                    for g in s.copartition_groups
                ),
            )
            for s in topology.subtopologies
        ),
    )


@handles(STREAMS_GROUP_HEARTBEAT, 0)
def streams_group_heartbeat(
    ctx: RequestContext, request: requests.StreamsGroupHeartbeatRequest
) -> r.StreamsGroupHeartbeatResponse | Awaitable[r.StreamsGroupHeartbeatResponse]:
    if ctx.broker.authorizer is not None and not ctx.allowed(
        Operation.READ, ResourceType.GROUP, request.group_id
    ):
        return _heartbeat_response(
            StreamsHeartbeatResult(E.group_authorization_failed, "Group authorization failed.")
        )
    topology = _topology(request.topology)
    if ctx.broker.authorizer is not None and topology is not None:
        # Kafka's rule: every source topic of the topology needs DESCRIBE.
        names = {t for s in topology.subtopologies for t in s.source_topics}
        denied = sorted(
            n for n in names if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n)
        )
        if denied:
            return _heartbeat_response(
                StreamsHeartbeatResult(
                    E.topic_authorization_failed, f"Unauthorized topics: {', '.join(denied)}"
                )
            )
    endpoint = request.user_endpoint
    req = StreamsHeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=int(request.member_epoch),
        endpoint_information_epoch=int(request.endpoint_information_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=duration_ms(request.rebalance_timeout),
        topology=topology,
        active_tasks=_tasks(request.active_tasks),
        standby_tasks=_tasks(request.standby_tasks),
        warmup_tasks=_tasks(request.warmup_tasks),
        process_id=request.process_id,
        user_endpoint=None if endpoint is None else (endpoint.host, int(endpoint.port)),
        client_tags=None
        if request.client_tags is None
        else tuple((kv.key, kv.value) for kv in request.client_tags),
        shutdown_application=bool(request.shutdown_application),
        client_id=ctx.client_id,
        client_host=_client_host(ctx),
    )
    reply: _Reply[StreamsHeartbeatResult] = _Reply()
    _coordinator(ctx).streams.heartbeat(req, reply)
    answer: r.StreamsGroupHeartbeatResponse | Awaitable[r.StreamsGroupHeartbeatResponse]
    answer = reply.respond(_heartbeat_response)
    return answer


def _task_ids(tasks: Tasks) -> list[r.StreamsGroupHeartbeatTaskIds]:
    return [
        {"subtopology_id": s, "partitions": sorted(tasks[s])} for s in sorted(tasks) if tasks[s]
    ]


def _heartbeat_response(result: StreamsHeartbeatResult) -> r.StreamsGroupHeartbeatResponse:
    a = result.assignment
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "acceptable_recovery_lag": result.acceptable_recovery_lag,
        "task_offset_interval": result.task_offset_interval_ms,
        # An error carries an empty status list, as Kafka's error answers do (not null).
        "status": [
            {"status_code": code, "status_detail": detail} for code, detail in result.statuses
        ]
        if result.error == E.none
        else [],
        "active_tasks": None if a is None else _task_ids(a.active),
        "standby_tasks": None if a is None else _task_ids(a.standby),
        "warmup_tasks": None if a is None else _task_ids(a.warmup),
        "endpoint_information_epoch": result.endpoint_information_epoch,
        "partitions_by_user_endpoint": None
        if result.endpoints is None
        else [
            {
                "user_endpoint": {"host": host, "port": port},
                "active_partitions": [{"topic": t, "partitions": p} for t, p in active.items()],
                "standby_partitions": [{"topic": t, "partitions": p} for t, p in standby.items()],
            }
            for (host, port), active, standby in result.endpoints
        ],
    }


# -- StreamsGroupDescribe -------------------------------------------------------------------


def _assignment(a: TaskAssignment) -> r.StreamsGroupDescribeAssignment:
    return {
        "active_tasks": _task_ids(a.active),
        "standby_tasks": _task_ids(a.standby),
        "warmup_tasks": _task_ids(a.warmup),
    }


def _describe_topic(info: TopicInfo, partitions: int | None = None) -> r.TopicInfo:
    return {
        "name": info.name,
        "partitions": info.partitions if partitions is None else partitions,
        "replication_factor": info.replication_factor,
        "topic_configs": [{"key": k, "value": v} for k, v in info.configs],
    }


def _describe_topology(group: StreamsGroup, sizes: dict[str, int]) -> r.Topology | None:
    topology = group.topology
    if topology is None:
        return None
    subtopologies: list[r.Subtopology] | None = None
    if group.configured:
        subtopologies = [
            {
                "subtopology_id": s.subtopology_id,
                "source_topics": sorted(
                    {*s.source_topics, *(t.name for t in s.repartition_source_topics)}
                ),
                "repartition_sink_topics": list(s.repartition_sink_topics),
                "state_changelog_topics": [
                    _describe_topic(t, sizes.get(t.name)) for t in s.state_changelog_topics
                ],
                "repartition_source_topics": [
                    _describe_topic(t, sizes.get(t.name)) for t in s.repartition_source_topics
                ],
            }
            for s in topology.subtopologies
        ]
    return {"epoch": topology.epoch, "subtopologies": subtopologies}


def _describe_member(group: StreamsGroup, m: StreamsMember) -> r.StreamsGroupDescribeMember:
    return {
        "member_id": m.member_id,
        "member_epoch": m.member_epoch,
        "instance_id": m.instance_id,
        "rack_id": m.rack_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "topology_epoch": m.topology_epoch,
        "process_id": m.process_id,
        "user_endpoint": None
        if m.user_endpoint is None
        else {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
        "client_tags": [{"key": k, "value": v} for k, v in m.client_tags],
        "task_offsets": [],
        "task_end_offsets": [],
        "assignment": _assignment(m.assigned),
        "target_assignment": _assignment(group.target.get(m.member_id, TaskAssignment())),
        "is_classic": False,
    }


@handles(STREAMS_GROUP_DESCRIBE, 0)
def streams_group_describe(
    ctx: RequestContext, request: requests.StreamsGroupDescribeRequest
) -> r.StreamsGroupDescribeResponse:
    coordinator = _coordinator(ctx)
    sizes = {
        name: len(info.partitions) for name, info in ctx.broker.controller.state.topics.items()
    }
    described: list[r.StreamsGroupDescribeDescribedGroup] = []
    for group_id in request.group_ids:
        error, message, group = coordinator.streams.describe(group_id)
        if ctx.broker.authorizer is not None and not ctx.allowed(
            Operation.DESCRIBE, ResourceType.GROUP, group_id
        ):
            error, message, group = E.group_authorization_failed, None, None
        if group is None:
            described.append(
                {
                    "error_code": error,
                    "error_message": message,
                    "group_id": group_id,
                    "group_state": "",
                    "group_epoch": 0,
                    "assignment_epoch": 0,
                    "topology": None,
                    "members": [],
                    "authorized_operations": OPERATIONS_OMITTED,
                }
            )
            continue
        described.append(
            {
                "error_code": E.none,
                "error_message": None,
                "group_id": group_id,
                "group_state": group.state.value,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "topology": _describe_topology(group, sizes),
                "members": [
                    _describe_member(group, m)
                    for m in sorted(group.members.values(), key=lambda m: m.member_id)
                ],
                "authorized_operations": group_operations(
                    ctx, request.include_authorized_operations, group_id
                ),
            }
        )
    return {"throttle_time": 0, "groups": described}
