"""Transactions version 2 (KIP-890 part 2) over the wire, against an in-process broker:
no AddPartitionsToTxn, partitions added by the leader a Produce v12 reaches and by the
group coordinator a TxnOffsetCommit v5 reaches, an epoch bump at every EndTxn v5, and
the old epoch's late writes fenced."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from inprocess import RawClient, run_broker
from kio.index import load_request_schema

from compat_tests.waiting import eventually_async
from kbroker.admin.client import fetch_fields, produce_fields
from kbroker.protocol.batch import encode_batch
from kbroker.protocol.client_frames import decode_response, encode_request
from kbroker.protocol.messages import build

PRODUCE = 0
FETCH = 1
FIND_COORDINATOR = 10
API_VERSIONS = 18
INIT_PRODUCER_ID = 22
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
INCREMENTAL_ALTER_CONFIGS = 44
TOPIC_RESOURCE = 2
OVERRIDES = ["transaction.state.log.num.partitions=2", "offsets.topic.num.partitions=2"]
T0 = 1_700_000_000_000
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90
INVALID_TXN_STATE = 48
NOT_ENOUGH_REPLICAS = 19
CONCURRENT_TRANSACTIONS = 51
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def _batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return bytes(
        encode_batch(
            [value],
            T0,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
    )


async def _produce(client: RawClient, pid: int, epoch: int, seq: int, value: bytes) -> int:
    """Produce v12 as a transactions version 2 client sends it, retried while the
    coordinator is still ending the previous transaction (NOT_ENOUGH_REPLICAS)."""

    async def answered() -> tuple[int] | None:
        response = await client.call(
            PRODUCE,
            12,
            produce_fields(
                "t", _batch(pid, epoch, seq, value), timeout_ms=5000, transactional_id="tx"
            ),
        )
        code = response.responses[0].partition_responses[0].error_code
        return None if code == NOT_ENOUGH_REPLICAS else (code,)

    return (await eventually_async(answered, timeout=10, what="a produce answer"))[0]


def _send_pipelined_pair(client: RawClient, pid: int, epoch: int) -> None:
    """Produce v12 of sequences 0 and 1, both sent before any answer (as a client keeps
    several in flight)."""
    for seq, value in ((0, b"first"), (1, b"second")):
        request = build(
            load_request_schema(PRODUCE, 12),
            produce_fields(
                "t", _batch(pid, epoch, seq, value), timeout_ms=5000, transactional_id="tx"
            ),
        )
        client.correlation += 1
        client.writer.write(encode_request(request, client.correlation, "test"))


async def _pipelined_pair(client: RawClient, pid: int, epoch: int) -> list[int]:
    """The pipelined pair's error codes, in order."""
    _send_pipelined_pair(client, pid, epoch)
    codes = []
    for _ in range(2):
        (size,) = struct.unpack(">i", await client.reader.readexactly(4))
        _, response = decode_response(PRODUCE, 12, await client.reader.readexactly(size))
        codes.append(response.responses[0].partition_responses[0].error_code)
    return codes


def _first_add_through(broker: Any, first: Any) -> list[int]:
    """The broker's first implicit add of a partition to a transaction goes through
    `first(add, *args)` instead of the coordinator (`add`); the list counts the adds."""
    adder = broker.txn_coordinator.adder
    add = adder.add
    calls = [0]

    async def wrapped(*args: Any) -> Any:
        calls[0] += 1
        return await (first(add, *args) if calls[0] == 1 else add(*args))

    adder.add = wrapped
    return calls


async def _end(client: RawClient, pid: int, epoch: int, commit: bool) -> Any:
    return await client.call(
        END_TXN,
        5,
        {
            "transactional_id": "tx",
            "producer_id": pid,
            "producer_epoch": epoch,
            "committed": commit,
        },
    )


async def _describe(client: RawClient) -> Any:
    response = await client.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]})
    return response.transaction_states[0]


async def _complete(client: RawClient) -> Any:
    async def done() -> Any:
        state = await _describe(client)
        return state if state.transaction_state.startswith("Complete") else None

    return await eventually_async(done, timeout=10, what="the transaction completed")


async def _read_committed(client: RawClient) -> tuple[int, list[tuple[int, int]]]:
    """(last stable offset, aborted transactions) a read_committed fetch is given."""
    response = await client.call(
        FETCH, 12, fetch_fields("t", max_wait=0, min_bytes=0, isolation_level=1)
    )
    partition = response.responses[0].partitions[0]
    aborted = [(a.producer_id, a.first_offset) for a in partition.aborted_transactions or ()]
    return partition.last_stable_offset, aborted


