"""The event loop stays awake briefly after answers while clients come back within the
budget, and stops spinning for clients that do not."""

from __future__ import annotations

import asyncio
import time

from kbroker.server.keep_awake import MAX_SKIP, KeepAwake


def _run(scenario):
    return asyncio.run(scenario())


async def _miss(awake: KeepAwake) -> None:
    """An answer that nobody follows up within the budget."""
    awake.answered()
    await asyncio.sleep(awake.budget_s * 5)  # the input: time past the budget
    awake.request_read()


def test_an_answer_keeps_the_loop_polling_until_the_budget_runs_out(monkeypatch):
    polls: list[float] = []
    spin = KeepAwake._spin

    def counted_spin(self: KeepAwake) -> None:
        polls.append(time.perf_counter())
        spin(self)

    monkeypatch.setattr(KeepAwake, "_spin", counted_spin)

    async def scenario():
        awake = KeepAwake(budget_s=0.05)
        answered = time.perf_counter()
        awake.answered()
        await asyncio.sleep(0.1)  # the input: the budget runs out with no request
        assert (awake.spins, awake.hits, awake.misses) == (1, 0, 1)
        return answered

    answered = _run(scenario)
    # The loop did not sleep through the budget: it kept a callback ready, polling its
    # sockets again and again (counted, not timed: CPU time depends on the machine's
    # load), until the budget had passed, and then stopped.
    assert len(polls) > 5
    assert polls[-1] - answered >= 0.05


def test_a_request_within_the_budget_is_a_hit():
    async def scenario():
        awake = KeepAwake(budget_s=0.05)
        awake.answered()
        await asyncio.sleep(0)  # one loop turn: the request comes within the budget
        awake.request_read()
        await asyncio.sleep(0.1)  # the budget runs out after the request: no miss
        assert (awake.spins, awake.hits, awake.misses) == (1, 1, 0)
        assert awake.enabled

    _run(scenario)


def test_answers_within_the_budget_extend_one_spin():
    async def scenario():
        # A budget far above the pause between answers, so that a loaded machine's
        # scheduling delays stay inside it.
        awake = KeepAwake(budget_s=0.5)
        for _ in range(20):
            awake.answered()
            await asyncio.sleep(0.002)  # the input: a request 2 ms after each answer
            awake.request_read()
        assert (awake.spins, awake.hits) == (1, 20)

    _run(scenario)


def test_timers_and_other_callbacks_run_while_spinning():
    async def scenario():
        awake = KeepAwake(budget_s=5.0)
        awake.answered()
        started = time.perf_counter()
        await asyncio.sleep(0.005)  # the input: how long a 5 ms sleep takes while spinning
        return time.perf_counter() - started

    assert _run(scenario) < 0.5


def test_a_zero_budget_never_spins():
    async def scenario():
        awake = KeepAwake(budget_s=0)
        for _ in range(10):
            awake.answered()
            await asyncio.sleep(0)  # one loop turn between answer and request
            awake.request_read()
        assert (awake.spins, awake.hits, awake.misses) == (0, 0, 0)
        assert not awake.enabled

    _run(scenario)


def test_one_miss_does_not_stop_spinning_but_misses_in_a_row_do():
    async def scenario():
        awake = KeepAwake(budget_s=0.001)
        await _miss(awake)
        assert awake.enabled
        misses = 1
        while awake.enabled:
            await _miss(awake)
            misses += 1
        return misses

    assert 4 <= _run(scenario) <= 8


def test_below_the_hit_rate_only_ever_rarer_probes_spin():
    async def scenario():
        awake = KeepAwake(budget_s=0.001)
        while awake.enabled:
            await _miss(awake)
        spins = awake.spins
        answers = 0
        for _ in range(200):  # unanswered answers: each a miss, probes back off
            await _miss(awake)
            answers += 1
        return awake.spins - spins, answers

    probes, answers = _run(scenario)
    assert 1 <= probes <= answers // 8
    assert answers >= MAX_SKIP


def test_requests_soon_after_unspun_answers_bring_spinning_back():
    async def scenario():
        awake = KeepAwake(budget_s=0.01)
        while awake.enabled:
            await _miss(awake)
        for _ in range(10):
            awake.answered()
            awake.request_read()  # the client came back at once
        assert awake.enabled

    _run(scenario)


def test_a_request_that_follows_no_answer_counts_for_nothing():
    async def scenario():
        awake = KeepAwake(budget_s=0.01)
        awake.request_read()
        awake.request_read()
        assert (awake.hits, awake.misses) == (0, 0)

    _run(scenario)
