"""The transaction coordinator inside a running broker.

Creates `__transaction_state` on first need, follows which of its partitions this node
leads (loading their transactional ids on gaining one, completing transactions found
half-ended), and runs the background duties: aborting transactions past their
timeout, retrying markers that could not be written, forgetting idle transactional
ids, and expiring idle producer ids from the partitions' producer state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.internal_topics import append_records, read_log_records
from kbroker.txn.coordinator import TransactionCoordinator, TxnConfig
from kbroker.txn.markers import LocalMarkerWriter
from kbroker.txn.offsets import TxnOffsetStore
from kbroker.txn.producer_ids import ProducerIdManager
from kbroker.txn.records import TRANSACTION_STATE_TOPIC

log = logging.getLogger("kbroker.txn")

E = ErrorCode
RETRY_INTERVAL_S = 0.2


def _now_ms() -> int:
    return int(time.time() * 1000)


def txn_config(config: Any) -> TxnConfig:
    return TxnConfig(
        num_partitions=config.get("transaction.state.log.num.partitions"),
        max_timeout_ms=config.get("transaction.max.timeout.ms"),
        id_expiration_ms=config.get("transactional.id.expiration.ms"),
    )


class LogTxnStore:
    """Writes transaction-log records to this broker's replicas of `__transaction_state`."""

    def __init__(self, broker: Any) -> None:
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


