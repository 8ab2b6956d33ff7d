"""The transaction coordinator inside a running broker.

Creates `__transaction_state` on first need, follows which of its partitions this node
leads (loading their transactional ids on gaining one, completing transactions found
half-ended), and runs the background duties: aborting transactions past their
timeout, retrying markers that could not be written, forgetting idle transactional
ids, and expiring idle producer ids from the partitions' producer state. What it
shares with the group coordinator is `kbroker.coordinator_runtime.internal_topics.InternalTopicService`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from kio.schema.errors import ErrorCode
from prometheus_client.core import GaugeMetricFamily, Metric

from kbroker.config import BrokerConfig, segment_size_config
from kbroker.coordinator_runtime.internal_topics import (
    InternalTopicService,
    KeyValue,
    ServiceBroker,
    TopicLayout,
    append_records,
)
from kbroker.txn.coordinator import TransactionCoordinator, TxnConfig
from kbroker.txn.implicit import ImplicitPartitionAdder
from kbroker.txn.markers import LocalMarkerWriter
from kbroker.txn.metadata import PREPARING
from kbroker.txn.offsets import TxnBroker, TxnOffsetStore
from kbroker.txn.producer_ids import ProducerIdManager
from kbroker.txn.records import TRANSACTION_STATE_TOPIC

log = logging.getLogger("kbroker.txn")

E = ErrorCode
RETRY_INTERVAL_S = 0.2


def _now_ms() -> int:
    return int(time.time() * 1000)


def txn_config(config: BrokerConfig) -> TxnConfig:
    return TxnConfig(
        num_partitions=config.transaction_state_log_num_partitions,
        max_timeout_ms=config.transaction_max_timeout_ms,
        id_expiration_ms=config.transactional_id_expiration_ms,
    )


class LogTxnStore:
    """Writes transaction-log records to this broker's replicas of `__transaction_state`."""

    def __init__(self, broker: ServiceBroker) -> None:
        self.broker = broker

    async def write(self, partition: int, key: bytes, value: bytes | None) -> ErrorCode:
        error, acknowledgement = append_records(
            self.broker, TRANSACTION_STATE_TOPIC, partition, [(key, value)], _now_ms()
        )
        if acknowledgement is None:
            return error
        try:
            return await acknowledgement
        except OSError:
            return E.kafka_storage_error


class TransactionCoordinatorService(InternalTopicService):
    topic = TRANSACTION_STATE_TOPIC
    log = log
    coordinator: TransactionCoordinator
    broker: TxnBroker

    def __init__(self, broker: TxnBroker) -> None:
        super().__init__(broker)
        self.producer_ids = ProducerIdManager(lambda n: broker.controller.allocate_producer_ids(n))
        self.markers = LocalMarkerWriter(broker)
        self.offsets = TxnOffsetStore(broker)
        self.markers.on_written.append(self.offsets.on_marker)
        self.coordinator = TransactionCoordinator(
            txn_config(broker.config),
            LogTxnStore(broker),
            self.markers,
            self.producer_ids.next_id,
            _now_ms,
            lambda: broker.controller.state.features.get("transaction.version", 0),
        )
        self.adder = ImplicitPartitionAdder(
            broker,
            self.coordinator,
            broker.config.add_partitions_to_txn_retry_backoff_ms,
            broker.config.add_partitions_to_txn_retry_backoff_max_ms,
        )

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        config = self.broker.config
        self._follow_group_loads()
        self.publish_metrics(self.metrics)
        await super().start()
        self._every(
            config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            self.coordinator.abort_timed_out,
        )
        self._every(
            RETRY_INTERVAL_S * 1000,
            self.coordinator.retry_incomplete,
            when=lambda: bool(self.coordinator.incomplete),
        )
        self._every(
            config.transaction_remove_expired_transaction_cleanup_interval_ms,
            self.coordinator.expire_ids,
        )
        self._every(config.producer_id_expiration_check_interval_ms, self._expire_producers)

    async def stop(self) -> None:
        self.adder.close()
        await super().stop()

    def metrics(self) -> list[Metric]:
        """Transactional ids by state, and ended transactions whose markers are not all
        written yet."""
        counts: dict[str, int] = {}
        for meta in self.coordinator.txns.values():
            name = meta.state.display_name
            counts[name] = counts.get(name, 0) + 1
        by_state = GaugeMetricFamily(
            "kbroker_transactions",
            "Transactional ids this node coordinates, by state.",
            labels=["state"],
        )
        for name, count in sorted(counts.items()):
            by_state.add_metric([name], count)
        awaiting = GaugeMetricFamily(
            "kbroker_transactions_awaiting_markers",
            "Ended transactions whose markers are not all written yet.",
            # Prepared ids: their markers are being written, or wait for the next retry.
            value=sum(1 for meta in self.coordinator.txns.values() if meta.state in PREPARING),
        )
        return [by_state, awaiting]

    def _follow_group_loads(self) -> None:
        """Plug into the group coordinator: after it loads an offsets partition, settle the
        offsets of its transactions (aborted ones out, open ones held back until their
        marker); and tell OffsetFetch (require_stable) which offsets are still pending."""
        coordinator = self.broker.group_coordinator.coordinator
        coordinator.load_listeners.append(self.offsets.reconcile)
        coordinator.pending_offset_check = self.offsets.has_pending

    def _every(
        self, interval_ms: float, job: Callable[[], Any], when: Callable[[], bool] | None = None
    ) -> None:
        self.every(interval_ms, job, f"transaction coordinator task {job.__name__}", when)

    async def _expire_producers(self) -> None:
        max_age = self.broker.config.producer_id_expiration_ms
        now = _now_ms()
        for replica in list(self.broker.replicas.hosted.values()):
            if not replica.log.closed:
                replica.log.producer_state.expire(now, max_age)
            await asyncio.sleep(0)

    # -- the transaction log --------------------------------------------------------------

    def layout(self) -> TopicLayout:
        config = self.broker.config
        return TopicLayout(
            config.transaction_state_log_num_partitions,
            config.transaction_state_log_replication_factor,
            {
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "min.insync.replicas": str(config.transaction_state_log_min_isr),
                **segment_size_config(config.transaction_state_log_segment_bytes),
            },
        )

    def held_partitions(self) -> Collection[int]:
        return self.coordinator.partitions.keys()

    def needs_load(self, partition: int, leader_epoch: int) -> bool:
        """A partition is loaded again when its leader epoch moved: the coordinator
        epoch its markers carry is that epoch."""
        state = self.coordinator.partitions.get(partition)
        return state is None or state.coordinator_epoch != leader_epoch

    def begin_loading(self, partition: int, leader_epoch: int) -> None:
        self.coordinator.begin_loading(partition, leader_epoch)

    async def load_records(self, partition: int, records: list[KeyValue], started: float) -> None:
        loaded = self.coordinator.load_partition(partition, records)
        if loaded:
            log.info(
                "loaded %d transactional ids from %s-%d in %.3fs",
                loaded,
                TRANSACTION_STATE_TOPIC,
                partition,
                time.monotonic() - started,
            )
        if self.coordinator.incomplete:
            await self.coordinator.retry_incomplete()
