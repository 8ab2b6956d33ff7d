"""Client quota lookup in Kafka's precedence order, and the throttle Kafka's Rate gives."""

from __future__ import annotations

import asyncio

import pytest
from test_fuzz_connection import FakeBroker as PlainBroker
from test_fuzz_connection import FakeTransport, request, responses

from kbroker.protocol.client_frames import decode_response
from kbroker.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
    WindowedRate,
    entity_key,
)
from kbroker.server.connection import KafkaConnection

API_VERSIONS = 18


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def quotas(table: dict, clock: Clock | None = None, samples: int = 11) -> ClientQuotas:
    return ClientQuotas(lambda: table, samples, 1.0, clock or Clock())


@pytest.mark.parametrize(
    "configured, expected",
    [
        ({"user": "alice", "client-id": "app"}, 1.0),
        ({"user": "alice", "client-id": None}, 2.0),
        ({"user": "alice"}, 3.0),
        ({"user": None, "client-id": "app"}, 4.0),
        ({"user": None, "client-id": None}, 5.0),
        ({"user": None}, 6.0),
        ({"client-id": "app"}, 7.0),
        ({"client-id": None}, 8.0),
    ],
)
def test_the_most_specific_quota_wins_in_kafkas_order(configured: dict, expected: float) -> None:
    everything = {
        entity_key({"user": "alice", "client-id": "app"}): 1.0,
        entity_key({"user": "alice", "client-id": None}): 2.0,
        entity_key({"user": "alice"}): 3.0,
        entity_key({"user": None, "client-id": "app"}): 4.0,
        entity_key({"user": None, "client-id": None}): 5.0,
        entity_key({"user": None}): 6.0,
        entity_key({"client-id": "app"}): 7.0,
        entity_key({"client-id": None}): 8.0,
    }
    # Keep the expected entity and every less specific one.
    order = list(everything)
    table = {e: {PRODUCER_BYTE_RATE: v} for e, v in everything.items()}
    for entity in order[: order.index(entity_key(configured))]:
        del table[entity]
    found = quotas(table).bound(PRODUCER_BYTE_RATE, "alice", "app")
    assert found is not None and found[0] == expected


def test_no_quota_means_no_measurement_and_no_throttle() -> None:
    q = quotas({})
    assert not q.active
    assert q.record(PRODUCER_BYTE_RATE, "alice", "app", 10**9) == 0


def test_a_client_within_its_quota_is_not_throttled() -> None:
    clock = Clock()
    q = quotas({entity_key({"client-id": "app"}): {PRODUCER_BYTE_RATE: 1000.0}}, clock)
    for _ in range(10):
        assert q.record(PRODUCER_BYTE_RATE, "u", "app", 900) == 0
        clock.now += 1


def test_a_burst_is_throttled_by_kafkas_formula_until_it_leaves_the_window() -> None:
    clock = Clock()
    q = quotas({entity_key({"client-id": "app"}): {PRODUCER_BYTE_RATE: 1000.0}}, clock)
    # 20 000 bytes in a young window padded to 10 s: 2000 B/s, twice the quota, so
    # (2000 - 1000) / 1000 * 10 s.
    assert q.record(PRODUCER_BYTE_RATE, "u", "app", 20_000) == 10_000
    clock.now += 10
    assert q.record(PRODUCER_BYTE_RATE, "u", "app", 0) > 0  # still in the 11 samples
    clock.now += 1.5
    assert q.record(PRODUCER_BYTE_RATE, "u", "app", 0) == 0


def test_a_fetch_asks_no_more_than_a_window_passes_and_a_throttled_one_is_taken_back() -> None:
    """Kafka's getMaxValueInQuotaWindow and unrecordQuotaSensor: a consumer's fetch is
    bounded by quota x (samples - 1) x window, and the bytes of a fetch answered empty
    because it was throttled do not count."""
    clock = Clock()
    q = quotas({entity_key({"client-id": "app"}): {CONSUMER_BYTE_RATE: 1000.0}}, clock)
    assert q.max_value_in_window(CONSUMER_BYTE_RATE, "u", "app") == 10_000
    assert q.max_value_in_window(CONSUMER_BYTE_RATE, "u", "other") is None
    assert q.record(CONSUMER_BYTE_RATE, "u", "app", 9_000) == 0
    throttle = q.record(CONSUMER_BYTE_RATE, "u", "app", 9_000)
    assert throttle > 0
    q.unrecord(CONSUMER_BYTE_RATE, "u", "app", 9_000)
    # Only the first fetch's 9 000 bytes count: 100 more are within the quota.
    assert q.record(CONSUMER_BYTE_RATE, "u", "app", 100) == 0


def test_quotas_are_per_key() -> None:
    q = quotas({entity_key({"client-id": "app"}): {CONSUMER_BYTE_RATE: 10.0}})
    assert q.record(PRODUCER_BYTE_RATE, "u", "app", 10**6) == 0
    assert q.record(CONSUMER_BYTE_RATE, "u", "app", 10**6) > 0


def test_old_samples_leave_the_window() -> None:
    rate = WindowedRate(samples=2, window_s=1.0)
    rate.record(1000, 0.0)
    assert rate.rate(0.5) == 1000 / 1.5
    assert rate.rate(5.0) == 0.0


def test_a_client_over_its_request_percentage_is_told_and_muted() -> None:
    """request_percentage: the handler's time counts against the client's quota; the
    answer carries the throttle time and the connection reads nothing until it ends."""
    broker = PlainBroker()
    table = {entity_key({"client-id": "fuzz"}): {REQUEST_PERCENTAGE: 1e-9}}
    broker.parts.quotas = ClientQuotas(lambda: table)
    conn = KafkaConnection(broker)  # type: ignore[arg-type]
    transport = FakeTransport()

    async def feed() -> None:
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(request(API_VERSIONS, 3, 5, b"\x05fuzz\x021\x00"))
        conn.data_received(request(API_VERSIONS, 3, 6, b"\x05fuzz\x021\x00"))
        await asyncio.sleep(0)  # one loop turn: the answers scheduled are written

    asyncio.run(feed())
    (answer,) = responses(transport.written)  # the second request waits, unread
    correlation, decoded = decode_response(API_VERSIONS, 3, answer)
    assert correlation == 5
    assert decoded.throttle_time.total_seconds() > 0
    assert not transport.reading


def test_quota_changes_tell_the_broker_whether_any_quota_is_left() -> None:
    from kbroker.controller.commands import ALTER_CLIENT_QUOTAS, apply_command
    from kbroker.controller.events import ClientQuotasChanged
    from kbroker.controller.state import MetadataState

    entity = [["client-id", "app"]]
    added = apply_command(
        MetadataState(), ALTER_CLIENT_QUOTAS, {"entries": [[entity, {PRODUCER_BYTE_RATE: 5.0}, []]]}
    )
    assert added.events == (ClientQuotasChanged(True),)
    removed = apply_command(
        added.state, ALTER_CLIENT_QUOTAS, {"entries": [[entity, {}, [PRODUCER_BYTE_RATE]]]}
    )
    assert removed.events == (ClientQuotasChanged(False),)
    assert removed.state.client_quotas == {}
