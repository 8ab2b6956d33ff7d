"""Transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
WriteTxnMarkers, TxnOffsetCommit, DescribeTransactions, ListTransactions.

Each handler turns its request into a call on the broker's transaction coordinator
(kbroker.txn) and the answer back into the version's fields. The coordinator's calls
are coroutines: their log writes may wait for an fsync or for replication.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
from collections.abc import Iterable
from typing import Protocol

from kio.schema.errors import ErrorCode

from kbroker.coordinator.group import OffsetAndMetadata
from kbroker.coordinator.store import OFFSETS_TOPIC
from kbroker.coordinator_runtime.internal_topics import Acknowledgement, write_error
from kbroker.handlers.context import RequestContext, TxnCoordination
from kbroker.handlers.registry import NO_RESPONSE, NoResponse, handles
from kbroker.protocol import requests, responses
from kbroker.protocol.messages import duration_ms
from kbroker.security.acl import CLUSTER_NAME, Operation, ResourceType
from kbroker.txn.implicit import produce_error
from kbroker.txn.metadata import TxnMetadata, TxnState

INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
FIRST_TV2_END_TXN = 5
FIRST_TV2_TXN_OFFSET_COMMIT = 5
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

E = ErrorCode
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
log = logging.getLogger("kbroker.txn")


def _service(ctx: RequestContext) -> TxnCoordination:
    return ctx.broker.transactions


# KIP-588: the first version of each API whose client knows PRODUCER_FENCED. An older
# one is told INVALID_PRODUCER_EPOCH instead, which it handles as a fencing, as Kafka's
# KafkaApis answers it; the code it does not know would be a fatal unknown error.
FIRST_PRODUCER_FENCED = {
    INIT_PRODUCER_ID: 4,
    ADD_PARTITIONS_TO_TXN: 2,
    ADD_OFFSETS_TO_TXN: 2,
    END_TXN: 2,
}


def _for_client(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    """`error` as the request's version may name it."""
    if error == E.producer_fenced and ctx.version < FIRST_PRODUCER_FENCED[ctx.header.api_key]:
        return E.invalid_producer_epoch
    return error


# -- InitProducerId ------------------------------------------------------------------------


# v6 (KIP-939, two-phase commit) is not served: 0-5 as Kafka 3.9 does.
def _txn_denied(ctx: RequestContext, txn_id: str) -> bool:
    """WRITE on the transactional id, which every transactional request needs."""
    return ctx.broker.authorizer is not None and not ctx.allowed(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
    )


def _init_denied(ctx: RequestContext, txn_id: str | None) -> ErrorCode | None:
    """Kafka's rule: a transactional producer needs WRITE on its transactional id; an
    idempotent one IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    if txn_id:
        if ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
            return None
        return E.transactional_id_authorization_failed
    if ctx.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    if ctx.allowed_on_some(Operation.WRITE, ResourceType.TOPIC):
        return None
    return E.cluster_authorization_failed


@handles(INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(
    ctx: RequestContext, request: requests.InitProducerIdRequest
) -> responses.InitProducerIdResponse:
    service = _service(ctx)
    txn_id = request.transactional_id
    if ctx.broker.authorizer is not None:
        denied = _init_denied(ctx, txn_id)
        if denied is not None:
            return {
                "throttle_time": 0,
                "error_code": denied,
                "producer_id": -1,
                "producer_epoch": -1,
            }
    if txn_id:
        error = await service.ensure_topic()
        if error != E.none:
            return {"throttle_time": 0, "error_code": error, "producer_epoch": -1}
    result = await service.coordinator.init_producer_id(
        txn_id,
        duration_ms(request.transaction_timeout),
        request.producer_id,
        request.producer_epoch,
    )
    return {
        "throttle_time": 0,
        "error_code": _for_client(ctx, result.error),
        "producer_id": result.producer_id,
        "producer_epoch": result.producer_epoch,
    }


# -- AddPartitionsToTxn -------------------------------------------------------------------


class _TxnTopic(Protocol):
    """A topic and the partitions it adds to a transaction, in every version."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> tuple[int, ...]: ...


def _partition_errors(
    ctx: RequestContext, topics: Iterable[_TxnTopic]
) -> tuple[set[tuple[str, int]], dict[tuple[str, int], ErrorCode]]:
    """The requested partitions, and an error for each that does not exist."""
    state = ctx.broker.controller.state
    wanted: set[tuple[str, int]] = set()
    bad: dict[tuple[str, int], ErrorCode] = {}
    for topic in topics:
        info = state.topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, int(p))
            wanted.add(tp)
            if info is None or not 0 <= p < len(info.partitions):
                bad[tp] = E.unknown_topic_or_partition
    return wanted, bad


