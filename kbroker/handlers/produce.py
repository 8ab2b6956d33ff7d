"""Produce: the request's partitions mapped to the replica manager's `append_records`
(kbroker/replica/append.py) and its per-partition results to the response.

What stays here is what Kafka's KafkaApis.handleProduceRequest does before it hands the
records down: the required acks, authorization, unknown and internal topics, the byte
quota and, after, naming the current leaders (KIP-951). The records go down as bytes;
the replica manager applies the produce-path policies, appends, and answers per
partition, with what the answer must wait for (fsyncs, acks=all) in its delayed produce.

One step comes first for a transactions version 2 client (Produce v12+, KIP-890 part
2), which sends no AddPartitionsToTxn: a partition whose producer state has no open
transaction of the batch's producer and epoch is added to the transaction by its
coordinator (kbroker.txn.implicit), which fences a write of an epoch an EndTxn ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from kio.schema.errors import ErrorCode

from kbroker.controller.state import INTERNAL_TOPICS, TopicInfo
from kbroker.handlers.context import RequestContext
from kbroker.handlers.endpoints import current_leader, leader_endpoints
from kbroker.handlers.registry import NO_RESPONSE, Later, NoResponse, handles
from kbroker.protocol.batch import (
    HEADER_SIZE,
    first_producer,
    first_sequence,
    starts_with_transactional_data,
)
from kbroker.protocol.fetch_response import NodeEndpoint
from kbroker.protocol.produce_request import ProduceRequest
from kbroker.protocol.produce_response import (
    FIRST_CURRENT_LEADER,
    ProducedPartition,
    ProducedTopic,
    encode_produce_response,
)
from kbroker.replica.append import AppendEntry, DelayedProduce
from kbroker.security.acl import Operation, ResourceType
from kbroker.security.quotas import PRODUCER_BYTE_RATE
from kbroker.storage.producer_state import CLIENT
from kbroker.txn.implicit import produce_error

PRODUCE = 0
FIRST_IMPLICIT_ADD_VERSION = 12  # KIP-890 part 2: no AddPartitionsToTxn from the client


@handles(PRODUCE, 0)
def produce(
    ctx: RequestContext, request: ProduceRequest
) -> bytes | Later | NoResponse | Awaitable[bytes | Later | NoResponse]:
    if ctx.version >= FIRST_IMPLICIT_ADD_VERSION and request.transactional_id is not None:
        appending = ctx.broker.transactions.adder.appending
        earlier = appending.get(request.transactional_id)
        if earlier is not None or _partitions_to_add(ctx, request) is not None:
            # Taken now, as the request comes, so the next one of this id waits for it.
            mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            appending[request.transactional_id] = mine
            return _produce_after_adding(ctx, request, request.transactional_id, earlier, mine)
    return _produce(ctx, request)


def _partitions_to_add(
    ctx: RequestContext, request: ProduceRequest
) -> tuple[int, int, set[tuple[str, int]]] | None:
    """KIP-890 part 2: (producer id, epoch, partitions) when a transactional batch of
    this Produce v12+ goes to a partition led here whose producer state has no open
    transaction of that producer and epoch yet: its coordinator adds it first."""
    broker = ctx.broker
    state = broker.controller.state
    found: tuple[int, int] | None = None
    adding: set[tuple[str, int]] = set()
    for topic_data in request.topic_data:
        topic = (
            state.topics_by_id.get(topic_data.topic_id)
            if topic_data.topic_id is not None
            else state.topics.get(topic_data.name or "")
        )
        if topic is None or topic.name in INTERNAL_TOPICS:
            continue
        if broker.authorizer is not None and not ctx.allowed(
            Operation.WRITE, ResourceType.TOPIC, topic.name
        ):
            continue  # refused below, before anything is added
        for pdata in topic_data.partition_data:
            records = pdata.records
            if not records or len(records) < HEADER_SIZE:
                continue
            if not starts_with_transactional_data(records):
                continue
            partition, _ = broker.partitions.leader(topic.name, pdata.index)
            if partition is None:
                continue
            producer = first_producer(records)
            found = found or producer
            producers = partition.log.producer_state
            entry = producers.producers.get(producer[0])
            if (
                producer[0] in producers.ongoing
                and entry is not None
                and entry.epoch == producer[1]
            ):
                continue  # in the transaction already
            producers.start_verification(producer[0], first_sequence(records), producer[1])
            adding.add((topic.name, pdata.index))
    if not adding or found is None:
        return None
    return found[0], found[1], adding


async def _produce_after_adding(
    ctx: RequestContext,
    request: ProduceRequest,
    transactional_id: str,
    earlier: asyncio.Future[None] | None,
    mine: asyncio.Future[None],
) -> bytes | Later | NoResponse:
    """The Produce once the coordinator added its partitions (those it refused answer
    its error, as Kafka's ReplicaManager maps it).

    The produces of one transactional id append in the order they came, as Kafka's
    muted connection processes them: one that comes while an earlier one waits for the
    coordinator waits for that one's append, or a pipelined batch (a client keeps
    several in flight) would overtake the earlier one and be refused as out of
    sequence."""
    adder = ctx.broker.transactions.adder
    try:
        if earlier is not None:
            await asyncio.shield(earlier)  # a closed connection cancels this one, not it
        refused: dict[tuple[str, int], ErrorCode] = {}
        adding = _partitions_to_add(ctx, request)  # the earlier one may have added them
        if adding is not None and (
            ctx.broker.authorizer is None
            or ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
        ):
            added = await adder.add(transactional_id, *adding)
            refused = {
                tp: produce_error(code) for tp, code in added.items() if code != ErrorCode.none
            }
        answer = _produce(ctx, request, refused)
    finally:
        if not mine.done():
            mine.set_result(None)
        if adder.appending.get(transactional_id) is mine:
            del adder.appending[transactional_id]
    # Appended: an answer that waits for acks=all comes as a Later, which frees the
    # connection's next request now (as after any Produce) instead of after replication.
    # Held until then, a client's pipelined requests queued behind each add and each
    # acks=all wait in turn, and the retry of a transaction's first batch that the
    # coordinator had refused waited seconds behind them while the batches after it
    # were refused OUT_OF_ORDER_SEQUENCE_NUMBER.
    return answer


def _produce(
    ctx: RequestContext,
    request: ProduceRequest,
    refused: dict[tuple[str, int], ErrorCode] | None = None,
) -> bytes | Later | NoResponse:
    broker = ctx.broker
    acks = request.acks
    state = broker.controller.state
    version = ctx.version
    by_id = version >= 13
    topics_out = []
    # What is appended (through the replica manager), and the slots of its answers.
    entries: list[AppendEntry] = []
    slots: list[tuple[list[ProducedPartition], int]] = []
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
        partitions: list[ProducedPartition] = []
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
            elif refused and (topic.name, pdata.index) in refused:
                result = ProducedPartition(pdata.index, refused[(topic.name, pdata.index)])
            else:
                slots.append((partitions, len(partitions)))
                partitions.append(_APPENDING)
                entries.append((topic.name, pdata.index, pdata.records))
                continue
            failed = True
            partitions.append(result)
        topics_out.append(ProducedTopic(name, topic_data.topic_id, partitions))
    delayed = None
    if entries:
        # Positional: the hottest call there is (keywords cost more to pass).
        delayed = broker.partitions.append_records(
            entries,
            acks,
            request.timeout_ms,
            CLIENT,
            None,
            version,
            request.transactional_id,
            broker.counters,
        )
        for (partitions, slot), result in zip(slots, delayed.results):  # noqa: B905
            partitions[slot] = result
            if result.error_code:
                failed = True
    throttle = _throttle(ctx, request) if broker.quotas.active else 0
    if acks == 0:
        if failed:
            # The client reads no answer; Kafka tells it of the failure by closing.
            ctx.connection.close("produce with acks=0 failed; closing so the client notices")
        return NO_RESPONSE
    endpoints = None
    if failed and version >= FIRST_CURRENT_LEADER:
        endpoints = _name_current_leaders(ctx, topics_out)
    if delayed is None or delayed.done:
        return encode_produce_response(version, topics_out, throttle, endpoints)
    return _respond_later(delayed, version, topics_out, throttle, endpoints)


# Holds an appended partition's place in the answer until the replica manager's result.
_APPENDING = ProducedPartition(-1)


def _respond_later(
    delayed: DelayedProduce,
    version: int,
    topics: list[ProducedTopic],
    throttle_ms: int,
    endpoints: list[NodeEndpoint] | None,
) -> Later:
    """The answer once the appends may be acknowledged (the replica manager's delayed
    produce: fsyncs of logs that flush every append, and with acks=all the ISR reaching
    each batch or the request's timeout), settled straight from the callback that
    completes it. When it waits for fsyncs alone it is encoded now, while the disk is
    already writing, not after (again only if an fsync failed)."""
    answer = Later()
    encoded = (
        None
        if delayed.waits_for_replication
        else encode_produce_response(version, topics, throttle_ms, endpoints)
    )

    def complete(done: DelayedProduce) -> None:
        if done.error is not None:  # an fsync failed without taking its directory offline
            answer.fail(done.error)
        elif encoded is not None and not done.storage_failed:
            answer.settle(encoded)
        else:
            answer.settle(encode_produce_response(version, topics, throttle_ms, endpoints))

    delayed.on_complete(complete)
    return answer


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
