"""Consumer-protocol group APIs (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

The heartbeat goes to the consumer-group coordinator that lives beside the classic one;
its answer comes through a callback once the records it wrote are stored, so a slow
write parks only this request.
"""

from __future__ import annotations

from collections.abc import Awaitable

from kio.schema.errors import ErrorCode

from kbroker.coordinator.consumer_coordinator import (
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    HeartbeatResult,
)
from kbroker.coordinator.consumer_group import Assignment, ConsumerGroup, ConsumerMember
from kbroker.handlers.context import RequestContext
from kbroker.handlers.groups import (
    _client_host,
    _coordinator,
    _Reply,
    group_operations,
)
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.protocol.group_answers import encode_heartbeat_answer
from kbroker.protocol.messages import ZERO_UUID, duration_ms
from kbroker.security.acl import OPERATIONS_OMITTED, Operation, ResourceType

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
# ConsumerGroupDescribe v1's member type: how the member joined (KIP-848's migration).
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1

E = ErrorCode


@handles(CONSUMER_GROUP_HEARTBEAT, 0)
def consumer_group_heartbeat(
    ctx: RequestContext, request: requests.ConsumerGroupHeartbeatRequest
) -> (
    responses.ConsumerGroupHeartbeatResponse
    | bytes
    | Awaitable[responses.ConsumerGroupHeartbeatResponse | bytes]
):
    if ctx.broker.authorizer is not None and not ctx.allowed(
        Operation.READ, ResourceType.GROUP, request.group_id
    ):
        return _heartbeat_response(
            HeartbeatResult(E.group_authorization_failed, "Group authorization failed.")
        )
    names = request.subscribed_topic_names
    if ctx.broker.authorizer is not None and names:
        # Kafka's rule: every topic named in the subscription needs DESCRIBE.
        denied = sorted(
            {n for n in names if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n)}
        )
        if denied:
            return _heartbeat_response(
                HeartbeatResult(
                    E.topic_authorization_failed, f"Unauthorized topics: {', '.join(denied)}"
                )
            )
    coordinator = _coordinator(ctx)
    owned = request.topic_partitions
    req = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=duration_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=request.subscribed_topic_regex,
        server_assignor=request.server_assignor,
        owned=None
        if owned is None
        else tuple(
            (tp.topic_id or ZERO_UUID, tuple(int(p) for p in tp.partitions)) for tp in owned
        ),
        client_id=ctx.client_id,
        client_host=_client_host(ctx),
        version=ctx.version,
    )
    reply: _Reply[HeartbeatResult] = _Reply()
    coordinator.consumer.heartbeat(req, reply)
    # request_percentage quotas write their throttle into a dict answer; else the bytes.
    render = _heartbeat_response if ctx.broker.quotas.active else _heartbeat_answer
    return reply.respond(render)


def _topic_partitions(
    assignment: Assignment,
) -> list[responses.ConsumerGroupHeartbeatTopicPartitions]:
    return [
        {"topic_id": topic_id, "partitions": sorted(partitions)}
        for topic_id, partitions in sorted(assignment.items(), key=lambda kv: str(kv[0]))
    ]


def _heartbeat_answer(r: HeartbeatResult) -> bytes:
    """The answer encoded directly (kbroker.protocol.group_answers), the same bytes."""
    return encode_heartbeat_answer(
        r.error, r.message, r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment
    )


def _heartbeat_response(r: HeartbeatResult) -> responses.ConsumerGroupHeartbeatResponse:
    return {
        "throttle_time": 0,
        "error_code": r.error,
        "error_message": r.message,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval": r.heartbeat_interval_ms,
        "assignment": None
        if r.assignment is None
        else {"topic_partitions": _topic_partitions(r.assignment)},
    }


@handles(CONSUMER_GROUP_DESCRIBE, 0)
def consumer_group_describe(
    ctx: RequestContext, request: requests.ConsumerGroupDescribeRequest
) -> responses.ConsumerGroupDescribeResponse:
    coordinator = _coordinator(ctx)
    described: list[responses.ConsumerGroupDescribeDescribedGroup] = []
    for group_id in request.group_ids:
        error, message, group = coordinator.consumer.describe(group_id)
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
                    "assignor_name": "",
                    "members": [],
                    "authorized_operations": OPERATIONS_OMITTED,
                }
            )
            continue
        consumer = coordinator.consumer
        described.append(
            {
                "error_code": E.none,
                "error_message": None,
                "group_id": group_id,
                "group_state": group.state.value,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": consumer.preferred_assignor(group),
                "members": [_describe_member(consumer, group, m) for m in group.members.values()],
                "authorized_operations": group_operations(
                    ctx, request.include_authorized_operations, group_id
                ),
            }
        )
    return {"throttle_time": 0, "groups": described}


def _named(
    consumer: ConsumerGroupCoordinator, assignment: Assignment
) -> responses.ConsumerGroupDescribeAssignment:
    """An assignment with topic names; topics deleted since are left out, as Kafka does."""
    topics: list[responses.ConsumerGroupDescribeTopicPartitions] = []
    for topic_id, partitions in sorted(assignment.items(), key=lambda kv: str(kv[0])):
        name = consumer.topic_name(topic_id)
        if name is not None:
            topics.append(
                {"topic_id": topic_id, "topic_name": name, "partitions": sorted(partitions)}
            )
    return {"topic_partitions": topics}


def _describe_member(
    consumer: ConsumerGroupCoordinator, group: ConsumerGroup, m: ConsumerMember
) -> responses.ConsumerGroupDescribeMember:
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id,
        "rack_id": m.rack_id,
        "member_epoch": m.member_epoch,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": sorted(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex,
        "assignment": _named(consumer, m.assigned),
        "target_assignment": _named(consumer, group.target.get(m.member_id, {})),
        "member_type": CLASSIC_MEMBER_TYPE if m.classic is not None else CONSUMER_MEMBER_TYPE,
    }