class TransactionCoordinatorService:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
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
        )
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._creating: asyncio.Future[ErrorCode] | None = None
        self._refresh_pending = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        config = self.broker.config
        self._follow_group_loads()
        extra = getattr(self.broker, "extra_metrics", None)
        if extra is not None:
            extra.append(self.metrics)
        self.broker.controller.subscribe(self._on_metadata_event)
        self.refresh()
        self._every(
            config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            self.coordinator.abort_timed_out,
        )
        self._every(RETRY_INTERVAL_S * 1000, self.coordinator.retry_incomplete)
        self._every(
            config.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
            self.coordinator.expire_ids,
        )
        self._every(config.get("producer.id.expiration.check.interval.ms"), self._expire_producers)

    async def stop(self) -> None:
        self.broker.controller.unsubscribe(self._on_metadata_event)
        for task in [*self._tasks, *self._loads.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._loads.values(), return_exceptions=True)
        self._tasks.clear()
        self._loads.clear()
        self.coordinator.shutdown()

    def metrics(self) -> list[str]:
        """Prometheus lines: transactional ids by state, markers waiting for a retry."""
        counts: dict[str, int] = {}
        for meta in self.coordinator.txns.values():
            name = meta.state.display_name
            counts[name] = counts.get(name, 0) + 1
        out = [
            "# HELP kbroker_transactions Transactional ids this node coordinates, by state.",
            "# TYPE kbroker_transactions gauge",
        ]
        out += [f'kbroker_transactions{{state="{n}"}} {c}' for n, c in sorted(counts.items())]
        out += [
            "# HELP kbroker_transactions_awaiting_markers Ended transactions whose markers "
            "are not all written yet.",
            "# TYPE kbroker_transactions_awaiting_markers gauge",
            f"kbroker_transactions_awaiting_markers {len(self.coordinator.incomplete)}",
        ]
        return out

    def _follow_group_loads(self) -> None:
        """Plug into the group coordinator: after it loads an offsets partition, settle the
        offsets of its transactions (aborted ones out, open ones held back until their
        marker); and tell OffsetFetch (require_stable) which offsets are still pending."""
        groups = getattr(self.broker, "group_coordinator", None)
        coordinator = getattr(groups, "coordinator", None)
        if coordinator is None:
            return
        coordinator.load_listeners.append(self.offsets.reconcile)
        coordinator.pending_offset_check = self.offsets.has_pending

    def _every(self, interval_ms: float, job: Any) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    await job()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("transaction coordinator task %s failed", job.__name__)

        self._tasks.append(asyncio.create_task(loop()))

    async def _expire_producers(self) -> None:
        max_age = self.broker.config.get("producer.id.expiration.ms")
        now = _now_ms()
        for replica in list(self.broker.replicas.replicas.values()):
            if not replica.log.closed:
                replica.log.producer_state.expire(now, max_age)
            await asyncio.sleep(0)

    # -- leadership of the transaction-log partitions ------------------------------------

    def _on_metadata_event(self, event: Any) -> None:
        if not self._refresh_pending:
            self._refresh_pending = True
            asyncio.get_running_loop().call_soon(self.refresh)

    def refresh(self) -> None:
        """Load partitions this node now leads, unload those it no longer leads."""
        self._refresh_pending = False
        coordinator = self.coordinator
        topic = self.broker.controller.state.topics.get(TRANSACTION_STATE_TOPIC)
        led: dict[int, int] = {}
        if topic is not None:
            if len(topic.partitions) != coordinator.config.num_partitions and not (
                coordinator.partitions
            ):
                coordinator.config = replace(
                    coordinator.config, num_partitions=len(topic.partitions)
                )
            for p in topic.partitions:
                replica = self.broker.replicas.get(TRANSACTION_STATE_TOPIC, p.partition)
                if p.leader == self.broker.node_id and replica is not None and replica.is_leader:
                    led[p.partition] = replica.leader_epoch
        current = coordinator.partitions
        for partition in sorted(set(current) - set(led)):
            task = self._loads.pop(partition, None)
            if task is not None:
                task.cancel()
            coordinator.unload_partition(partition)
            log.info("no longer coordinating %s-%d", TRANSACTION_STATE_TOPIC, partition)
        for partition, epoch in sorted(led.items()):
            state = current.get(partition)
            if state is not None and state.coordinator_epoch == epoch:
                continue
            coordinator.begin_loading(partition, epoch)
            self._loads[partition] = asyncio.create_task(self._load(partition))

    async def _load(self, partition: int) -> None:
        started = time.monotonic()
        try:
            replica = self.broker.replicas.get(TRANSACTION_STATE_TOPIC, partition)
            records: list[tuple[bytes, bytes | None]] = []
            if replica is not None:
                for _, batch in read_log_records(replica.log):
                    records.extend(batch)
                    if len(records) % 10_000 < len(batch):
                        await asyncio.sleep(0)
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
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC, partition)
            self.coordinator.unload_partition(partition)
        finally:
            self._loads.pop(partition, None)

    # -- FindCoordinator ----------------------------------------------------------------

    async def find_coordinator(self, transactional_id: str) -> tuple[ErrorCode, Any]:
        """The broker leading the id's transaction-log partition (creating the topic if new)."""
        state = self.broker.controller.state
        if TRANSACTION_STATE_TOPIC not in state.topics:
            error = await self.ensure_topic()
            if error != E.none:
                return error, None
            state = self.broker.controller.state
        topic = state.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return E.coordinator_not_available, None
        partition = topic.partitions[
            self.coordinator.partition_for(transactional_id) % len(topic.partitions)
        ]
        node = state.brokers.get(partition.leader)
        if node is None or node.fenced:
            return E.coordinator_not_available, None
        return E.none, node

    async def ensure_topic(self) -> ErrorCode:
        """Create `__transaction_state` once, however many requests ask at the same time."""
        if TRANSACTION_STATE_TOPIC in self.broker.controller.state.topics:
            return E.none
        if self._creating is None:
            self._creating = asyncio.ensure_future(self._create())
            self._creating.add_done_callback(self._forget_creation)
        return await asyncio.shield(self._creating)

    def _forget_creation(self, _: asyncio.Future[ErrorCode]) -> None:
        self._creating = None

    async def _create(self) -> ErrorCode:
        from kbroker.controller import ControllerError

        config = self.broker.config
        try:
            await self.broker.controller.create_topic(
                TRANSACTION_STATE_TOPIC,
                config.get("transaction.state.log.num.partitions"),
                config.get("transaction.state.log.replication.factor"),
                {
                    "cleanup.policy": "compact",
                    "compression.type": "uncompressed",
                    "min.insync.replicas": str(config.get("transaction.state.log.min.isr")),
                    "segment.bytes": str(config.get("transaction.state.log.segment.bytes")),
                },
            )
        except ControllerError as exc:
            if TRANSACTION_STATE_TOPIC in self.broker.controller.state.topics:
                return E.none
            log.warning("cannot create %s: %s", TRANSACTION_STATE_TOPIC, exc)
            return E.coordinator_not_available
        log.info("created %s", TRANSACTION_STATE_TOPIC)
        return E.none
