"""KafkaConnection against hostile frames: every one gets an answer or a logged close.

A fake transport stands in for the socket, and a fake broker carries only what
dispatch needs; ApiVersions is the one handler run, as it touches no storage. The
rule checked throughout: data_received never raises, and a close always leaves a
warning naming the peer and the reason.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from compat_tests.waiting import eventually_async
from kbroker.config import BrokerConfig
from kbroker.controller.state import MetadataState
from kbroker.handlers.registry import APIS
from kbroker.metrics.counters import RequestCounters
from kbroker.protocol import messages
from kbroker.protocol.client_frames import request_frame
from kbroker.protocol.framing import frame
from kbroker.security.quotas import ClientQuotas
from kbroker.server.connection import KafkaConnection
from kbroker.server.connection_limits import ConnectionLimits
from kbroker.server.keep_awake import KeepAwake
from kbroker.server.request_memory import RequestMemory

pytestmark = pytest.mark.slow  # make test-fast leaves these out

MAX_REQUEST = 1 << 16
API_VERSIONS = 18
PRODUCE = 0
UNSUPPORTED_VERSION = 35


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.written += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return 0


class FakeMetadata:
    state = MetadataState()


class FakeParts:
    """ApiVersions, the one handler run, reads only settings and the metadata's version."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.controller = FakeMetadata()
        self.quotas = ClientQuotas(dict)  # none configured


class FakeBroker:
    max_request_bytes = MAX_REQUEST

    def __init__(self, max_idle_ms: int = -1, memory: RequestMemory | None = None) -> None:
        self.request_memory = memory or RequestMemory(-1)
        self.connections: set[KafkaConnection] = set()
        self.connection_limits = ConnectionLimits(2**31 - 1, 2**31 - 1)
        self.counters = RequestCounters()
        self.config = BrokerConfig.from_settings(
            {
                "connections.max.idle.ms": str(max_idle_ms),
                "logging.requests.enable": "false",
                "group.share.enable": "true",
                "group.coordinator.rebalance.protocols": "classic,consumer",
            }
        )
        self.parts = FakeParts(self.config)
        self.keep_awake = KeepAwake(budget_s=0)  # no running loop to spin in


def connect(
    max_idle_ms: int = -1, memory: RequestMemory | None = None
) -> tuple[KafkaConnection, FakeTransport]:
    conn = KafkaConnection(FakeBroker(max_idle_ms, memory))  # type: ignore[arg-type]
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def request(api_key: int, version: int, correlation: int, body: bytes = b"") -> bytes:
    """A whole frame, with the header version the API version asks for."""
    return request_frame(api_key, version, correlation, "fuzz", body)


def responses(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        out.append(bytes(data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return out


def closed_with(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(
        r.name == "kbroker.connection"
        and r.levelno == logging.WARNING
        and "127.0.0.1:40000" in r.getMessage()
        and text in r.getMessage()
        for r in caplog.records
    )


def test_api_versions_v0_is_answered() -> None:
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 0, 42))
    (answer,) = responses(transport.written)
    correlation, error, count = struct.unpack_from(">ihi", answer)
    assert (correlation, error, count) == (42, 0, len(APIS))
    assert not transport.closed


def test_api_versions_above_the_range_gets_v0_unsupported_version_with_the_ranges() -> None:
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 99, 7, b"garbage that is never parsed"))
    (answer,) = responses(transport.written)
    correlation, error, count = struct.unpack_from(">ihi", answer)
    assert (correlation, error, count) == (7, UNSUPPORTED_VERSION, len(APIS))
    ranges = {struct.unpack_from(">hhh", answer, 10 + 6 * i)[0] for i in range(count)}
    assert ranges == set(APIS)
    assert not transport.closed


def test_unknown_api_key_closes_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    conn, transport = connect()
    conn.data_received(request(9999, 0, 1))
    assert transport.closed and not transport.written
    assert closed_with(caplog, "unknown API key 9999")


