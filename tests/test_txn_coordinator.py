"""The transaction coordinator's state machine, with an in-memory log and marker writer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from compat_tests.waiting import eventually_async
from kbroker.coordinator.store import OFFSETS_TOPIC
from kbroker.txn.coordinator import TransactionCoordinator, TxnConfig
from kbroker.txn.metadata import MAX_EPOCH, TxnMetadata, TxnState
from kbroker.txn.records import (
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)

E = ErrorCode
PARTITIONS = 4
TP = ("topic", 0)


class MemoryStore:
    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail: ErrorCode = E.none
        # when set, writes wait for it: a replicated write not yet acknowledged
        self.gate: asyncio.Event | None = None
        self.at_gate = 0

    async def write(self, partition: int, key: bytes, value: bytes | None) -> ErrorCode:
        if self.gate is not None:
            self.at_gate += 1
            await self.gate.wait()
        if self.fail != E.none:
            return self.fail
        self.records.setdefault(partition, []).append((key, value))
        return E.none

    def latest(self, txn_id: str) -> TxnMetadata | None:
        found = None
        for records in self.records.values():
            for key, value in records:
                if decode_txn_key(key) == txn_id:
                    found = None if value is None else decode_txn_value(txn_id, value)
        return found


class FakeMarkers:
    def __init__(self) -> None:
        self.written: list[tuple[int, int, bool, list]] = []
        self.retry: set = set()
        self.broken: Exception | None = None
        # when set, writes wait for it: a marker destination that has not answered yet
        self.gate: asyncio.Event | None = None
        self.at_gate = 0  # writes that have reached the gate

    async def write(
        self,
        producer_id: int,
        epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable,
    ) -> set:
        partitions = list(partitions)
        if self.gate is not None:
            self.at_gate += 1
            await self.gate.wait()
        if self.broken is not None:
            raise self.broken
        self.written.append((producer_id, epoch, commit, partitions))
        return {tp for tp in partitions if tp in self.retry}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make(**config: int) -> tuple[TransactionCoordinator, MemoryStore, FakeMarkers, Clock]:
    store, markers, clock = MemoryStore(), FakeMarkers(), Clock()
    ids = iter(range(100, 10_000))

    async def next_id() -> int:
        return next(ids)

    coordinator = TransactionCoordinator(
        TxnConfig(num_partitions=PARTITIONS, **config), store, markers, next_id, clock
    )
    for p in range(PARTITIONS):
        coordinator.begin_loading(p, 0)
        coordinator.load_partition(p, [])
    return coordinator, store, markers, clock


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def ongoing(c: TransactionCoordinator, txn_id: str = "tx") -> tuple[int, int]:
    init = await c.init_producer_id(txn_id, 60_000)
    assert init.error == E.none
    assert await c.add_partitions(txn_id, init.producer_id, init.producer_epoch, {TP}) == E.none
    return init.producer_id, init.producer_epoch


# -- InitProducerId ------------------------------------------------------------------------


def test_idempotent_producers_get_fresh_ids_at_epoch_zero():
    c, *_ = make()
    first = run(c.init_producer_id(None, 0))
    second = run(c.init_producer_id(None, 0))
    assert (first.error, first.producer_epoch, second.producer_epoch) == (E.none, 0, 0)
    assert first.producer_id != second.producer_id


def test_reinit_keeps_the_producer_id_and_bumps_the_epoch():
    c, store, *_ = make()
    first = run(c.init_producer_id("tx", 60_000))
    second = run(c.init_producer_id("tx", 60_000))
    assert first.producer_id == second.producer_id
    assert (first.producer_epoch, second.producer_epoch) == (0, 1)
    stored = store.latest("tx")
    assert stored is not None and (stored.producer_epoch, stored.state) == (1, TxnState.EMPTY)


def test_timeout_above_the_maximum_is_refused():
    c, *_ = make(max_timeout_ms=1000)
    assert run(c.init_producer_id("tx", 5000)).error == E.invalid_transaction_timeout


def test_empty_transactional_id_is_an_invalid_request():
    c, *_ = make()
    assert run(c.init_producer_id("", 1000)).error == E.invalid_request


def test_kip360_reinit_with_current_epoch_bumps_and_retry_returns_the_same():
    c, *_ = make()
    init = run(c.init_producer_id("tx", 60_000))
    bumped = run(c.init_producer_id("tx", 60_000, init.producer_id, init.producer_epoch))
    assert bumped.producer_epoch == init.producer_epoch + 1
    retried = run(c.init_producer_id("tx", 60_000, init.producer_id, init.producer_epoch))
    assert (retried.error, retried.producer_epoch) == (E.none, bumped.producer_epoch)


def test_kip360_reinit_with_a_stale_epoch_is_fenced():
    c, *_ = make()
    init = run(c.init_producer_id("tx", 60_000))
    run(c.init_producer_id("tx", 60_000))  # another instance took over
    run(c.init_producer_id("tx", 60_000))
    stale = run(c.init_producer_id("tx", 60_000, init.producer_id, init.producer_epoch))
    assert stale.error == E.producer_fenced


def test_exhausted_epoch_rotates_to_a_new_producer_id():
    c, *_ = make()
    init = run(c.init_producer_id("tx", 60_000))
    c.txns["tx"].producer_epoch = MAX_EPOCH - 1
    rotated = run(c.init_producer_id("tx", 60_000))
    assert rotated.producer_id != init.producer_id
    assert rotated.producer_epoch == 0


def test_reinit_during_an_open_transaction_fences_and_aborts_it():
    c, _, markers, _ = make()

    async def scenario():
        pid, epoch = await ongoing(c)
        fencing = await c.init_producer_id("tx", 60_000)
        await c.settled()
        successor = await c.init_producer_id("tx", 60_000)
        zombie_end = await c.end_txn("tx", pid, epoch, commit=True)
        return pid, epoch, fencing, successor, zombie_end

    pid, epoch, fencing, successor, zombie_end = run(scenario())
    assert markers.written == [(pid, epoch + 1, False, [TP])]
    # As Kafka: the InitProducerId that fences answers CONCURRENT_TRANSACTIONS, its retry
    # after the abort gets the epoch bumped a second time.
    assert fencing.error == E.concurrent_transactions
    assert (successor.error, successor.producer_epoch) == (E.none, epoch + 2)
    assert zombie_end.error == E.producer_fenced


# -- AddPartitionsToTxn ---------------------------------------------------------------------


def test_add_partitions_checks_producer_id_and_epoch():
    c, *_ = make()
    init = run(c.init_producer_id("tx", 60_000))
    pid, epoch = init.producer_id, init.producer_epoch
    assert run(c.add_partitions("tx", pid + 1, epoch, {TP})) == E.invalid_producer_id_mapping
    assert run(c.add_partitions("tx", pid, epoch + 1, {TP})) == E.producer_fenced
    assert run(c.add_partitions("nope", pid, epoch, {TP})) == E.invalid_producer_id_mapping
    assert run(c.add_partitions("tx", pid, epoch, {TP})) == E.none
    meta = c.txns["tx"]
    assert (meta.state, meta.partitions) == (TxnState.ONGOING, {TP})


def test_add_partitions_while_a_write_is_pending_is_concurrent():
    c, *_ = make()
    init = run(c.init_producer_id("tx", 60_000))
    c.txns["tx"].pending = True
    assert (
        run(c.add_partitions("tx", init.producer_id, init.producer_epoch, {TP}))
        == E.concurrent_transactions
    )


def test_verify_partitions_reports_partitions_not_in_the_transaction():
    c, *_ = make()
    pid, epoch = run(ongoing(c))
    result = c.verify_partitions("tx", pid, epoch, {TP, ("topic", 1)})
    assert result == {TP: E.none, ("topic", 1): E.transaction_abortable}


# -- EndTxn ----------------------------------------------------------------------------------


def test_commit_writes_commit_markers_and_completes():
    c, store, markers, _ = make()

    async def scenario():
        pid, epoch = await ongoing(c)
        result = await c.end_txn("tx", pid, epoch, commit=True)
        await c.settled()
        return pid, epoch, result

    pid, epoch, result = run(scenario())
    assert (result.error, result.producer_id, result.producer_epoch) == (E.none, pid, epoch)
    assert markers.written == [(pid, epoch, True, [TP])]
    meta = c.txns["tx"]
    assert (meta.state, meta.partitions) == (TxnState.COMPLETE_COMMIT, set())
    states = [decode_txn_value("tx", v).state for _, v in store.records[c.partition_for("tx")]]
    assert states == [
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.PREPARE_COMMIT,
        TxnState.COMPLETE_COMMIT,
    ]


def test_no_markers_go_out_once_the_partition_of_the_id_left_this_coordinator():
    """Its partition emigrated between the durable PrepareCommit and the markers: the new
    coordinator completes the transaction with its own epoch; this one sends nothing
    (a marker with no coordinator epoch would be refused, or worse, taken)."""
    c, _, markers, _ = make()

    async def scenario():
        pid, epoch = await ongoing(c)
        result = await c.end_txn("tx", pid, epoch, commit=True)
        c.unload_partition(c.partition_for("tx"))
        await c.settled()
        return result.error

    assert run(scenario()) == E.none
    assert markers.written == []


def test_a_complete_state_that_cannot_be_written_is_retried_without_the_markers_again():
    """As Kafka's coordinator retries only its log append: the markers are written once
    however often the transaction log refuses the CompleteCommit (too few in sync)."""
    c, store, markers, _ = make()

    async def scenario():
        pid, epoch = await ongoing(c)
        markers.gate = asyncio.Event()
        await c.end_txn("tx", pid, epoch, commit=True)
        store.fail = E.not_enough_replicas
        markers.gate.set()
        await c.settled()
        for _ in range(3):
            await c.retry_incomplete()
        assert c.txns["tx"].state == TxnState.PREPARE_COMMIT
        store.fail = E.none
        await c.retry_incomplete()
        return pid, epoch

    pid, epoch = run(scenario())
    assert markers.written == [(pid, epoch, True, [TP])]
    assert c.txns["tx"].state == TxnState.COMPLETE_COMMIT
    assert store.latest("tx").state == TxnState.COMPLETE_COMMIT


def test_end_txn_answers_before_the_marker_destination_answers():
    """As Kafka's coordinator: the answer follows the durable PrepareCommit; the markers
    and then CompleteCommit are written in the background."""
    c, store, markers, _ = make()

    async def scenario():
        pid, epoch = await ongoing(c)
        markers.gate = asyncio.Event()
        result = await asyncio.wait_for(c.end_txn("tx", pid, epoch, commit=True), 5)
        await eventually_async(
            lambda: markers.at_gate, timeout=5, what="the background writer at the destination"
        )
        state_at_answer = c.txns["tx"].state
        markers.gate.set()
        await c.settled()
        return result.error, state_at_answer

    error, state_at_answer = run(scenario())
    assert error == E.none
    assert state_at_answer == TxnState.PREPARE_COMMIT
    assert c.txns["tx"].state == TxnState.COMPLETE_COMMIT
    assert store.latest("tx").state == TxnState.COMPLETE_COMMIT


def test_the_next_transaction_gets_concurrent_transactions_while_markers_are_pending():
    c, _, markers, _ = make()

    async def scenario():
        pid, epoch = await ongoing(c)
        markers.gate = asyncio.Event()
        await c.end_txn("tx", pid, epoch, commit=True)
        await eventually_async(lambda: markers.at_gate, timeout=5, what="the markers pending")
        pending = (
            await c.add_partitions("tx", pid, epoch, {("topic", 1)}),
            await c.add_partitions("tx", pid, epoch, {(OFFSETS_TOPIC, 0)}),  # AddOffsetsToTxn
            (await c.init_producer_id("tx", 60_000)).error,
        )
        markers.gate.set()
        await c.settled()
        after = await c.add_partitions("tx", pid, epoch, {("topic", 1)})
        return pending, after

    pending, after = run(scenario())
    assert pending == (E.concurrent_transactions,) * 3
    assert after == E.none


def test_retried_commit_succeeds_and_abort_after_commit_is_invalid():
    c, *_ = make()

    async def scenario():
        pid, epoch = await ongoing(c)
        await c.end_txn("tx", pid, epoch, commit=True)
        await c.settled()
        return (
            (await c.end_txn("tx", pid, epoch, commit=True)).error,
            (await c.end_txn("tx", pid, epoch, commit=False)).error,
        )

    assert run(scenario()) == (E.none, E.invalid_txn_state)


def test_end_txn_on_unknown_id_or_empty_transaction():
    c, *_ = make()
    assert run(c.end_txn("unknown", 1, 0, True)).error == E.invalid_producer_id_mapping
    init = run(c.init_producer_id("tx", 60_000))
    empty = run(c.end_txn("tx", init.producer_id, init.producer_epoch, True))
    assert empty.error == E.invalid_txn_state
    wrong_epoch = run(c.end_txn("tx", init.producer_id, init.producer_epoch + 3, True))
    assert wrong_epoch.error == E.producer_fenced


def test_partitions_added_while_an_add_is_written_go_out_together_in_the_next_write():
    """The leaders of a version 2 transaction's partitions add theirs at once."""
    c, store, *_ = make()
    others = {("topic", 1), ("topic", 2), ("other", 0)}

    async def scenario() -> list[ErrorCode]:
        init = await c.init_producer_id("tx", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        store.gate = asyncio.Event()
        first = asyncio.create_task(c.add_partitions("tx", pid, epoch, {TP}, 2))
        await eventually_async(lambda: store.at_gate == 1, timeout=5, what="the add at the log")
        rest = [asyncio.create_task(c.add_partitions("tx", pid, epoch, {tp}, 2)) for tp in others]
        again = asyncio.create_task(c.add_partitions("tx", pid, epoch, {TP}, 2))
        await asyncio.sleep(0)
        assert not any(t.done() for t in [first, again, *rest])
        store.gate.set()
        return list(await asyncio.gather(first, again, *rest))

    assert run(scenario()) == [E.none] * 5
    assert store.at_gate == 2  # the first add, then one write for the three others
    assert c.txns["tx"].partitions == {TP} | others
    assert store.latest("tx").partitions == {TP} | others


def test_adds_waiting_for_a_failed_add_are_tried_in_their_own_write():
    c, store, *_ = make()
    failures: list[ErrorCode] = []
    write = store.write

    async def write_failing_once(partition: int, key: bytes, value: bytes | None) -> ErrorCode:
        code = await write(partition, key, value)
        return failures.pop() if failures else code

    store.write = write_failing_once  # type: ignore[method-assign]

    async def scenario() -> tuple[ErrorCode, ErrorCode]:
        init = await c.init_producer_id("tx", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        store.gate = asyncio.Event()
        failures.append(E.not_enough_replicas)  # the first add's write is not acknowledged
        first = asyncio.create_task(c.add_partitions("tx", pid, epoch, {TP}, 2))
        await eventually_async(lambda: store.at_gate == 1, timeout=5, what="the add at the log")
        second = asyncio.create_task(c.add_partitions("tx", pid, epoch, {("topic", 1)}, 2))
        await asyncio.sleep(0)
        store.gate.set()
        return await first, await second

    failed, added = run(scenario())
    assert failed == E.coordinator_not_available  # as Kafka reports a failed log write
    assert added == E.none
    assert c.txns["tx"].partitions == {("topic", 1)}


def test_an_end_txn_while_an_add_is_written_still_gets_concurrent_transactions():
    c, store, *_ = make()

    async def scenario() -> tuple[ErrorCode, ErrorCode, ErrorCode]:
        init = await c.init_producer_id("tx", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        store.gate = asyncio.Event()
        add = asyncio.create_task(c.add_partitions("tx", pid, epoch, {TP}))
        await eventually_async(lambda: store.at_gate == 1, timeout=5, what="the add at the log")
        early = (await c.end_txn("tx", pid, epoch, commit=True)).error
        store.gate.set()
        added = await add
        return early, added, (await c.end_txn("tx", pid, epoch, commit=True)).error

    assert run(scenario()) == (E.concurrent_transactions, E.none, E.none)


def test_markers_that_cannot_be_written_are_retried_later():
    c, _, markers, _ = make()
    markers.retry = {TP}

    async def scenario():
        pid, epoch = await ongoing(c)
        result = await c.end_txn("tx", pid, epoch, commit=False)
        await c.settled()
        blocked = await c.add_partitions("tx", pid, epoch, {TP})
        state_before = c.txns["tx"].state
        markers.retry = set()
        await c.retry_incomplete()
        return result.error, blocked, state_before

    error, blocked, state_before = run(scenario())
    assert error == E.none
    assert blocked == E.concurrent_transactions
    assert state_before == TxnState.PREPARE_ABORT
    assert c.txns["tx"].state == TxnState.COMPLETE_ABORT
    assert not c.incomplete


def test_a_failure_while_writing_markers_leaves_the_transaction_to_be_retried():
    """The commit is decided once PrepareCommit is stored: EndTxn answers it, and the
    markers are tried again rather than the transaction staying prepared for good."""
    c, _, markers, _ = make()
    markers.broken = RuntimeError("a link in a bad state")

    async def scenario():
        pid, epoch = await ongoing(c)
        result = await c.end_txn("tx", pid, epoch, commit=True)
        await c.settled()
        state_before = c.txns["tx"].state
        markers.broken = None
        await c.retry_incomplete()
        return result.error, state_before

    error, state_before = run(scenario())
    assert error == E.none
    assert state_before == TxnState.PREPARE_COMMIT
    assert c.txns["tx"].state == TxnState.COMPLETE_COMMIT
    assert markers.written[-1][2:] == (True, [TP])
    assert not c.incomplete


def test_failed_log_write_is_reported_as_kafka_does():
    c, store, *_ = make()
    store.fail = E.not_leader_or_follower
    assert run(c.init_producer_id("tx", 60_000)).error == E.not_coordinator
    store.fail = E.not_enough_replicas
    assert run(c.init_producer_id("tx", 60_000)).error == E.coordinator_not_available


# -- timeouts, ownership, loading -----------------------------------------------------------


def test_timed_out_transaction_is_aborted_with_a_bumped_epoch():
    c, _, markers, clock = make()
    pid, epoch = run(ongoing(c))
    clock.now += 30_000
    assert run(c.abort_timed_out()) == []
    clock.now += 31_000
    assert run(c.abort_timed_out()) == ["tx"]
    assert markers.written == [(pid, epoch + 1, False, [TP])]
    assert run(c.end_txn("tx", pid, epoch, True)).error == E.producer_fenced


def test_unowned_and_loading_partitions():
    c, *_ = make()
    partition = c.partition_for("tx")
    c.unload_partition(partition)
    assert run(c.init_producer_id("tx", 1000)).error == E.not_coordinator
    c.begin_loading(partition, 1)
    assert run(c.init_producer_id("tx", 1000)).error == E.coordinator_load_in_progress


def test_loading_restores_ids_and_queues_prepared_transactions():
    c, *_ = make()
    partition = c.partition_for("tx")
    prepared = TxnMetadata("tx", 42, 3, 60_000, TxnState.PREPARE_COMMIT, {TP}, 5, 6)
    older = TxnMetadata("tx", 42, 3, 60_000, TxnState.ONGOING, {TP}, 5, 5)
    c.begin_loading(partition, 2)
    c.load_partition(
        partition,
        [
            (encode_txn_key("tx"), encode_txn_value(older)),
            (encode_txn_key("tx"), encode_txn_value(prepared)),
            (encode_txn_key("gone"), encode_txn_value(older)),
            (encode_txn_key("gone"), None),
        ],
    )
    assert c.txns["tx"].state == TxnState.PREPARE_COMMIT
    assert "gone" not in c.txns
    assert c.incomplete == {"tx"}
    assert c.coordinator_epoch("tx") == 2


def test_idle_ids_expire_with_a_tombstone():
    c, store, _, clock = make(id_expiration_ms=1000)
    run(c.init_producer_id("tx", 500))
    clock.now += 2000
    assert run(c.expire_ids()) == ["tx"]
    assert "tx" not in c.txns
    assert store.records[c.partition_for("tx")][-1] == (encode_txn_key("tx"), None)


def test_list_and_describe():
    c, _, _, clock = make()
    pid, _ = run(ongoing(c, "a"))
    run(c.init_producer_id("b", 60_000))
    clock.now += 5000
    assert {m.transactional_id for m in c.list()} == {"a", "b"}
    assert [m.transactional_id for m in c.list({TxnState.ONGOING})] == ["a"]
    assert [m.transactional_id for m in c.list(producer_ids={pid})] == ["a"]
    assert [m.transactional_id for m in c.list(min_duration_ms=1000)] == ["a"]
    assert c.describe("a")[1].partitions == {TP}
    assert c.describe("missing")[0] == E.transactional_id_not_found


def test_transaction_log_value_round_trip():
    meta = TxnMetadata("id", 7, 2, 900, TxnState.ONGOING, {("a", 1), ("a", 0), ("b", 3)}, 10, 11)
    back = decode_txn_value("id", encode_txn_value(meta))
    assert (back.producer_id, back.producer_epoch, back.timeout_ms, back.state) == (
        7,
        2,
        900,
        TxnState.ONGOING,
    )
    assert back.partitions == meta.partitions
    assert (back.start_ms, back.last_update_ms) == (10, 11)
    assert decode_txn_key(encode_txn_key("id")) == "id"


# -- transactions version 2 (KIP-890 part 2) ------------------------------------------------


async def ongoing_v2(c: TransactionCoordinator, epoch: int | None = None) -> tuple[int, int]:
    """An id whose transaction a version 2 client's write opened (the leader added TP)."""
    init = await c.init_producer_id("tx", 60_000)
    pid = init.producer_id
    if epoch is not None:
        c.txns["tx"].producer_epoch = epoch
    now = c.txns["tx"].producer_epoch
    assert await c.add_partitions("tx", pid, now, {TP}, client_version=2) == E.none
    return pid, now


def test_v2_end_txn_bumps_the_epoch_and_writes_markers_with_it():
    async def body() -> None:
        c, store, markers, _ = make()
        pid, epoch = await ongoing_v2(c)
        ended = await c.end_txn("tx", pid, epoch, commit=True, client_version=2)
        assert (ended.error, ended.producer_id, ended.producer_epoch) == (E.none, pid, epoch + 1)
        await c.settled()
        assert markers.written == [(pid, epoch + 1, True, [TP])]
        stored = store.latest("tx")
        assert stored is not None
        assert (stored.state, stored.producer_epoch, stored.client_transaction_version) == (
            TxnState.COMPLETE_COMMIT,
            epoch + 1,
            2,
        )
        # the retry of a lost answer, and then one of an epoch before it
        again = await c.end_txn("tx", pid, epoch, commit=True, client_version=2)
        assert (again.error, again.producer_epoch) == (E.none, epoch + 1)
        assert (await c.end_txn("tx", pid, epoch - 1, True, client_version=2)).error == (
            E.producer_fenced
        )
        # the ended epoch cannot open a transaction again
        assert await c.add_partitions("tx", pid, epoch, {TP}, client_version=2) == (
            E.producer_fenced
        )

    run(body())


def test_v2_epoch_overflow_moves_to_a_new_producer_id():
    async def body() -> None:
        c, store, markers, _ = make()
        pid, epoch = await ongoing_v2(c, epoch=MAX_EPOCH - 1)
        ended = await c.end_txn("tx", pid, epoch, commit=False, client_version=2)
        assert ended.error == E.none
        assert ended.producer_id != pid and ended.producer_epoch == 0
        await c.settled()
        # the markers carry the old id at the last epoch
        assert markers.written == [(pid, MAX_EPOCH, False, [TP])]
        meta = c.txns["tx"]
        assert (meta.producer_id, meta.producer_epoch, meta.state) == (
            ended.producer_id,
            0,
            TxnState.COMPLETE_ABORT,
        )
        # a retry with the old id and epoch gets the new ones again
        again = await c.end_txn("tx", pid, epoch, commit=False, client_version=2)
        assert (again.error, again.producer_id, again.producer_epoch) == (
            E.none,
            ended.producer_id,
            0,
        )
        # and the rotation survives a reload of the log (value version 1's tagged fields)
        stored = store.latest("tx")
        assert stored is not None
        assert (stored.producer_id, stored.last_producer_id) == (ended.producer_id, pid)

    run(body())


def test_v2_timeout_abort_bumps_twice_so_the_fenced_client_is_not_taken_for_a_retry():
    async def body() -> None:
        c, _, markers, clock = make()
        pid, epoch = await ongoing_v2(c)
        clock.now += 120_000
        assert await c.abort_timed_out() == ["tx"]
        await c.settled()
        assert markers.written == [(pid, epoch + 2, False, [TP])]
        late = await c.end_txn("tx", pid, epoch, commit=True, client_version=2)
        assert late.error == E.producer_fenced

    run(body())


def test_v2_abort_of_nothing_while_the_last_commit_ends_waits_rather_than_being_fenced():
    """KAFKA-18464: right after a commit's answer, the next transaction's EndTxn (an abort
    of nothing, at the bumped epoch) finds the commit's markers still going out. It is
    told to retry (CONCURRENT_TRANSACTIONS), not fenced as a zombie, and its retry once
    the commit completed goes through."""

    async def body() -> None:
        c, _, markers, _ = make()
        pid, epoch = await ongoing_v2(c)
        markers.gate = asyncio.Event()
        committed = await c.end_txn("tx", pid, epoch, commit=True, client_version=2)
        assert committed.producer_epoch == epoch + 1
        await eventually_async(lambda: markers.at_gate, timeout=5, what="the markers pending")
        early = await c.end_txn("tx", pid, epoch + 1, commit=False, client_version=2)
        assert early.error == E.concurrent_transactions
        markers.gate.set()
        await c.settled()
        aborted = await c.end_txn("tx", pid, epoch + 1, commit=False, client_version=2)
        assert (aborted.error, aborted.producer_epoch) == (E.none, epoch + 2)
        await c.settled()
        assert c.txns["tx"].state == TxnState.COMPLETE_ABORT
        assert markers.written == [(pid, epoch + 1, True, [TP])]  # none for the abort

    run(body())


def test_v2_commit_racing_the_coordinators_own_abort_is_fenced_not_invalid():
    """KAFKA-20785: a commit in flight when the coordinator aborted the transaction itself
    arrives at an epoch that looks like a retry of the abort; it is fenced (recoverable),
    not INVALID_TXN_STATE (fatal to a client)."""

    async def body() -> None:
        c, _, _, _ = make()
        pid, epoch = await ongoing_v2(c)
        aborted = await c.end_txn("tx", pid, epoch, commit=False, client_version=2)
        await c.settled()
        late_commit = await c.end_txn("tx", pid, epoch, commit=True, client_version=2)
        assert late_commit.error == E.producer_fenced
        retried_abort = await c.end_txn("tx", pid, epoch, commit=False, client_version=2)
        assert (retried_abort.error, retried_abort.producer_epoch) == (
            E.none,
            aborted.producer_epoch,
        )

    run(body())


def test_v1_end_txn_keeps_the_epoch_beside_v2():
    async def body() -> None:
        c, _, markers, _ = make()
        pid, epoch = await ongoing(c)
        ended = await c.end_txn("tx", pid, epoch, commit=True)
        assert (ended.error, ended.producer_epoch) == (E.none, epoch)
        await c.settled()
        assert markers.written == [(pid, epoch, True, [TP])]

    run(body())


def test_transaction_log_value_version_1_round_trips_the_tagged_fields():
    meta = TxnMetadata(
        "tx",
        7,
        3,
        1000,
        TxnState.PREPARE_COMMIT,
        {("a", 0), ("a", 2), ("b", 1)},
        10,
        20,
        last_producer_id=6,
        next_producer_id=8,
        client_transaction_version=2,
    )
    back = decode_txn_value("tx", encode_txn_value(meta, 1))
    assert back == meta
    # version 0 has no place for them
    old = decode_txn_value("tx", encode_txn_value(meta, 0))
    assert (old.last_producer_id, old.next_producer_id, old.client_transaction_version) == (
        -1,
        -1,
        0,
    )
    assert old.partitions == meta.partitions