def _run(tmp_path: Path, body) -> None:  # type: ignore[no-untyped-def]
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("t", 1, 1, {})
        client = await RawClient.connect(port)
        try:
            await body(broker, client)
        finally:
            client.close()

    run_broker(tmp_path, check, OVERRIDES)


def test_a_new_cluster_finalizes_transaction_version_2(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        response = await client.call(
            API_VERSIONS, 4, {"client_software_name": "t", "client_software_version": "1"}
        )
        finalized = {f.name: f.max_version_level for f in response.finalized_features}
        assert finalized["transaction.version"] == 2

    _run(tmp_path, body)


def test_end_txn_v5_bumps_the_epoch_and_fences_the_ended_epoch(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await client.call(
            INIT_PRODUCER_ID, 5, {"transactional_id": "tx", "transaction_timeout": 60_000}
        )
        pid, epoch = init.producer_id, init.producer_epoch
        # No AddPartitionsToTxn: the leader adds the partition.
        assert await _produce(client, pid, epoch, 0, b"one") == 0
        ongoing = await _describe(client)
        assert ongoing.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in ongoing.topics] == [("t", [0])]
        ended = await _end(client, pid, epoch, commit=True)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
        done = await _complete(client)
        assert (done.transaction_state, done.producer_epoch) == ("CompleteCommit", epoch + 1)
        # A retried EndTxn (its answer lost) gets the same answer.
        again = await _end(client, pid, epoch, commit=True)
        assert (again.error_code, again.producer_epoch) == (0, epoch + 1)
        # The ended epoch's late write (a zombie) is fenced by the marker's epoch.
        assert await _produce(client, pid, epoch, 1, b"zombie") == INVALID_PRODUCER_EPOCH
        # The next transaction runs at the bumped epoch, from sequence 0, and aborts.
        assert await _produce(client, pid, epoch + 1, 0, b"aborted") == 0
        aborted = await _end(client, pid, epoch + 1, commit=False)
        assert (aborted.error_code, aborted.producer_epoch) == (0, epoch + 2)
        await _complete(client)
        assert await _produce(client, pid, epoch + 1, 1, b"late") == INVALID_PRODUCER_EPOCH
        # An EndTxn of an epoch two behind is no retry: fenced.
        stale = await _end(client, pid, epoch, commit=True)
        assert stale.error_code == PRODUCER_FENCED
        # one (0), its marker (1), aborted (2), its marker (3): only "aborted" is hidden.
        assert await _read_committed(client) == (4, [(pid, 2)])

    _run(tmp_path, body)


def test_txn_offset_commit_v5_adds_the_offsets_partition(tmp_path: Path) -> None:
    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await client.call(
            INIT_PRODUCER_ID, 5, {"transactional_id": "tx", "transaction_timeout": 60_000}
        )
        pid, epoch = init.producer_id, init.producer_epoch
        # As a client does before it commits offsets: find (and so load) the group's
        # coordinator.
        await client.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})

        async def commit() -> tuple[int] | None:
            response = await client.call(
                TXN_OFFSET_COMMIT,
                5,
                {
                    "transactional_id": "tx",
                    "group_id": "g",
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "generation_id": -1,
                    "member_id": "",
                    "group_instance_id": None,
                    "topics": [
                        {
                            "name": "t",
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 7,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "",
                                }
                            ],
                        }
                    ],
                },
            )
            code = response.topics[0].partitions[0].error_code
            return None if code in (14, 15, 16) else (code,)  # coordinator loading or moving

        assert await eventually_async(commit, timeout=10, what="the offset commit") == (0,)
        ongoing = await _describe(client)
        offsets = broker.group_coordinator.coordinator.partition_for("g")
        assert [(t.topic, list(t.partitions)) for t in ongoing.topics] == [
            ("__consumer_offsets", [offsets])
        ]
        ended = await _end(client, pid, epoch, commit=True)
        assert (ended.error_code, ended.producer_epoch) == (0, epoch + 1)

    _run(tmp_path, body)


