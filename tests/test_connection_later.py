"""Answers settled later by a callback (Later): written the moment they settle, in the
order their requests arrived."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest
from test_fuzz_connection import API_VERSIONS, closed_with, connect, request, responses

from compat_tests.waiting import eventually_async
from kbroker.handlers.registry import APIS, Api, Later
from kbroker.protocol.encoded import EncodedBody


@pytest.fixture
def pending(monkeypatch: pytest.MonkeyPatch) -> list[Later]:
    """ApiVersions replaced by a handler that answers each request with a new Later."""
    made: list[Later] = []

    def handler(_ctx, _body):
        later = Later()
        made.append(later)
        return later

    monkeypatch.setitem(APIS, API_VERSIONS, Api(API_VERSIONS, 0, 4, handler))
    return made


def correlations(written: bytes) -> list[int]:
    return [struct.unpack_from(">i", answer)[0] for answer in responses(written)]


def test_a_later_answer_is_written_when_it_settles(pending: list[Later]) -> None:
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 0, 1))
    assert transport.written == b""
    pending[0].settle(b"body")
    (answer,) = responses(transport.written)
    assert answer == struct.pack(">i", 1) + b"body"


def test_an_answer_settled_before_the_connection_asks_is_written_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def handler(_ctx, _body):
        later = Later()
        later.settle(b"now")
        return later

    monkeypatch.setitem(APIS, API_VERSIONS, Api(API_VERSIONS, 0, 4, handler))
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 0, 5))
    assert correlations(transport.written) == [5]


def test_answers_settled_out_of_order_go_out_in_request_order(pending: list[Later]) -> None:
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 0, 1) + request(API_VERSIONS, 0, 2))
    pending[1].settle(b"second")
    assert transport.written == b""
    pending[0].settle(b"first")
    assert correlations(transport.written) == [1, 2]


def test_a_failed_later_closes_the_connection_with_a_log_line(
    pending: list[Later], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 0, 1))
    pending[0].fail(OSError("disk gone"))
    assert transport.closed
    assert closed_with(caplog, "internal error")


def test_settling_after_the_connection_closed_writes_nothing(pending: list[Later]) -> None:
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 0, 1))
    conn.connection_lost(None)
    pending[0].settle(b"late")
    assert transport.written == b""


def test_a_later_settles_once() -> None:
    later = Later()
    seen: list[tuple[object, BaseException | None]] = []
    later.then(lambda value, error: seen.append((value, error)))
    later.settle(1)
    later.settle(2)
    later.fail(OSError())
    assert seen == [(1, None)]


def counting_writes(transport) -> list[bytes]:
    writes: list[bytes] = []
    write = transport.write

    def counted(data: bytes) -> None:
        writes.append(bytes(data))
        write(data)

    transport.write = counted
    return writes


def test_answers_to_requests_read_together_go_out_in_one_write() -> None:
    conn, transport = connect()
    writes = counting_writes(transport)
    conn.data_received(b"".join(request(API_VERSIONS, 0, i) for i in range(5)))
    assert len(writes) == 1
    assert correlations(transport.written) == [0, 1, 2, 3, 4]
    conn.data_received(request(API_VERSIONS, 0, 5))  # one request: written as it is answered
    assert len(writes) == 2


def test_a_later_settled_after_the_read_is_written_on_its_own(pending: list[Later]) -> None:
    conn, transport = connect()
    writes = counting_writes(transport)
    conn.data_received(request(API_VERSIONS, 0, 1) + request(API_VERSIONS, 0, 2))
    pending[0].settle(b"first")
    assert correlations(transport.written) == [1] and len(writes) == 1
    pending[1].settle(b"second")
    assert correlations(transport.written) == [1, 2] and len(writes) == 2


def test_an_answer_of_several_parts_settled_later_goes_out_in_one_write(
    pending: list[Later],
) -> None:
    """A parked fetch's answer (header, then its body's parts) settles from a timer,
    outside any read: one write, not a syscall and a packet for each part."""
    conn, transport = connect()
    writes = counting_writes(transport)
    conn.data_received(request(API_VERSIONS, 0, 7))
    pending[0].settle(EncodedBody([b"head-", b"middle-", b"tail"], 16))
    (answer,) = responses(transport.written)
    assert answer == struct.pack(">i", 7) + b"head-middle-tail"
    assert len(writes) == 1


def test_a_coroutine_ending_in_a_later_answer_holds_the_next_request_only_until_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A handler with work to await first (a Produce adding its partitions to a
    transaction) holds the connection's later requests until that work is done, and no
    longer: when it returns a Later (its answer waits for acks=all, as any Produce's
    may) the next request is handled at once, and the answers still go out in order."""
    made: list[Later] = []
    handled: list[int] = []

    def handler(ctx, _body):
        handled.append(ctx.header.correlation_id)
        later = Later()
        made.append(later)
        if len(made) > 1:
            return later

        async def work() -> Later:
            await asyncio.sleep(0)
            return later

        return work()

    monkeypatch.setitem(APIS, API_VERSIONS, Api(API_VERSIONS, 0, 4, handler))

    async def body() -> None:
        conn, transport = connect()
        conn.data_received(request(API_VERSIONS, 0, 1) + request(API_VERSIONS, 0, 2))
        assert handled == [1]  # the second waits for the first's work
        await eventually_async(
            lambda: handled == [1, 2], timeout=5, what="the second handled before any answer"
        )
        made[1].settle(b"second")
        assert transport.written == b""
        made[0].settle(b"first")
        assert correlations(transport.written) == [1, 2]

    asyncio.run(body())