def test_unsupported_produce_version_closes_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn, transport = connect()
    conn.data_received(request(PRODUCE, 99, 1))
    assert transport.closed and not transport.written
    assert closed_with(caplog, "unsupported version 99 of API 0")


@pytest.mark.parametrize("size", [-1, -(2**31), MAX_REQUEST + 1, 2**31 - 1])
def test_bad_size_prefix_closes_with_a_log_line(
    size: int, caplog: pytest.LogCaptureFixture
) -> None:
    conn, transport = connect()
    conn.data_received(struct.pack(">i", size))
    assert transport.closed
    assert closed_with(caplog, "bad frame")


def test_frame_shorter_than_a_header_closes(caplog: pytest.LogCaptureFixture) -> None:
    conn, transport = connect()
    conn.data_received(frame(3) + b"abc")
    assert transport.closed
    assert closed_with(caplog, "shorter than a header")


def test_truncated_body_closes_naming_the_api(caplog: pytest.LogCaptureFixture) -> None:
    conn, transport = connect()
    conn.data_received(request(3, 12, 5, b"\x05"))  # Metadata: 4 topics, no bytes
    assert transport.closed
    assert closed_with(caplog, "malformed metadata v12 request (correlation 5)")


def test_hostile_array_count_closes_instead_of_aborting(caplog: pytest.LogCaptureFixture) -> None:
    conn, transport = connect()
    body = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1) + bytes.fromhex("a8c881905c")
    conn.data_received(request(1, 12, 9, body))
    assert transport.closed
    assert closed_with(caplog, "array of 24729642023 elements")


def test_requests_after_a_bad_one_in_the_same_read_are_dropped() -> None:
    conn, transport = connect()
    conn.data_received(request(9999, 0, 1) + request(API_VERSIONS, 0, 2))
    assert transport.closed and not transport.written


def test_answers_before_a_bad_request_are_sent_in_order() -> None:
    conn, transport = connect()
    conn.data_received(
        request(API_VERSIONS, 0, 1) + request(API_VERSIONS, 1, 2) + request(9999, 0, 3)
    )
    assert [struct.unpack_from(">i", r)[0] for r in responses(transport.written)] == [1, 2]
    assert transport.closed


def test_thousands_of_tiny_requests_in_one_read_are_all_answered() -> None:
    conn, transport = connect()
    count = 3000
    conn.data_received(b"".join(request(API_VERSIONS, 0, i) for i in range(count)))
    answers = responses(transport.written)
    assert [struct.unpack_from(">i", r)[0] for r in answers] == list(range(count))
    assert not transport.closed


def test_handler_failure_closes_with_internal_error(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(ctx: Any, body: Any) -> Any:
        raise RuntimeError("boom")

    api = APIS[API_VERSIONS]
    monkeypatch.setitem(
        APIS, API_VERSIONS, type(api)(api.key, api.min_version, api.max_version, broken)
    )
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 0, 1))
    assert transport.closed
    assert closed_with(caplog, "internal error")


def test_unencodable_handler_result_closes_with_a_log_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def out_of_range(ctx: Any, body: Any) -> Any:
        return {"error_code": 0, "api_keys": [{"api_key": 1 << 20}], "throttle_time": 0}

    api = APIS[API_VERSIONS]
    monkeypatch.setitem(
        APIS, API_VERSIONS, type(api)(api.key, api.min_version, api.max_version, out_of_range)
    )
    conn, transport = connect()
    conn.data_received(request(API_VERSIONS, 0, 1))
    assert transport.closed
    assert closed_with(caplog, "internal error")


# -- random input -------------------------------------------------------------------------

api_frames = st.builds(
    lambda key, version, correlation, body: request(key, version, correlation, body),
    st.sampled_from([API_VERSIONS, 9999, -1]),  # handlers needing a broker run live
    st.integers(-2, 20),
    st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=60),
)
streams = st.lists(api_frames | st.binary(max_size=40), max_size=8).map(b"".join)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(streams, st.integers(1, 64))
def test_random_streams_are_answered_or_closed_with_a_log_line(data: bytes, chunk: int) -> None:
    conn, transport = connect()
    handler = logging.getLogger("kbroker.connection")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(logging.WARNING)
    handler.addHandler(keep)
    try:
        for i in range(0, len(data), chunk):
            conn.data_received(data[i : i + chunk])
            if transport.closed:
                break
    finally:
        handler.removeHandler(keep)
    if transport.closed:
        assert any("closing connection from 127.0.0.1:40000" in r.getMessage() for r in records)


