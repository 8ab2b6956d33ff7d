"""Appending as leader, the one way there is: Kafka's ReplicaManager.appendRecords and
DelayedProduce.

`append_records` (reached through `ReplicaManager.append_records`) takes one request's
batches per partition, whoever sends them: the Produce handler, the coordinators
writing their internal topics, the transaction markers, transactional offset commits
and the share groups' dead letters. For each partition it finds this broker's leader
replica, applies the produce-path policies (a client's legacy message sets up-converted,
broker-side schema validation, the verification of a transactional batch), appends, and
answers with a Kafka error code in a `ProducedPartition`, never an exception. An I/O
error from the append goes to the log directory failure channel, which takes the
directory offline at once.

What the answer then waits for is the `DelayedProduce` it returns: the fsync of logs
that flush every append (flush.messages=1, one group commit for the loop iteration) and,
with acks=all, the high watermark passing each batch, up to the request's timeout. It is
completed by plain callbacks from the group commit and the partitions' purgatories,
with no task or future, so an fsync acknowledgement costs no more than the callback.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from kbroker.protocol.batch import (
    BatchTooLargeError,
    InvalidBatchError,
    InvalidRecordsError,
    RecordListTooLargeError,
    UnsupportedMagicError,
    starts_with_transactional_data,
)
from kbroker.protocol.legacy_records import InvalidLegacyRecordError, is_legacy, up_convert
from kbroker.protocol.produce_response import ProducedPartition
from kbroker.protocol.record_validation import InvalidTimestampError
from kbroker.replica.delayed import PendingAck
from kbroker.replica.partition import Partition, PartitionError
from kbroker.storage.producer_state import (
    CLIENT,
    CoordinatorFencedError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    UnknownProducerIdError,
)

if TYPE_CHECKING:
    from kbroker.replica.manager import ReplicaManager
    from kbroker.storage.log import PartitionLog

log = logging.getLogger("kbroker.produce")

Records = bytearray | memoryview
AppendEntry = tuple[str, int, Records | None]
"""One partition's share of an append: (topic, partition, its batches)."""

ALL_REPLICAS = -1  # acks=all
FIRST_V2_ONLY_VERSION = 3  # Produce v3+ carries record batches (magic 2) only
LATEST_VERSION = 1 << 15  # an append that no Produce request carries

_PRODUCER_STATE_CODES: dict[type[ProducerStateError], ErrorCode] = {
    OutOfOrderSequenceError: ErrorCode.out_of_order_sequence_number,
    # Since Kafka 2.7 a produce from an old epoch is INVALID_PRODUCER_EPOCH (abortable),
    # not the fatal PRODUCER_FENCED; the coordinator's own checks still answer FENCED.
    InvalidProducerEpochError: ErrorCode.invalid_producer_epoch,
    InvalidTxnStateError: ErrorCode.invalid_txn_state,
    CoordinatorFencedError: ErrorCode.transaction_coordinator_fenced,
    InvalidRecordError: ErrorCode.invalid_record,
    UnknownProducerIdError: ErrorCode.unknown_producer_id,
}


PRODUCER_STATE_CODES = frozenset(_PRODUCER_STATE_CODES.values())
"""The codes an append answers when the producer state refused its batch."""


def producer_state_error_code(exc: ProducerStateError) -> ErrorCode:
    """The Kafka error code for what the producer state refused."""
    return _PRODUCER_STATE_CODES.get(type(exc), ErrorCode.unknown_server_error)


class RecordValidation(Protocol):
    """Broker-side schema validation (kbroker.schemas): why a partition's produced
    records are refused, if they are."""

    def refuse(
        self, topic: str, records: bytes | bytearray | memoryview
    ) -> tuple[str, list[tuple[int, str]]] | None: ...


TransactionVerifier = Callable[[str | None, str, int, Records], ErrorCode]
"""KIP-890's check of a transactional batch before it is appended (kbroker.txn):
(transactional id, topic, partition, records) -> NONE or why it is refused. Where a
Produce may also add the partition to its transaction."""


class TopicStats(Protocol):
    """Kafka's BrokerTopicMetrics for one topic, as appends count them."""

    messages_in: int
    bytes_in: int


