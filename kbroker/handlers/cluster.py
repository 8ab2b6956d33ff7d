"""DescribeCluster and DescribeTopicPartitions: read-only views of the cluster.

DescribeTopicPartitions is what newer Java admin clients use for describeTopics: topics
in name order, at most `response_partition_limit` partitions per response, and a cursor
naming the first topic and partition the next request should start from.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from kbroker.controller import ControllerError
from kbroker.controller.state import INTERNAL_TOPICS, BrokerInfo, PartitionInfo
from kbroker.controller.validation import validate_topic_name
from kbroker.handlers.context import RequestContext
from kbroker.handlers.endpoints import node_address
from kbroker.handlers.metadata import cluster_operations, visible_controller_id
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import OPERATIONS_OMITTED, Operation, ResourceType

DESCRIBE_CLUSTER = 60
DESCRIBE_TOPIC_PARTITIONS = 75

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2
NO_LEADER = -1
MAX_PARTITIONS_PER_RESPONSE = 2000  # Kafka's max.request.partition.size.limit default
# -- DescribeCluster -----------------------------------------------------------------------


@handles(DESCRIBE_CLUSTER, 0)
def describe_cluster(
    ctx: RequestContext, request: requests.DescribeClusterRequest
) -> responses.DescribeClusterResponse:
    state = ctx.broker.controller.state
    endpoint_type = request.endpoint_type
    response: responses.DescribeClusterResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": state.cluster_id or "",
        "controller_id": visible_controller_id(ctx),
        "brokers": [],
        "cluster_authorized_operations": cluster_operations(ctx)
        if request.include_cluster_authorized_operations
        else OPERATIONS_OMITTED,
    }
    if endpoint_type not in (ENDPOINT_BROKERS, ENDPOINT_CONTROLLERS):
        response["error_code"] = (
            ErrorCode.invalid_request if ctx.version == 0 else ErrorCode.unsupported_endpoint_type
        )
        response["error_message"] = f"Unsupported endpoint type {endpoint_type}"
        return response
    if endpoint_type == ENDPOINT_CONTROLLERS:
        # As Kafka's brokers answer: controllers describe the controllers.
        response["error_code"] = (
            ErrorCode.invalid_request if ctx.version == 0 else ErrorCode.mismatched_endpoint_type
        )
        response["error_message"] = (
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
            "of type CONTROLLER"
        )
        return response
    with_fenced = request.include_fenced_brokers
    response["brokers"] = [
        {
            "broker_id": b.node_id,
            "host": node_address(ctx, b)[0],
            "port": node_address(ctx, b)[1],
            "rack": b.rack,
            "is_fenced": b.fenced,
        }
        for b in sorted(state.brokers.values(), key=lambda b: b.node_id)
        if with_fenced or not b.fenced
    ]
    return response


# -- DescribeTopicPartitions ---------------------------------------------------------------


def _partition(
    p: PartitionInfo, live: set[int], topic_id: uuid.UUID, brokers: Mapping[int, BrokerInfo]
) -> responses.DescribeTopicPartitionsResponsePartition:
    def offline(replica: int) -> bool:
        b = brokers.get(replica)
        return b is None or b.replica_offline(topic_id, p.partition)

    return {
        "error_code": ErrorCode.none,
        "partition_index": p.partition,
        "leader_id": p.leader if p.leader in live else NO_LEADER,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": list(p.replicas),
        "isr_nodes": list(p.isr),
        "eligible_leader_replicas": list(p.elr),
        "last_known_elr": list(p.last_known_elr),
        "offline_replicas": [r for r in p.replicas if offline(r)],
    }


def _missing_topic(
    ctx: RequestContext, name: str
) -> responses.DescribeTopicPartitionsResponseTopic:
    try:
        validate_topic_name(name)
        code = ErrorCode.unknown_topic_or_partition
    except ControllerError:
        code = ErrorCode.invalid_topic_exception
    return {
        "error_code": code,
        "name": name,
        "topic_id": None,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": [],
        "topic_authorized_operations": ctx.authorized_operations(ResourceType.TOPIC, name),
    }


def _denied_topic(name: str) -> responses.DescribeTopicPartitionsResponseTopic:
    """A named topic the principal may not describe: whether it exists is not told."""
    return {
        "error_code": ErrorCode.topic_authorization_failed,
        "name": name,
        "topic_id": None,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": OPERATIONS_OMITTED,
    }


def _refused(
    request: requests.DescribeTopicPartitionsRequest, message: str
) -> responses.DescribeTopicPartitionsResponse:
    """Kafka's whole-request error: every named topic carries INVALID_REQUEST."""
    topics: list[responses.DescribeTopicPartitionsResponseTopic] = [
        {
            "error_code": ErrorCode.invalid_request,
            "name": t.name,
            "topic_id": None,
            "partitions": [],
        }
        for t in request.topics
    ]
    return {"throttle_time": 0, "topics": topics, "next_cursor": None}


@handles(DESCRIBE_TOPIC_PARTITIONS, 0)
def describe_topic_partitions(
    ctx: RequestContext, request: requests.DescribeTopicPartitionsRequest
) -> responses.DescribeTopicPartitionsResponse:
    state = ctx.broker.controller.state
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    all_topics = not request.topics
    candidates = state.topics.keys() if all_topics else {t.name for t in request.topics}
    names = sorted(n for n in candidates if n >= start_topic)
    if cursor is not None:
        if not all_topics and cursor.topic_name not in names:
            return _refused(
                request,
                "DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                f"{cursor.topic_name}",
            )
        if cursor.partition_index < 0:
            return _refused(
                request, "DescribeTopicPartitionsRequest cursor partition must be valid"
            )
    denied: list[responses.DescribeTopicPartitionsResponseTopic] = []
    if ctx.broker.authorizer is not None:
        # Topics the principal may not describe: named ones answer
        # TOPIC_AUTHORIZATION_FAILED after the others, the rest are left out (as Kafka).
        allowed = [n for n in names if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n)]
        if not all_topics:
            refused = set(names).difference(allowed)
            denied = [_denied_topic(n) for n in names if n in refused]
        names = allowed
    live = {b.node_id for b in state.brokers.values() if not b.fenced}
    remaining = max(min(MAX_PARTITIONS_PER_RESPONSE, request.response_partition_limit), 1)
    topics: list[responses.DescribeTopicPartitionsResponseTopic] = []
    next_cursor: responses.Cursor | None = None
    for name in names:
        if remaining == 0:
            # The next response starts here, whether or not this topic exists (as Kafka).
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        info = state.topics.get(name)
        if info is None:
            if not all_topics:
                topics.append(_missing_topic(ctx, name))
            continue
        first = cursor.partition_index if cursor is not None and name == start_topic else 0
        partitions = sorted(info.partitions, key=lambda p: p.partition)[first:]
        taken = partitions[:remaining]
        remaining -= len(taken)
        topics.append(
            {
                "error_code": ErrorCode.none,
                "name": name,
                "topic_id": info.topic_id,
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": [_partition(p, live, info.topic_id, state.brokers) for p in taken],
                "topic_authorized_operations": ctx.authorized_operations(ResourceType.TOPIC, name),
            }
        )
        if len(taken) < len(partitions):
            next_cursor = {"topic_name": name, "partition_index": partitions[len(taken)].partition}
            break
    return {"throttle_time": 0, "topics": [*topics, *denied], "next_cursor": next_cursor}
