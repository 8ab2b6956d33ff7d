"""The transaction coordinator: transactional ids, their producer ids and epochs, and the
two-phase end of each transaction.

It follows Kafka's TransactionCoordinator. A transactions version 1 client adds
partitions with AddPartitionsToTxn and ends with EndTxn; a version 2 client (KIP-890
part 2: EndTxn v5+) adds none itself: the leader its Produce v12+ reaches and the group
coordinator its TxnOffsetCommit v5+ reaches add them, and each EndTxn bumps the epoch,
answering the id and epoch the next transaction uses. Every state change is first
written to the id's `__transaction_state` partition and only then applied, so a
coordinator that restarts finds each transaction where it was; a transaction found in
PrepareCommit or PrepareAbort is completed on load. While a write is in flight the id
is `pending` and other requests for it get CONCURRENT_TRANSACTIONS, as in Kafka, with
one exception: partitions added while an add of the same producer is being written wait
for it and go out together as the next write. A version 2 client's produces reach
every leader of the transaction at once, and each leader adds its partition: answered
CONCURRENT_TRANSACTIONS, all but one would retry after a backoff, one write at a time.

EndTxn answers, as Kafka's handleEndTransaction does, once the PrepareCommit or
PrepareAbort state is durable in the transaction log: from then on the outcome is
decided, and a coordinator that takes over completes it. The markers are written in
the background (markers that cannot be written now are retried later); until all are
written the id stays in its Prepare state, so the producer's next AddPartitionsToTxn,
AddOffsetsToTxn or InitProducerId gets CONCURRENT_TRANSACTIONS and retries, and only
then is the Complete state written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from kbroker.coordinator.records import partition_for
from kbroker.coordinator_runtime.internal_topics import write_error
from kbroker.txn.metadata import (
    COMPLETED,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARING,
    TopicPartition,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
)
from kbroker.txn.records import (
    TxnRecordError,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)

log = logging.getLogger("kbroker.txn")

E = ErrorCode


class TxnStore(Protocol):
    async def write(self, partition: int, key: bytes, value: bytes | None) -> ErrorCode:
        """Append one record to a partition of the transaction log; the outcome."""
        ...


class MarkerWriter(Protocol):
    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
    ) -> set[TopicPartition]:
        """Write markers; returns the partitions to try again later."""
        ...


@dataclass(frozen=True, slots=True)
class TxnConfig:
    num_partitions: int = 50
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(slots=True)
class _Partition:
    coordinator_epoch: int
    loading: bool = True
    ids: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _AddBatch:
    """Partitions of one producer's transaction written to the log in one state change."""

    producer_id: int
    producer_epoch: int
    client_version: int
    partitions: set[TopicPartition]
    done: asyncio.Future[ErrorCode]


def _write_error(code: ErrorCode) -> ErrorCode:
    """How a failed transaction-log write is reported (Kafka's appendTransactionToLog)."""
    return write_error(code, timed_out=E.coordinator_not_available)


