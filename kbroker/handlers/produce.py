"""Produce: each partition's records, as the request carries them, appended through the
partition's `Partition` (replica/partition.py) if this broker leads it.

The records go down as bytes: the log (storage/log.py) checks each batch's header, CRC
and records, recompresses to the topic's compression.type and patches offsets in place.
Here only the first batch's attributes are read, to verify a transactional write
(KIP-890). The answer waits, without blocking the loop, for the fsync of logs with
flush.messages=1 and, with acks=all, for the high watermark to pass each batch.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.controller.state import INTERNAL_TOPICS, TopicInfo
from kbroker.handlers.context import BrokerParts, RequestContext
from kbroker.handlers.endpoints import current_leader, leader_endpoints
from kbroker.handlers.registry import NO_RESPONSE, Later, handles
from kbroker.protocol.batch import (
    BatchTooLargeError,
    InvalidBatchError,
    InvalidRecordsError,
    UnsupportedMagicError,
    starts_with_transactional_data,
)
from kbroker.protocol.fetch_response import NodeEndpoint
from kbroker.protocol.legacy_records import InvalidLegacyRecordError, is_legacy, up_convert
from kbroker.protocol.produce_request import PartitionData, ProduceRequest
from kbroker.protocol.produce_response import (
    FIRST_CURRENT_LEADER,
    ProducedPartition,
    ProducedTopic,
    encode_produce_response,
)
from kbroker.protocol.record_validation import InvalidTimestampError
from kbroker.replica.delayed import PendingAck
from kbroker.replica.partition import Partition, PartitionError
from kbroker.security.acl import Operation, ResourceType
from kbroker.security.quotas import PRODUCER_BYTE_RATE
from kbroker.storage.log import PartitionLog
from kbroker.storage.producer_state import CLIENT, ProducerStateError
from kbroker.txn.errors import producer_state_error_code
from kbroker.txn.verification import verify_transactional_write

PRODUCE = 0
FIRST_V2_ONLY_VERSION = 3
log = logging.getLogger("kbroker.produce")


@handles(PRODUCE, 0)
def produce(ctx: RequestContext, request: ProduceRequest) -> Any:
    broker = ctx.broker
    acks = request.acks
    now = int(time.time() * 1000)
    state = broker.controller.state
    version = ctx.version
    by_id = version >= 13
    topics_out = []
    waits = _Waits()
    failed = False
    # Authorization only when an authorizer is configured: none costs one test per request.
    checking = broker.authorizer is not None
    denied_all = None
    if (
        checking
        and request.transactional_id is not None
        and not ctx.allowed(
            Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        )
    ):
        denied_all = ErrorCode.transactional_id_authorization_failed
    for topic_data in request.topic_data:
        topic: TopicInfo | None = None
        if by_id:
            if topic_data.topic_id is not None:
                topic = state.topics_by_id.get(topic_data.topic_id)
            name = topic.name if topic else None
        else:
            name = topic_data.name
            if name is not None:
                topic = state.topics.get(name)
        denied = denied_all
        if (
            checking
            and denied is None
            and not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, name or "")
        ):
            denied = ErrorCode.topic_authorization_failed
        partitions = []
        for pdata in topic_data.partition_data:
            if acks not in (0, 1, -1):
                result = ProducedPartition(pdata.index, ErrorCode.invalid_required_acks)
            elif denied is not None:
                result = ProducedPartition(pdata.index, denied)
            elif topic is None:
                code = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                result = ProducedPartition(pdata.index, code)
            elif name in INTERNAL_TOPICS:  # written only by the coordinators that own them
                result = ProducedPartition(pdata.index, ErrorCode.invalid_topic_exception)
            else:
                result = _append(
                    broker,
                    topic.name,
                    pdata,
                    now,
                    acks,
                    waits,
                    request.transactional_id,
                    version,
                )
            failed = failed or result.error_code != 0
            partitions.append(result)
        topics_out.append(ProducedTopic(name, topic_data.topic_id, partitions))
    throttle = _throttle(ctx, request) if broker.quotas.active else 0
    if acks == 0:
        if failed:
            # The client reads no answer; Kafka tells it of the failure by closing.
            ctx.connection.close("produce with acks=0 failed; closing so the client notices")
        return NO_RESPONSE
    endpoints = None
    if failed and version >= FIRST_CURRENT_LEADER:
        endpoints = _name_current_leaders(ctx, topics_out)
    if waits.replication:
        return _respond_after_replication(
            broker, waits, version, topics_out, request.timeout_ms, throttle, endpoints
        )
    if waits.logs:
        return _respond_after_flush(broker, waits.logs, version, topics_out, throttle, endpoints)
    return encode_produce_response(version, topics_out, throttle, endpoints)


def _name_current_leaders(
    ctx: RequestContext, topics: list[ProducedTopic]
) -> list[NodeEndpoint] | None:
    """KIP-951: a NOT_LEADER_OR_FOLLOWER answer names the partition's current leader and
    its endpoint, so the client retries there without a Metadata round trip."""
    leaders: set[int] = set()
    for topic in topics:
        for p in topic.partitions:
            if p.error_code == ErrorCode.not_leader_or_follower and topic.name is not None:
                p.current_leader = current_leader(ctx, topic.name, p.index)
                if p.current_leader is not None:
                    leaders.add(p.current_leader[0])
    return leader_endpoints(ctx, leaders) if leaders else None


def _throttle(ctx: RequestContext, request: ProduceRequest) -> int:
    """producer_byte_rate: count the request's record bytes against the client's quota;
    over it, the answer carries the throttle time and the channel is muted that long."""
    size = sum(len(p.records) for t in request.topic_data for p in t.partition_data if p.records)
    throttle = ctx.broker.quotas.record(PRODUCER_BYTE_RATE, ctx.principal.name, ctx.client_id, size)
    ctx.connection.throttle(throttle)
    return throttle


def _append(
    broker: BrokerParts,
    topic: str,
    pdata: PartitionData,
    now: int,
    acks: int,
    waits: _Waits,
    transactional_id: str | None,
    version: int,
) -> ProducedPartition:
    index = pdata.index
    partition, code = broker.partitions.leader(topic, index)
    if partition is None:
        why = broker.durability.failed.get((topic, index))
        if why is not None:  # its log could not be made or opened here
            return ProducedPartition(index, ErrorCode.kafka_storage_error, error_message=why)
        return ProducedPartition(index, code)
    if pdata.records is None:
        return ProducedPartition(index, ErrorCode.corrupt_message, error_message="null records")
    if not pdata.records and version >= FIRST_V2_ONLY_VERSION:
        return ProducedPartition(
            index,
            ErrorCode.invalid_record,
            error_message=f"Produce requests with version {version} must have exactly one "
            "record batch per partition",
        )
    broker.counters.produced_bytes += len(pdata.records)
    records: memoryview | bytearray = pdata.records
    if version < FIRST_V2_ONLY_VERSION and is_legacy(records):
        # Message format v0/v1 (Produce v0-2): stored as one v2 batch, as Kafka 3.9 does.
        try:
            records = up_convert(records)
        except InvalidLegacyRecordError as exc:
            return ProducedPartition(index, ErrorCode.invalid_record, error_message=str(exc))
        except InvalidBatchError as exc:
            log.warning("rejecting corrupt messages for %s-%d: %s", topic, index, exc)
            return ProducedPartition(index, ErrorCode.corrupt_message, error_message=str(exc))
    if broker.schemas is not None:
        refused = broker.schemas.refuse(topic, records)
        if refused is not None:
            message, errors = refused
            return ProducedPartition(
                index, ErrorCode.invalid_record, error_message=message, record_errors=tuple(errors)
            )
    if starts_with_transactional_data(records):
        code = verify_transactional_write(
            broker.transactions.coordinator,
            broker.config.transaction_partition_verification_enable,
            broker.controller.state,
            transactional_id,
            topic,
            index,
            records,
        )
        if code:
            return ProducedPartition(index, code)
    try:
        appended = partition.append_as_leader(
            records, now, CLIENT, acks, broker.controller.state.next_producer_id
        )
    except PartitionError as exc:
        return ProducedPartition(index, exc.code, error_message=str(exc))
    except BatchTooLargeError as exc:
        return ProducedPartition(index, ErrorCode.message_too_large, error_message=str(exc))
    except UnsupportedMagicError as exc:
        # Produce v3+ carries only v2 batches (Kafka: INVALID_RECORD); in v0-2 an old
        # message after a v2 batch is a message set Kafka cannot parse either.
        code = (
            ErrorCode.invalid_record
            if version >= FIRST_V2_ONLY_VERSION
            else ErrorCode.corrupt_message
        )
        return ProducedPartition(index, code, error_message=str(exc))
    except InvalidRecordsError as exc:
        code = (
            ErrorCode.invalid_timestamp
            if isinstance(exc, InvalidTimestampError)
            else ErrorCode.invalid_record
        )
        return ProducedPartition(
            index, code, error_message=str(exc), record_errors=tuple(exc.record_errors)
        )
    except InvalidBatchError as exc:
        log.warning("rejecting corrupt batch for %s-%d: %s", topic, index, exc)
        return ProducedPartition(index, ErrorCode.corrupt_message, error_message=str(exc))
    except ProducerStateError as exc:
        return ProducedPartition(index, producer_state_error_code(exc), error_message=str(exc))
    except OSError as exc:  # a disk error: the log directory goes offline (Kafka's answer)
        why = broker.durability.storage_error(partition.log, exc)
        return ProducedPartition(index, ErrorCode.kafka_storage_error, error_message=why)
    counters = broker.counters
    stats = counters.topics.get(topic) or counters.topic(topic)
    stats.messages_in += appended.record_count
    stats.bytes_in += len(records)
    result = ProducedPartition(
        index, 0, appended.base_offset, appended.log_append_time_ms, appended.log_start_offset
    )
    if partition.log.config.fsyncs_every_append:
        waits.logs.append(partition.log)
    if acks == -1:
        required = appended.last_offset + 1
        decided = partition.replication_outcome(required)
        if decided is None:  # the ISR has yet to reach it: a delayed produce waits
            waits.replication.append((partition, required, result))
        elif decided:
            result.error_code = decided
    return result


@dataclass(slots=True)
class _Waits:
    """What a Produce's answer waits for: fsyncs of logs that flush every append, and
    (acks=all) the ISR reaching each partition's batch."""

    logs: list[PartitionLog] = field(default_factory=list)
    replication: list[tuple[Partition, int, ProducedPartition]] = field(default_factory=list)


