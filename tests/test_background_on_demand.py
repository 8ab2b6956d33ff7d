"""Background work on demand: an idle node's share-group clock sets no timers, its log
flusher looks only at logs that may need a background fsync while flush.ms still has a
log fsynced on time, and a coordinator's periodic jobs are loop timers."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from compat_tests.waiting import eventually_async
from kbroker.broker import Broker
from kbroker.coordinator_runtime.internal_topics import _Periodic
from tests.inprocess import RawClient, run_broker

SHARE_GROUP_HEARTBEAT = 76
QUIET_S = 0.6  # six share-clock ticks, twelve flusher rounds


def clock_timers(broker: Broker) -> int:
    """The share clock's timers scheduled on the broker's loop."""
    assert broker.share_coordinator is not None
    run = broker.share_coordinator.clock._run
    scheduled = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
    return sum(1 for handle in scheduled if not handle.cancelled() and handle._callback == run)


def test_idle_node_sets_no_share_clock_timers_until_a_share_group_appears(tmp_path):
    async def check(broker: Broker, port: int) -> None:
        assert broker.share_coordinator is not None
        clock = broker.share_coordinator.clock
        # One tick after start finds nothing to do; the clock then rests.
        await eventually_async(
            lambda: clock.ticks >= 1 and clock_timers(broker) == 0,
            timeout=10,
            what="the share clock at rest",
        )
        ticks = clock.ticks
        await asyncio.sleep(QUIET_S)
        assert (clock.ticks, clock_timers(broker)) == (ticks, 0)

        client = await RawClient.connect(port)
        try:
            answer = await client.call(
                SHARE_GROUP_HEARTBEAT,
                1,
                {
                    "group_id": "on-demand",
                    "member_id": str(uuid.uuid4()),
                    "member_epoch": 0,
                    "rack_id": None,
                    "subscribed_topic_names": ["on-demand-topic"],
                },
            )
            assert answer.error_code == 0, answer
            # A share group holds state here now: the clock ticks for it.
            await eventually_async(
                lambda: clock.ticks >= ticks + 3 and clock_timers(broker) == 1,
                timeout=10,
                what="the share clock ticking for the group",
            )
        finally:
            client.close()

    run_broker(tmp_path, check)


def test_flusher_fsyncs_by_flush_ms_and_rests_without_a_policy(tmp_path):
    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(port)
        try:
            await client.create_topic("by-time", {"flush.ms": "300"})
            await client.create_topic("never", {})
            for topic in ("by-time", "never"):
                await eventually_async(
                    lambda topic=topic: broker.logs.get(topic, 0), timeout=10, what=topic
                )
            timed, untimed = broker.logs.get("by-time", 0), broker.logs.get("never", 0)
            assert timed is not None and untimed is not None
            await asyncio.sleep(0.4)  # both logs' last fsync (their creation) is flush.ms ago
            sent = time.monotonic()
            for topic in ("by-time", "never"):
                for _ in range(3):
                    assert (await client.produce(topic, b"x", acks=1)).error_code == 0
            # flush.ms ran out before the appends: the next flusher round fsyncs them.
            await eventually_async(
                lambda: timed.flushed_offset == 3, timeout=10, what="the flush.ms fsync"
            )
            assert time.monotonic() - sent < 5
            # Nothing unflushed is left under a policy that ends: the flusher rests. The
            # log without a flush policy keeps its appends unflushed (acks=1 waits for no
            # fsync), and is not looked at either.
            await eventually_async(
                lambda: not broker.logs._flush_due, timeout=10, what="the flusher at rest"
            )
            assert untimed.flushed_offset == 0 and untimed.log_end_offset == 3
            for _ in range(2):
                assert (await client.produce("by-time", b"y", acks=1)).error_code == 0
            await eventually_async(
                lambda: timed.flushed_offset == 5, timeout=10, what="the second fsync"
            )
        finally:
            client.close()

    run_broker(tmp_path, check)


def test_periodic_jobs_are_loop_timers_that_skip_and_survive_failures():
    async def scenario() -> None:
        calls: list[str] = []
        gate = [False]

        def sync_job() -> None:
            calls.append("sync")
            if len(calls) == 1:
                raise RuntimeError("the first run fails; the next ones go ahead")

        async def coroutine_job() -> None:
            await asyncio.sleep(0)
            calls.append("async")

        jobs = [
            _Periodic(0.01, sync_job, "sync job", None, logging.getLogger("test")),
            _Periodic(
                0.01, coroutine_job, "coroutine job", lambda: gate[0], logging.getLogger("t")
            ),
        ]
        await eventually_async(lambda: calls.count("sync") >= 3, timeout=10, what="sync runs")
        assert "async" not in calls  # skipped while `when` says no
        gate[0] = True
        await eventually_async(lambda: calls.count("async") >= 2, timeout=10, what="async runs")
        running = [task for job in jobs if (task := job.stop()) is not None]
        for task in running:
            task.cancel()
        stopped = list(calls)
        await asyncio.sleep(0.1)  # ten intervals
        assert calls == stopped

    asyncio.run(scenario())
