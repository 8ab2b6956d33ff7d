"""What the transaction coordinator knows of one transactional id, and its states."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767
TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    """Kafka's transaction states, with the numbers its transaction log stores."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETED = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing; past it a new producer id is needed."""
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    # KIP-360: the epoch before the last bump, so a retried InitProducerId is recognised.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    # The producer id before a rotation (epoch exhausted), for the same reason.
    last_producer_id: int = NO_PRODUCER_ID
    # KIP-890 part 2: the producer id an overflowing epoch bump moves to once the
    # transaction completes (its markers carry the old id at the last epoch).
    next_producer_id: int = NO_PRODUCER_ID
    # The transaction version the client speaks (2: an epoch bump ends each transaction).
    client_transaction_version: int = 0
    # A write of this id's next state is in flight: other requests must retry.
    pending: bool = False

    def copy(self, **changes: object) -> TxnMetadata:
        """The next state to write; applied to the live metadata once it is stored."""
        out = replace(self, **changes)  # type: ignore[arg-type]
        if "partitions" not in changes:
            out.partitions = set(self.partitions)
        out.pending = False
        return out

    def adopt(self, other: TxnMetadata) -> None:
        """Take over a stored next state."""
        self.producer_id = other.producer_id
        self.producer_epoch = other.producer_epoch
        self.timeout_ms = other.timeout_ms
        self.state = other.state
        self.partitions = other.partitions
        self.start_ms = other.start_ms
        self.last_update_ms = other.last_update_ms
        self.last_producer_epoch = other.last_producer_epoch
        self.last_producer_id = other.last_producer_id
        self.next_producer_id = other.next_producer_id
        self.client_transaction_version = other.client_transaction_version

    @property
    def bumps_epoch_per_transaction(self) -> bool:
        """Transactions version 2: EndTxn bumps the epoch (KIP-890 part 2)."""
        return self.client_transaction_version >= 2
