"""Transaction markers: the control batches that end a transaction in each partition.

A marker is a control batch (attributes bit 5, transactional bit 4) of one record whose
key is (int16 version 0, int16 type: 0 abort, 1 commit) and whose value is (int16
version 0, int32 coordinator epoch), carrying the producer id and epoch of the
transaction. The writer here appends them to the partitions this broker leads; the
producer state of each partition then closes the transaction (and indexes it when
aborted), which moves the last stable offset.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode

from kbroker.internal_topics import Acknowledgement, ServiceBroker, acknowledgement
from kbroker.protocol.batch import InvalidBatchError, Record, encode_batch
from kbroker.replica.partition import Partition, PartitionError
from kbroker.storage.producer_state import COORDINATOR, ProducerStateError
from kbroker.txn.errors import producer_state_error_code

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


class LocalMarkerWriter:
    """Writes markers to partitions led by this broker.

    `write` returns the partitions that must be tried again later (not led here right
    now, or a storage failure); a partition whose topic is gone counts as done, as do
    markers the partition refuses for a newer epoch (a later marker supersedes them).
    """

    def __init__(self, broker: ServiceBroker) -> None:
        self.broker = broker
        self.on_written: list[MarkerWritten] = []

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
        marker. Returns the partitions to try again (their leadership moved)."""
        retry: set[TopicPartition] = set()
        waiting: list[tuple[TopicPartition, Acknowledgement]] = []
        now = int(time.time() * 1000)
        for tp in partitions:
            code, replica, end = self._append(
                tp, producer_id, producer_epoch, coordinator_epoch, commit, now
            )
            if replica is not None:
                ack = acknowledgement(self.broker, replica, end)
                if ack is not None:
                    waiting.append((tp, ack))
            elif code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
                retry.add(tp)
        for tp, ack in waiting:
            try:
                code = await ack
            except OSError:
                log.exception("fsync of %s-%d after a marker failed", *tp)
                continue
            if code != ErrorCode.none:
                log.warning("marker on %s-%d not replicated: %s", tp[0], tp[1], code.name)
        return retry

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
    ) -> tuple[ErrorCode, Partition | None, int]:
        """(error, the partition written, the offset after the marker)."""
        topic, partition = tp
        replica, code = self.broker.replicas.leader(topic, partition)
        if replica is None:
            if code == ErrorCode.unknown_topic_or_partition and (
                topic in self.broker.controller.state.topics
            ):
                return ErrorCode.not_leader_or_follower, None, -1
            return code, None, -1
        batch = encode_marker(producer_id, producer_epoch, coordinator_epoch, commit, now_ms)
        try:
            appended = replica.append_as_leader(batch, now_ms, COORDINATOR)
        except PartitionError as exc:
            return exc.code, None, -1
        except ProducerStateError as exc:
            log.warning(
                "marker for producer %d refused by %s-%d: %s", producer_id, topic, partition, exc
            )
            return producer_state_error_code(exc), None, -1
        except (InvalidBatchError, OSError) as exc:
            log.error("cannot write a marker to %s-%d: %s", topic, partition, exc)
            return ErrorCode.kafka_storage_error, None, -1
        for callback in self.on_written:
            callback(tp, producer_id, commit)
        return ErrorCode.none, replica, appended.last_offset + 1
