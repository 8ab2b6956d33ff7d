"""The leader of a transactions version 2 write adds its partition to the transaction
itself, and tries again while the coordinator answers CONCURRENT_TRANSACTIONS (another
write of the same id in flight, or the last transaction's markers still going out), for
up to add.partitions.to.txn.retry.backoff.max.ms, as Kafka 4's ReplicaManager does. A
Produce then carries CONCURRENT_TRANSACTIONS itself (KAFKA-18662); a TxnOffsetCommit
carries COORDINATOR_LOAD_IN_PROGRESS, which its clients retry."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from inprocess import run_broker
from kio.schema.errors import ErrorCode

from kbroker.txn.implicit import ImplicitPartitionAdder, produce_error

E = ErrorCode
TP = ("t", 0)


class BusyCoordinator:
    """Coordinates every id here; answers CONCURRENT_TRANSACTIONS to the first `busy`
    adds, then adds."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.calls: list[float] = []

    def status(self, transactional_id: str) -> ErrorCode | None:
        return None

    async def add_partitions(self, *args: object) -> ErrorCode:
        self.calls.append(time.monotonic())
        if len(self.calls) <= self.busy:
            return E.concurrent_transactions
        return E.none


def adder_for(coordinator: BusyCoordinator, backoff_ms: int, max_ms: int) -> ImplicitPartitionAdder:
    return ImplicitPartitionAdder(None, coordinator, backoff_ms, max_ms)  # type: ignore[arg-type]


def test_a_busy_coordinator_is_asked_again_until_it_adds_the_partition() -> None:
    coordinator = BusyCoordinator(busy=3)
    added = asyncio.run(adder_for(coordinator, 5, 1000).add("tx", 7, 0, [TP]))
    assert added == {TP: E.none}
    assert len(coordinator.calls) == 4
    gaps = [b - a for a, b in zip(coordinator.calls, coordinator.calls[1:], strict=False)]
    assert all(gap >= 0.004 for gap in gaps), gaps  # the backoff between tries


def test_a_coordinator_busy_past_the_limit_leaves_the_write_its_answer() -> None:
    coordinator = BusyCoordinator(busy=10**6)
    started = time.monotonic()
    added = asyncio.run(adder_for(coordinator, 10, 50).add("tx", 7, 0, [TP]))
    assert added == {TP: E.concurrent_transactions}
    assert time.monotonic() - started < 1.0
    assert 2 <= len(coordinator.calls) <= 6
    assert produce_error(added[TP]) == E.concurrent_transactions


def test_no_retry_when_the_limit_is_zero() -> None:
    coordinator = BusyCoordinator(busy=1)
    added = asyncio.run(adder_for(coordinator, 20, 0).add("tx", 7, 0, [TP]))
    assert added == {TP: E.concurrent_transactions}
    assert len(coordinator.calls) == 1


def test_what_a_produce_answers_for_the_coordinators_errors() -> None:
    assert produce_error(E.concurrent_transactions) == E.concurrent_transactions
    assert produce_error(E.not_coordinator) == E.not_enough_replicas
    assert produce_error(E.coordinator_load_in_progress) == E.not_enough_replicas
    assert produce_error(E.producer_fenced) == E.invalid_producer_epoch
    assert produce_error(E.none) == E.none


def test_the_brokers_settings_reach_its_adder(tmp_path: Path) -> None:
    """add.partitions.to.txn.retry.backoff.ms and .max.ms, set on a broker, are what its
    leader's adds wait and retry by (their defaults would be 20 and 100 ms)."""
    seen: list[tuple[float, float]] = []

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        adder = broker.txn_coordinator.adder
        seen.append((adder.retry_backoff_s, adder.retry_backoff_max_s))

    run_broker(
        tmp_path,
        check,
        [
            "add.partitions.to.txn.retry.backoff.ms=7",
            "add.partitions.to.txn.retry.backoff.max.ms=0",
        ],
    )
    assert seen == [(0.007, 0.0)]
