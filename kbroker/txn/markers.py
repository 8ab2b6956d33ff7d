"""Transaction markers: the control batches that end a transaction in each partition.

A marker is a control batch (attributes bit 5, transactional bit 4) of one record whose
key is (int16 version 0, int16 type: 0 abort, 1 commit) and whose value is (int16
version 0, int32 coordinator epoch), carrying the producer id and epoch of the
transaction. The writer here appends them to the partitions this broker leads; the
producer state of each partition then closes the transaction (and indexes it when
aborted), which moves the last stable offset.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.coordinator_runtime.internal_topics import (
    REFUSED_BATCH,
    Acknowledgement,
    ServiceBroker,
    append_batch,
)
from kbroker.protocol.batch import Record, encode_batch
from kbroker.protocol.messages import build
from kbroker.replica.append import PRODUCER_STATE_CODES
from kbroker.replica.broker_link import BrokerLink
from kbroker.storage.producer_state import COORDINATOR

log = logging.getLogger("kbroker.txn.markers")

ABORT = 0
COMMIT = 1
TopicPartition = tuple[str, int]
MarkerWritten = Callable[[TopicPartition, int, bool], None]


def encode_marker(
    producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, now_ms: int
) -> bytearray:
    key = struct.pack(">hh", 0, COMMIT if commit else ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return encode_batch(
        [Record(key, value, now_ms)],
        now_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
MARKER_TIMEOUT_S = 30.0
_RETRY = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
    }
)
"""What a partition answers for a marker that must be written again later, as Kafka's
TransactionMarkerRequestCompletionHandler retries them: the leader moved, too few
replicas are in sync to take it (or to acknowledge it once written: a marker written
twice changes nothing), a timeout, a failed log directory. Until then the transaction
stays prepared, so its partitions' last stable offset waits for the marker rather than
staying behind a transaction its coordinator thinks complete."""


@dataclass(slots=True)
class _Queued:
    """One transaction's markers waiting for a WriteTxnMarkers to their broker."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list[TopicPartition]
    outcome: asyncio.Future[dict[TopicPartition, ErrorCode]]

    def entry(self) -> dict[str, object]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in self.partitions:
            by_topic.setdefault(topic, []).append(index)
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "transaction_result": self.commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
            "coordinator_epoch": self.coordinator_epoch,
        }

    def settle(self, outcomes: dict[TopicPartition, ErrorCode]) -> None:
        if not self.outcome.done():
            self.outcome.set_result({tp: outcomes[tp] for tp in self.partitions if tp in outcomes})


