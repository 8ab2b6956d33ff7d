"""The coordinators' internal compacted topics (`__consumer_offsets`, `__transaction_state`).

The group and the transaction coordinator keep their state the same way: as keyed
records in a compacted topic whose partition leaders are the coordinators. What they
share lives here: the service that creates the topic on first need, follows which of
its partitions this node leads (replaying one on gaining it, dropping it on losing it)
and answers FindCoordinator; appending records to a led partition with the durability
a produce would get; and reading a partition's records back.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from kio.schema.errors import ErrorCode
from prometheus_client.core import Metric

from kbroker.protocol import record_codec
from kbroker.protocol.batch import (
    HEADER_SIZE,
    BatchHeader,
    decode_records,
    read_header,
)
from kbroker.protocol.compression import decompress
from kbroker.protocol.produce_response import ProducedPartition
from kbroker.replica.delayed import PendingAck
from kbroker.replica.partition import Partition
from kbroker.storage.producer_state import CLIENT
from kbroker.tasks import cancel_and_wait

if TYPE_CHECKING:
    from kbroker.config import BrokerConfig
    from kbroker.controller import Controller
    from kbroker.controller.events import MetadataEvent
    from kbroker.controller.state import BrokerInfo
    from kbroker.replica.append import DelayedProduce
    from kbroker.replica.manager import ReplicaManager
    from kbroker.security.inter_broker import InterBrokerSecurity
    from kbroker.storage.log import PartitionLog
    from kbroker.storage.manager import LogManager

log = logging.getLogger("kbroker.internal_topics")

E = ErrorCode
KeyValue = tuple[bytes, bytes | None]
Acknowledgement = Coroutine[Any, Any, ErrorCode]
ALL_REPLICAS = -1  # coordinators write with acks=all, as Kafka's do
Metrics = Callable[[], Iterable[Metric]]
# Records read between two yields to the loop while replaying a partition.
YIELD_EVERY_RECORDS = 10_000


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """How an internal topic is created: from the broker's settings for it."""

    partitions: int
    replication_factor: int
    configs: dict[str, str]


class ServiceBroker(Protocol):
    """What a coordinator service uses of the broker running it."""

    node_id: int
    config: BrokerConfig
    controller: Controller
    replicas: ReplicaManager
    logs: LogManager
    extra_metrics: list[Metrics]
    inter_broker: InterBrokerSecurity  # how to reach the other brokers

    def opening(self, topic: str, /) -> bool: ...

    async def partitions_opened(self, topic: str, /) -> dict[int, str]: ...


class PartitionedCoordinator(Protocol):
    """What the service needs of the coordinator state machine it hosts."""

    config: Any  # a frozen dataclass with num_partitions

    def partition_for(self, key: str, /) -> int: ...

    def unload_partition(self, partition: int, /) -> None: ...

    def shutdown(self) -> None: ...


