"""DescribeProducers: the idempotent and transactional producers a partition remembers."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import Operation, ResourceType

DESCRIBE_PRODUCERS = 61
E = ErrorCode


def _partition(ctx: RequestContext, topic: str, index: int) -> responses.PartitionResponse:
    out: responses.PartitionResponse = {
        "partition_index": index,
        "error_code": E.none,
        "active_producers": [],
    }
    if ctx.broker.authorizer is not None and not ctx.allowed(
        Operation.READ, ResourceType.TOPIC, topic
    ):
        out["error_code"] = E.topic_authorization_failed
        return out
    info = ctx.broker.controller.state.topics.get(topic)
    if info is None or not 0 <= index < len(info.partitions):
        out["error_code"] = E.unknown_topic_or_partition
        return out
    # Any replica answers, as Kafka's does (Admin.describeProducers may name a follower).
    partition = ctx.broker.partitions.get(topic, index)
    if partition is None:
        out["error_code"] = E.not_leader_or_follower
        return out
    out["active_producers"] = [
        {
            "producer_id": e.producer_id,
            "producer_epoch": e.epoch,
            "last_sequence": e.last_sequence,
            "last_timestamp": e.last_timestamp,
            "coordinator_epoch": e.coordinator_epoch,
            "current_txn_start_offset": e.txn_first_offset,
        }
        for e in partition.log.producer_state.producers.values()
    ]
    return out


@handles(DESCRIBE_PRODUCERS, 0)
def describe_producers(
    ctx: RequestContext, request: requests.DescribeProducersRequest
) -> responses.DescribeProducersResponse:
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": t.name,
                "partitions": [_partition(ctx, t.name, int(i)) for i in t.partition_indexes],
            }
            for t in request.topics
        ],
    }
