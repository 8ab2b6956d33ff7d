"""compat_tests.waiting: the one way tests wait for a condition."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from compat_tests.waiting import eventually, eventually_async


def test_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, [], "ready", "later"])
    assert eventually(lambda: next(values), timeout=5, what="ready", interval=0) == "ready"


def test_an_exception_means_not_yet() -> None:
    calls = itertools.count()

    def flaky() -> int:
        n = next(calls)
        if n < 3:
            raise ConnectionRefusedError("not listening yet")
        return n

    assert eventually(flaky, timeout=5, what="a listener", interval=0) == 3


def test_a_timeout_names_what_and_the_last_value() -> None:
    polls = itertools.count()
    with pytest.raises(AssertionError) as failed:
        eventually(lambda: [next(polls)][:0], timeout=0.05, what="the ISR to grow", interval=0.01)
    assert "waiting for the ISR to grow (last value: [])" in str(failed.value)
    assert next(polls) >= 2  # polled more than once, and once more at the deadline


def test_a_timeout_names_the_last_exception() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("port 1")

    with pytest.raises(AssertionError, match=r"a broker \(last error: ConnectionRefusedError") as e:
        eventually(refused, timeout=0, what="a broker")
    assert isinstance(e.value.__cause__, ConnectionRefusedError)


def test_the_async_twin_awaits_the_predicate_and_lets_other_tasks_run() -> None:
    async def scenario() -> str:
        done = asyncio.Event()
        asyncio.get_running_loop().call_later(0.02, done.set)

        async def ready() -> str | None:
            return "set" if done.is_set() else None

        first = await eventually_async(ready, timeout=5, what="the event", interval=0.005)
        second = await eventually_async(done.is_set, timeout=5, what="the event")
        return f"{first} {second}"

    assert asyncio.run(scenario()) == "set True"


def test_the_async_twin_times_out_with_what() -> None:
    async def scenario() -> None:
        await eventually_async(lambda: None, timeout=0.02, what="a leader", interval=0.005)

    with pytest.raises(AssertionError, match=r"waiting for a leader \(last value: None\)"):
        asyncio.run(scenario())
