"""A Fetch parked for min_bytes: woken by appends (parking again while too little has
come), answered by them long before max_wait, and forgotten when its client goes away."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from inprocess import RawClient, run_broker

from compat_tests.waiting import eventually_async
from kbroker.admin.client import fetch_fields

FETCH = 1
DELETE_RECORDS = 21
KEY = ("parked", 0)


def test_parked_fetch_wakes_on_appends_and_is_forgotten_with_its_client(tmp_path: Path) -> None:
    seen: dict[str, float] = {}

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("parked", 1, 1, {})
        producer = await RawClient.connect(port)
        consumer = await RawClient.connect(port)

        async def parked_now(count: int) -> None:
            await eventually_async(
                lambda: broker.waiters.parked(KEY) == count, timeout=10, what="parked fetches"
            )

        # One record's batch is under 100 bytes: the first append wakes the fetch, which
        # reads too little and parks again; the second completes it.
        request = fetch_fields("parked", max_wait=30_000, min_bytes=150)
        started = time.monotonic()
        fetch = asyncio.create_task(consumer.call(FETCH, 12, request))
        await parked_now(1)
        assert (await producer.produce("parked", b"x" * 40)).error_code == 0
        await parked_now(1)
        assert not fetch.done()
        assert (await producer.produce("parked", b"y" * 40)).error_code == 0
        response = await asyncio.wait_for(fetch, 10)
        seen["answered_after"] = time.monotonic() - started
        partition = response.responses[0].partitions[0]
        assert partition.error_code == 0
        assert partition.high_watermark == 2
        assert b"x" * 40 in bytes(partition.records) and b"y" * 40 in bytes(partition.records)
        assert broker.waiters.parked_requests() == 0

        # A client that goes away while its fetch is parked leaves nothing parked.
        idle = await RawClient.connect(port)
        later = asyncio.create_task(
            idle.call(FETCH, 12, fetch_fields("parked", max_wait=30_000, min_bytes=1, offset=2))
        )
        await parked_now(1)
        idle.close()
        await parked_now(0)
        later.cancel()
        producer.close()
        consumer.close()

    run_broker(tmp_path, check)
    assert seen["answered_after"] < 25  # by the appends, not by max_wait


def test_a_fetch_that_finds_a_diverging_epoch_is_answered_at_once(tmp_path: Path) -> None:
    """As Kafka's fetchMessages: a diverging epoch answers now, whatever min_bytes and
    max_wait say, so a fetcher truncates without waiting out its fetch wait."""

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("parked", 1, 1, {})
        client = await RawClient.connect(port)
        for value in (b"a", b"b"):
            assert (await client.produce("parked", value)).error_code == 0
        epoch = broker.replicas.get("parked", 0).leader_epoch
        # A fetcher past the end of the leader's latest epoch holds a tail never written here.
        request = fetch_fields("parked", max_wait=30_000, min_bytes=1, offset=5)
        request["topics"][0]["partitions"][0]["last_fetched_epoch"] = epoch
        response = await asyncio.wait_for(client.call(FETCH, 12, request), 10)
        partition = response.responses[0].partitions[0]
        assert partition.error_code == 0
        assert (partition.diverging_epoch.epoch, partition.diverging_epoch.end_offset) == (
            epoch,
            2,
        )
        client.close()

    run_broker(tmp_path, check)


def test_a_parked_fetch_answers_at_its_deadline_with_the_log_start_moved_meanwhile(
    tmp_path: Path,
) -> None:
    """Nothing wakes a parked fetch when DeleteRecords (or retention) moves a log start,
    yet its answer carries the log start as of its deadline, as a read then would."""

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("parked", 1, 1, {})
        producer = await RawClient.connect(port)
        consumer = await RawClient.connect(port)
        for value in (b"a", b"b", b"c"):
            assert (await producer.produce("parked", value)).error_code == 0
        request = fetch_fields("parked", max_wait=1_500, min_bytes=1, offset=3)
        fetch = asyncio.create_task(consumer.call(FETCH, 12, request))
        await eventually_async(
            lambda: broker.waiters.parked(KEY) == 1, timeout=10, what="a parked fetch"
        )
        deletion = {
            "topics": [{"name": "parked", "partitions": [{"partition_index": 0, "offset": 2}]}],
            "timeout": 5_000,
        }
        deleted = await producer.call(DELETE_RECORDS, 2, deletion)
        assert deleted.topics[0].partitions[0].low_watermark == 2
        assert not fetch.done()
        partition = (await asyncio.wait_for(fetch, 10)).responses[0].partitions[0]
        assert (partition.error_code, partition.high_watermark) == (0, 3)
        assert partition.log_start_offset == 2
        assert partition.records is None or not bytes(partition.records)
        producer.close()
        consumer.close()

    run_broker(tmp_path, check)