class AppendStats(Protocol):
    """What a client's appends count (kbroker.metrics.counters.RequestCounters)."""

    produced_bytes: int

    @property
    def topics(self) -> Mapping[str, TopicStats]: ...

    def topic(self, name: str) -> TopicStats: ...


Completion = Callable[["DelayedProduce"], None]


class DelayedProduce:
    """One append request's answer while it waits (Kafka's DelayedProduce).

    `results` holds one `ProducedPartition` per entry, in the entries' order; they are
    final once `done`. Until then the request waits for the fsync of `logs` and (acks=all)
    for the acknowledgements still pending, or for its timeout, which answers
    REQUEST_TIMED_OUT for the partitions still short. An fsync that failed took its log
    directory offline: the partitions written there answer KAFKA_STORAGE_ERROR
    (`storage_failed`); one that failed otherwise (no descriptors left) fails the whole
    request (`error`). `flush_error` is the failed fsync's error either way."""

    __slots__ = (
        "results",
        "done",
        "error",
        "flush_error",
        "storage_failed",
        "_entries",
        "_failed",
        "_flushing",
        "_pending",
        "_timer",
        "_callback",
    )

    def __init__(
        self,
        entries: Sequence[AppendEntry],
        results: list[ProducedPartition],
        failed: Mapping[tuple[str, int], str],
    ) -> None:
        self.results = results
        self.done = False
        self.error: OSError | None = None
        self.flush_error: OSError | None = None
        self.storage_failed = False
        self._entries = entries
        self._failed = failed
        # Made only when there is something to wait for (most appends have nothing).
        self._flushing: set[PartitionLog] | None = None
        self._pending: dict[int, tuple[PendingAck, ProducedPartition]] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._callback: Completion | None = None

    @property
    def waits_for_replication(self) -> bool:
        return bool(self._pending)

    def on_complete(self, callback: Completion) -> None:
        """Call `callback(self)` once done (at once if it already is)."""
        if self.done:
            callback(self)
        else:
            self._callback = callback

    async def wait(self) -> None:
        """Return once done; raise the fsync's error if one failed (a coordinator's
        write is not acknowledged then, whatever its partitions answer)."""
        if not self.done:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def complete(_: DelayedProduce) -> None:
                if not future.done():
                    future.set_result(None)

            self.on_complete(complete)
            try:
                await future
            finally:
                if not self.done:  # the waiter was cancelled: nothing waits any more
                    self.cancel()
        if self.flush_error is not None:
            raise self.flush_error

    def cancel(self) -> None:
        """Nobody waits for the answer any more: drop the pending acknowledgements."""
        if self._pending:
            for ack, _ in self._pending.values():
                ack.cancel()
            self._pending.clear()
        if self._timer is not None:
            self._timer.cancel()
        self._callback = None
        self.done = True

    # -- set up by append_records ---------------------------------------------------------

    def _start(self, durable: DurableWaits, timeout_ms: int | None) -> None:
        if self._pending and timeout_ms is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(max(timeout_ms, 0) / 1000, self._expire)
        if self._flushing:
            for plog in list(self._flushing):
                durable(plog, functools.partial(self._durable, plog))
        if not self._pending and not self._flushing:
            self.done = True

    def _wait_for_replication(
        self, key: int, partition: Partition, required: int, result: ProducedPartition
    ) -> None:
        outcome = partition.await_replication(required, functools.partial(self._acked, key, result))
        if isinstance(outcome, PendingAck):
            if self._pending is None:
                self._pending = {}
            self._pending[key] = (outcome, result)
        elif outcome:
            result.error_code = outcome

    # -- completions ----------------------------------------------------------------------

    def _acked(self, key: int, result: ProducedPartition, code: ErrorCode) -> None:
        if self._pending is not None:
            self._pending.pop(key, None)
        if code:
            result.error_code = code
        self._finish()

    def _expire(self) -> None:
        if self._pending:
            for ack, result in self._pending.values():
                ack.cancel()
                result.error_code = ErrorCode.request_timed_out
            self._pending.clear()
        self._finish()

    def _durable(self, plog: PartitionLog, error: OSError | None) -> None:
        if self.done:
            return
        if error is None:
            if self._flushing:
                self._flushing.discard(plog)
            if not self._flushing:
                self._finish()
            return
        self.flush_error = error
        if self._mark_storage_failures():
            self.storage_failed = True
            self._flushing = None
            self._finish()
        else:
            self.error = error
            self._complete()

    def _mark_storage_failures(self) -> bool:
        """Give KAFKA_STORAGE_ERROR to the written partitions that are offline here now."""
        failed = self._failed
        found = False
        for (topic, index, _), result in zip(self._entries, self.results, strict=True):
            if result.error_code == 0:
                why = failed.get((topic, index))
                if why is not None:
                    result.error_code = ErrorCode.kafka_storage_error
                    result.error_message = why
                    result.base_offset = -1
                    found = True
        return found

    def _finish(self) -> None:
        if not self._pending and not self._flushing and not self.done:
            if self._timer is not None:
                self._timer.cancel()
            self._complete()

    def _complete(self) -> None:
        self.done = True
        callback, self._callback = self._callback, None
        if callback is not None:
            callback(self)


