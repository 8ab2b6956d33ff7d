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


def _partition_v0(
    broker: BrokerParts, topic: str, p: requests.ListOffsetsPartition, replica_id: int
) -> responses.ListOffsetsPartitionResponse:
    """ListOffsets v0 as Kafka 3.9 answered it: up to `max_num_offsets` offsets, newest
    first, from the segments' base offsets and the log end (`Log.legacy_offsets_before`);
    a consumer's (replica id -1) capped at the high watermark."""
    out = _error(p.partition_index, 0)
    partition, code = broker.partitions.leader(topic, p.partition_index, -1)
    if partition is None:
        out["error_code"] = code
        return out
    offsets = partition.log.legacy_offsets_before(p.timestamp, p.max_num_offsets)
    if replica_id == -1:
        hw = partition.high_watermark
        if any(o > hw for o in offsets):
            offsets = [hw] + [o for o in offsets if o <= hw]
    out["old_style_offsets"] = offsets
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
            elif ctx.version == 0:
                partitions.append(_partition_v0(broker, t.name, p, request.replica_id))
            else:
                partitions.append(_partition(broker, t.name, p, isolation))
        if ctx.version == 0:
            for answer in partitions:
                answer.setdefault("old_style_offsets", [])
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
