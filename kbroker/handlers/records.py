"""DeleteRecords: move a partition's log start offset forward on its leader.

The records below the new start offset stop being readable at once; whole segments
below it are removed by the log. Offset -1 means "up to the high watermark". As on
Kafka the answer waits (up to the request's timeout) until every replica on a live
broker has moved its log start there too, which followers do from their next fetch:
then no replica elected leader later serves the deleted records again.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from kbroker.controller.state import INTERNAL_TOPICS, TopicInfo
from kbroker.handlers.context import BrokerParts, RequestContext
from kbroker.handlers.registry import handles
from kbroker.protocol import requests, responses
from kbroker.replica.delayed import PendingDeletion
from kbroker.security.acl import Operation, ResourceType
from kbroker.storage.errors import LogClosedError, LogError, OffsetOutOfRangeError

DELETE_RECORDS = 21
HIGH_WATERMARK = -1

log = logging.getLogger("kbroker.delete_records")


def _result(
    index: int, code: ErrorCode, low_watermark: int = -1
) -> responses.DeleteRecordsPartitionResult:
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": code}


def delete_partition_records(
    broker: BrokerParts,
    topic: TopicInfo,
    index: int,
    offset: int,
    waiting: list[asyncio.Future[None]],
) -> responses.DeleteRecordsPartitionResult:
    """One partition's deletion, with the error codes Kafka gives for each refusal. While
    followers on live brokers have yet to follow it, the result says REQUEST_TIMED_OUT
    and a future added to `waiting` completes when they have, setting the outcome."""
    if topic.name in INTERNAL_TOPICS:
        return _result(index, ErrorCode.invalid_topic_exception)
    if not any(p.partition == index for p in topic.partitions):
        return _result(index, ErrorCode.unknown_topic_or_partition)
    partition = broker.partitions.get(topic.name, index)
    if partition is None or not partition.is_leader:
        return _result(index, ErrorCode.not_leader_or_follower)
    plog = partition.log
    if not plog.config.deletes:
        return _result(index, ErrorCode.policy_violation)
    high_watermark = partition.high_watermark
    target = high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > high_watermark:
        return _result(index, ErrorCode.offset_out_of_range)
    try:
        low_watermark = plog.delete_records_before(target)
    except OffsetOutOfRangeError:
        return _result(index, ErrorCode.offset_out_of_range)
    except LogClosedError:  # the partition was deleted or moved meanwhile
        return _result(index, ErrorCode.not_leader_or_follower)
    except OSError as exc:
        # Deleting segments failed: the log directory goes offline, as for a failed append.
        broker.durability.dir_failures.report(plog, exc)
        return _result(index, ErrorCode.kafka_storage_error)
    except LogError:
        log.exception("deleting records of %s-%d before %d failed", topic.name, index, target)
        return _result(index, ErrorCode.kafka_storage_error)
    result = _result(index, ErrorCode.none, low_watermark)
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def live(node_id: int) -> bool:
        registered = broker.controller.state.brokers.get(node_id)
        return registered is not None and not registered.fenced

    def replicated(code: ErrorCode, low: int) -> None:
        result["error_code"], result["low_watermark"] = code, low
        if not future.done():
            future.set_result(None)

    outcome = partition.await_log_start(low_watermark, live, replicated)
    if isinstance(outcome, PendingDeletion):
        result["error_code"], result["low_watermark"] = ErrorCode.request_timed_out, -1
        future.add_done_callback(lambda f: outcome.cancel() if f.cancelled() else None)
        waiting.append(future)
    else:
        result["low_watermark"] = outcome
    return result


@handles(DELETE_RECORDS, 0)
async def delete_records(
    ctx: RequestContext, request: requests.DeleteRecordsRequest
) -> responses.DeleteRecordsResponse:
    broker = ctx.broker
    topics = broker.controller.state.topics
    results: list[responses.DeleteRecordsTopicResult] = []
    waiting: list[asyncio.Future[None]] = []
    for t in request.topics:
        topic = topics.get(t.name)
        if broker.authorizer is not None and not ctx.allowed(
            Operation.DELETE, ResourceType.TOPIC, t.name
        ):
            denied = ErrorCode.topic_authorization_failed
            partitions = [_result(p.partition_index, denied) for p in t.partitions]
            results.append({"name": t.name, "partitions": partitions})
            continue
        partitions = [
            delete_partition_records(broker, topic, p.partition_index, p.offset, waiting)
            if topic is not None
            else _result(p.partition_index, ErrorCode.unknown_topic_or_partition)
            for p in t.partitions
        ]
        results.append({"name": t.name, "partitions": partitions})
    if waiting:
        # Kafka's DelayedDeleteRecords: a partition still waiting at the request's timeout
        # answers REQUEST_TIMED_OUT (its log start has moved on the leader all the same).
        _, late = await asyncio.wait(waiting, timeout=max(0.0, request.timeout.total_seconds()))
        for future in late:
            future.cancel()
    return {"throttle_time": 0, "topics": results}