def test_end_txn_v5_aborts_a_transaction_that_added_no_partition(tmp_path: Path) -> None:
    """A version 2 client whose every produce failed before reaching a leader aborts a
    transaction the coordinator never saw start (franz-go does); Kafka's coordinator
    takes it from Empty or from a completed transaction, bumping the epoch, and refuses
    only a commit of nothing."""

    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await client.call(
            INIT_PRODUCER_ID, 5, {"transactional_id": "tx", "transaction_timeout": 60_000}
        )
        pid, epoch = init.producer_id, init.producer_epoch
        nothing = await _end(client, pid, epoch, commit=True)
        assert nothing.error_code == INVALID_TXN_STATE
        # From Empty: an abort of nothing bumps the epoch and completes.
        aborted = await _end(client, pid, epoch, commit=False)
        assert (aborted.error_code, aborted.producer_id, aborted.producer_epoch) == (
            0,
            pid,
            epoch + 1,
        )
        done = await _complete(client)
        assert (done.transaction_state, done.producer_epoch) == ("CompleteAbort", epoch + 1)
        # Its retry is answered again; a commit claiming that epoch is fenced.
        again = await _end(client, pid, epoch, commit=False)
        assert (again.error_code, again.producer_epoch) == (0, epoch + 1)
        assert (await _end(client, pid, epoch, commit=True)).error_code == PRODUCER_FENCED
        # From CompleteAbort at the current epoch: another abort of nothing.
        assert (await _end(client, pid, epoch + 1, commit=False)).producer_epoch == epoch + 2
        await _complete(client)
        # A committed transaction, then an abort of nothing at its new epoch.
        assert await _produce(client, pid, epoch + 2, 0, b"one") == 0
        assert (await _end(client, pid, epoch + 2, commit=True)).producer_epoch == epoch + 3
        await _complete(client)
        assert (await _end(client, pid, epoch + 3, commit=True)).error_code == INVALID_TXN_STATE
        after_commit = await _end(client, pid, epoch + 3, commit=False)
        assert (after_commit.error_code, after_commit.producer_epoch) == (0, epoch + 4)
        done = await _complete(client)
        assert (done.transaction_state, list(done.topics)) == ("CompleteAbort", [])
        # The committed record stays visible: the abort of nothing wrote no marker.
        assert await _read_committed(client) == (2, [])

    _run(tmp_path, body)


def test_pipelined_produces_of_a_transaction_append_in_order_while_the_first_is_added(
    tmp_path: Path,
) -> None:
    """A client keeps several Produce requests in flight. When the first waits for the
    coordinator to add its partition (busy, say, with the last transaction's markers),
    the second, at the next sequence, waits for the first's append rather than being
    added at once and refused as out of sequence (Kafka Streams' exactly-once producer
    met that, as a fenced task)."""

    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await client.call(
            INIT_PRODUCER_ID, 5, {"transactional_id": "tx", "transaction_timeout": 60_000}
        )
        pid, epoch = init.producer_id, init.producer_epoch

        async def slowly(add: Any, *args: Any) -> Any:
            await asyncio.sleep(0.3)
            return await add(*args)

        calls = _first_add_through(broker, slowly)
        codes = await _pipelined_pair(client, pid, epoch)
        assert codes == [0, 0]
        assert calls == [1]  # the second found its partition added by the first

    _run(tmp_path, body)


