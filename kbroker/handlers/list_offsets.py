"""ListOffsets: earliest, latest, max-timestamp and by-timestamp offsets of partitions."""

from __future__ import annotations

from collections import Counter

from kio.schema.errors import ErrorCode

from kbroker.handlers.context import BrokerParts, RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.security.acl import Operation, ResourceType

LIST_OFFSETS = 2
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5
LATEST_TIERED = -6


def _partition(
    broker: BrokerParts, topic: str, p: requests.ListOffsetsPartition, isolation_level: int
) -> responses.ListOffsetsPartitionResponse:
    out: responses.ListOffsetsPartitionResponse = {
        "partition_index": p.partition_index,
        "error_code": 0,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    partition, code = broker.partitions.leader(topic, p.partition_index, p.current_leader_epoch)
    if partition is None:
        out["error_code"] = code
        return out
    plog = partition.log
    out["leader_epoch"] = partition.leader_epoch
    visible = partition.last_stable_offset if isolation_level == 1 else partition.high_watermark
    ts = p.timestamp
    # Kafka's lagging new leader: no latest offset, nor one found at or past the visible
    # end, until its high watermark reaches its epoch's start (the client retries).
    lagging = ts not in (EARLIEST, EARLIEST_LOCAL) and partition.high_watermark_lags_epoch_start
    if ts == LATEST:
        if lagging:
            out["error_code"] = ErrorCode.offset_not_available
        else:
            out["offset"] = visible
    elif ts in (EARLIEST, EARLIEST_LOCAL):
        out["offset"] = plog.log_start_offset
    elif ts == MAX_TIMESTAMP:
        found = plog.max_timestamp()
        if found is not None and found[1] >= 0:
            out["timestamp"], out["offset"] = found
    elif ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        out["offset"] = -1
    elif ts < 0:
        out["error_code"] = ErrorCode.invalid_request
    else:
        at = plog.offset_for_timestamp(ts)
        if at is not None and at[0] < visible:
            out["offset"], out["timestamp"] = at
        elif lagging:
            out["error_code"] = ErrorCode.offset_not_available
    return out


def _error(partition: int, code: int) -> responses.ListOffsetsPartitionResponse:
    return {"partition_index": partition, "error_code": code, "timestamp": -1, "offset": -1}


@handles(LIST_OFFSETS, 0)
def list_offsets(
    ctx: RequestContext, request: requests.ListOffsetsRequest
) -> responses.ListOffsetsResponse:
    broker = ctx.broker
    isolation = request.isolation_level
    named = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    topics: list[responses.ListOffsetsTopicResponse] = []
    checking = broker.authorizer is not None
    for t in request.topics:
        known = t.name in broker.controller.state.topics
        denied = checking and not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        partitions: list[responses.ListOffsetsPartitionResponse] = []
        for p in t.partitions:
            if denied:
                partitions.append(_error(p.partition_index, ErrorCode.topic_authorization_failed))
            elif named[(t.name, p.partition_index)] > 1:  # Kafka refuses every copy
                partitions.append(_error(p.partition_index, ErrorCode.invalid_request))
            elif not known:
                partitions.append(_error(p.partition_index, ErrorCode.unknown_topic_or_partition))
            else:
                partitions.append(_partition(broker, t.name, p, isolation))
        if ctx.version == 0:
            # v0 answers a list of offsets (Kafka 3.9: the one asked for, with the base
            # offsets of older segments after it); every client asks for one.
            for answer in partitions:
                offset = answer.get("offset", -1)
                answer["old_style_offsets"] = [offset] if offset >= 0 else []
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