# -- idle connections (connections.max.idle.ms) ---------------------------------------------

IDLE_MS = 200


def test_idle_connection_is_closed_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> float:
        began = time.monotonic()
        _, transport = connect(IDLE_MS)
        await eventually_async(lambda: transport.closed, timeout=10, what="the idle close")
        return time.monotonic() - began

    assert asyncio.run(scenario()) >= IDLE_MS / 1000 * 0.9  # the timer's own clock
    assert closed_with(caplog, "connections.max.idle.ms")


def test_connection_in_use_is_not_idle() -> None:
    async def scenario() -> FakeTransport:
        conn, transport = connect(IDLE_MS)
        for i in range(8):
            conn.data_received(request(API_VERSIONS, 0, i))
            await asyncio.sleep(IDLE_MS / 1000 / 2)  # the input: a request every half limit
        return transport

    assert not asyncio.run(scenario()).closed


def test_request_being_answered_keeps_the_connection_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def slow(ctx: Any, body: Any) -> Any:
        await asyncio.sleep(IDLE_MS / 1000 * 3)  # the input: an answer that outlasts the limit
        return {"error_code": 0, "api_keys": [], "throttle_time": 0}

    api = APIS[API_VERSIONS]
    monkeypatch.setitem(
        APIS, API_VERSIONS, type(api)(api.key, api.min_version, api.max_version, slow)
    )

    async def scenario() -> tuple[bool, FakeTransport]:
        conn, transport = connect(IDLE_MS)
        conn.data_received(request(API_VERSIONS, 0, 1))
        await eventually_async(
            lambda: transport.written or transport.closed, timeout=10, what="the answer"
        )
        answered_open = bool(transport.written) and not transport.closed
        await eventually_async(lambda: transport.closed, timeout=10, what="the idle close")
        return answered_open, transport

    answered_open, transport = asyncio.run(scenario())
    assert answered_open
    assert transport.closed


def test_idle_limit_of_minus_one_never_closes() -> None:
    async def scenario() -> FakeTransport:
        _, transport = connect(-1)
        await asyncio.sleep(0.3)  # absence: longer than the limits the other tests close at
        return transport

    assert not asyncio.run(scenario()).closed


# -- parked requests of a closed connection ----------------------------------------------

FETCH = 1


def fetch_v12_body() -> bytes:
    entity = messages.build(
        load_request_schema(FETCH, 12),
        {"replica_id": -1, "max_wait": 2**31 - 1, "min_bytes": 2**31 - 1, "topics": []},
    )
    return messages.encode(entity)


def swap_handler(monkeypatch: pytest.MonkeyPatch, key: int, handler: Any) -> None:
    api = APIS[key]
    monkeypatch.setitem(APIS, key, type(api)(api.key, api.min_version, api.max_version, handler))


def test_parked_fetch_is_cancelled_when_its_connection_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcome: list[str] = []

    async def parked(ctx: Any, body: Any) -> Any:
        outcome.append("parked")
        try:
            await asyncio.sleep(3600)  # a fetch that nothing answers
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    swap_handler(monkeypatch, FETCH, parked)

    async def scenario() -> None:
        conn, _ = connect()
        conn.data_received(request(FETCH, 12, 1, fetch_v12_body()))
        await eventually_async(lambda: outcome, timeout=5, what="the fetch to park")
        conn.connection_lost(None)
        # before asyncio.run's own shutdown cancels it
        await eventually_async(lambda: len(outcome) > 1, timeout=5, what="the cancellation")
        assert outcome == ["parked", "cancelled"]

    asyncio.run(asyncio.wait_for(scenario(), 5))


