"""The event loop stays awake briefly after answers, and stops when nothing comes back."""

from __future__ import annotations

import asyncio
import time

from kbroker.server.keep_awake import MAX_SKIP, KeepAwake


async def _settle(seconds: float) -> None:
    await asyncio.sleep(seconds)


def _run(coro_fn):
    return asyncio.run(coro_fn())


def test_an_answer_keeps_the_loop_polling_until_the_budget_runs_out():
    async def scenario():
        awake = KeepAwake(budget_s=0.05)
        started_cpu = time.process_time()
        awake.answered()
        await _settle(0.1)
        assert awake.spins == 1
        assert awake.hits == 0
        assert not awake.enabled
        return time.process_time() - started_cpu

    # The loop did not sleep through the budget: it polled for it.
    assert _run(scenario) >= 0.02


def test_a_request_during_the_spin_is_a_hit_and_keeps_spinning_on():
    async def scenario():
        awake = KeepAwake(budget_s=0.02)
        awake.answered()
        await asyncio.sleep(0)
        awake.request_read()
        await _settle(0.05)  # the budget runs out after the request: not a miss
        assert (awake.spins, awake.hits) == (1, 1)
        assert awake.enabled

    _run(scenario)


def test_answers_within_the_budget_extend_one_spin():
    async def scenario():
        awake = KeepAwake(budget_s=0.02)
        for _ in range(20):
            awake.answered()
            await asyncio.sleep(0.002)
            awake.request_read()
        assert awake.spins == 1
        assert awake.hits == 20

    _run(scenario)


def test_timers_and_other_callbacks_run_while_spinning():
    async def scenario():
        awake = KeepAwake(budget_s=5.0)
        awake.answered()
        started = time.perf_counter()
        await asyncio.sleep(0.005)
        waited = time.perf_counter() - started
        awake.request_read()
        return waited

    assert _run(scenario) < 0.5


def test_a_zero_budget_never_spins():
    async def scenario():
        awake = KeepAwake(budget_s=0)
        for _ in range(10):
            awake.answered()
            await asyncio.sleep(0)
            awake.request_read()
        assert awake.spins == 0

    _run(scenario)


def test_after_a_miss_a_request_soon_after_its_answer_turns_spinning_back_on():
    async def scenario():
        awake = KeepAwake(budget_s=0.002)
        awake.answered()
        await _settle(0.01)
        assert not awake.enabled
        awake.answered()  # let pass unspun: the first answer after a miss
        awake.request_read()  # ... yet the client came back within the budget
        assert awake.enabled
        assert awake.spins == 1

    _run(scenario)


def test_misses_in_a_row_spin_ever_fewer_answers():
    async def scenario():
        awake = KeepAwake(budget_s=0.001)
        answers = 0
        for _ in range(6):  # six misses in a row, each waited out
            spins = awake.spins
            while awake.spins == spins:
                awake.answered()
                answers += 1
            await _settle(0.005)
            assert not awake.enabled
        return answers, awake.spins

    answers, spins = _run(scenario)
    assert spins == 6
    # One answer, then probes after 1, 3, 7, 15 and 31 unspun ones (skips 2, 4 ... 32).
    assert answers == 1 + 2 + 4 + 8 + 16 + 32
    assert MAX_SKIP >= 32


def test_a_successful_probe_restores_spinning_on_every_answer():
    async def scenario():
        awake = KeepAwake(budget_s=0.002)
        awake.answered()
        await _settle(0.01)  # miss
        awake.answered()  # skipped
        await _settle(0.01)
        awake.request_read()  # late: no evidence
        assert not awake.enabled
        awake.answered()  # the probe
        await asyncio.sleep(0)
        awake.request_read()
        assert awake.enabled
        assert (awake.spins, awake.hits) == (2, 1)

    _run(scenario)
