"""Fetch sessions (KIP-227) against a live in-process broker."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from inprocess import RawClient, run_broker

from compat_tests.waiting import eventually_async
from kbroker.controller.state import MetadataState, TopicInfo
from kbroker.handlers.fetch import resolve_unknown_topics
from kbroker.protocol.batch import encode_batch
from kbroker.replica.fetch_sessions import EVICTION_S, FetchSessionCache, FetchTarget

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
    """Run `steps(broker, client)` against a broker holding topic "sessions" of three
    partitions; the client's `port` leads to the broker for other connections."""

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("sessions", 3, 1, {})
        client = await RawClient.connect(port)
        client.port = port
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


def test_a_parked_incremental_fetch_sends_a_quiet_partition_whose_log_start_moved(
    tmp_path: Path,
) -> None:
    """A session's read leaves out partitions with nothing new; if DeleteRecords moves
    one's log start while the fetch is parked (nothing wakes it for that), the answer
    at its deadline carries that partition with its new log start."""

    async def steps(broker, client) -> None:  # type: ignore[no-untyped-def]
        for _ in range(3):
            _append(broker, 0)
        first = await client.call(FETCH, VERSION, _fetch(0, 0, [(0, 0), (1, 0)]))
        assert sorted(_partitions(first)) == [0, 1]
        parked = {**_fetch(first.session_id, 1, [(0, 3)]), "max_wait": 1_500, "min_bytes": 1}
        fetch = asyncio.create_task(client.call(FETCH, VERSION, parked))
        await eventually_async(
            lambda: broker.waiters.parked(("sessions", 0)) == 1, timeout=10, what="parked"
        )
        deleter = await RawClient.connect(client.port)
        deletion = {
            "topics": [{"name": "sessions", "partitions": [{"partition_index": 0, "offset": 2}]}],
            "timeout": 5_000,
        }
        assert (await deleter.call(21, 2, deletion)).topics[0].partitions[0].low_watermark == 2
        deleter.close()
        assert not fetch.done()
        answer = await asyncio.wait_for(fetch, 10)
        assert _partitions(answer) == [0]
        assert answer.responses[0].partitions[0].log_start_offset == 2
        quiet = await client.call(FETCH, VERSION, _fetch(first.session_id, 2, []))
        assert _partitions(quiet) == []

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


def test_a_session_partition_of_a_topic_unknown_when_it_came_is_read_once_the_topic_is_known(
    tmp_path: Path,
) -> None:
    """A client whose metadata is ahead of this broker's names a partition in its first
    Fetch only: the session keeps it and names its topic on a later fetch (Kafka's
    maybeResolveUnknownName), rather than answering UNKNOWN_TOPIC for ever."""

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        client = await RawClient.connect(port)
        try:
            first = {
                **_fetch(0, 0, [(0, 0)]),
                "topics": [{**_fetch(0, 0, [(0, 0)])["topics"][0], "topic": "later"}],
            }
            answer = await client.call(FETCH, VERSION, first)
            assert [p.error_code for t in answer.responses for p in t.partitions] == [3]
            await broker.controller.create_topic("later", 1, 1, {})
            again = await client.call(FETCH, VERSION, _fetch(answer.session_id, 1, []))
            [(topic, partition)] = [(t, p) for t in again.responses for p in t.partitions]
            assert (topic.topic, partition.error_code, partition.high_watermark) == ("later", 0, 0)
        finally:
            client.close()

    run_broker(tmp_path, check)


def test_a_session_partition_named_by_an_unknown_topic_id_is_resolved_when_it_is_known() -> None:
    topic_id = uuid.uuid4()
    target = FetchTarget((topic_id, 0), None, topic_id, 0, 0, 1 << 20)
    resolve_unknown_topics(MetadataState(), [target])
    assert target.topic is None
    info = TopicInfo("later", topic_id, ())
    resolve_unknown_topics(
        MetadataState(topics={"later": info}, topics_by_id={topic_id: info}), [target]
    )
    assert (target.topic, target.topic_id) == ("later", topic_id)


# -- the cache's slots (max.incremental.fetch.session.cache.slots) -----------------------


def _targets(count: int) -> list[FetchTarget]:
    return [FetchTarget(("t", p), "t", None, p, 0, 1 << 20) for p in range(count)]


def _open(cache: FetchSessionCache, size: int, now: float, *, privileged: bool = False) -> int:
    return cache.plan(0, 0, _targets(size), [], privileged=privileged, now=now).session_id


def test_a_full_cache_makes_no_session_for_a_consumer_while_the_others_are_young() -> None:
    cache = FetchSessionCache(2)
    assert _open(cache, 3, 0.0) and _open(cache, 3, 1.0)
    plan = cache.plan(0, 0, _targets(5), [], now=2.0)
    assert plan.session_id == 0 and len(plan.targets) == 5  # answered in full, no session
    assert len(cache) == 2


def test_a_follower_takes_the_slot_of_a_young_consumer_session() -> None:
    cache = FetchSessionCache(2)
    small, big = _open(cache, 2, 0.0), _open(cache, 9, 1.0)
    follower = _open(cache, 1, 2.0, privileged=True)
    assert follower
    # The smaller consumer session went; the larger one is still there.
    assert cache.plan(small, 1, [], [], now=3.0).error_code == 70
    assert cache.plan(big, 1, [], [], now=3.0).error_code == 0
    # A follower's young session is no consumer's to take, nor another follower's.
    assert _open(cache, 50, 4.0) == 0
    assert _open(cache, 50, 4.0, privileged=True)  # takes the consumer's
    assert _open(cache, 50, 4.0, privileged=True) == 0
    assert cache.plan(follower, 1, [], [], now=5.0).error_code == 0
    assert cache.evictions == 2
    gauges = {m.name: m.samples[0].value for m in cache.collect()}
    assert gauges["kafka_server_fetchsessioncache_numincrementalfetchsessions"] == 2
    assert gauges["kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"] == 51
    assert gauges["kafka_server_fetchsessioncache_incrementalfetchsessionevictions"] == 2


def test_a_stale_session_gives_its_slot_to_anyone() -> None:
    cache = FetchSessionCache(1)
    follower = _open(cache, 9, 0.0, privileged=True)
    assert _open(cache, 1, EVICTION_S - 1) == 0
    assert _open(cache, 1, EVICTION_S + 1)
    assert cache.plan(follower, 1, [], [], now=EVICTION_S + 2).error_code == 70


def test_an_old_session_is_taken_by_a_larger_one_only() -> None:
    cache = FetchSessionCache(1)
    first = _open(cache, 5, 0.0)
    cache.plan(first, 1, [], [], now=EVICTION_S)  # used lately, but made long ago
    assert _open(cache, 5, EVICTION_S + 1) == 0  # a tie keeps it
    assert _open(cache, 6, EVICTION_S + 1)


def test_no_slots_means_no_sessions() -> None:
    cache = FetchSessionCache(0)
    plan = cache.plan(0, 0, _targets(2), [], privileged=True, now=0.0)
    assert plan.session_id == 0 and len(plan.targets) == 2