def _respond_after_flush(
    broker: BrokerParts,
    logs: list[PartitionLog],
    version: int,
    topics: list[ProducedTopic],
    throttle_ms: int = 0,
    endpoints: list[NodeEndpoint] | None = None,
) -> Later:
    """fsync-before-ack: the answer goes out when every written log is fsynced, straight
    from the group commit that fsynced them (one fsync for all appends of the loop
    iteration). It is encoded now, while the disk is already writing, not after."""
    answer = Later()
    encoded = encode_produce_response(version, topics, throttle_ms, endpoints)

    def storage_failed() -> None:
        answer.settle(encode_produce_response(version, topics, throttle_ms, endpoints))

    _await_flushes(broker, logs, answer, lambda: answer.settle(encoded), topics, storage_failed)
    return answer


def _await_flushes(
    broker: BrokerParts,
    logs: list[PartitionLog],
    answer: Later,
    done: Callable[[], None],
    topics: list[ProducedTopic],
    storage_failed: Callable[[], None],
) -> None:
    """Call `done` once every log is fsynced. A failed fsync took its log directory
    offline (the log manager's group commit): the partitions written there answer
    KAFKA_STORAGE_ERROR, through `storage_failed`; an fsync that failed otherwise (no
    descriptors) fails the request."""
    waiting = set(logs)

    def durable(plog: PartitionLog, error: OSError | None) -> None:
        if answer.settled:
            return
        if error is not None:
            if _storage_failures(broker, topics):
                storage_failed()
            else:
                answer.fail(error)
            return
        waiting.discard(plog)
        if not waiting:
            done()

    for plog in list(waiting):
        broker.durability.when_durable(plog, functools.partial(durable, plog))