async def _add_partitions(
    ctx: RequestContext,
    txn_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Iterable[_TxnTopic],
    verify_only: bool = False,
    from_broker: bool = False,
) -> dict[tuple[str, int], ErrorCode]:
    wanted, bad = _partition_errors(ctx, topics)
    service = _service(ctx)
    if ctx.broker.authorizer is not None and not verify_only and not from_broker:
        if _txn_denied(ctx, txn_id):
            return dict.fromkeys(wanted, E.transactional_id_authorization_failed)
        for topic, partition in wanted:
            if not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, topic):
                bad[(topic, partition)] = E.topic_authorization_failed
    if bad:
        # Kafka adds none of them when any is bad; the others were not attempted.
        return {tp: bad.get(tp, E.operation_not_attempted) for tp in wanted}
    coordinator = service.coordinator
    if verify_only:
        return coordinator.verify_partitions(txn_id, producer_id, producer_epoch, wanted)
    # A broker adding partitions (v4+ without verify_only) does so for a transactions
    # version 2 client, whose Produce v12+ or TxnOffsetCommit v5+ reached it.
    error = await coordinator.add_partitions(
        txn_id, producer_id, producer_epoch, wanted, 2 if from_broker else 0
    )
    return dict.fromkeys(wanted, error)


def _topic_results(
    results: dict[tuple[str, int], ErrorCode],
) -> list[responses.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[responses.AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), error in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": error}
        )
    return [{"name": name, "results_by_partition": parts} for name, parts in by_topic.items()]


@handles(ADD_PARTITIONS_TO_TXN, 0, unordered_from=4)  # v4+: sent by partition leaders
async def add_partitions_to_txn(
    ctx: RequestContext, request: requests.AddPartitionsToTxnRequest
) -> responses.AddPartitionsToTxnResponse | NoResponse:
    # From v4 (KIP-890) one request, sent by a partition leader, names several
    # transactions; up to v3 a producer names its own.
    if ctx.version < 4:
        results = await _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
        )
        results = {tp: _for_client(ctx, error) for tp, error in results.items()}
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(results)}
    # v4+: batched, sent by brokers rather than clients, which only a broker may send
    # (CLUSTER_ACTION, as Kafka asks).
    if not request.transactions:
        # Kafka refuses such a request as it parses it, so the connection closes.
        ctx.connection.close(f"AddPartitionsToTxn v{ctx.version} names no transaction")
        return NO_RESPONSE
    if ctx.broker.authorizer is not None and not ctx.is_broker():
        return {
            "throttle_time": 0,
            "error_code": E.cluster_authorization_failed,
            "results_by_transaction": [],
        }
    out: list[responses.AddPartitionsToTxnResult] = []
    for txn in request.transactions:
        results = await _add_partitions(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            verify_only=txn.verify_only,
            from_broker=True,
        )
        out.append(
            {"transactional_id": txn.transactional_id, "topic_results": _topic_results(results)}
        )
    return {"throttle_time": 0, "error_code": E.none, "results_by_transaction": out}


# -- AddOffsetsToTxn ----------------------------------------------------------------------


@handles(ADD_OFFSETS_TO_TXN, 0)
async def add_offsets_to_txn(
    ctx: RequestContext, request: requests.AddOffsetsToTxnRequest
) -> responses.AddOffsetsToTxnResponse:
    if _txn_denied(ctx, request.transactional_id):
        return {"throttle_time": 0, "error_code": E.transactional_id_authorization_failed}
    if ctx.broker.authorizer is not None and not ctx.allowed(
        Operation.READ, ResourceType.GROUP, request.group_id
    ):
        return {"throttle_time": 0, "error_code": E.group_authorization_failed}
    service = _service(ctx)
    groups = ctx.broker.groups
    # The group's offsets partition joins the transaction, so the commit marker reaches it.
    error, _ = await groups.find_group_coordinator(request.group_id)
    if error != E.none:
        return {"throttle_time": 0, "error_code": error}
    partition = groups.coordinator.partition_for(request.group_id)
    error = await service.coordinator.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        {(OFFSETS_TOPIC, partition)},
    )
    return {"throttle_time": 0, "error_code": _for_client(ctx, error)}


# -- EndTxn ---------------------------------------------------------------------------------