class _Periodic:
    """`InternalTopicService.every`'s job: a chain of loop timers, and a task only while
    a coroutine job runs."""

    def __init__(
        self,
        delay_s: float,
        job: Callable[[], Any],
        what: str,
        when: Callable[[], bool] | None,
        log: logging.Logger,
    ) -> None:
        self.delay_s, self.job, self.what, self.when, self.log = delay_s, job, what, when, log
        self.loop = asyncio.get_running_loop()
        self.task: asyncio.Task[Any] | None = None
        self.handle: asyncio.TimerHandle | None = self.loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self.handle = None
        if self.when is None or self.when():
            try:
                result = self.job()
            except Exception:
                self.log.exception("%s failed", self.what)
            else:
                if inspect.isawaitable(result):
                    self.task = asyncio.ensure_future(result)
                    self.task.add_done_callback(self._ran)
                    return
        self.handle = self.loop.call_later(self.delay_s, self._fire)

    def _ran(self, task: asyncio.Task[Any]) -> None:
        self.task = None
        if task.cancelled():
            return  # stopped
        error = task.exception()
        if isinstance(error, Exception):
            self.log.error("%s failed", self.what, exc_info=error)
        self.handle = self.loop.call_later(self.delay_s, self._fire)

    def stop(self) -> asyncio.Task[Any] | None:
        """No more runs; the task of a run under way, if one is, for the caller to end."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        task, self.task = self.task, None
        if task is not None:
            task.remove_done_callback(self._ran)
        return task


class InternalTopicService:
    """A coordinator state machine inside a running broker, over its internal topic.

    A subclass names the topic (`topic`, `layout`), hosts a `coordinator`, and says how
    its partitions are held: `held_partitions`, `needs_load`, `begin_loading`,
    `load_records`. Replaying a partition yields to the loop between chunks, so a large
    log does not stall other connections.
    """

    topic: ClassVar[str]
    log: ClassVar[logging.Logger] = log
    coordinator: PartitionedCoordinator

    def __init__(self, broker: ServiceBroker) -> None:
        self.broker = broker
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._metrics: list[Metrics] = []
        self._creating: asyncio.Future[ErrorCode] | None = None
        self._refresh_pending = False
        self._awaiting_logs: asyncio.Task[None] | None = None
        # Partitions loading since their log began to be made, their load not started.
        self._begun: set[int] = set()
        self._periodic: list[_Periodic] = []

    # -- what a subclass says -------------------------------------------------------------

    def layout(self) -> TopicLayout:
        raise NotImplementedError

    def held_partitions(self) -> Collection[int]:
        """The partitions the coordinator has loaded or is loading."""
        raise NotImplementedError

    def needs_load(self, partition: int, leader_epoch: int) -> bool:
        """Whether a partition this node leads at `leader_epoch` must be (re)loaded."""
        return partition not in self.held_partitions()

    def begin_loading(self, partition: int, leader_epoch: int) -> None:
        raise NotImplementedError

    async def load_records(self, partition: int, records: list[KeyValue], started: float) -> None:
        """Rebuild the partition's state from its records (read since `started`)."""
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self.broker.controller.subscribe(self._on_metadata_event)
        self.refresh()

    async def stop(self) -> None:
        self.broker.controller.unsubscribe(self._on_metadata_event)
        extra = self.broker.extra_metrics
        for metrics in self._metrics:
            if metrics in extra:
                extra.remove(metrics)
        self._metrics.clear()
        running = [task for periodic in self._periodic if (task := periodic.stop()) is not None]
        self._periodic.clear()
        awaiting = [self._awaiting_logs] if self._awaiting_logs is not None else []
        await cancel_and_wait(
            [*self._tasks, *running, *awaiting, *self._loads.values()],
            what=f"{self.topic} tasks",
        )
        self._tasks.clear()
        self._loads.clear()
        self._begun.clear()
        self.coordinator.shutdown()

    def publish_metrics(self, metrics: Metrics) -> None:
        """Add metric families to the broker's /metrics until `stop`."""
        self.broker.extra_metrics.append(metrics)
        self._metrics.append(metrics)

    def every(
        self,
        interval_ms: float,
        job: Callable[[], Any],
        what: str,
        when: Callable[[], bool] | None = None,
    ) -> None:
        """Run `job` (a function or a coroutine function) every interval until `stop`; a
        failure is logged as `what` failed, and the next run goes ahead. With `when`, a
        run for which it says False is skipped (no coroutine, no task). The interval is
        a loop timer between the end of one run and the start of the next."""
        self._periodic.append(_Periodic(interval_ms / 1000, job, what, when, self.log))

    # -- leadership of the topic's partitions ---------------------------------------------

    def _on_metadata_event(self, event: MetadataEvent) -> None:
        # Let the broker open the partitions first (it hears of the same event), then look.
        if not self._refresh_pending:
            self._refresh_pending = True
            asyncio.get_running_loop().call_soon(self.refresh)

    def refresh(self) -> None:
        """Load partitions this node now leads, unload those it no longer leads.

        A partition the metadata has this node lead while the broker's workers still
        make its log is loading from that moment, its load started once the log is
        there: a client that FindCoordinator sent here (the topic is in the metadata)
        hears "loading, try again" (COORDINATOR_LOAD_IN_PROGRESS), not "not the
        coordinator", which some clients take as final (librdkafka's committed())."""
        self._refresh_pending = False
        coordinator = self.coordinator
        topic = self.broker.controller.state.topics.get(self.topic)
        led: dict[int, int] = {}  # partition -> leader epoch
        opening: dict[int, int] = {}  # led here, but its log is still being made
        if topic is not None:
            count = len(topic.partitions)
            if count != coordinator.config.num_partitions and not self.held_partitions():
                # The topic's real partition count decides placement, whatever the setting.
                coordinator.config = replace(coordinator.config, num_partitions=count)
            for p in topic.partitions:
                if p.leader != self.broker.node_id:
                    continue
                replica, _ = self.broker.replicas.leader(self.topic, p.partition)
                if replica is not None:
                    led[p.partition] = replica.leader_epoch
                elif self.broker.opening(self.topic):
                    opening[p.partition] = p.leader_epoch
        if opening and self._awaiting_logs is None:
            self._awaiting_logs = asyncio.create_task(self._refresh_when_opened())
        for partition in sorted(set(self.held_partitions()) - set(led) - set(opening)):
            task = self._loads.pop(partition, None)
            if task is not None:
                task.cancel()
            self._begun.discard(partition)
            coordinator.unload_partition(partition)
            self.log.info("no longer coordinating %s-%d", self.topic, partition)
        for partition, epoch in sorted(opening.items()):
            if partition not in self._begun and self.needs_load(partition, epoch):
                self.begin_loading(partition, epoch)
                self._begun.add(partition)
        for partition, epoch in sorted(led.items()):
            if partition in self._begun or self.needs_load(partition, epoch):
                self._begun.discard(partition)
                stale = self._loads.pop(partition, None)
                if stale is not None:  # a load for an older leader epoch must not finish
                    stale.cancel()
                self.begin_loading(partition, epoch)
                self._loads[partition] = asyncio.create_task(self._load(partition))

    async def _refresh_when_opened(self) -> None:
        """Look again once the broker's workers have made the topic's new logs (a new
        topic's partitions are opened off the loop; no metadata change follows)."""
        try:
            await self._logs_made()
        finally:
            self._awaiting_logs = None
        self.refresh()

    async def _logs_made(self) -> None:
        """Wait until the broker's workers have made this node's logs of the topic. A
        worker that failed is the broker's to log (it already has, and the partitions
        without a log stay offline here); this service goes on with those it has."""
        with contextlib.suppress(Exception):
            await self.broker.partitions_opened(self.topic)

    async def _load(self, partition: int) -> None:
        started = time.monotonic()
        try:
            replica = self.broker.replicas.get(self.topic, partition)
            records: list[KeyValue] = []
            if replica is not None:
                for _, batch in read_batches(replica.log):
                    records.extend(batch)
                    if len(records) % YIELD_EVERY_RECORDS < len(batch):
                        await asyncio.sleep(0)
            await self.load_records(partition, records, started)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.log.exception("loading %s-%d failed", self.topic, partition)
            self.coordinator.unload_partition(partition)
        finally:
            if self._loads.get(partition) is asyncio.current_task():
                del self._loads[partition]

    # -- FindCoordinator ------------------------------------------------------------------

    async def find_coordinator(self, key: str) -> tuple[ErrorCode, BrokerInfo | None]:
        """The broker leading the key's partition of the topic (creating the topic if new)."""
        state = self.broker.controller.state
        if self.topic not in state.topics:
            error = await self.ensure_topic()
            if error != E.none:
                return error, None
            state = self.broker.controller.state
        topic = state.topics.get(self.topic)
        if topic is None:
            return E.coordinator_not_available, None
        partition = topic.partitions[self.coordinator.partition_for(key) % len(topic.partitions)]
        node = state.brokers.get(partition.leader)
        if node is None or node.fenced:
            return E.coordinator_not_available, None
        return E.none, node

    async def ensure_topic(self) -> ErrorCode:
        """Create the topic once, however many requests ask at the same time."""
        if self.topic in self.broker.controller.state.topics:
            return E.none
        if self._creating is None:
            self._creating = asyncio.ensure_future(self._create())
            self._creating.add_done_callback(self._forget_creation)
        return await asyncio.shield(self._creating)

    def _forget_creation(self, _: asyncio.Future[ErrorCode]) -> None:
        self._creating = None

    async def _create(self) -> ErrorCode:
        from kbroker.controller import ControllerError

        layout = self.layout()
        try:
            await self.broker.controller.create_topic(
                self.topic, layout.partitions, layout.replication_factor, layout.configs
            )
        except ControllerError as exc:
            if self.topic in self.broker.controller.state.topics:
                return E.none  # created concurrently (another broker, or a retry)
            self.log.warning("cannot create %s: %s", self.topic, exc)
            return E.coordinator_not_available
        # Answer once this node's replicas are open and their coordinator loads begun,
        # so that the asking client's next request finds its coordinator here.
        await self._logs_made()
        self.refresh()
        self.log.info("created %s", self.topic)
        return E.none