def test_other_pending_requests_run_on_when_the_connection_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcome: list[str] = []
    release = asyncio.Event()

    async def slow(ctx: Any, body: Any) -> Any:
        await release.wait()  # still running when the connection is lost
        task = asyncio.current_task()
        assert task is not None  # its callback runs after the connection's own
        task.add_done_callback(lambda _: outcome.append("answer handled"))
        outcome.append("finished")
        return {"error_code": 0, "api_keys": [], "throttle_time": 0}

    swap_handler(monkeypatch, API_VERSIONS, slow)

    async def scenario() -> None:
        conn, transport = connect()
        conn.data_received(request(API_VERSIONS, 0, 1))
        conn.connection_lost(None)
        release.set()
        await eventually_async(lambda: len(outcome) > 1, timeout=5, what="the answer handled")
        assert not transport.written

    asyncio.run(asyncio.wait_for(scenario(), 5))
    assert outcome == ["finished", "answer handled"]


def test_unknown_api_keys_are_not_counted_as_requests() -> None:
    broker = FakeBroker()
    for key in (9999, -1, 1234, API_VERSIONS):
        conn = KafkaConnection(broker)  # type: ignore[arg-type]
        conn.connection_made(FakeTransport())  # type: ignore[arg-type]
        conn.data_received(request(key, 0, 1))
    assert dict(broker.counters.requests) == {API_VERSIONS: 1}


def test_a_request_split_across_reads_is_answered() -> None:
    conn, transport = connect()
    data = request(API_VERSIONS, 0, 42)
    conn.data_received(data[:7])
    conn.data_received(data[7:])
    (answer,) = responses(transport.written)
    assert struct.unpack_from(">ih", answer) == (42, 0)
    assert not transport.closed


# -- queued.max.request.bytes ------------------------------------------------------------


def padded_api_versions(correlation: int, size: int) -> bytes:
    """An ApiVersions v3 frame of `size` bytes in all (Kafka ignores bytes after a body)."""
    body = messages.encode(
        messages.build(
            load_request_schema(API_VERSIONS, 3),
            {"client_software_name": "fuzz", "client_software_version": "1"},
        )
    )
    whole = request(API_VERSIONS, 3, correlation, body)
    padding = size - len(whole)
    return frame(len(whole) - 4 + padding) + whole[4:] + b"\0" * padding


def test_while_a_request_over_the_budget_is_read_no_connection_starts_another() -> None:
    memory = RequestMemory(10_000)
    big, big_transport = connect(memory=memory)
    other, other_transport = connect(memory=memory)
    whole = padded_api_versions(1, 40_000)
    big.data_received(whole[:20_000])  # admitted: a begun frame is read whole
    assert big_transport.reading and memory.exhausted
    other.data_received(request(API_VERSIONS, 3, 2, b"\x05fuzz\x021\x00"))
    assert len(responses(bytes(other_transport.written))) == 1  # already read: answered
    assert not other_transport.reading  # but nothing new is read while memory is short
    big.data_received(whole[20_000:])
    assert len(responses(bytes(big_transport.written))) == 1
    assert memory.used == 0 and not memory.exhausted
    assert other_transport.reading and big_transport.reading


def test_a_closed_connection_gives_back_what_it_held() -> None:
    memory = RequestMemory(10_000)
    conn, _ = connect(memory=memory)
    waiting, waiting_transport = connect(memory=memory)
    conn.data_received(padded_api_versions(1, 50_000)[:30_000])
    waiting.data_received(request(API_VERSIONS, 3, 2, b"\x05fuzz\x021\x00"))
    assert memory.used >= 50_000 and not waiting_transport.reading
    conn.connection_lost(None)
    assert memory.used == 0 and waiting_transport.reading


def test_without_a_limit_reading_never_pauses() -> None:
    memory = RequestMemory(-1)
    conn, transport = connect(memory=memory)
    conn.data_received(padded_api_versions(1, 60_000)[:30_000])
    assert transport.reading and not memory.exhausted