DurableWaits = Callable[["PartitionLog", Callable[[OSError | None], None]], None]


def append_records(
    manager: ReplicaManager,
    entries: Sequence[AppendEntry],
    acks: int,
    timeout_ms: int | None,
    origin: int = CLIENT,
    now_ms: int | None = None,
    request_version: int | None = None,
    transactional_id: str | None = None,
    stats: AppendStats | None = None,
) -> DelayedProduce:
    """Append each entry's batches to this broker's leader replica of its partition:
    the one way to append as leader (Kafka's appendRecords), `ReplicaManager.append_records`.

    Every partition's outcome is a Kafka error code in the returned answer's `results`
    (entries' order), never an exception; an I/O error takes the log directory offline.
    `acks` (0, 1 or -1) and the logs' flush policy decide what the answer waits for, up
    to `timeout_ms` for the followers (None: as long as this broker leads). A client's
    Produce gives its `request_version`: its records then pass the produce-path policies
    (legacy up-conversion, schema validation, transactional verification with
    `transactional_id`) and count in `stats`. `origin` is storage.producer_state's
    CLIENT or COORDINATOR."""
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    results: list[ProducedPartition] = []
    failed = manager.logs.failed
    delayed = DelayedProduce(entries, results, failed)
    client = request_version is not None
    version = LATEST_VERSION if request_version is None else request_version
    validation = manager.record_validation if client else None
    verifier = manager.transaction_verifier if client else None
    hosted = manager.hosted
    node_id = manager.node_id
    key = 0
    for topic, index, records in entries:
        partition = hosted.get((topic, index))
        if partition is None or partition.leader_id != node_id:  # leader()'s fast path
            partition, code = manager.leader(topic, index)
        if partition is None:
            why = failed.get((topic, index))
            if why is not None:  # its log could not be made or opened here
                results.append(
                    ProducedPartition(index, ErrorCode.kafka_storage_error, error_message=why)
                )
            else:
                results.append(ProducedPartition(index, code))
            continue
        if records is None:
            results.append(
                ProducedPartition(index, ErrorCode.corrupt_message, error_message="null records")
            )
            continue
        if client:
            if not records and version >= FIRST_V2_ONLY_VERSION:
                results.append(_no_batch(index, version))
                continue
            if stats is not None:
                stats.produced_bytes += len(records)
            if version < FIRST_V2_ONLY_VERSION and is_legacy(records):
                converted = _up_convert(topic, index, records)
                if isinstance(converted, ProducedPartition):
                    results.append(converted)
                    continue
                records = converted
            if validation is not None:
                refused = validation.refuse(topic, records)
                if refused is not None:
                    message, errors = refused
                    results.append(
                        ProducedPartition(
                            index,
                            ErrorCode.invalid_record,
                            error_message=message,
                            record_errors=tuple(errors),
                        )
                    )
                    continue
            if verifier is not None and starts_with_transactional_data(records):
                code = verifier(transactional_id, topic, index, records)
                if code:
                    results.append(ProducedPartition(index, code))
                    continue
        try:
            appended = partition.append_as_leader(records, now_ms, origin, acks)
        except PartitionError as exc:
            results.append(ProducedPartition(index, exc.code, error_message=str(exc)))
            continue
        except (InvalidBatchError, ProducerStateError) as exc:
            results.append(_refused(topic, index, exc, version))
            continue
        except OSError as exc:  # a disk error: the log directory goes offline (Kafka's answer)
            why = manager.logs.dir_failures.report(partition.log, exc)
            results.append(
                ProducedPartition(index, ErrorCode.kafka_storage_error, error_message=why)
            )
            continue
        if stats is not None:
            topic_stats = stats.topics.get(topic) or stats.topic(topic)
            topic_stats.messages_in += appended.record_count
            topic_stats.bytes_in += len(records)
        result = ProducedPartition(
            index, 0, appended.base_offset, appended.log_append_time_ms, appended.log_start_offset
        )
        results.append(result)
        if acks == 0:
            continue
        plog = partition.log
        if plog.config.fsyncs_every_append:
            if delayed._flushing is None:
                delayed._flushing = set()
            delayed._flushing.add(plog)
        if acks == ALL_REPLICAS:
            required = appended.last_offset + 1
            decided = partition.replication_outcome(required)
            if decided is None:  # the ISR has yet to reach it: the answer waits
                delayed._wait_for_replication(key, partition, required, result)
                key += 1
            elif decided:
                result.error_code = decided
    if delayed._pending or delayed._flushing:
        delayed._start(manager.logs.when_durable, timeout_ms)
    else:
        delayed.done = True
    return delayed


