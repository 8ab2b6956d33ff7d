"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455).

Alter hands the targets to the controller, which records them and answers per
partition once the change is committed (UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT for an empty list, a broker named twice or one never
registered, NO_REASSIGNMENT_IN_PROGRESS for a cancellation with nothing to cancel,
INVALID_REPLICATION_FACTOR when v1's allow_replication_factor_change is false and the
count changes). The replicas then move by themselves (kbroker.controller.reassignment):
the request does not wait for that. List reads the metadata once this broker has
applied everything committed before it (so it answers as the controller would, Kafka
forwarding it there): every partition being reassigned, or those of the named ones that
are (names that do not exist are left out, as Kafka does). Both need the cluster permission Kafka asks for (ALTER, DESCRIBE).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kbroker.controller import ControllerError
from kbroker.handlers.context import RequestContext
from kbroker.handlers.partition_results import by_topic
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import CLUSTER_NAME, Operation, ResourceType

ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46


@handles(ALTER_PARTITION_REASSIGNMENTS, 0)
async def alter_partition_reassignments(
    ctx: RequestContext, request: requests.AlterPartitionReassignmentsRequest
) -> responses.AlterPartitionReassignmentsResponse:
    allow_rf_change = request.allow_replication_factor_change
    response: responses.AlterPartitionReassignmentsResponse = {
        "throttle_time": 0,
        "allow_replication_factor_change": allow_rf_change,
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": [],
    }
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        response["error_code"] = ErrorCode.cluster_authorization_failed
        return response
    wanted = [
        (t.name, int(p.partition_index), None if p.replicas is None else list(p.replicas))
        for t in request.topics
        for p in t.partitions
    ]
    try:
        results = await ctx.broker.controller.alter_partition_reassignments(
            wanted, allow_replication_factor_change=allow_rf_change
        )
    except ControllerError as exc:
        response["error_code"] = ErrorCode(exc.error_code)
        response["error_message"] = exc.message
        return response
    response["responses"] = [
        {
            "name": topic,
            "partitions": [
                {"partition_index": index, "error_code": code, "error_message": message}
                for index, code, message in partitions
            ],
        }
        for topic, partitions in by_topic(results).items()
    ]
    return response


@handles(LIST_PARTITION_REASSIGNMENTS, 0)
async def list_partition_reassignments(
    ctx: RequestContext, request: requests.ListPartitionReassignmentsRequest
) -> responses.ListPartitionReassignmentsResponse:
    response: responses.ListPartitionReassignmentsResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": [],
    }
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        response["error_code"] = ErrorCode.cluster_authorization_failed
        return response
    controller = ctx.broker.controller
    try:
        await controller.catch_up()
    except ControllerError as exc:
        response["error_code"] = ErrorCode(exc.error_code)
        response["error_message"] = exc.message
        return response
    state = controller.state
    if request.topics is None:
        wanted = [(t, [p.partition for p in t.partitions]) for t in state.topics.values()]
    else:
        wanted = [
            (info, [int(i) for i in t.partition_indexes])
            for t in request.topics
            if (info := state.topics.get(t.name)) is not None
        ]
    topics: list[responses.OngoingTopicReassignment] = []
    for info, indexes in wanted:
        ongoing: list[responses.OngoingPartitionReassignment] = [
            {
                "partition_index": p.partition,
                "replicas": list(p.replicas),
                "adding_replicas": list(p.adding),
                "removing_replicas": list(p.removing),
            }
            for i in indexes
            if 0 <= i < len(info.partitions) and (p := info.partitions[i]).is_reassigning
        ]
        if ongoing:
            topics.append({"name": info.name, "partitions": ongoing})
    response["topics"] = topics
    return response