class LocalMarkerWriter:
    """Writes markers to partitions led by this broker, and sends those led by another
    broker there with WriteTxnMarkers (as Kafka's coordinator does for every partition).

    `write` returns the partitions that must be tried again later (`_RETRY`: not led
    here right now, too few replicas in sync, a storage failure); a partition whose
    topic is gone counts as done, as do
    markers the partition refuses for a newer epoch (a later marker supersedes them).
    """

    def __init__(self, broker: ServiceBroker) -> None:
        self.broker = broker
        self.on_written: list[MarkerWritten] = []
        self._links: dict[int, BrokerLink] = {}
        # A link carries one request at a time. The markers of transactions that end
        # while it is busy wait here, and go together in the next request (as Kafka's
        # TransactionMarkerChannelManager drains its queue per broker).
        self._queues: dict[int, list[_Queued]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
    ) -> set[TopicPartition]:
        """Append the markers, then wait as Kafka's WriteTxnMarkers does (acks=all): until
        each is fsynced where the topic asks for it and below its partition's high
        watermark, so that a leader failover cannot lose a completed transaction's
        marker. Returns the partitions to try again (`_RETRY`).

        Markers for partitions led elsewhere go to their leaders while this broker writes
        its own, every leader at once (as Kafka's TransactionMarkerChannelManager sends
        to each broker): the transaction stays prepared, and its producer's next
        transaction refused CONCURRENT_TRANSACTIONS, only as long as the slowest leader
        takes, not as long as all of them one after another."""
        here, elsewhere = self._route(partitions)
        args = (producer_id, producer_epoch, coordinator_epoch, commit)
        sends = [self._send(leader, *args, tps) for leader, tps in elsewhere.items()]
        outcomes, *answers = await asyncio.gather(self.write_here(*args, here), *sends)
        sent = list(zip(elsewhere.values(), answers, strict=True))
        retry = {tp for tp, code in outcomes.items() if code in _RETRY}
        # A partition this broker no longer leads (its metadata moved during the write):
        # to its new leader now rather than at the next retry.
        _, moved = self._route(retry)
        if moved:
            answers = await asyncio.gather(
                *(self._send(leader, *args, tps) for leader, tps in moved.items())
            )
            sent += zip(moved.values(), answers, strict=True)
            retry.difference_update(*moved.values())
        for tps, answered in sent:
            retry.update(tp for tp in tps if tp not in answered or self._again(tp, answered[tp]))
        return retry

    def _route(
        self, partitions: Iterable[TopicPartition]
    ) -> tuple[list[TopicPartition], dict[int, list[TopicPartition]]]:
        """Split `partitions` by the leader this broker's metadata knows: this one or none
        (here; the write answers NOT_LEADER_OR_FOLLOWER until one leads), or another
        broker (elsewhere, by leader)."""
        here: list[TopicPartition] = []
        elsewhere: dict[int, list[TopicPartition]] = {}
        state = self.broker.controller.state
        me = self.broker.node_id
        for tp in partitions:
            info = state.partition(*tp)
            if info is not None and info.leader not in (-1, me):
                elsewhere.setdefault(info.leader, []).append(tp)
            else:
                here.append(tp)
        return here, elsewhere

    def _again(self, tp: TopicPartition, code: ErrorCode) -> bool:
        """Whether a leader's answer leaves the marker to be written again: a retriable
        code, or an unknown partition of a topic that still exists (that broker has not
        learnt of it yet; a deleted topic's markers are done)."""
        if code == ErrorCode.unknown_topic_or_partition:
            return tp[0] in self.broker.controller.state.topics
        return code in _RETRY

    async def write_here(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Append markers to partitions led here and wait until each is fsynced where the
        topic asks for it and below its high watermark (WriteTxnMarkers is acks=all)."""
        outcomes: dict[TopicPartition, ErrorCode] = {}
        waiting: list[tuple[TopicPartition, Acknowledgement]] = []
        now = int(time.time() * 1000)
        for tp in partitions:
            code, ack = self._append(
                tp, producer_id, producer_epoch, coordinator_epoch, commit, now
            )
            outcomes[tp] = code
            if ack is not None:
                waiting.append((tp, ack))
        for tp, ack in waiting:
            try:
                code = await ack
            except OSError:
                log.exception("fsync of %s-%d after a marker failed", *tp)
                continue
            if code != ErrorCode.none:
                log.warning("marker on %s-%d not replicated: %s", tp[0], tp[1], code.name)
                if code in _RETRY:
                    outcomes[tp] = code
        return outcomes

    async def _send(
        self,
        leader: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """WriteTxnMarkers to the broker leading `partitions`; their outcomes there (none
        when it cannot be reached: they are tried again later)."""
        queued = _Queued(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            partitions,
            asyncio.get_running_loop().create_future(),
        )
        self._queues.setdefault(leader, []).append(queued)
        if leader not in self._senders:
            self._senders[leader] = asyncio.create_task(self._drain(leader))
        return await queued.outcome

    async def _drain(self, leader: int) -> None:
        """Send what is queued for `leader`, one request at a time, each carrying every
        waiting transaction (one entry per producer id: the answer is keyed by it)."""
        queue = self._queues[leader]
        bundle: list[_Queued] = []
        try:
            while queue:
                bundle, rest, producers = [], [], set()
                for queued in queue:
                    if queued.outcome.done():
                        continue  # its caller gave up
                    if queued.producer_id in producers:
                        rest.append(queued)
                    else:
                        producers.add(queued.producer_id)
                        bundle.append(queued)
                queue[:] = rest
                if not bundle:
                    continue
                try:
                    answers = await self._send_bundle(leader, bundle)
                except Exception:
                    log.exception("markers to broker %d not sent", leader)
                    answers = {}
                for queued in bundle:
                    queued.settle(answers.get(queued.producer_id, {}))
        finally:
            for queued in [*bundle, *queue]:
                queued.settle({})  # not sent: tried again later
            queue.clear()
            del self._senders[leader]

    async def _send_bundle(
        self, leader: int, bundle: list[_Queued]
    ) -> dict[int, dict[TopicPartition, ErrorCode]]:
        """One WriteTxnMarkers with the markers of `bundle`; outcomes by producer id."""
        node = self.broker.controller.state.brokers.get(leader)
        address = node.endpoint(self.broker.inter_broker.listener) if node is not None else None
        if node is None or node.fenced or address is None:
            return {}
        request = build(
            load_request_schema(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION),
            {"markers": [queued.entry() for queued in bundle]},
        )
        return await self._call(leader, address, request)

    async def _call(
        self, leader: int, address: tuple[str, int], request: Any
    ) -> dict[int, dict[TopicPartition, ErrorCode]]:
        security = self.broker.inter_broker
        while True:
            link = self._links.get(leader)
            reused = link is not None and (link.host, link.port) == address
            if not reused:
                if link is not None:
                    link.close()
                link = self._links[leader] = BrokerLink(
                    *address, f"txn-markers-{self.broker.node_id}", security
                )
            assert link is not None
            try:
                response = await link.call(request, MARKER_TIMEOUT_S)
                break
            except (OSError, EOFError, TimeoutError) as exc:
                link.close()
                self._links.pop(leader, None)
                if reused and isinstance(exc, (ConnectionError, EOFError)):
                    # Closed since its last use (that broker restarted): once more on a
                    # new connection, so the markers need not wait for the next retry.
                    continue
                log.info("markers to broker %d not sent: %s", leader, exc)
                return {}
        answers: dict[int, dict[TopicPartition, ErrorCode]] = {}
        for m in response.markers:
            outcomes = answers.setdefault(int(m.producer_id), {})
            for t in m.topics:
                for p in t.partitions:
                    outcomes[(t.name, int(p.partition_index))] = ErrorCode(p.error_code)
        return answers

    def write_one(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> ErrorCode:
        """Append one marker; the error code says what happened (WriteTxnMarkers uses it)."""
        return self._append(tp, producer_id, producer_epoch, coordinator_epoch, commit, now_ms)[0]

    def _append(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> tuple[ErrorCode, Acknowledgement | None]:
        """(error, what to await before the marker is acknowledged, if anything)."""
        topic, partition = tp
        replica, code = self.broker.replicas.leader(topic, partition)
        if replica is None:
            if code == ErrorCode.unknown_topic_or_partition and (
                topic in self.broker.controller.state.topics
            ):
                return ErrorCode.not_leader_or_follower, None
            return code, None
        batch = encode_marker(producer_id, producer_epoch, coordinator_epoch, commit, now_ms)
        result, ack = append_batch(self.broker, topic, partition, batch, now_ms, COORDINATOR)
        if result.base_offset < 0:  # not appended
            code = ErrorCode(result.error_code)
            if code in PRODUCER_STATE_CODES:
                log.warning(
                    "marker for producer %d refused by %s-%d: %s",
                    producer_id,
                    topic,
                    partition,
                    result.error_message,
                )
            elif code in REFUSED_BATCH or code == ErrorCode.kafka_storage_error:
                log.error(
                    "cannot write a marker to %s-%d: %s", topic, partition, result.error_message
                )
                code = ErrorCode.kafka_storage_error
            return code, None
        for callback in self.on_written:
            callback(tp, producer_id, commit)
        return ErrorCode.none, ack
