"""OffsetForLeaderEpoch: where a leader epoch ended in this log.

Consumers validate their position after a leader change with it (KIP-320), and
followers use it to find where to truncate before fetching from a new leader.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import BrokerParts, RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import Operation, ResourceType

OFFSET_FOR_LEADER_EPOCH = 23


def _may_describe(ctx: RequestContext, topic: str) -> bool:
    """Kafka's rule since KIP-320: a broker (CLUSTER_ACTION) may ask of every topic, a
    consumer of the topics it may describe."""
    return (
        ctx.broker.authorizer is None
        or ctx.is_broker()
        or ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic)
    )


def _denied(p: requests.OffsetForLeaderPartition) -> responses.OffsetForLeaderEpochEpochEndOffset:
    return {
        "partition": p.partition,
        "error_code": int(ErrorCode.topic_authorization_failed),
        "leader_epoch": -1,
        "end_offset": -1,
    }


def _partition(
    broker: BrokerParts, topic: str, p: requests.OffsetForLeaderPartition
) -> responses.OffsetForLeaderEpochEpochEndOffset:
    out: responses.OffsetForLeaderEpochEpochEndOffset = {
        "partition": p.partition,
        "error_code": 0,
        "leader_epoch": -1,
        "end_offset": -1,
    }
    partition, out["error_code"] = broker.partitions.leader(
        topic, p.partition, p.current_leader_epoch
    )
    if partition is not None:
        out["leader_epoch"], out["end_offset"] = partition.end_offset_for_epoch(p.leader_epoch)
    return out


@handles(OFFSET_FOR_LEADER_EPOCH, 0)  # v0-1 through protocol.legacy_messages
def offset_for_leader_epoch(
    ctx: RequestContext, request: requests.OffsetForLeaderEpochRequest
) -> responses.OffsetForLeaderEpochResponse:
    return {
        "throttle_time": 0,
        "topics": [
            {
                "topic": t.topic,
                "partitions": [
                    _partition(ctx.broker, t.topic, p)
                    if _may_describe(ctx, t.topic)
                    else _denied(p)
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ],
    }
