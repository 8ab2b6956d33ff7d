"""OffsetForLeaderEpoch against a live in-process broker."""

from __future__ import annotations

from pathlib import Path

from inprocess import RawClient, run_broker

from kbroker.protocol.batch import encode_batch

OFFSET_FOR_LEADER_EPOCH = 23


def _request(topic: str, leader_epoch: int, current: int = -1) -> dict:
    return {
        "replica_id": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "current_leader_epoch": current, "leader_epoch": leader_epoch}
                ],
            }
        ],
    }


async def _produce(broker, topic: str, count: int) -> None:  # type: ignore[no-untyped-def]
    records = [(None, b"v%d" % i) for i in range(count)]
    broker.replicas.get(topic, 0).append_as_leader(
        bytearray(encode_batch(records, base_timestamp=1000)), 1000
    )


def test_current_epoch_ends_at_the_log_end(tmp_path: Path) -> None:
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("epochs", 1, 1, {})
        await _produce(broker, "epochs", 5)
        client = await RawClient.connect(port)
        response = await client.call(OFFSET_FOR_LEADER_EPOCH, 4, _request("epochs", 0))
        p = response.topics[0].partitions[0]
        assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 5)
        client.close()

    run_broker(tmp_path, check)


def test_a_newer_current_epoch_than_the_leaders_is_unknown(tmp_path: Path) -> None:
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("epochs", 1, 1, {})
        client = await RawClient.connect(port)
        response = await client.call(OFFSET_FOR_LEADER_EPOCH, 4, _request("epochs", 0, current=3))
        assert response.topics[0].partitions[0].error_code == 75  # UNKNOWN_LEADER_EPOCH
        client.close()

    run_broker(tmp_path, check)


def test_unknown_topic_is_reported_per_partition(tmp_path: Path) -> None:
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        client = await RawClient.connect(port)
        response = await client.call(OFFSET_FOR_LEADER_EPOCH, 4, _request("missing", 0))
        assert response.topics[0].partitions[0].error_code == 3
        client.close()

    run_broker(tmp_path, check)
