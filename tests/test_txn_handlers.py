"""Idempotent and transactional requests over the wire, against an in-process broker."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from inprocess import RawClient, run_broker

from compat_tests.waiting import eventually_async
from kbroker.admin.client import fetch_fields, produce_fields
from kbroker.metrics.prometheus import render_families
from kbroker.protocol.batch import encode_batch

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
FIND_COORDINATOR = 10
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

OVERRIDES = ["transaction.state.log.num.partitions=2", "offsets.topic.num.partitions=2"]
T0 = 1_700_000_000_000


def _batch(pid: int, epoch: int, seq: int, n: int = 1, txn: bool = False) -> bytes:
    return bytes(
        encode_batch(
            [b"r%d" % (seq + i) for i in range(n)],
            T0,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=txn,
        )
    )


async def _produce(
    client: RawClient, topic: str, records: bytes, txn_id: str | None = None, partition: int = 0
) -> Any:
    response = await client.call(
        PRODUCE,
        9,
        produce_fields(
            topic, records, partition=partition, timeout_ms=5000, transactional_id=txn_id
        ),
    )
    return response.responses[0].partition_responses[0]


async def _init(client: RawClient, txn_id: str | None, timeout_ms: int = 60_000) -> Any:
    return await client.call(
        INIT_PRODUCER_ID,
        4,
        {"transactional_id": txn_id, "transaction_timeout": timeout_ms},
    )


async def _add(client: RawClient, txn_id: str, pid: int, epoch: int, topic: str, *parts: int):
    response = await client.call(
        ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": txn_id,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": list(parts)}],
        },
    )
    return {
        (t.name, r.partition_index): r.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for r in t.results_by_partition
    }


async def _end(client: RawClient, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
    response = await client.call(
        END_TXN,
        3,
        {
            "transactional_id": txn_id,
            "producer_id": pid,
            "producer_epoch": epoch,
            "committed": commit,
        },
    )
    return response.error_code


async def _fetch(client: RawClient, topic: str, isolation: int) -> Any:
    response = await client.call(
        FETCH,
        12,
        fetch_fields(topic, max_wait=0, min_bytes=0, isolation_level=isolation),
    )
    return response.responses[0].partitions[0]


def _run(tmp_path: Path, body, overrides: tuple[str, ...] = ()) -> None:  # type: ignore[no-untyped-def]
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("t", 2, 1, {})
        client = await RawClient.connect(port)
        try:
            await body(broker, client)
        finally:
            client.close()

    run_broker(tmp_path, check, [*OVERRIDES, *overrides])


# -- idempotence ----------------------------------------------------------------------------


def test_duplicate_batch_is_answered_with_its_first_offsets(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await _init(client, None)
        assert (init.error_code, init.producer_epoch) == (0, 0)
        pid = init.producer_id
        await _produce(client, "t", encode_batch([b"other"], T0))
        first = await _produce(client, "t", _batch(pid, 0, 0, 3))
        again = await _produce(client, "t", _batch(pid, 0, 0, 3))
        assert (first.error_code, first.base_offset) == (0, 1)
        assert (again.error_code, again.base_offset) == (0, 1)
        assert broker.replicas.get("t", 0).log.log_end_offset == 4

    _run(tmp_path, body)


def test_out_of_order_sequence_and_old_epoch_are_refused(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        pid = (await _init(client, None)).producer_id
        assert (await _produce(client, "t", _batch(pid, 1, 0, 2))).error_code == 0
        gap = await _produce(client, "t", _batch(pid, 1, 5))
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        old = await _produce(client, "t", _batch(pid, 0, 2))
        assert old.error_code == 47  # INVALID_PRODUCER_EPOCH
        negative = await _produce(client, "t", _batch(pid, 1, -3))
        assert negative.error_code == 87  # INVALID_RECORD
        assert broker.replicas.get("t", 0).log.log_end_offset == 2

    _run(tmp_path, body)


def test_describe_producers_lists_the_partitions_producers(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        pid = (await _init(client, None)).producer_id
        await _produce(client, "t", _batch(pid, 0, 0, 4))
        response = await client.call(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t", "partition_indexes": [0, 1, 7]}]}
        )
        p0, p1, p7 = response.topics[0].partitions
        assert [
            (s.producer_id, s.producer_epoch, s.last_sequence) for s in p0.active_producers
        ] == [(pid, 0, 3)]
        assert (p1.error_code, p1.active_producers) == (0, ())
        assert p7.error_code == 3

    _run(tmp_path, body)


# -- transactions ---------------------------------------------------------------------------


def test_find_coordinator_for_a_transactional_id_names_this_broker(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        response = await client.call(
            FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-a", "tx-b"]}
        )
        assert [(c.error_code, c.node_id) for c in response.coordinators] == [(0, 1), (0, 1)]
        assert "__transaction_state" in broker.controller.state.topics

    _run(tmp_path, body)


def test_reinit_bumps_the_epoch_and_bad_timeouts_are_refused(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        first = await _init(client, "tx")
        second = await _init(client, "tx")
        assert (first.producer_id, first.producer_epoch + 1) == (
            second.producer_id,
            second.producer_epoch,
        )
        too_long = await _init(client, "tx", 10**9)
        assert too_long.error_code == 50  # INVALID_TRANSACTION_TIMEOUT

    _run(tmp_path, body)


def test_end_txn_errors_for_unknown_ids_wrong_epochs_and_empty_transactions(
    tmp_path: Path,
) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        await _init(client, "known")
        init = await _init(client, "tx")
        pid, epoch = init.producer_id, init.producer_epoch
        assert await _end(client, "never-seen", pid, epoch, True) == 49
        assert await _end(client, "tx", pid, epoch + 1, True) == 90  # PRODUCER_FENCED
        assert await _end(client, "tx", pid, epoch, True) == 48  # nothing to end
        assert await _end(client, "", pid, epoch, True) == 42
        adds = await _add(client, "tx", pid + 99, epoch, "t", 0)
        assert adds == {("t", 0): 49}
        adds = await _add(client, "tx", pid, epoch, "t", 0, 9)
        assert adds == {("t", 0): 55, ("t", 9): 3}  # none added when one is unknown
        log = broker.replicas.get("t", 0).log
        assert log.log_end_offset == 0

    _run(tmp_path, body)


def test_transactional_batches_outside_a_transaction_are_refused(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await _init(client, "tx")
        pid, epoch = init.producer_id, init.producer_epoch
        batch = _batch(pid, epoch, 0, txn=True)
        assert (await _produce(client, "t", batch)).error_code == 53  # no transactional id
        assert (await _produce(client, "t", batch, "tx")).error_code == 48  # not added
        assert (await _produce(client, "t", batch, "other")).error_code == 49
        await _add(client, "tx", pid, epoch, "t", 0)
        stale = _batch(pid, epoch - 1 if epoch else 5, 0, txn=True)
        assert (await _produce(client, "t", stale, "tx")).error_code == 47
        assert (await _produce(client, "t", batch, "tx")).error_code == 0
        assert broker.replicas.get("t", 0).log.log_end_offset == 1

    _run(tmp_path, body)


def test_abort_hides_records_from_read_committed_and_lists_the_aborted_transaction(
    tmp_path: Path,
) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await _init(client, "tx")
        pid, epoch = init.producer_id, init.producer_epoch
        await _produce(client, "t", encode_batch([b"plain"], T0))
        assert await _add(client, "tx", pid, epoch, "t", 0) == {("t", 0): 0}
        assert (
            await _produce(client, "t", _batch(pid, epoch, 0, 2, txn=True), "tx")
        ).error_code == 0
        await _produce(client, "t", encode_batch([b"after"], T0))

        open_txn = await _fetch(client, "t", 1)
        assert (open_txn.high_watermark, open_txn.last_stable_offset) == (4, 1)
        offsets = await client.call(
            LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 1,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                        ],
                    }
                ],
            },
        )
        assert offsets.topics[0].partitions[0].offset == 1

        assert await _end(client, "tx", pid, epoch, False) == 0
        committed = await _fetch(client, "t", 1)
        assert (committed.high_watermark, committed.last_stable_offset) == (5, 5)
        assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
            (pid, 1)
        ]
        uncommitted = await _fetch(client, "t", 0)
        assert uncommitted.aborted_transactions is None

    _run(tmp_path, body)


def test_an_abort_at_the_end_of_a_preallocated_segment_is_listed_to_read_committed(
    tmp_path: Path,
) -> None:
    """With fsync per message the active segment reads as zeros past its data; the fetch
    must not take those zeros for the next batch's offset."""

    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await _init(client, "tx")
        pid, epoch = init.producer_id, init.producer_epoch
        now = int(time.time() * 1000)  # an old timestamp would roll the segment (segment.ms)
        await _produce(client, "t", encode_batch([b"plain"], now))
        assert await _add(client, "tx", pid, epoch, "t", 0) == {("t", 0): 0}
        records = encode_batch(
            [b"r0", b"r1"],
            now,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            is_transactional=True,
        )
        assert (await _produce(client, "t", bytes(records), "tx")).error_code == 0
        assert await _end(client, "tx", pid, epoch, False) == 0
        plog = broker.replicas.get("t", 0).log
        assert plog.num_segments == 1
        assert os.path.getsize(plog.active_segment.log_path) > plog.active_segment.size

        async def aborted() -> list[tuple[int, int]] | None:
            # The abort's marker is written after EndTxn's answer.
            committed = await _fetch(client, "t", 1)
            listed = [(a.producer_id, a.first_offset) for a in committed.aborted_transactions]
            return listed or None

        assert await eventually_async(aborted, timeout=10, what="the abort listed") == [(pid, 1)]

    _run(tmp_path, body, ("log.flush.interval.messages=1",))