def _storage_failures(broker: BrokerParts, topics: list[ProducedTopic]) -> bool:
    """Give KAFKA_STORAGE_ERROR to the written partitions that are offline here now."""
    failed = broker.durability.failed
    by_id = broker.controller.state.topics_by_id
    found = False
    for topic in topics:
        named = by_id.get(topic.topic_id) if topic.topic_id and topic.name is None else None
        name = named.name if named is not None else topic.name or ""
        for result in topic.partitions:
            why = failed.get((name, result.index))
            if why is not None and result.error_code == 0:
                result.error_code = ErrorCode.kafka_storage_error
                result.error_message = why
                result.base_offset = -1
                found = True
    return found


def _respond_after_replication(
    broker: BrokerParts,
    waits: _Waits,
    version: int,
    topics: list[ProducedTopic],
    timeout_ms: int,
    throttle_ms: int,
    endpoints: list[NodeEndpoint] | None,
) -> Later | bytes:
    """acks=all: the answer goes out when the high watermark of every written partition
    has passed its batch (Kafka's delayed produce), or at the request's timeout with
    REQUEST_TIMED_OUT for the partitions still short. Each partition's outcome may be
    an error (NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below
    min.insync.replicas, NOT_LEADER_OR_FOLLOWER when leadership moved meanwhile).

    When the high watermarks already cover every batch (an ISR of the leader alone), no
    delayed produce is set up: the answer is encoded at once and, for logs that fsync
    every append, sent straight from the group commit, as for acks=1."""
    short: list[tuple[Partition, int, ProducedPartition]] = []
    for partition, required, result in waits.replication:
        decided = partition.replication_outcome(required)
        if decided is None:
            short.append((partition, required, result))
        elif decided:
            result.error_code = decided
    if not short:  # decided now, as on a partition whose ISR is the leader alone
        if waits.logs:
            return _respond_after_flush(broker, waits.logs, version, topics, throttle_ms, endpoints)
        return encode_produce_response(version, topics, throttle_ms, endpoints)
    answer = Later()
    pending: dict[int, tuple[PendingAck, ProducedPartition]] = {}
    state = {"flushing": bool(waits.logs)}
    timer: list[asyncio.TimerHandle] = []

    def finish() -> None:
        if not pending and not state["flushing"] and not answer.settled:
            if timer:
                timer[0].cancel()
            answer.settle(encode_produce_response(version, topics, throttle_ms, endpoints))

    def acked(key: int, result: ProducedPartition, code: ErrorCode) -> None:
        pending.pop(key, None)
        if code:
            result.error_code = code
        finish()

    for i, (partition, required, result) in enumerate(short):
        outcome = partition.await_replication(required, functools.partial(acked, i, result))
        if isinstance(outcome, PendingAck):
            pending[i] = (outcome, result)
        elif outcome:
            result.error_code = outcome
    if pending:

        def expire() -> None:
            for ack, result in pending.values():
                ack.cancel()
                result.error_code = ErrorCode.request_timed_out
            pending.clear()
            finish()

        loop = asyncio.get_running_loop()
        timer.append(loop.call_later(max(timeout_ms, 0) / 1000, expire))
    if waits.logs:

        def flushed() -> None:
            state["flushing"] = False
            finish()

        _await_flushes(broker, waits.logs, answer, flushed, topics, flushed)
    elif not pending:
        return encode_produce_response(version, topics, throttle_ms, endpoints)
    return answer