# -- writing ------------------------------------------------------------------------------


def write_error(
    code: ErrorCode,
    *,
    timed_out: ErrorCode = E.request_timed_out,
    too_large: ErrorCode = E.unknown_server_error,
) -> ErrorCode:
    """How a coordinator reports a failed write to its topic (Kafka's mapping): the
    partition gone or short of replicas means try later, leadership or the disk lost
    means find the coordinator again. What a timeout or a batch too large means depends
    on the request, so the caller says."""
    if code in (
        E.unknown_topic_or_partition,
        E.not_enough_replicas,
        E.not_enough_replicas_after_append,
    ):
        return E.coordinator_not_available
    if code in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if code == E.request_timed_out:
        return timed_out
    if code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        return too_large
    return code


def append_batch(
    broker: ServiceBroker,
    topic: str,
    partition: int,
    batch: bytearray,
    now_ms: int,
    origin: int = CLIENT,
) -> tuple[ProducedPartition, Acknowledgement | None]:
    """Append one batch with acks=all to this node's leader replica of the partition,
    through the replica manager's one append path (an I/O error takes the log directory
    offline there). Returns the append's outcome (its Kafka error code) and, when it succeeded but may
    not be acknowledged yet, what to await first: an fsync when the topic flushes every
    message and the ISR reaching the batch, so that a coordinator failover cannot lose
    what was acknowledged. The awaitable gives the final error and raises OSError when
    the fsync fails."""
    delayed = broker.replicas.append_records(
        [(topic, partition, batch)], ALL_REPLICAS, None, origin=origin, now_ms=now_ms
    )
    result = delayed.results[0]
    if result.base_offset < 0 or (delayed.done and result.error_code == E.none):
        return result, None  # not appended, or acknowledged already
    return result, _acknowledged(delayed)


