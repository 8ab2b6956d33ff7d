"""Refusing transactional writes that belong to no transaction (KIP-890 part 1, local).

A transactional batch opens a transaction in its partition's producer state, and the
last stable offset stays below it until a marker closes it. A batch no coordinator
knows of would therefore stall read_committed consumers for good, so a produce must
name a transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka) and,
when this node coordinates that id, match its ongoing transaction: same producer id
and epoch, the partition added. When another node coordinates the id the write is let
through (asking it would take Kafka's AddPartitionsToTxn verify round trip).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kbroker.controller.state import MetadataState
from kbroker.protocol.batch import first_producer
from kbroker.txn.coordinator import TransactionCoordinator
from kbroker.txn.metadata import TxnState
from kbroker.txn.records import TRANSACTION_STATE_TOPIC

E = ErrorCode


def verify_transactional_write(
    coordinator: TransactionCoordinator,
    enabled: bool,
    metadata: MetadataState,
    transactional_id: str | None,
    topic: str,
    partition: int,
    records: bytes | bytearray | memoryview,
) -> ErrorCode:
    """E.none when the transactional batch at the start of `records` may be appended.

    `enabled` is Kafka's transaction.partition.verification.enable.
    """
    if transactional_id is None:
        return E.transactional_id_authorization_failed
    if not enabled:
        return E.none
    if TRANSACTION_STATE_TOPIC not in metadata.topics:
        return E.invalid_producer_id_mapping  # no transaction exists anywhere yet
    status = coordinator.status(transactional_id)
    if status == E.not_coordinator:
        return E.none
    if status is not None:
        return E.not_enough_replicas  # loading: retriable for the producer
    producer_id, epoch = first_producer(records)
    meta = coordinator.txns.get(transactional_id)
    if meta is None or meta.producer_id != producer_id:
        return E.invalid_producer_id_mapping
    if epoch != meta.producer_epoch:
        return E.invalid_producer_epoch
    if meta.state != TxnState.ONGOING or (topic, partition) not in meta.partitions:
        return E.invalid_txn_state
    return E.none