@handles(END_TXN, 0)
async def end_txn(ctx: RequestContext, request: requests.EndTxnRequest) -> responses.EndTxnResponse:
    if _txn_denied(ctx, request.transactional_id):
        return {
            "throttle_time": 0,
            "error_code": E.transactional_id_authorization_failed,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    service = _service(ctx)
    result = await service.coordinator.end_txn(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        bool(request.committed),
        # EndTxn v5+ comes from a transactions version 2 client (Kafka's rule).
        client_version=2 if ctx.version >= FIRST_TV2_END_TXN else 0,
    )
    return {
        "throttle_time": 0,
        "error_code": _for_client(ctx, result.error),
        "producer_id": result.producer_id,
        "producer_epoch": result.producer_epoch,
    }


# -- WriteTxnMarkers -------------------------------------------------------------------------


@handles(WRITE_TXN_MARKERS, 0, unordered_from=0)  # v0 through protocol.legacy_messages
async def write_txn_markers(
    ctx: RequestContext, request: requests.WriteTxnMarkersRequest
) -> responses.WriteTxnMarkersResponse:
    """Markers from a transaction coordinator on another broker, for partitions led here.
    Only a broker (CLUSTER_ACTION) may write them."""
    service = _service(ctx)
    markers_out: list[responses.WritableTxnMarkerResult] = []
    if ctx.broker.authorizer is not None and not ctx.is_broker():
        refused = E.cluster_authorization_failed
        return {
            "markers": [
                {
                    "producer_id": m.producer_id,
                    "topics": [
                        {
                            "name": t.name,
                            "partitions": [
                                {"partition_index": i, "error_code": refused}
                                for i in t.partition_indexes
                            ],
                        }
                        for t in m.topics
                    ],
                }
                for m in request.markers
            ]
        }
    # Answered once the ISR holds each marker, as Kafka's acks=all marker append; the
    # markers of the several transactions a request may carry are awaited together.
    written = await asyncio.gather(
        *(
            service.markers.write_here(
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                bool(marker.transaction_result),
                [(t.name, int(i)) for t in marker.topics for i in t.partition_indexes],
            )
            for marker in request.markers
        )
    )
    answers = iter(written)
    for marker in request.markers:
        outcomes = next(answers)
        topics_out: list[responses.WritableTxnMarkerTopicResult] = [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": i, "error_code": outcomes[(topic.name, int(i))]}
                    for i in topic.partition_indexes
                ],
            }
            for topic in marker.topics
        ]
        markers_out.append({"producer_id": marker.producer_id, "topics": topics_out})
    return {"markers": markers_out}


# -- TxnOffsetCommit --------------------------------------------------------------------------


