"""Transactional offset commits: visible on commit only, and still so after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inprocess import RawClient, run_broker

from compat_tests.waiting import eventually_async

OFFSET_FETCH = 9
INIT_PRODUCER_ID = 22
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
OVERRIDES = ["transaction.state.log.num.partitions=2", "offsets.topic.num.partitions=2"]


async def retried(client: RawClient, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """A coordinator request, tried again while the previous transaction's markers are
    being written (CONCURRENT_TRANSACTIONS), as clients do."""

    async def answered() -> Any:
        response = await client.call(api_key, version, body)
        return response if response.error_code != 51 else None

    return await eventually_async(answered, timeout=5, what="an answer other than 51")


class Txn:
    def __init__(self, client: RawClient, pid: int, epoch: int) -> None:
        self.client, self.pid, self.epoch = client, pid, epoch

    @classmethod
    async def init(cls, client: RawClient) -> Txn:
        init = await retried(
            client, INIT_PRODUCER_ID, 4, {"transactional_id": "tx", "transaction_timeout": 60_000}
        )
        assert init.error_code == 0
        return cls(client, init.producer_id, init.producer_epoch)

    async def commit_offset(self, offset: int, **member: Any) -> int:
        added = await retried(
            self.client,
            ADD_OFFSETS_TO_TXN,
            3,
            {
                "transactional_id": "tx",
                "producer_id": self.pid,
                "producer_epoch": self.epoch,
                "group_id": "g",
            },
        )
        assert added.error_code == 0
        response = await self.client.call(
            TXN_OFFSET_COMMIT,
            3,
            {
                "transactional_id": "tx",
                "group_id": "g",
                "producer_id": self.pid,
                "producer_epoch": self.epoch,
                "generation_id": member.get("generation_id", -1),
                "member_id": member.get("member_id", ""),
                "group_instance_id": None,
                "topics": [
                    {
                        "name": "in",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": offset,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )
        return response.topics[0].partitions[0].error_code

    async def end(self, commit: bool) -> int:
        response = await self.client.call(
            END_TXN,
            3,
            {
                "transactional_id": "tx",
                "producer_id": self.pid,
                "producer_epoch": self.epoch,
                "committed": commit,
            },
        )
        return response.error_code


async def committed(client: RawClient, require_stable: bool = False) -> int:
    """The committed offset, or minus the error code (-88: UNSTABLE_OFFSET_COMMIT)."""
    response = await client.call(
        OFFSET_FETCH,
        7,
        {
            "group_id": "g",
            "topics": [{"name": "in", "partition_indexes": [0]}],
            "require_stable": require_stable,
        },
    )
    partition = response.topics[0].partitions[0]
    return -partition.error_code if partition.error_code else partition.committed_offset


def test_offsets_count_only_once_committed_and_stay_right_after_restart(tmp_path: Path) -> None:
    async def first(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("in", 1, 1, {})
        client = await RawClient.connect(port)
        txn = await Txn.init(client)
        assert await txn.commit_offset(5) == 0
        assert await committed(client) == -1
        assert await txn.end(False) == 0
        await broker.txn_coordinator.coordinator.settled()
        assert await committed(client) == -1
        assert await txn.commit_offset(7) == 0
        assert await txn.end(True) == 0
        await broker.txn_coordinator.coordinator.settled()  # the markers are written
        assert await committed(client) == 7
        assert await txn.commit_offset(9) == 0  # left open across the restart
        assert await committed(client) == 7
        assert await committed(client, require_stable=True) == -88
        client.close()

    async def second(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        client = await RawClient.connect(port)
        for _ in range(100):  # the offsets partition loads in the background
            response = await committed(client)
            if response != -1:
                break
        assert await committed(client) == 7
        assert await committed(client, require_stable=True) == -88  # still pending
        service = broker.txn_coordinator
        meta = service.coordinator.txns["tx"]
        txn = Txn(client, meta.producer_id, meta.producer_epoch)
        assert await txn.end(True) == 0
        await service.coordinator.settled()
        assert await committed(client) == 9
        assert await committed(client, require_stable=True) == 9
        client.close()

    run_broker(tmp_path, first, OVERRIDES)
    run_broker(tmp_path, second, OVERRIDES)


def test_fenced_producer_cannot_commit_offsets(tmp_path: Path) -> None:
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("in", 1, 1, {})
        client = await RawClient.connect(port)
        old = await Txn.init(client)
        assert await old.commit_offset(3) == 0
        new = await Txn.init(client)  # bumps the epoch, aborts the open transaction
        assert new.epoch > old.epoch
        response = await client.call(
            TXN_OFFSET_COMMIT,
            3,
            {
                "transactional_id": "tx",
                "group_id": "g",
                "producer_id": old.pid,
                "producer_epoch": old.epoch,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": "in",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 4,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )
        assert response.topics[0].partitions[0].error_code == 90  # PRODUCER_FENCED
        assert await committed(client) == -1
        client.close()

    run_broker(tmp_path, check, OVERRIDES)


def test_unknown_member_of_a_live_generation_is_refused(tmp_path: Path) -> None:
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("in", 1, 1, {})
        client = await RawClient.connect(port)
        txn = await Txn.init(client)
        error = await txn.commit_offset(1, generation_id=3, member_id="nobody")
        assert error in (25, 22)  # UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION
        client.close()

    run_broker(tmp_path, check, OVERRIDES)


def test_with_fsync_per_message_the_answer_waits_for_the_offsets_fsync(tmp_path: Path) -> None:
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("in", 1, 1, {})
        synced: list[str] = []
        when_durable = broker.logs.when_durable

        def recording(plog, done):  # type: ignore[no-untyped-def]
            def fsynced(error):  # type: ignore[no-untyped-def]
                synced.append(plog.topic)
                done(error)

            when_durable(plog, fsynced)

        broker.logs.when_durable = recording
        client = await RawClient.connect(port)
        txn = await Txn.init(client)
        synced.clear()
        assert await txn.commit_offset(5) == 0
        assert "__consumer_offsets" in synced
        client.close()

    run_broker(tmp_path, check, [*OVERRIDES, "log.flush.interval.messages=1"])


def test_offsets_held_before_leadership_moved_away_and_back_are_forgotten() -> None:
    """An offsets partition led here, then elsewhere (where the transaction ended), then
    here again: the offsets held the first time are not pending any more, and a later
    marker of the same producer does not bring them back over newer commits."""
    from types import SimpleNamespace

    from kbroker.coordinator.group import OffsetAndMetadata
    from kbroker.txn.offsets import PendingOffsets, TxnOffsetStore

    applied: list[tuple[str, dict[Any, Any]]] = []
    coordinator = SimpleNamespace(apply_committed_offsets=lambda g, o: applied.append((g, o)))
    quiet_log = SimpleNamespace(producer_state=SimpleNamespace(aborted=[], ongoing={}))
    broker = SimpleNamespace(
        group_coordinator=SimpleNamespace(coordinator=coordinator),
        replicas=SimpleNamespace(get=lambda topic, p: SimpleNamespace(log=quiet_log)),
    )
    store = TxnOffsetStore(broker)  # type: ignore[arg-type]
    store.pending[(0, 7)] = PendingOffsets({"g": {("in", 0): OffsetAndMetadata(5)}})
    store.pending[(1, 7)] = PendingOffsets({"h": {("in", 0): OffsetAndMetadata(9)}})

    store.reconcile(0)  # partition 0 is led here again

    assert not store.has_pending("g", ("in", 0))
    store.on_marker(("__consumer_offsets", 0), 7, True)
    assert applied == []
    assert store.has_pending("h", ("in", 0))  # another partition's are untouched
