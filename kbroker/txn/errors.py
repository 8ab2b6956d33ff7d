"""Kafka error codes for what the producer state refuses."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kbroker.storage.producer_state import (
    CoordinatorFencedError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    UnknownProducerIdError,
)

_CODES: dict[type[ProducerStateError], ErrorCode] = {
    OutOfOrderSequenceError: ErrorCode.out_of_order_sequence_number,
    # Since Kafka 2.7 a produce from an old epoch is INVALID_PRODUCER_EPOCH (abortable),
    # not the fatal PRODUCER_FENCED; the coordinator's own checks still answer FENCED.
    InvalidProducerEpochError: ErrorCode.invalid_producer_epoch,
    InvalidTxnStateError: ErrorCode.invalid_txn_state,
    CoordinatorFencedError: ErrorCode.transaction_coordinator_fenced,
    InvalidRecordError: ErrorCode.invalid_record,
    UnknownProducerIdError: ErrorCode.unknown_producer_id,
}


def producer_state_error_code(exc: ProducerStateError) -> ErrorCode:
    return _CODES.get(type(exc), ErrorCode.unknown_server_error)
