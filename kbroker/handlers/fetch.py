"""Fetch: byte ranges of segment files for each partition, parked until min_bytes arrive.

A partition's answer starts at the batch holding the requested offset and ends at
whole batches below the high watermark (the last stable offset for read_committed, the
log end for a follower's fetch); the bytes are not read here but sent from the file by
the connection. Every read goes through the partition's `Partition.read`.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from kio.schema.errors import ErrorCode

from kbroker.config.topic import topic_config_values
from kbroker.controller.state import MetadataState
from kbroker.handlers.context import BrokerParts, RequestContext
from kbroker.handlers.endpoints import current_leader, node_address
from kbroker.handlers.registry import Later, handles
from kbroker.protocol import requests
from kbroker.protocol.encoded import EncodedBody
from kbroker.protocol.fetch_response import (
    FetchedPartition,
    FetchedTopic,
    NodeEndpoint,
    encode_fetch_response,
)
from kbroker.protocol.legacy_records import ZstdDownConversionError, down_convert
from kbroker.replica.delayed import Parked
from kbroker.replica.fetch_sessions import (
    FetchPlan,
    FetchTarget,
    Key,
    remember_sent,
    worth_sending,
)
from kbroker.replica.partition import UNCHANGED
from kbroker.replica.selector import RACK_AWARE_SELECTOR, preferred_read_replica
from kbroker.security.acl import Operation, ResourceType
from kbroker.security.quotas import CONSUMER_BYTE_RATE
from kbroker.storage.log import LogStartMoves

FETCH = 1
READ_COMMITTED = 1
FIRST_SESSION_VERSION = 7
FIRST_REPLICA_STATE_VERSION = 15
FIRST_TOPIC_ID_VERSION = 13  # KIP-516: topics are named by id alone
FIRST_CURRENT_LEADER = 12
FIRST_V2_FORMAT = 4  # older Fetch versions read message format v0 (v0-1) or v1 (v2-3)
FIRST_RACK_ID_VERSION = 11  # KIP-392: a consumer may fetch from a follower
_LEADER_MOVED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


@handles(FETCH, 0)  # v0-3 through protocol.legacy_messages, records down-converted
def fetch(ctx: RequestContext, request: requests.FetchRequest) -> EncodedBody | Later:
    plan = _plan(ctx, request)
    if plan.error_code:
        return encode_fetch_response(ctx.version, [], error_code=plan.error_code)
    results, total, urgent = _read_all(ctx, request, plan, record=True)
    max_wait_ms = request.max_wait.total_seconds() * 1000
    if (
        total >= _min_bytes(ctx, request)
        or urgent
        or max_wait_ms <= 0
        or not plan.targets  # nothing to wait for: a consumer closing its session, say
        or ctx.broker.lifecycle.stopping
    ):
        return _encode(ctx, request, plan, results)
    return _delayed_fetch(ctx, request, plan, results, total, max_wait_ms / 1000)


def _max_bytes(ctx: RequestContext, request: requests.FetchRequest) -> int:
    """Kafka's response bound: the request's max_bytes, at most the broker's
    fetch.max.bytes and, for a consumer with a consumer_byte_rate quota, at most what the
    quota lets through in one window (else one answer could never pass)."""
    bound = min(request.max_bytes, ctx.broker.config.fetch_max_bytes)
    quotas = ctx.broker.quotas
    if quotas.active and replica_id_of(ctx, request) < 0:
        window = quotas.max_value_in_window(CONSUMER_BYTE_RATE, ctx.principal.name, ctx.client_id)
        if window is not None:
            bound = min(bound, max(1, int(window)))
    return bound


def _min_bytes(ctx: RequestContext, request: requests.FetchRequest) -> int:
    """min_bytes no larger than the response may be (else the fetch always waits it out)."""
    return min(request.min_bytes, _max_bytes(ctx, request))


def _delayed_fetch(
    ctx: RequestContext,
    request: requests.FetchRequest,
    plan: FetchPlan,
    results: list[tuple[FetchTarget, FetchedPartition]],
    total: int,
    max_wait_s: float,
) -> Later:
    """Park until an append to one of the partitions (or the wait runs out), then read again."""
    answer = Later()
    _ParkedFetch(ctx, request, plan, answer, results, total, max_wait_s)
    return answer


class _ParkedFetch:
    """A fetch waiting for min_bytes, by plain callbacks: woken by an append to one of its
    partitions (it reads again, and answers or parks again) or by its deadline (it
    answers what there is). No task, future or coroutine per parked request.

    Only the first read records a follower's fetch position (as Kafka's fetchMessages;
    its DelayedFetch reads without). What wakes a parked fetch (an append, a moved high
    watermark, a change of leader, the partition stopping) is everything that changes a
    read but the log start offset, so a fetch that found no bytes and was not woken
    since its last read answers that read at its deadline (each log start offset looked
    up again if any log's moved meanwhile), rather than reading every partition of its
    session a second time."""

    __slots__ = (
        "ctx",
        "request",
        "plan",
        "answer",
        "keys",
        "parked",
        "timer",
        "results",
        "log_starts",
    )

    def __init__(
        self,
        ctx: RequestContext,
        request: requests.FetchRequest,
        plan: FetchPlan,
        answer: Later,
        results: list[tuple[FetchTarget, FetchedPartition]],
        total: int,
        max_wait_s: float,
    ) -> None:
        self.ctx = ctx
        self.request = request
        self.plan = plan
        self.answer = answer
        self.results = results if total == 0 else None
        self.log_starts = LogStartMoves.count
        self.keys = [(t.topic, t.partition) for t in plan.targets if t.topic is not None]
        waiters = ctx.broker.waiters
        self.parked: Parked | None = waiters.park(self.keys, self._woken)
        loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = loop.call_at(
            loop.time() + max_wait_s, self._expired
        )
        answer.on_abandon = self._abandon

    def _woken(self) -> None:
        try:
            ctx, request, plan = self.ctx, self.request, self.plan
            results, total, urgent = _read_all(ctx, request, plan, record=False)
            if total >= _min_bytes(ctx, request) or urgent or ctx.broker.lifecycle.stopping:
                self._stop()
                self.answer.settle(_encode(ctx, request, plan, results))
                return
        except Exception as exc:
            self._stop()
            self.answer.fail(exc)
            return
        self.results = results if total == 0 else None
        self.log_starts = LogStartMoves.count
        self.parked = ctx.broker.waiters.park(self.keys, self._woken)

    def _expired(self) -> None:
        self._stop()
        try:
            results = self.results
            if results is None or (
                LogStartMoves.count != self.log_starts
                and not _refresh_log_starts(self.ctx.broker, self.plan, results)
            ):
                results = _read_all(self.ctx, self.request, self.plan, record=False)[0]
            self.answer.settle(_encode(self.ctx, self.request, self.plan, results))
        except Exception as exc:
            self.answer.fail(exc)

    def _abandon(self) -> None:
        self._stop()

    def _stop(self) -> None:
        """Wait no more: cancel the parked entry and the timer (either may have fired
        already), and drop both. Each holds a bound method of this fetch (the timer even
        once it ran, on asyncio's loop), so kept they would make cycles that only the
        cyclic collector frees: a generation-0 collection every forty or so fetches."""
        parked, timer = self.parked, self.timer
        self.parked = self.timer = None
        if parked is not None:
            parked.cancel()
        if timer is not None:
            timer.cancel()


def _refresh_log_starts(
    broker: BrokerParts, plan: FetchPlan, results: list[tuple[FetchTarget, FetchedPartition]]
) -> bool:
    """Bring a read that found no bytes up to its partitions' log start offsets, the one
    thing that moves without waking a parked fetch (retention, DeleteRecords). False
    when that is not enough: a partition now gone or throttled, a log start past the
    fetch position (its answer is OFFSET_OUT_OF_RANGE, which only a read gives), or
    one that a session's read left out whose log start moved (it must be sent now).
    `results` follow `plan.targets`' order, less the partitions left out."""
    if broker.partitions.leader_quota.active:
        return False  # a throttled partition read nothing and may read now
    get = broker.partitions.get
    answered = iter(results)
    following = next(answered, None)
    for target in plan.targets:
        result = None
        if following is not None and following[0] is target:
            result = following[1]
            following = next(answered, None)
            if result.error_code:
                continue
        if target.topic is None:
            continue
        partition = get(target.topic, target.partition)
        if partition is None:
            return False
        log_start = partition.log.log_start_offset
        if log_start > target.fetch_offset:
            return False
        if result is not None:
            result.log_start_offset = log_start
        elif log_start != target.sent_log_start_offset:
            return False
    return True


def _plan(ctx: RequestContext, request: requests.FetchRequest) -> FetchPlan:
    """The partitions this fetch reads: the request's own, or its session's (v7+)."""
    state = ctx.broker.controller.state
    requested: list[FetchTarget] = []
    for t in request.topics:
        named: str | uuid.UUID | None
        if ctx.version >= FIRST_TOPIC_ID_VERSION:
            info = None if t.topic_id is None else state.topics_by_id.get(t.topic_id)
            name, topic_id, named = (info.name if info else None), t.topic_id, t.topic_id
        else:
            info = state.topics.get(t.topic)
            name, topic_id, named = t.topic, (info.topic_id if info else None), t.topic
        for p in t.partitions:
            requested.append(
                FetchTarget(
                    (named, p.partition),
                    name if info is not None else None,
                    topic_id,
                    p.partition,
                    p.fetch_offset,
                    p.partition_max_bytes,
                    p.current_leader_epoch,
                    p.last_fetched_epoch,
                    p.log_start_offset,
                )
            )
    if ctx.version < FIRST_SESSION_VERSION:
        return FetchPlan(requested)
    by_id = ctx.version >= FIRST_TOPIC_ID_VERSION
    forgotten: list[Key] = [
        (t.topic_id if by_id else t.topic, partition)
        for t in request.forgotten_topics_data
        for partition in t.partitions
    ]
    plan = ctx.broker.fetch_sessions.plan(
        request.session_id,
        request.session_epoch,
        requested,
        forgotten,
        privileged=replica_id_of(ctx, request) >= 0,
    )
    if plan.incremental:
        resolve_unknown_topics(state, plan.targets)
    return plan


def resolve_unknown_topics(state: MetadataState, targets: list[FetchTarget]) -> None:
    """Name the topic of each session partition that came while this broker did not know
    it (its metadata a moment behind the client's, which named the partition once and
    will not again), as Kafka's CachedPartition.maybeResolveUnknownName on every
    incremental fetch; until then it is answered UNKNOWN_TOPIC_ID."""
    for target in targets:
        if target.topic is None:
            if target.topic_id is not None:
                info = state.topics_by_id.get(target.topic_id)
            else:
                info = state.topics.get(target.key[0])
            if info is not None:
                target.topic, target.topic_id = info.name, info.topic_id


def _encode(
    ctx: RequestContext,
    request: requests.FetchRequest,
    plan: FetchPlan,
    results: list[tuple[FetchTarget, FetchedPartition]],
) -> EncodedBody:
    if plan.incremental:
        results = [(t, r) for t, r in results if worth_sending(t, r)]
    quotas = ctx.broker.quotas
    if quotas.active and replica_id_of(ctx, request) < 0:
        # A follower's fetch is replication: exempt from client quotas, as on Kafka (the
        # replication throttles bound it instead).
        size = sum(r.records_size for _, r in results)
        throttle = quotas.record(CONSUMER_BYTE_RATE, ctx.principal.name, ctx.client_id, size)
        if throttle > 0:
            # Kafka's throttled fetch: no data now (nothing marked sent, and its bytes not
            # counted), the throttle time, and a muted channel; the client fetches the
            # same offsets again.
            quotas.unrecord(CONSUMER_BYTE_RATE, ctx.principal.name, ctx.client_id, size)
            ctx.connection.throttle(throttle)
            return encode_fetch_response(
                ctx.version, [], session_id=plan.session_id, throttle_time_ms=throttle
            )
    remember_sent(plan, results)
    if ctx.version < FIRST_V2_FORMAT:
        _down_convert(ctx.broker, ctx.version, results)
    # Kafka's BytesOutPerSec counts what consumers get; a follower's fetch is replication.
    consumer = replica_id_of(ctx, request) < 0
    topics: list[FetchedTopic] = []
    for target, result in results:
        if (
            not topics
            or topics[-1].topic_id != target.topic_id
            or topics[-1].name != (target.topic or "")
        ):
            topics.append(FetchedTopic(target.topic or "", target.topic_id))
        topics[-1].partitions.append(result)
        if consumer and result.records_size and target.topic is not None:
            ctx.broker.counters.topic(target.topic).bytes_out += result.records_size
    endpoints = None
    if ctx.version >= 16 and any(r.error_code for _, r in results):
        endpoints = [
            NodeEndpoint(b.node_id, *node_address(ctx, b), b.rack)
            for b in ctx.broker.controller.state.brokers.values()
        ]
    return encode_fetch_response(
        ctx.version, topics, session_id=plan.session_id, node_endpoints=endpoints
    )


def _down_convert(
    broker: BrokerParts, version: int, results: list[tuple[FetchTarget, FetchedPartition]]
) -> None:
    """Fetch v0-3: the records as messages of format v0 (v0-1) or v1 (v2-3). As Kafka 3.9
    answers: UNSUPPORTED_COMPRESSION_TYPE for a zstd topic (the old formats know no
    zstd), UNSUPPORTED_VERSION where the topic's message.downconversion.enable is off."""
    magic = 0 if version < 2 else 1
    refusals: dict[str, int] = {}
    for target, result in results:
        topic = target.topic
        if topic is None or result.error_code:
            continue
        if topic not in refusals:
            info = broker.controller.state.topics.get(topic)
            values = topic_config_values(info.configs if info else {}, broker.config)
            refusals[topic] = (
                ErrorCode.unsupported_compression_type
                if values["compression.type"] == "zstd"
                else 0
                if values["message.downconversion.enable"]
                else ErrorCode.unsupported_version
            )
        records = result.records
        result.records = None
        data: bytes | bytearray = b""
        if records is not None:
            data = records if isinstance(records, bytes | bytearray) else records.read()
            if not isinstance(records, bytes | bytearray):
                records.release()
        error = refusals[topic]
        if not error and data:
            try:
                result.records = down_convert(data, magic, target.fetch_offset)
            except ZstdDownConversionError:
                error = ErrorCode.unsupported_compression_type
        if error:  # Kafka's error answer: no watermarks
            result.error_code = error
            result.high_watermark = result.last_stable_offset = result.log_start_offset = -1


def _read_all(
    ctx: RequestContext, request: requests.FetchRequest, plan: FetchPlan, *, record: bool
) -> tuple[list[tuple[FetchTarget, FetchedPartition]], int, bool]:
    """Read every partition of the plan within max_bytes: (results, bytes found, whether
    to answer now whatever min_bytes says). Kafka answers at once a read with an error,
    a diverging epoch (the fetcher must truncate) or a preferred read replica (the
    consumer must go there). `record`: a follower's fetch positions count (the request's
    first read)."""
    broker = ctx.broker
    budget = _max_bytes(ctx, request)
    total = 0
    urgent = False
    committed_only = request.isolation_level == READ_COMMITTED
    unknown = (
        ErrorCode.unknown_topic_id if ctx.version >= 13 else ErrorCode.unknown_topic_or_partition
    )
    results: list[tuple[FetchTarget, FetchedPartition]] = []
    denied: set[str] = set()
    replica = replica_id_of(ctx, request)
    if broker.authorizer is not None:
        names = {t.topic for t in plan.targets if t.topic is not None}
        if replica >= 0:  # a follower needs CLUSTER_ACTION, and then reads every topic
            denied = set() if ctx.is_broker() else names
        else:
            denied = {n for n in names if not ctx.allowed(Operation.READ, ResourceType.TOPIC, n)}
    client_rack = _client_rack(ctx, request, replica)
    now = int(time.time() * 1000) if replica >= 0 or client_rack else 0
    # KIP-73: a follower out of the ISR gets nothing of a throttled replica while this
    # broker's leader.replication.throttled.rate is exceeded (Kafka's shouldLeaderThrottle).
    quota = broker.partitions.leader_quota
    throttling = replica >= 0 and quota.active
    over = throttling and quota.exceeded()
    for target in plan.targets:
        if target.topic is None:
            results.append((target, _refused(target.partition, unknown)))
            urgent = True
            continue
        if denied and target.topic in denied:
            refused = _refused(target.partition, ErrorCode.topic_authorization_failed)
            results.append((target, refused))
            urgent = True
            continue
        throttled = throttling and broker.partitions.leader_throttled(
            target.topic, target.partition, replica
        )
        held = throttled and over
        result = _read_partition(
            broker,
            target.topic,
            target,
            0 if held else budget,
            committed_only,
            total == 0 and not held,
            replica,
            now,
            ctx.version >= FIRST_RACK_ID_VERSION,
            client_rack,
            record,
            plan.incremental,
        )
        if result is None:
            continue
        if throttled and result.records_size:
            quota.record(result.records_size)
        results.append((target, result))
        if result.diverging_epoch is not None or result.preferred_read_replica >= 0:
            urgent = True
        if result.error_code:
            urgent = True
            if result.error_code in _LEADER_MOVED and ctx.version >= FIRST_CURRENT_LEADER:
                # KIP-951: name the leader, so the client goes there without Metadata.
                result.current_leader = current_leader(ctx, target.topic, target.partition)
        size = result.records_size
        total += size
        budget = max(0, budget - size)
    return results, total, urgent


def _refused(partition: int, code: ErrorCode) -> FetchedPartition:
    """A partition refused before any replica is asked (unknown to the metadata, or not
    readable): as Kafka's FetchResponse.partitionResponse, its aborted transactions are
    an empty list, not null."""
    return FetchedPartition(partition, code, aborted_transactions=[])


def _read_partition(
    broker: BrokerParts,
    topic: str,
    p: FetchTarget,
    budget: int,
    committed_only: bool,
    first: bool,
    replica_id: int,
    now_ms: int,
    from_follower_ok: bool,
    client_rack: str = "",
    record: bool = True,
    incremental: bool = False,
) -> FetchedPartition | None:
    """One partition's answer; None, in an incremental session, for one with nothing
    its fetcher does not know (the answer leaves it out)."""
    partition = broker.partitions.get(topic, p.partition)
    if partition is None:
        if (topic, p.partition) in broker.durability.failed:  # its log directory failed
            return FetchedPartition(p.partition, ErrorCode.kafka_storage_error)
        code = ErrorCode(broker.controller.state.missing_replica_error(topic, p.partition))
        if code == ErrorCode.unknown_topic_or_partition:
            return _refused(p.partition, code)
        return FetchedPartition(p.partition, code)
    if client_rack and partition.is_leader and not partition.check_epoch(p.current_leader_epoch):
        preferred = preferred_read_replica(
            RACK_AWARE_SELECTOR,
            partition,
            client_rack,
            p.fetch_offset,
            lambda node: _live_rack(broker, node),
            now_ms,
        )
        if preferred is not None:
            # KIP-392: no records, the replica to fetch from instead.
            return FetchedPartition(
                p.partition,
                ErrorCode.none,
                partition.high_watermark,
                partition.last_stable_offset,
                partition.log.log_start_offset,
                preferred_read_replica=preferred,
            )
    max_bytes = min(p.partition_max_bytes, budget)
    if max_bytes <= 0 and not first:
        read = partition.read_offsets(p.current_leader_epoch)
    else:
        try:
            read = partition.read(
                p.fetch_offset,
                max_bytes,
                committed_only=committed_only,
                replica_id=replica_id,
                current_leader_epoch=p.current_leader_epoch,
                now_ms=now_ms,
                from_follower_ok=from_follower_ok,
                last_fetched_epoch=p.last_fetched_epoch,
                follower_log_start=p.log_start_offset,
                record=record,
                sent=p if incremental else None,
            )
            if read is UNCHANGED:
                return None
        except OSError as exc:  # a disk error: the log directory goes offline
            broker.durability.dir_failures.report(partition.log, exc)
            return FetchedPartition(p.partition, ErrorCode.kafka_storage_error)
    if read.error and read.high_watermark < 0:
        return FetchedPartition(p.partition, read.error)
    if read.error and replica_id < 0:
        # A consumer's failed partition carries no watermarks (-1), as Kafka answers it;
        # a follower keeps them, for it follows the leader's log start.
        return FetchedPartition(p.partition, read.error, log_start_offset=read.log_start_offset)
    return FetchedPartition(
        p.partition,
        read.error,
        read.high_watermark,
        read.last_stable_offset,
        read.log_start_offset,
        None if read.aborted is None else [(t.producer_id, t.first_offset) for t in read.aborted],
        records=read.records,
        diverging_epoch=read.diverging_epoch,
    )


def _client_rack(ctx: RequestContext, request: requests.FetchRequest, replica_id: int) -> str:
    """The consumer's rack when this broker's replica.selector.class may send it to a
    follower in it (KIP-392); "" otherwise."""
    if replica_id >= 0 or ctx.version < FIRST_RACK_ID_VERSION:
        return ""
    if ctx.broker.config.replica_selector_class != RACK_AWARE_SELECTOR:
        return ""
    return request.rack_id


def _live_rack(broker: BrokerParts, node_id: int) -> str | None:
    """A live broker's rack ("" when it has none); None for one fenced or unknown."""
    info = broker.controller.state.brokers.get(node_id)
    if info is None or info.fenced:
        return None
    return info.rack or ""


def replica_id_of(ctx: RequestContext, request: requests.FetchRequest) -> int:
    """The fetching follower's id (-1 for a consumer): a field of its own before v15,
    inside replica_state from v15 (KIP-903)."""
    if ctx.version >= FIRST_REPLICA_STATE_VERSION:
        return request.replica_state.replica_id
    return request.replica_id
