"""Partitions added to a transaction by the broker a version 2 client writes to
(KIP-890 part 2).

A transactions version 2 client sends no AddPartitionsToTxn: the leader of a partition
its Produce v12+ writes a transactional batch to, and the group coordinator its
TxnOffsetCommit v5+ reaches, add the partition to the transaction before the write.
When this node coordinates the transactional id that is a call on its coordinator;
otherwise an AddPartitionsToTxn v5 (verify_only false) to the node that does, as
Kafka's AddPartitionsToTxnManager sends. The coordinator answers PRODUCER_FENCED to a
write from an epoch an EndTxn has moved past, which fences a zombie's late write.

The coordinator answers CONCURRENT_TRANSACTIONS while another change of the same id is in
flight (the adds of the transaction's other leaders it folds into its next write
instead): the last transaction's markers still going out right after its EndTxn, or the
end itself being written. That lasts milliseconds,
so the leader tries again itself (every `add.partitions.to.txn.retry.backoff.ms`, for
up to `add.partitions.to.txn.retry.backoff.max.ms`, as Kafka 4's ReplicaManager does,
KAFKA-18654) rather than sending the client into its own, longer, retry backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kbroker.coordinator_runtime.internal_topics import ServiceBroker
from kbroker.protocol.messages import build
from kbroker.replica.broker_link import BrokerLinks
from kbroker.txn.coordinator import TransactionCoordinator
from kbroker.txn.metadata import TopicPartition
from kbroker.txn.records import TRANSACTION_STATE_TOPIC

log = logging.getLogger("kbroker.txn")

E = ErrorCode
ADD_PARTITIONS_TO_TXN = 24
ADD_PARTITIONS_VERSION = 5
CALL_TIMEOUT_S = 30.0
TRANSACTIONS_VERSION_2 = 2

# Kafka's ReplicaManager answers these coordinator errors to a producer as the retriable
# NOT_ENOUGH_REPLICAS, and a fenced epoch as INVALID_PRODUCER_EPOCH. CONCURRENT_TRANSACTIONS
# it answers as itself, which Produce v12 (the first version of a transactions version 2
# client, the only one whose partitions a leader adds) may carry (KAFKA-18662).
_RETRIABLE = {
    E.coordinator_load_in_progress,
    E.coordinator_not_available,
    E.not_coordinator,
    E.request_timed_out,
    E.network_exception,
}


def produce_error(code: ErrorCode) -> ErrorCode:
    """The error a Produce answers for what adding its partition answered."""
    if code in _RETRIABLE:
        return E.not_enough_replicas
    if code == E.producer_fenced:
        return E.invalid_producer_epoch
    return code


class ImplicitPartitionAdder:
    def __init__(
        self,
        broker: ServiceBroker,
        coordinator: TransactionCoordinator,
        retry_backoff_ms: int = 20,
        retry_backoff_max_ms: int = 100,
    ) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.retry_backoff_max_s = retry_backoff_max_ms / 1000
        # The last produce of each transactional id still adding its partitions: done
        # once it appended (the produce handler orders that id's writes by it).
        self.appending: dict[str, asyncio.Future[None]] = {}
        self._links = BrokerLinks(broker, "txn-add-partitions", "AddPartitionsToTxn", log)

    async def add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Add `partitions` to the ongoing transaction; the coordinator's answer each,
        tried again while it answers CONCURRENT_TRANSACTIONS (for a while)."""
        wanted = set(partitions)
        gives_up = time.monotonic() + self.retry_backoff_max_s
        answers: dict[TopicPartition, ErrorCode] = {}
        while True:
            answers.update(await self._add(transactional_id, producer_id, producer_epoch, wanted))
            wanted = {tp for tp in wanted if answers[tp] == E.concurrent_transactions}
            if not wanted or time.monotonic() + self.retry_backoff_s > gives_up:
                return answers
            await asyncio.sleep(self.retry_backoff_s)

    async def _add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        wanted: set[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        status = self.coordinator.status(transactional_id)
        if status is None:
            error = await self.coordinator.add_partitions(
                transactional_id, producer_id, producer_epoch, wanted, TRANSACTIONS_VERSION_2
            )
            return dict.fromkeys(wanted, error)
        if status != E.not_coordinator:
            return dict.fromkeys(wanted, status)
        state = self.broker.controller.state
        info = state.partition(
            TRANSACTION_STATE_TOPIC, self.coordinator.partition_for(transactional_id)
        )
        if info is None or info.leader in (-1, self.broker.node_id):
            return dict.fromkeys(wanted, E.coordinator_not_available)
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(wanted):
            by_topic.setdefault(topic, []).append(index)
        request = build(
            load_request_schema(ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_VERSION),
            {
                "transactions": [
                    {
                        "transactional_id": transactional_id,
                        "producer_id": producer_id,
                        "producer_epoch": producer_epoch,
                        "verify_only": False,
                        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                    }
                ]
            },
        )
        response = await self._links.call(info.leader, request, CALL_TIMEOUT_S)
        if response is None:
            return dict.fromkeys(wanted, E.coordinator_not_available)
        if response.error_code != E.none:
            return dict.fromkeys(wanted, ErrorCode(response.error_code))
        out = dict.fromkeys(wanted, E.coordinator_not_available)
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for p in topic.results_by_partition:
                    tp = (topic.name, int(p.partition_index))
                    if tp in out:
                        out[tp] = ErrorCode(p.partition_error_code)
        return out

    def close(self) -> None:
        self._links.close()