def _no_batch(index: int, version: int) -> ProducedPartition:
    return ProducedPartition(
        index,
        ErrorCode.invalid_record,
        error_message=f"Produce requests with version {version} must have exactly one "
        "record batch per partition",
    )


def _up_convert(topic: str, index: int, records: Records) -> Records | ProducedPartition:
    """Message format v0/v1 (Produce v0-2): stored as one v2 batch, as Kafka 3.9 does;
    or the partition's refusal of messages that do not parse."""
    try:
        return up_convert(records)
    except InvalidLegacyRecordError as exc:
        return ProducedPartition(index, ErrorCode.invalid_record, error_message=str(exc))
    except InvalidBatchError as exc:
        log.warning("rejecting corrupt messages for %s-%d: %s", topic, index, exc)
        return ProducedPartition(index, ErrorCode.corrupt_message, error_message=str(exc))


def _refused(
    topic: str, index: int, exc: InvalidBatchError | ProducerStateError, version: int
) -> ProducedPartition:
    """Kafka's error code for batches the log refused."""
    if isinstance(exc, ProducerStateError):
        return ProducedPartition(index, producer_state_error_code(exc), error_message=str(exc))
    if isinstance(exc, BatchTooLargeError):
        return ProducedPartition(index, ErrorCode.message_too_large, error_message=str(exc))
    if isinstance(exc, RecordListTooLargeError):
        return ProducedPartition(index, ErrorCode.record_list_too_large, error_message=str(exc))
    if isinstance(exc, UnsupportedMagicError):
        # Produce v3+ carries only v2 batches (Kafka: INVALID_RECORD); in v0-2 an old
        # message after a v2 batch is a message set Kafka cannot parse either.
        code = (
            ErrorCode.invalid_record
            if version >= FIRST_V2_ONLY_VERSION
            else ErrorCode.corrupt_message
        )
        return ProducedPartition(index, code, error_message=str(exc))
    if isinstance(exc, InvalidRecordsError):
        code = (
            ErrorCode.invalid_timestamp
            if isinstance(exc, InvalidTimestampError)
            else ErrorCode.invalid_record
        )
        return ProducedPartition(
            index, code, error_message=str(exc), record_errors=tuple(exc.record_errors)
        )
    log.warning("rejecting corrupt batch for %s-%d: %s", topic, index, exc)
    return ProducedPartition(index, ErrorCode.corrupt_message, error_message=str(exc))