class TransactionCoordinator:
    def __init__(
        self,
        config: TxnConfig,
        store: TxnStore,
        markers: MarkerWriter,
        next_producer_id: Callable[[], Awaitable[int]],
        now_ms: Callable[[], int],
        transaction_version: Callable[[], int] = lambda: 0,
    ) -> None:
        self.config = config
        # the finalized transaction.version level (kbroker.features)
        self.transaction_version = transaction_version
        self.store = store
        self.markers = markers
        self.next_producer_id = next_producer_id
        self.now_ms = now_ms
        self.txns: dict[str, TxnMetadata] = {}
        self.partitions: dict[int, _Partition] = {}
        self.active = True
        # ids whose markers could not all be written yet
        self.incomplete: set[str] = set()
        # markers being written after EndTxn answered (held so they are not collected)
        self.completing: set[asyncio.Task[bool]] = set()
        # per id: the add being written, and the adds that came meanwhile, written next
        self._adding: dict[str, _AddBatch] = {}
        self._next_adds: dict[str, _AddBatch] = {}
        self._add_tasks: set[asyncio.Task[None]] = set()

    # -- ownership ------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def status(self, transactional_id: str) -> ErrorCode | None:
        """None when this node coordinates the id and has loaded it, else why not."""
        if not self.active:
            return E.coordinator_not_available
        state = self.partitions.get(self.partition_for(transactional_id))
        if state is None:
            return E.not_coordinator
        if state.loading:
            return E.coordinator_load_in_progress
        return None

    def _lookup(self, transactional_id: str) -> tuple[ErrorCode | None, TxnMetadata | None]:
        """(why not, None) for an empty id or one this node does not coordinate and has
        not loaded; else (None, the id's metadata or None when it has none)."""
        if not transactional_id:
            return E.invalid_request, None
        error = self.status(transactional_id)
        if error is not None:
            return error, None
        return None, self.txns.get(transactional_id)

    def coordinator_epoch(self, transactional_id: str) -> int:
        state = self.partitions.get(self.partition_for(transactional_id))
        return state.coordinator_epoch if state is not None else -1

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        self.unload_partition(partition)
        self.partitions[partition] = _Partition(coordinator_epoch)

    def load_partition(self, partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Rebuild the ids of a partition from its records (the latest per id wins)."""
        latest: dict[str, bytes | None] = {}
        for key, value in records:
            try:
                latest[decode_txn_key(key)] = value
            except TxnRecordError as exc:
                log.warning("skipping unreadable key in transaction log %d: %s", partition, exc)
        state = self.partitions.setdefault(partition, _Partition(-1))
        for txn_id, value in latest.items():
            if value is None:
                continue
            try:
                meta = decode_txn_value(txn_id, value)
            except TxnRecordError as exc:
                log.warning("skipping transactional id %r: %s", txn_id, exc)
                continue
            self.txns[txn_id] = meta
            state.ids.add(txn_id)
            if meta.state in PREPARING:
                self.incomplete.add(txn_id)
        state.loading = False
        return len(state.ids)

    def unload_partition(self, partition: int) -> None:
        state = self.partitions.pop(partition, None)
        if state is None:
            return
        for txn_id in state.ids:
            self.txns.pop(txn_id, None)
            self.incomplete.discard(txn_id)

    def shutdown(self) -> None:
        self.active = False
        for task in self.completing:
            task.cancel()  # the Prepare state is durable: the next coordinator completes it
        for partition in list(self.partitions):
            self.unload_partition(partition)

    async def settled(self) -> None:
        """Wait until the markers of every ended transaction have been tried once."""
        while self.completing:
            await asyncio.gather(*self.completing, return_exceptions=True)

    # -- writing a state ------------------------------------------------------------------

    def _value_version(self, nxt: TxnMetadata) -> int:
        """Kafka writes value version 1 from transaction.version 1; a state that needs
        version 1's tagged fields (a version 2 client's) is written so in any case."""
        if self.transaction_version() >= 1 or nxt.client_transaction_version >= 1:
            return 1
        return 0 if nxt.next_producer_id == NO_PRODUCER_ID else 1

    async def _store(self, meta: TxnMetadata, nxt: TxnMetadata) -> ErrorCode:
        """Write `nxt` as the id's state and adopt it on success."""
        partition = self.partition_for(meta.transactional_id)
        epoch = self.coordinator_epoch(meta.transactional_id)
        meta.pending = True
        try:
            code = await self.store.write(
                partition,
                encode_txn_key(meta.transactional_id),
                encode_txn_value(nxt, self._value_version(nxt)),
            )
        finally:
            meta.pending = False
        if code != E.none:
            return _write_error(code)
        state = self.partitions.get(partition)
        if state is None or state.coordinator_epoch != epoch:
            return E.not_coordinator  # leadership moved while the write was in flight
        meta.adopt(nxt)
        if self.txns.get(meta.transactional_id) is not meta:
            self.txns[meta.transactional_id] = meta
        state.ids.add(meta.transactional_id)
        return E.none

    # -- InitProducerId -------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitResult:
        if transactional_id is None:
            # Idempotence only: a fresh id every time, epoch 0 (KIP-360 clients re-init
            # this way too when their id is unknown to a partition).
            try:
                return InitResult(E.none, await self.next_producer_id(), 0)
            except Exception as exc:  # the controller is unavailable
                log.warning("cannot allocate a producer id: %s", exc)
                return InitResult(E.coordinator_not_available)
        if not transactional_id:
            return InitResult(E.invalid_request)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return InitResult(E.invalid_transaction_timeout)
        error = self.status(transactional_id)
        if error is not None:
            return InitResult(error)
        expected = (
            (expected_producer_id, expected_epoch)
            if expected_producer_id != NO_PRODUCER_ID or expected_epoch != NO_PRODUCER_EPOCH
            else None
        )
        meta = self.txns.get(transactional_id)
        if meta is None:
            try:
                pid = await self.next_producer_id()
            except Exception as exc:
                log.warning("cannot allocate a producer id: %s", exc)
                return InitResult(E.coordinator_not_available)
            meta = self.txns.get(transactional_id)  # another request may have made it
            if meta is None:
                meta = TxnMetadata(
                    transactional_id, pid, timeout_ms=timeout_ms, last_update_ms=self.now_ms()
                )
                self.txns[transactional_id] = meta
                owner = self.partitions.get(self.partition_for(transactional_id))
                if owner is not None:
                    owner.ids.add(transactional_id)
        for _ in range(3):
            if meta.pending:
                return InitResult(E.concurrent_transactions)
            if expected is not None and not (
                meta.producer_epoch == NO_PRODUCER_EPOCH
                or expected[0] == meta.producer_id
                or (expected[0] == meta.last_producer_id and epoch_exhausted(expected[1]))
            ):
                return InitResult(E.producer_fenced)
            if meta.state in PREPARING:
                return InitResult(E.concurrent_transactions)
            if meta.state == TxnState.ONGOING:
                # A new instance of the producer: fence the old one (epoch bump) and abort
                # its transaction, then bump again for the caller.
                error = await self._fence_and_abort(meta)
                if error != E.none:
                    return InitResult(error)
                # _fence_and_abort moved the state on (mypy keeps the narrowing above).
                if meta.state != TxnState.COMPLETE_ABORT:  # type: ignore[comparison-overlap]
                    return InitResult(E.concurrent_transactions)
                expected = None
                continue
            if meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
                return InitResult(E.concurrent_transactions)
            return await self._bump_for_init(meta, timeout_ms, expected)
        return InitResult(E.concurrent_transactions)

    async def _bump_for_init(
        self, meta: TxnMetadata, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        now = self.now_ms()
        common = {"state": TxnState.EMPTY, "partitions": set(), "timeout_ms": timeout_ms}
        if epoch_exhausted(meta.producer_epoch) and (
            expected is None or expected[1] == meta.producer_epoch
        ):
            try:
                pid = await self.next_producer_id()
            except Exception:
                return InitResult(E.coordinator_not_available)
            nxt = meta.copy(
                producer_id=pid,
                producer_epoch=0,
                last_producer_id=meta.producer_id,
                last_producer_epoch=meta.producer_epoch if expected is not None else -1,
                start_ms=-1,
                last_update_ms=now,
                **common,
            )
        else:
            bumped = meta.producer_epoch + 1
            if expected is None:
                epoch, last = bumped, NO_PRODUCER_EPOCH
            elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
                epoch, last = bumped, meta.producer_epoch
            elif expected[1] == meta.last_producer_epoch:
                epoch, last = meta.producer_epoch, meta.last_producer_epoch  # a retry
            else:
                return InitResult(E.producer_fenced)
            nxt = meta.copy(
                producer_epoch=epoch,
                last_producer_epoch=last,
                start_ms=-1,
                last_update_ms=now,
                **common,
            )
        error = await self._store(meta, nxt)
        if error != E.none:
            return InitResult(error)
        log.info(
            "initialized transactional id %s: producer id %d epoch %d",
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
        )
        return InitResult(E.none, meta.producer_id, meta.producer_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TxnMetadata | None]:
        error, meta = self._lookup(transactional_id)
        if error is not None:
            return error, None
        if meta is None or meta.producer_id != producer_id:
            return E.invalid_producer_id_mapping, None
        if meta.producer_epoch != producer_epoch:
            return E.producer_fenced, None
        return E.none, meta

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
        client_version: int = 0,
    ) -> ErrorCode:
        """AddPartitionsToTxn, AddOffsetsToTxn, and (`client_version` 2) the partitions a
        leader or group coordinator adds for a transactions version 2 client."""
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        already = meta.state == TxnState.ONGOING and partitions <= meta.partitions
        writing = self._adding.get(transactional_id)
        if meta.pending and writing is not None:
            if already:
                return E.none
            return await self._add_after(
                transactional_id, writing, producer_id, producer_epoch, partitions, client_version
            )
        if meta.pending or meta.state in PREPARING:
            return E.concurrent_transactions
        if meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return E.concurrent_transactions
        if already:
            return E.none
        now = self.now_ms()
        nxt = meta.copy(
            state=TxnState.ONGOING,
            partitions=meta.partitions | partitions,
            start_ms=meta.start_ms if meta.state == TxnState.ONGOING else now,
            last_update_ms=now,
            client_transaction_version=client_version,
        )
        batch = _AddBatch(
            producer_id,
            producer_epoch,
            client_version,
            set(partitions),
            asyncio.get_running_loop().create_future(),
        )
        self._adding[transactional_id] = batch
        code = E.coordinator_not_available
        try:
            code = await self._store(meta, nxt)
        finally:
            if self._adding.get(transactional_id) is batch:
                del self._adding[transactional_id]
            batch.done.set_result(code)
            following = self._next_adds.pop(transactional_id, None)
            if following is not None:
                task = asyncio.ensure_future(self._add_batch(transactional_id, following))
                self._add_tasks.add(task)
                task.add_done_callback(self._add_tasks.discard)
        return code

    async def _add_after(
        self,
        transactional_id: str,
        writing: _AddBatch,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
        client_version: int,
    ) -> ErrorCode:
        """Answer an add that came while the same producer's add is being written: with
        that write's outcome when it covers the partitions, else with the next write's."""
        if (producer_id, producer_epoch) != (writing.producer_id, writing.producer_epoch):
            return E.concurrent_transactions
        if partitions <= writing.partitions:
            return await asyncio.shield(writing.done)
        following = self._next_adds.get(transactional_id)
        if following is None:
            following = _AddBatch(
                producer_id,
                producer_epoch,
                client_version,
                set(),
                asyncio.get_running_loop().create_future(),
            )
            self._next_adds[transactional_id] = following
        following.partitions |= partitions
        following.client_version = max(following.client_version, client_version)
        return await asyncio.shield(following.done)

    async def _add_batch(self, transactional_id: str, batch: _AddBatch) -> None:
        """Write the adds that waited for the last one (checked afresh: an EndTxn or a
        new epoch may have come between)."""
        code = E.coordinator_not_available
        try:
            code = await self.add_partitions(
                transactional_id,
                batch.producer_id,
                batch.producer_epoch,
                batch.partitions,
                batch.client_version,
            )
        finally:
            batch.done.set_result(code)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn verify_only: which partitions are in the transaction."""
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return dict.fromkeys(partitions, error)
        if meta.state in PREPARING:
            return dict.fromkeys(partitions, E.concurrent_transactions)
        return {
            tp: E.none if tp in meta.partitions else E.transaction_abortable for tp in partitions
        }

    # -- EndTxn ---------------------------------------------------------------------------

    async def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        from_client: bool = True,
        client_version: int = 0,
    ) -> InitResult:
        """EndTxn: the result carries the producer id and epoch for EndTxn v5+.

        `client_version` 2 (EndTxn v5+, KIP-890 part 2) bumps the epoch as the
        transaction is prepared, so its markers fence every write of the epoch that ran
        it; an epoch that would reach the last one moves to a new producer id once the
        transaction completes. The answer carries the id and epoch for the next one.

        Such a client may also abort a transaction it never added a partition to (every
        produce of it failed before reaching a leader): as Kafka's coordinator does under
        transactions version 2, an abort from Empty, or from a completed transaction that
        is not a retry of its EndTxn, bumps the epoch through a Prepare with no markers."""
        error, meta = self._lookup(transactional_id)
        if error is not None:
            return InitResult(error)
        if meta is None:
            return InitResult(E.invalid_producer_id_mapping)
        state = meta.state
        # The request's version decides, as in Kafka: the stored one is that of the last
        # transaction, and an Empty id has none yet.
        v2 = from_client and client_version >= 2
        # A retried EndTxn of a version 2 client whose answer was lost: the epoch it
        # sends is the one before the bump (or the last of an id the overflow replaced).
        retry_bumped = (
            v2 and meta.producer_id == producer_id and meta.producer_epoch == producer_epoch + 1
        )
        retry_overflow = (
            v2
            and meta.last_producer_id == producer_id
            and producer_epoch == MAX_EPOCH - 1
            and meta.producer_epoch == 0
            and meta.producer_id != producer_id
        )
        if meta.producer_id != producer_id and not retry_overflow:
            return InitResult(E.invalid_producer_id_mapping)
        if v2 and (meta.pending or state in PREPARING):
            # The last transaction is still ending (its markers are going out): the
            # client waits and retries. Before the epoch check, as Kafka does since
            # KAFKA-18464: the next EndTxn at the bumped epoch (an abort of nothing, say)
            # is no zombie to fence.
            return InitResult(E.concurrent_transactions)
        if v2:
            if state in COMPLETED:
                valid = retry_bumped or retry_overflow or producer_epoch == meta.producer_epoch
            else:
                valid = producer_epoch == meta.producer_epoch
        else:
            valid = producer_epoch >= meta.producer_epoch and (
                not from_client or producer_epoch == meta.producer_epoch
            )
        if not valid:
            return InitResult(E.producer_fenced)
        if meta.pending and state not in PREPARING:
            return InitResult(E.concurrent_transactions)
        done = InitResult(E.none, meta.producer_id, meta.producer_epoch)
        invalid = InitResult(E.invalid_txn_state)
        if state == TxnState.ONGOING:
            pass
        elif v2 and state in COMPLETED:
            if retry_bumped or retry_overflow:
                # A retry of the EndTxn that completed it: the same outcome is answered
                # again. A commit at that epoch of what ended aborted raced the
                # coordinator's own abort (a timeout): fenced, which clients recover
                # from, as Kafka answers since KAFKA-20785.
                if commit == (state == TxnState.COMPLETE_COMMIT):
                    return done
                return InitResult(E.producer_fenced) if commit else invalid
            if commit:
                return invalid
        elif v2 and state == TxnState.EMPTY and not commit:
            pass
        elif state == TxnState.COMPLETE_COMMIT:
            return done if commit else invalid
        elif state == TxnState.COMPLETE_ABORT:
            return done if not commit else invalid
        elif state == TxnState.PREPARE_COMMIT:
            return InitResult(E.concurrent_transactions if commit else E.invalid_txn_state)
        elif state == TxnState.PREPARE_ABORT:
            return InitResult(E.concurrent_transactions if not commit else E.invalid_txn_state)
        else:
            return invalid
        changes: dict[str, object] = {
            "state": TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            "producer_epoch": producer_epoch,
            "last_update_ms": self.now_ms(),
        }
        if state != TxnState.ONGOING:
            # An abort of nothing: it starts and ends now (Kafka's noPartitionAdded).
            changes["start_ms"] = changes["last_update_ms"]
        if client_version >= 2:
            # Kafka's prepareAbortOrCommit under transactions version 2.
            changes["client_transaction_version"] = client_version
            if epoch_exhausted(producer_epoch):
                try:
                    changes["next_producer_id"] = await self.next_producer_id()
                except Exception as exc:
                    log.warning("cannot allocate a producer id: %s", exc)
                    return InitResult(E.coordinator_not_available)
                if meta.pending or meta.state != state:
                    return InitResult(E.concurrent_transactions)
            changes["producer_epoch"] = producer_epoch + 1
            changes["last_producer_epoch"] = producer_epoch
        elif from_client:
            changes["client_transaction_version"] = client_version
        nxt = meta.copy(**changes)
        error = await self._store(meta, nxt)
        if error != E.none:
            return InitResult(error)
        self._complete_in_background(meta)
        if meta.next_producer_id != NO_PRODUCER_ID:
            return InitResult(E.none, meta.next_producer_id, 0)
        return InitResult(E.none, meta.producer_id, meta.producer_epoch)

    def _complete_in_background(self, meta: TxnMetadata) -> None:
        """Write the markers and the Complete state after EndTxn has answered. The id is
        marked pending before the answer leaves, so nothing else starts its markers."""
        meta.pending = True
        task = asyncio.create_task(self._complete_now(meta))
        self.completing.add(task)
        task.add_done_callback(self.completing.discard)

    async def _complete_now(self, meta: TxnMetadata) -> bool:
        meta.pending = False
        return await self.complete(meta)

    async def complete(self, meta: TxnMetadata) -> bool:
        """Write the markers of a prepared transaction, then its Complete state. False if
        some markers must wait (the id stays prepared and is retried later)."""
        if meta.state not in PREPARING or meta.pending:
            return False
        commit = meta.state == TxnState.PREPARE_COMMIT
        txn_id = meta.transactional_id
        coordinator_epoch = self.coordinator_epoch(txn_id)
        if coordinator_epoch < 0:
            # Its partition left this broker since the Prepare state was written: as
            # Kafka's coordinator drops the markers of an emigrated partition, the new
            # coordinator writes them, with its own epoch, from the Prepare it loads.
            return False
        meta.pending = True
        retry: set[TopicPartition] = set()
        try:
            if meta.partitions:
                retry = await self.markers.write(
                    meta.producer_id,
                    meta.producer_epoch,
                    coordinator_epoch,
                    commit,
                    sorted(meta.partitions),
                )
        except Exception:
            # Whatever went wrong, the transaction must not be left prepared for good:
            # every marker is tried again (a marker written twice changes nothing).
            log.exception("writing the markers of %s failed; trying again later", txn_id)
            retry = set(meta.partitions)
        finally:
            meta.pending = False
        if self.txns.get(txn_id) is not meta or meta.state not in PREPARING:
            return False
        if retry:
            meta.partitions = set(retry)
            self.incomplete.add(txn_id)
            return False
        # Every marker is written: should the Complete state below not be, the retry
        # writes that state alone (as Kafka's coordinator retries only its log append),
        # not every marker again at each retry, as a broker whose transaction log had too
        # few replicas in sync after a restart did, dozens of times a second.
        meta.partitions = set()
        rotation: dict[str, object] = {}
        if meta.next_producer_id != NO_PRODUCER_ID:
            # The epoch overflowed at this transaction's end (transactions version 2):
            # the markers carried the old id at the last epoch; the next one starts anew.
            rotation = {
                "producer_id": meta.next_producer_id,
                "producer_epoch": 0,
                "last_producer_id": meta.producer_id,
                "last_producer_epoch": MAX_EPOCH - 1,
                "next_producer_id": NO_PRODUCER_ID,
            }
        nxt = meta.copy(
            state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            partitions=set(),
            last_update_ms=self.now_ms(),
            **rotation,
        )
        error = await self._store(meta, nxt)
        if error != E.none:
            self.incomplete.add(txn_id)
            return False
        self.incomplete.discard(txn_id)
        return True

    async def retry_incomplete(self) -> None:
        for txn_id in list(self.incomplete):
            meta = self.txns.get(txn_id)
            if meta is None or meta.state not in PREPARING:
                self.incomplete.discard(txn_id)
                continue
            await self.complete(meta)

    # -- fencing and timeouts -------------------------------------------------------------

    async def _fence_and_abort(self, meta: TxnMetadata) -> ErrorCode:
        """Bump the epoch of an ongoing transaction's producer and abort it with the new
        epoch: the markers carry it, so the old instance's writes are refused from now."""
        epoch = (
            meta.producer_epoch if epoch_exhausted(meta.producer_epoch) else meta.producer_epoch + 1
        )
        # Under transactions version 2 the abort bumps once more, as Kafka's does, so
        # that the fenced instance's retried EndTxn is not taken for a retry of this one.
        result = await self.end_txn(
            meta.transactional_id,
            meta.producer_id,
            epoch,
            commit=False,
            from_client=False,
            client_version=meta.client_transaction_version,
        )
        if result.error == E.none:
            meta.last_producer_epoch = NO_PRODUCER_EPOCH
        return result.error

    async def abort_timed_out(self) -> list[str]:
        """Abort (and fence) transactions open longer than their timeout."""
        now = self.now_ms()
        aborted = []
        for txn_id, meta in list(self.txns.items()):
            if (
                meta.state == TxnState.ONGOING
                and not meta.pending
                and meta.start_ms >= 0
                and now - meta.start_ms > meta.timeout_ms
                and self.status(txn_id) is None
            ):
                log.info(
                    "aborting transaction of %s (producer id %d epoch %d): open for %d ms",
                    txn_id,
                    meta.producer_id,
                    meta.producer_epoch,
                    now - meta.start_ms,
                )
                error = await self._fence_and_abort(meta)
                if error == E.none:
                    aborted.append(txn_id)
                else:
                    log.warning("aborting the transaction of %s failed: %s", txn_id, error.name)
        return aborted

    async def expire_ids(self) -> list[str]:
        """Forget ids idle past transactional.id.expiration.ms (tombstone in the log)."""
        now = self.now_ms()
        expired = []
        for txn_id, meta in list(self.txns.items()):
            if (
                (meta.state == TxnState.EMPTY or meta.state in COMPLETED)
                and not meta.pending
                and now - meta.last_update_ms > self.config.id_expiration_ms
                and self.status(txn_id) is None
            ):
                partition = self.partition_for(txn_id)
                meta.pending = True
                try:
                    code = await self.store.write(partition, encode_txn_key(txn_id), None)
                finally:
                    meta.pending = False
                if code == E.none and self.txns.get(txn_id) is meta:
                    del self.txns[txn_id]
                    state = self.partitions.get(partition)
                    if state is not None:
                        state.ids.discard(txn_id)
                    expired.append(txn_id)
        return expired

    # -- introspection --------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        error, meta = self._lookup(transactional_id)
        if error is not None:
            return error, None
        if meta is None or meta.state == TxnState.DEAD or meta.producer_epoch < 0:
            return E.transactional_id_not_found, None
        return E.none, meta

    def list(
        self,
        states: set[TxnState] | None = None,
        producer_ids: set[int] | None = None,
        min_duration_ms: int = -1,
    ) -> list[TxnMetadata]:
        now = self.now_ms()
        out = []
        for txn_id, meta in self.txns.items():
            if self.status(txn_id) is not None or meta.producer_epoch < 0:
                continue
            if states and meta.state not in states:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (
                meta.state != TxnState.ONGOING or now - meta.start_ms <= min_duration_ms
            ):
                continue
            out.append(meta)
        return out