def test_list_and_describe_transactions(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await _init(client, "tx")
        await _add(client, "tx", init.producer_id, init.producer_epoch, "t", 1)
        await _init(client, "idle")
        listed = await client.call(LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing", "Bogus"]})
        assert [t.transactional_id for t in listed.transaction_states] == ["tx"]
        assert listed.unknown_state_filters == ("Bogus",)
        described = await client.call(
            DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx", "missing"]}
        )
        tx, missing = described.transaction_states
        assert (tx.error_code, tx.transaction_state, tx.producer_id) == (
            0,
            "Ongoing",
            init.producer_id,
        )
        assert [(t.topic, t.partitions) for t in tx.topics] == [("t", (1,))]
        assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND

    _run(tmp_path, body)


def test_write_txn_markers_closes_a_transaction_in_a_partition(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await _init(client, "tx")
        pid, epoch = init.producer_id, init.producer_epoch
        await _add(client, "tx", pid, epoch, "t", 0)
        await _produce(client, "t", _batch(pid, epoch, 0, txn=True), "tx")
        log = broker.replicas.get("t", 0).log
        assert log.last_stable_offset == 0
        response = await client.call(
            WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "transaction_result": True,
                        "topics": [{"name": "t", "partition_indexes": [0]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
        )
        assert response.markers[0].topics[0].partitions[0].error_code == 0
        assert log.last_stable_offset == log.log_end_offset == 2

    _run(tmp_path, body)


def test_metrics_count_transactional_ids_by_state(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await _init(client, "tx")
        await _add(client, "tx", init.producer_id, init.producer_epoch, "t", 0)
        await _init(client, "idle")
        lines = render_families(broker.txn_coordinator.metrics()).splitlines()
        assert 'kbroker_transactions{state="Ongoing"} 1.0' in lines
        assert 'kbroker_transactions{state="Empty"} 1.0' in lines
        assert "kbroker_transactions_awaiting_markers 0.0" in lines

    _run(tmp_path, body)


def test_metrics_count_a_transaction_whose_markers_are_still_being_written(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        coordinator = broker.txn_coordinator.coordinator
        init = await _init(client, "tx")
        await _add(client, "tx", init.producer_id, init.producer_epoch, "t", 0)
        release = asyncio.Event()
        markers = coordinator.markers

        class HeldMarkers:
            async def write(self, *args):  # type: ignore[no-untyped-def]
                await release.wait()
                return await markers.write(*args)

        coordinator.markers = HeldMarkers()
        assert await _end(client, "tx", init.producer_id, init.producer_epoch, True) == 0
        held = render_families(broker.txn_coordinator.metrics()).splitlines()
        release.set()
        await coordinator.settled()
        done = render_families(broker.txn_coordinator.metrics()).splitlines()
        assert "kbroker_transactions_awaiting_markers 1.0" in held
        assert "kbroker_transactions_awaiting_markers 0.0" in done

    _run(tmp_path, body)


def test_a_client_older_than_producer_fenced_is_told_invalid_producer_epoch(
    tmp_path: Path,
) -> None:
    """KIP-588: PRODUCER_FENCED (90) came with InitProducerId v4 and AddPartitionsToTxn,
    AddOffsetsToTxn and EndTxn v2; an older client is told INVALID_PRODUCER_EPOCH (47), a
    code it handles as fencing, as Kafka tells it."""

    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        first = await _init(client, "tx")
        await _init(client, "tx")  # fences `first`
        pid, stale = first.producer_id, first.producer_epoch
        fields = {"transactional_id": "tx", "producer_id": pid, "producer_epoch": stale}

        async def end(version: int) -> int:
            answer = await client.call(END_TXN, version, {**fields, "committed": True})
            return int(answer.error_code)

        async def add(version: int) -> int:
            answer = await client.call(
                ADD_PARTITIONS_TO_TXN,
                version,
                {
                    "v3_and_below_transactional_id": "tx",
                    "v3_and_below_producer_id": pid,
                    "v3_and_below_producer_epoch": stale,
                    "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
                },
            )
            return int(
                answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
            )

        async def add_offsets(version: int) -> int:
            answer = await client.call(ADD_OFFSETS_TO_TXN, version, {**fields, "group_id": "g"})
            return int(answer.error_code)

        async def init(version: int) -> int:
            answer = await client.call(
                INIT_PRODUCER_ID,
                version,
                {**fields, "transaction_timeout": 60_000},
            )
            return int(answer.error_code)

        assert (await end(1), await end(2)) == (47, 90)
        assert (await add(1), await add(2)) == (47, 90)
        assert (await add_offsets(1), await add_offsets(2)) == (47, 90)
        assert (await init(3), await init(4)) == (47, 90)

    _run(tmp_path, body)