def test_a_marker_refused_for_too_few_in_sync_replicas_is_written_once_they_are_back(
    tmp_path: Path,
) -> None:
    """As Kafka's coordinator retries a marker a partition answers NOT_ENOUGH_REPLICAS:
    the transaction stays PrepareCommit (its records hidden from read_committed) until
    the partition takes the marker, and never completes with the marker missing, which
    would leave the partition's last stable offset behind that transaction for good."""

    async def min_isr(client: RawClient, value: str) -> None:
        answer = await client.call(
            INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": TOPIC_RESOURCE,
                        "resource_name": "t",
                        "configs": [
                            {"name": "min.insync.replicas", "config_operation": 0, "value": value}
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
        assert answer.responses[0].error_code == 0

    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await client.call(
            INIT_PRODUCER_ID, 5, {"transactional_id": "tx", "transaction_timeout": 60_000}
        )
        pid, epoch = init.producer_id, init.producer_epoch
        assert await _produce(client, pid, epoch, 0, b"one") == 0
        # One replica, and now two must be in sync to take an acks=all write.
        await min_isr(client, "2")
        await eventually_async(
            lambda: broker.replicas.get("t", 0).min_insync_replicas == 2,
            timeout=10,
            what="min.insync.replicas=2 in force on t-0",
        )
        ended = await _end(client, pid, epoch, commit=True)
        assert ended.error_code == 0
        coordinator = broker.txn_coordinator.coordinator
        await eventually_async(
            lambda: "tx" in coordinator.incomplete,
            timeout=10,
            what="the refused marker left for a retry",
        )
        assert (await _describe(client)).transaction_state == "PrepareCommit"
        assert await _read_committed(client) == (0, [])
        await min_isr(client, "1")
        done = await _complete(client)
        assert done.transaction_state == "CompleteCommit"
        # "one" (0) and its marker (1): the committed record is readable.
        assert await _read_committed(client) == (2, [])

    _run(tmp_path, body)


def test_a_batch_behind_one_whose_partition_could_not_be_added_waits_for_it(
    tmp_path: Path,
) -> None:
    """Kafka's lowest verifying sequence (KIP-890): when the first Produce of a
    transaction cannot have its partition added (the coordinator still ending the last
    transaction answers CONCURRENT_TRANSACTIONS) and the one pipelined behind it can, the
    later batch is refused OUT_OF_ORDER_SEQUENCE_NUMBER rather than written first, which
    would leave the first unable ever to follow (the producer stalled until its
    transaction timed out, as Kafka Streams met at rebalances)."""

    async def body(broker, client) -> None:  # type: ignore[no-untyped-def]
        init = await client.call(
            INIT_PRODUCER_ID, 5, {"transactional_id": "tx", "transaction_timeout": 60_000}
        )
        pid, epoch = init.producer_id, init.producer_epoch

        async def refused(add: Any, *args: Any) -> Any:
            return dict.fromkeys(args[3], CONCURRENT_TRANSACTIONS)

        _first_add_through(broker, refused)
        codes = await _pipelined_pair(client, pid, epoch)
        assert codes[0] != 0  # refused: the client retries it
        assert codes[1] == OUT_OF_ORDER_SEQUENCE_NUMBER
        # The client's retries, in order, now go through.
        assert await _produce(client, pid, epoch, 0, b"first") == 0
        assert await _produce(client, pid, epoch, 1, b"second") == 0
        assert (await _end(client, pid, epoch, commit=True)).error_code == 0
        await _complete(client)
        assert await _read_committed(client) == (3, [])

    _run(tmp_path, body)


def test_a_produce_that_added_its_partition_frees_the_connection_once_it_appended(
    tmp_path: Path,
) -> None:
    """A Produce v12 whose partition is first added to the transaction holds the
    connection's later requests until it has appended, not until its answer may go
    (acks=all, here an fsync of a flush.messages=1 topic), as after any Produce. Held
    until the answer, a client's pipelined Produce requests each waited for the last
    one's add and acknowledgement in turn, and the retry of a transaction's first batch
    (refused while the coordinator ended the last transaction) reached the leader
    seconds late while every batch after it was refused OUT_OF_ORDER_SEQUENCE_NUMBER
    (Kafka Streams' exactly-once producer, at commits and rebalances)."""

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("t", 1, 1, {"flush.messages": "1"})
        logs = broker.replicas.logs
        fsync_of = logs.when_durable
        held: list[Any] = []

        def when_durable(plog: Any, done: Any) -> None:
            if plog.topic == "t":
                held.append((plog, done))  # the acknowledgement waits for the test
            else:
                fsync_of(plog, done)

        logs.when_durable = when_durable
        client = await RawClient.connect(port)
        try:
            init = await client.call(
                INIT_PRODUCER_ID, 5, {"transactional_id": "tx", "transaction_timeout": 60_000}
            )
            pid, epoch = init.producer_id, init.producer_epoch
            _send_pipelined_pair(client, pid, epoch)
            # The second is appended while the first's answer still waits.
            await eventually_async(
                lambda: broker.replicas.get("t", 0).log_end_offset == 2 and len(held) == 2,
                timeout=10,
                what="both batches appended before the first is acknowledged",
            )
            for plog, done in held:
                fsync_of(plog, done)
            codes = []
            for _ in range(2):
                (size,) = struct.unpack(">i", await client.reader.readexactly(4))
                _, response = decode_response(PRODUCE, 12, await client.reader.readexactly(size))
                codes.append(response.responses[0].partition_responses[0].error_code)
            assert codes == [0, 0]
        finally:
            logs.when_durable = fsync_of
            client.close()

    run_broker(tmp_path, check, OVERRIDES)
