"""Produce: record batches from the request, appended to partition logs as they are.

The records of each partition go to the log as bytes: the storage layer checks each
batch's header and CRC and patches its base offset, and nothing here looks inside.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.handlers.registry import NO_RESPONSE, handles
from kbroker.protocol.batch import BatchTooLargeError, InvalidBatchError

PRODUCE = 0
log = logging.getLogger("kbroker.produce")


def _partition_error(index: int, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "error_message": message,
    }


@handles(PRODUCE, 3)
def produce(ctx: Any, request: Any) -> Any:
    broker = ctx.broker
    acks = request.acks
    now = int(time.time() * 1000)
    state = broker.controller.state
    by_id = ctx.version >= 13
    topics_out = []
    awaiting_flush = []
    failed = False
    for topic_data in request.topic_data:
        if by_id:
            topic = state.topics_by_id.get(topic_data.topic_id)
            name = topic.name if topic else None
        else:
            name = topic_data.name
            topic = state.topics.get(name)
        partitions_out = []
        for pdata in topic_data.partition_data:
            if acks not in (0, 1, -1):
                result = _partition_error(pdata.index, ErrorCode.invalid_required_acks)
            elif topic is None:
                code = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                result = _partition_error(pdata.index, code)
            else:
                result = _append(broker, name, pdata, now, awaiting_flush)
            failed = failed or result["error_code"] != 0
            partitions_out.append(result)
        entry: dict[str, Any] = {"partition_responses": partitions_out}
        entry["topic_id" if by_id else "name"] = topic_data.topic_id if by_id else name
        topics_out.append(entry)
    if acks == 0:
        if failed:
            # The client reads no answer; Kafka tells it of the failure by closing.
            ctx.connection.close("produce with acks=0 failed; closing so the client notices")
        return NO_RESPONSE
    response = {"responses": topics_out, "throttle_time": 0}
    if awaiting_flush:
        return _respond_after_flush(broker, awaiting_flush, response)
    return response


def _append(broker: Any, topic: str, pdata: Any, now: int, awaiting_flush: list[Any]) -> dict:
    replica = broker.replicas.get(topic, pdata.index)
    if replica is None:
        return _partition_error(pdata.index, ErrorCode.unknown_topic_or_partition)
    if not replica.is_leader:
        return _partition_error(pdata.index, ErrorCode.not_leader_or_follower)
    if pdata.records is None:
        return _partition_error(pdata.index, ErrorCode.corrupt_message, "null records")
    try:
        appended = broker.replicas.append(replica, bytearray(pdata.records), now)
    except BatchTooLargeError as exc:
        return _partition_error(pdata.index, ErrorCode.message_too_large, str(exc))
    except InvalidBatchError as exc:
        log.warning("rejecting corrupt batch for %s-%d: %s", topic, pdata.index, exc)
        return _partition_error(pdata.index, ErrorCode.corrupt_message, str(exc))
    if replica.log.config.flush_interval_messages == 1:
        awaiting_flush.append(replica.log)
    return {
        "index": pdata.index,
        "error_code": 0,
        "base_offset": appended.base_offset,
        "log_append_time": appended.log_append_time_ms,
        "log_start_offset": appended.log_start_offset,
    }


async def _respond_after_flush(broker: Any, logs: list[Any], response: dict) -> dict:
    """fsync-before-ack: one group-committed fsync per log covers every waiting append."""
    for plog in logs:
        await broker.logs.flush_for_ack(plog)
    return response