@handles(TXN_OFFSET_COMMIT, 0)
async def txn_offset_commit(
    ctx: RequestContext, request: requests.TxnOffsetCommitRequest
) -> responses.TxnOffsetCommitResponse:
    state = ctx.broker.controller.state
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    results: dict[tuple[str, int], ErrorCode] = {}
    denied_all = None
    if _txn_denied(ctx, request.transactional_id):
        denied_all = E.transactional_id_authorization_failed
    elif ctx.broker.authorizer is not None and not ctx.allowed(
        Operation.READ, ResourceType.GROUP, request.group_id
    ):
        denied_all = E.group_authorization_failed
    for topic in request.topics:
        info = state.topics.get(topic.name)
        denied = denied_all
        if (
            denied is None
            and ctx.broker.authorizer is not None
            and not ctx.allowed(Operation.READ, ResourceType.TOPIC, topic.name)
        ):
            denied = E.topic_authorization_failed
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if denied is not None:
                results[tp] = denied
                continue
            if info is None or not 0 <= p.partition_index < len(info.partitions):
                results[tp] = E.unknown_topic_or_partition
                continue
            offsets[tp] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch,
                metadata=p.committed_metadata or "",
            )
    service = _service(ctx)
    if offsets:
        error = service.offsets.validate(
            request.group_id,
            request.member_id,
            request.generation_id,
            request.group_instance_id,
            offsets,
        )
        if error == E.none and ctx.version >= FIRST_TV2_TXN_OFFSET_COMMIT:
            error = await _add_offsets_partition(ctx, request)
        if error == E.none:
            error, pending = service.offsets.write(
                request.group_id, request.producer_id, request.producer_epoch, offsets
            )
            if pending is not None:
                error = await _acknowledged(request.group_id, pending)
        results.update(dict.fromkeys(offsets, error))
    by_topic: dict[str, list[responses.TxnOffsetCommitResponsePartition]] = {}
    for topic in request.topics:
        by_topic.setdefault(topic.name, [])
        for p in topic.partitions:
            by_topic[topic.name].append(
                {
                    "partition_index": p.partition_index,
                    "error_code": results[(topic.name, p.partition_index)],
                }
            )
    return {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


async def _add_offsets_partition(
    ctx: RequestContext, request: requests.TxnOffsetCommitRequest
) -> ErrorCode:
    """TxnOffsetCommit v5+ (a transactions version 2 client, which sends no
    AddOffsetsToTxn): the group's offsets partition joins the transaction first, so the
    marker reaches it (KIP-890 part 2)."""
    partition = ctx.broker.groups.coordinator.partition_for(request.group_id)
    added = await _service(ctx).adder.add(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        {(OFFSETS_TOPIC, partition)},
    )
    error = produce_error(added[(OFFSETS_TOPIC, partition)])
    # What a produce retries on is a coordinator still busy to an offset commit.
    busy = (E.not_enough_replicas, E.concurrent_transactions)
    return E.coordinator_load_in_progress if error in busy else error


async def _acknowledged(group_id: str, pending: Acknowledgement) -> ErrorCode:
    """The error to answer once the offsets' batch is fsynced (and replicated)."""
    try:
        error = await pending
    except OSError as exc:
        log.error("cannot fsync transactional offsets of %s: %s", group_id, exc)
        return E.not_coordinator
    return write_error(error, too_large=E.invalid_commit_offset_size)


# -- DescribeTransactions / ListTransactions ------------------------------------------------


def _describe_one(
    service: TxnCoordination, txn_id: str
) -> responses.DescribeTransactionsTransactionState:
    error, meta = service.coordinator.describe(txn_id)
    out: responses.DescribeTransactionsTransactionState = {
        "error_code": error,
        "transactional_id": txn_id,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": _EPOCH,
        # An id not found leaves every field at its schema default, as in Kafka's answer.
        "producer_id": 0,
        "producer_epoch": 0,
        "topics": [],
    }
    if meta is None:
        return out
    out.update(_described(meta))
    return out


def _described(meta: TxnMetadata) -> responses.DescribeTransactionsTransactionState:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return {
        "transaction_state": meta.state.display_name,
        "transaction_timeout": datetime.timedelta(milliseconds=meta.timeout_ms),
        "transaction_start_time": _EPOCH + datetime.timedelta(milliseconds=meta.start_ms),
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    }


@handles(DESCRIBE_TRANSACTIONS, 0)
def describe_transactions(
    ctx: RequestContext, request: requests.DescribeTransactionsRequest
) -> responses.DescribeTransactionsResponse:
    service = _service(ctx)
    return {
        "throttle_time": 0,
        "transaction_states": [
            _describe_one(service, t)
            if _may_describe_txn(ctx, t)
            else {
                **_describe_one(service, ""),
                "transactional_id": t,
                "error_code": E.transactional_id_authorization_failed,
            }
            for t in request.transactional_ids
        ],
    }


def _may_describe_txn(ctx: RequestContext, txn_id: str) -> bool:
    return ctx.broker.authorizer is None or ctx.allowed(
        Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id
    )


@handles(LIST_TRANSACTIONS, 0)
def list_transactions(
    ctx: RequestContext, request: requests.ListTransactionsRequest
) -> responses.ListTransactionsResponse:
    service = _service(ctx)
    states: set[TxnState] = set()
    unknown: list[str] = []
    for name in request.state_filters:
        state = TxnState.from_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.add(state)
    if unknown and not states:
        listed: list[TxnMetadata] = []
    else:
        listed = service.coordinator.list(
            states or None,
            set(request.producer_id_filters) or None,
            request.duration_filter,
        )
    pattern = request.transactional_id_pattern
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error:
            return {
                "throttle_time": 0,
                "error_code": E.invalid_regular_expression,
                "transaction_states": [],
            }
        listed = [m for m in listed if regex.fullmatch(m.transactional_id)]
    # As Kafka: only the transactional ids the principal may describe are listed.
    listed = [m for m in listed if _may_describe_txn(ctx, m.transactional_id)]
    return {
        "throttle_time": 0,
        "error_code": E.none,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {
                "transactional_id": m.transactional_id,
                "producer_id": m.producer_id,
                "transaction_state": m.state.display_name,
            }
            for m in listed
        ],
    }
