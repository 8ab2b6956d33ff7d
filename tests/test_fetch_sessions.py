"""Fetch sessions (KIP-227) against a live in-process broker."""

from __future__ import annotations

from pathlib import Path

from inprocess import RawClient, run_broker

from kbroker.protocol.batch import encode_batch

FETCH = 1
VERSION = 12


def _fetch(session_id: int, epoch: int, partitions: list[tuple[int, int]], forgotten=()) -> dict:  # type: ignore[no-untyped-def]
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": "sessions",
                "partitions": [
                    {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    for p, offset in partitions
                ],
            }
        ]
        if partitions
        else [],
        "forgotten_topics_data": [{"topic": "sessions", "partitions": list(forgotten)}]
        if forgotten
        else [],
    }


def _append(broker, partition: int) -> None:  # type: ignore[no-untyped-def]
    partition_ = broker.replicas.get("sessions", partition)
    partition_.append_as_leader(encode_batch([(None, b"x")], base_timestamp=1000), 1000)


def _partitions(response) -> list[int]:  # type: ignore[no-untyped-def]
    return [p.partition_index for t in response.responses for p in t.partitions]


def _session(tmp_path: Path, steps) -> None:  # type: ignore[no-untyped-def]
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("sessions", 3, 1, {})
        client = await RawClient.connect(port)
        try:
            await steps(broker, client)
        finally:
            client.close()

    run_broker(tmp_path, check)


def test_initial_epoch_creates_a_session_and_answers_every_partition(tmp_path: Path) -> None:
    async def steps(broker, client) -> None:  # type: ignore[no-untyped-def]
        response = await client.call(FETCH, VERSION, _fetch(0, 0, [(0, 0), (1, 0), (2, 0)]))
        assert response.session_id != 0
        assert sorted(_partitions(response)) == [0, 1, 2]

    _session(tmp_path, steps)


def test_incremental_fetch_answers_only_partitions_with_news(tmp_path: Path) -> None:
    async def steps(broker, client) -> None:  # type: ignore[no-untyped-def]
        first = await client.call(FETCH, VERSION, _fetch(0, 0, [(0, 0), (1, 0), (2, 0)]))
        quiet = await client.call(FETCH, VERSION, _fetch(first.session_id, 1, []))
        assert _partitions(quiet) == []
        _append(broker, 1)
        news = await client.call(FETCH, VERSION, _fetch(first.session_id, 2, []))
        assert _partitions(news) == [1]
        assert news.responses[0].partitions[0].high_watermark == 1

    _session(tmp_path, steps)


def test_forgotten_partitions_leave_the_session(tmp_path: Path) -> None:
    async def steps(broker, client) -> None:  # type: ignore[no-untyped-def]
        first = await client.call(FETCH, VERSION, _fetch(0, 0, [(0, 0), (1, 0)]))
        await client.call(FETCH, VERSION, _fetch(first.session_id, 1, [], forgotten=[0]))
        _append(broker, 0)
        _append(broker, 1)
        response = await client.call(FETCH, VERSION, _fetch(first.session_id, 2, []))
        assert _partitions(response) == [1]

    _session(tmp_path, steps)


def test_wrong_epoch_is_refused(tmp_path: Path) -> None:
    async def steps(broker, client) -> None:  # type: ignore[no-untyped-def]
        first = await client.call(FETCH, VERSION, _fetch(0, 0, [(0, 0)]))
        response = await client.call(FETCH, VERSION, _fetch(first.session_id, 5, []))
        assert response.error_code == 71  # INVALID_FETCH_SESSION_EPOCH

    _session(tmp_path, steps)


def test_unknown_session_is_refused(tmp_path: Path) -> None:
    async def steps(broker, client) -> None:  # type: ignore[no-untyped-def]
        response = await client.call(FETCH, VERSION, _fetch(12345, 1, []))
        assert response.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND

    _session(tmp_path, steps)


def test_final_epoch_fetches_without_a_session(tmp_path: Path) -> None:
    async def steps(broker, client) -> None:  # type: ignore[no-untyped-def]
        first = await client.call(FETCH, VERSION, _fetch(0, 0, [(0, 0)]))
        closing = await client.call(FETCH, VERSION, _fetch(first.session_id, -1, [(0, 0)]))
        assert closing.session_id == 0 and _partitions(closing) == [0]
        again = await client.call(FETCH, VERSION, _fetch(first.session_id, 1, []))
        assert again.error_code == 70

    _session(tmp_path, steps)


def test_a_fetch_naming_no_partition_is_answered_at_once_whatever_its_wait(tmp_path: Path) -> None:
    """A consumer closing its session sends a final-epoch Fetch of no partitions with its
    usual max wait (500 ms for Java's): as Kafka, the broker has nothing to wait for."""

    async def steps(broker, client) -> None:  # type: ignore[no-untyped-def]
        import time

        first = await client.call(FETCH, VERSION, _fetch(0, 0, [(0, 0)]))
        closing = {**_fetch(first.session_id, -1, []), "max_wait": 30_000, "min_bytes": 1}
        started = time.monotonic()
        answer = await client.call(FETCH, VERSION, closing)
        assert answer.error_code == 0
        assert time.monotonic() - started < 10

    _session(tmp_path, steps)
