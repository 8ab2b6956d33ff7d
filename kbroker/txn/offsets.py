"""Transactional offset commits (TxnOffsetCommit), held until their transaction ends.

As in Kafka, the offsets are written at once to the group's `__consumer_offsets`
partition as a transactional batch of the producer, but the group sees them only when
the commit marker reaches that partition; an abort marker drops them. The group
coordinator's committed offsets are updated in place at that moment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from kbroker.coordinator.group import OffsetAndMetadata
from kbroker.coordinator.records import (
    OffsetKey,
    RecordFormatError,
    decode_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
)
from kbroker.coordinator.store import OFFSETS_TOPIC
from kbroker.coordinator_runtime.internal_topics import (
    REFUSED_BATCH,
    Acknowledgement,
    ServiceBroker,
    append_batch,
    read_batches,
    write_error,
)
from kbroker.protocol.batch import Record, encode_batch
from kbroker.replica.append import PRODUCER_STATE_CODES
from kbroker.storage.producer_state import COORDINATOR

if TYPE_CHECKING:
    from kbroker.coordinator.coordinator import GroupCoordinator
    from kbroker.coordinator.service import GroupCoordinatorService

log = logging.getLogger("kbroker.txn.offsets")

E = ErrorCode
TopicPartition = tuple[str, int]


@dataclass(slots=True)
class PendingOffsets:
    """The offsets one producer has committed in its open transaction, per group."""

    by_group: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)


class TxnBroker(ServiceBroker, Protocol):
    """What the transaction coordinator uses of the broker: a coordinator service's
    parts and the group coordinator, whose offsets transactions commit."""

    group_coordinator: GroupCoordinatorService


class TxnOffsetStore:
    def __init__(self, broker: TxnBroker) -> None:
        self.broker = broker
        # (offsets partition, producer id) -> what waits for the marker
        self.pending: dict[tuple[int, int], PendingOffsets] = {}

    def _coordinator(self) -> GroupCoordinator:
        return self.broker.group_coordinator.coordinator

    def validate(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        instance_id: str | None,
        partitions: Iterable[TopicPartition] = (),
    ) -> ErrorCode:
        """Kafka's checks of a TxnOffsetCommit against the group (the group coordinator's)."""
        coordinator = self._coordinator()
        return coordinator.validate_txn_offset_commit(
            group_id, member_id, generation_id, instance_id, partitions
        )

    def write(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> tuple[ErrorCode, Acknowledgement | None]:
        """Append the offsets as a transactional batch and hold them until the marker.

        Returns the error and, after a successful append, what to await before the
        answer (an fsync when the offsets topic flushes every message)."""
        coordinator = self._coordinator()
        partition = coordinator.partition_for(group_id)
        replica, _ = self.broker.replicas.leader(OFFSETS_TOPIC, partition)
        if replica is None:
            return E.not_coordinator, None
        now = int(time.time() * 1000)
        stamped = {
            tp: OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, now)
            for tp, v in offsets.items()
        }
        batch = encode_batch(
            [
                Record(encode_offset_key(group_id, t, p), encode_offset_value(v), now)
                for (t, p), v in stamped.items()
            ],
            now,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
        )
        result, ack = append_batch(self.broker, OFFSETS_TOPIC, partition, batch, now, COORDINATOR)
        if result.base_offset < 0:  # not appended
            return self._refused(group_id, ErrorCode(result.error_code), result.error_message)
        pending = self.pending.setdefault((partition, producer_id), PendingOffsets())
        pending.by_group.setdefault(group_id, {}).update(stamped)
        return E.none, ack

    @staticmethod
    def _refused(
        group_id: str, code: ErrorCode, why: str | None
    ) -> tuple[ErrorCode, Acknowledgement | None]:
        """TxnOffsetCommit's error for an append refused (Kafka's mapping)."""
        if code == E.invalid_producer_epoch:
            return E.producer_fenced, None
        if code in PRODUCER_STATE_CODES or code == E.unknown_server_error:
            log.warning("transactional offsets of %s refused: %s", group_id, why)
            return E.invalid_txn_state, None
        if code == E.message_too_large:
            return E.invalid_commit_offset_size, None
        if code in REFUSED_BATCH or code == E.kafka_storage_error:
            log.error("cannot write transactional offsets of %s: %s", group_id, why)
            return E.not_coordinator, None
        return write_error(code), None

    def on_marker(self, tp: TopicPartition, producer_id: int, commit: bool) -> None:
        """A marker reached a partition: if it is an offsets partition, settle its offsets."""
        if tp[0] != OFFSETS_TOPIC:
            return
        pending = self.pending.pop((tp[1], producer_id), None)
        if pending is None or not commit:
            return
        coordinator = self._coordinator()
        for group_id, offsets in pending.by_group.items():
            coordinator.apply_committed_offsets(group_id, offsets)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of the group for `tp` (what
        OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for)."""
        for pending in self.pending.values():
            offsets = pending.by_group.get(group_id)
            if offsets is not None and tp in offsets:
                return True
        return False

    # -- after a restart or a move of leadership -------------------------------------------

    def reconcile(self, partition: int) -> int:
        """Correct the offsets the group coordinator loaded from an offsets partition,
        and hold again those of transactions still open in it.

        Its loader replays every offset record; those of aborted transactions must not
        count and those of still-open ones must wait for their marker. Only needed when
        the partition's producer state knows of such transactions. Returns how many
        (group, partition) offsets were corrected.
        """
        # What was held here before is stale: while another broker led the partition
        # those transactions ended there (and a later marker must not apply them).
        for held in [k for k in self.pending if k[0] == partition]:
            del self.pending[held]
        coordinator = self._coordinator()
        replica = self.broker.replicas.get(OFFSETS_TOPIC, partition)
        if replica is None:
            return 0
        plog = replica.log
        state = plog.producer_state
        if not state.aborted and not state.ongoing:
            return 0
        aborted: dict[int, list[tuple[int, int]]] = {}
        for txn in state.aborted:
            aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        ongoing = dict(state.ongoing)
        final: dict[tuple[str, TopicPartition], OffsetAndMetadata | None] = {}
        touched: set[tuple[str, TopicPartition]] = set()
        pending: dict[int, PendingOffsets] = {}
        for header, records in read_batches(plog):
            hold = skip = False
            if header.is_transactional:
                pid, offset = header.producer_id, header.base_offset
                if pid in ongoing and offset >= ongoing[pid]:
                    hold = True
                elif any(first <= offset <= last for first, last in aborted.get(pid, ())):
                    skip = True
            for key_bytes, value in records:
                try:
                    key = decode_key(key_bytes)
                    if not isinstance(key, OffsetKey):
                        continue
                    decoded = None if value is None else decode_offset_value(value)
                except RecordFormatError:
                    continue
                k = (key.group_id, (key.topic, key.partition))
                if header.is_transactional:
                    touched.add(k)
                if hold and decoded is not None:
                    entry = pending.setdefault(header.producer_id, PendingOffsets())
                    entry.by_group.setdefault(k[0], {})[k[1]] = decoded
                elif not skip and not hold:
                    final[k] = decoded
        for group_id, tp in touched:
            committed = final.get((group_id, tp))
            if committed is not None:
                coordinator.apply_committed_offsets(group_id, {tp: committed})
                continue
            # Classic and consumer-protocol groups share the id space; either may hold it.
            group = (
                coordinator.groups.get(group_id)
                or coordinator.consumer.groups.get(group_id)
                or coordinator.streams.groups.get(group_id)
            )
            if group is not None:
                group.offsets.pop(tp, None)
        for pid, entry in pending.items():
            self.pending[(partition, pid)] = entry
        return len(touched)