async def _acknowledged(delayed: DelayedProduce) -> ErrorCode:
    await delayed.wait()
    return ErrorCode(delayed.results[0].error_code)


REFUSED_BATCH = frozenset({E.corrupt_message, E.invalid_record, E.invalid_timestamp})
"""What the log answers for a batch it refused as malformed: for a batch a coordinator
encoded itself, a bug, not the client's error."""


def append_records(
    broker: ServiceBroker,
    topic: str,
    partition: int,
    records: list[KeyValue],
    now_ms: int,
    compression: int = 0,
) -> tuple[ErrorCode, Acknowledgement | None]:
    """Append `records` as one batch (in codec `compression`) to this node's leader
    replica of the partition (see `append_batch`).

    The append itself happens before this returns, so records of successive calls land
    in call order. Returns its error and, when it succeeded but may not be acknowledged
    yet, what to await first (the same policy as an acks=all produce)."""
    batch = record_codec.batch(
        record_codec.encode_pairs(records, record_codec.NO_HEADERS),
        len(records),
        now_ms,
        compression,
    )
    result, ack = append_batch(broker, topic, partition, batch, now_ms)
    if ack is not None:
        return E.none, ack
    code = ErrorCode(result.error_code)
    if code in REFUSED_BATCH:
        log.error("%s-%d refused a coordinator batch: %s", topic, partition, result.error_message)
        return E.unknown_server_error, None
    if code == E.kafka_storage_error:
        log.error("cannot write to %s-%d: %s", topic, partition, result.error_message)
    return code, None


def acknowledgement(
    broker: ServiceBroker, replica: Partition, required_offset: int
) -> Acknowledgement | None:
    """What to await before acknowledging an append to `replica` that ended before
    `required_offset`, if anything: the same policy as an acks=all produce (see
    `append_batch`)."""
    flush = replica.log.config.fsyncs_every_append
    if not flush and replica.replication_outcome(required_offset) == E.none:
        return None
    return _acknowledgement(broker, replica, flush, required_offset)


async def _acknowledgement(
    broker: ServiceBroker, replica: Partition, flush: bool, required_offset: int
) -> ErrorCode:
    if flush:
        await broker.logs.flush_for_ack(replica.log)
    future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

    def done(code: ErrorCode) -> None:
        if not future.done():
            future.set_result(code)

    outcome = replica.await_replication(required_offset, done)
    if isinstance(outcome, PendingAck):
        try:
            return await future
        finally:
            outcome.cancel()
    return outcome


# -- reading ------------------------------------------------------------------------------


def read_batches(
    plog: PartitionLog, start: int = 0, chunk_bytes: int = 1 << 20
) -> Iterator[tuple[BatchHeader, list[KeyValue]]]:
    """Every data batch of a partition log with its keyed records, oldest first.

    Reads the log through its public read API in chunks and decodes only complete
    batches; compressed batches are decompressed with the stock codecs. Control
    batches (transaction markers) are skipped: they carry no coordinator state.
    """
    offset = max(start, plog.log_start_offset)
    end = plog.log_end_offset
    while offset < end:
        region = plog.read(offset, chunk_bytes, end)
        if region is None or region.length == 0:
            return
        with region:
            data = region.read()
        pos = 0
        progressed = False
        while pos + HEADER_SIZE <= len(data):
            header = read_header(data, pos)
            size = header.total_size
            if pos + size > len(data):
                break
            progressed = True
            if header.next_offset <= offset:
                pos += size
                continue
            if not header.is_control:
                recs = decode_records(data, pos, plog.decompressor or decompress)
                yield (
                    header,
                    [
                        (r.key, r.value)
                        for r in recs
                        if r.key is not None and (r.offset or 0) >= offset
                    ],
                )
            offset = header.next_offset
            pos += size
        if not progressed:
            if chunk_bytes >= 1 << 30:
                raise ValueError(f"batch at offset {offset} larger than {chunk_bytes} bytes")
            chunk_bytes *= 4


def read_log_records(
    plog: PartitionLog, start: int = 0, chunk_bytes: int = 1 << 20
) -> Iterator[tuple[int, list[KeyValue]]]:
    """Every (base offset, [(key, value)]) batch of a partition log, as `read_batches`."""
    for header, records in read_batches(plog, start, chunk_bytes):
        yield header.base_offset, records
