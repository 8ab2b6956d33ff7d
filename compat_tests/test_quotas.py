"""Client quotas on a live broker: set and described with the quota APIs, enforced with
throttle_time_ms and a muted channel so a producer over its byte rate is held to it
while another client on the same broker is not slowed."""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from compat_tests.broker_process import BrokerProcess, running_broker
from kbroker.admin.client import BrokerConnection, ClientError, fetch_fields

pytestmark = pytest.mark.timeout(120)

INVALID_REQUEST = 42
QUOTA = 200_000  # bytes per second
RECORD = b"x" * 10_000


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Two one-second samples (Kafka's quota.window.* settings): a new client's burst
    # allowance is one window, so ten seconds show the steady throttled rate.
    settings = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
    with running_broker(tmp_path_factory.mktemp("quota-broker"), settings) as broker:
        yield broker


def alter(node: BrokerProcess, entity: list[tuple[str, str | None]], ops: list[dict]) -> int:
    with BrokerConnection.to(node.bootstrap) as conn:
        answer = conn.request(
            49,
            1,
            entries=[
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "ops": ops,
                }
            ],
            validate_only=False,
        )
    return int(answer.entries[0].error_code)


def describe(node: BrokerProcess, client_id: str) -> dict[str, float]:
    with BrokerConnection.to(node.bootstrap) as conn:
        answer = conn.request(
            48,
            1,
            components=[{"entity_type": "client-id", "match_type": 0, "match": client_id}],
            strict=True,
        )
    assert answer.error_code == 0
    return {v.key: v.value for e in answer.entries for v in e.values}


def set_quota(key: str, value: float) -> dict:
    return {"key": key, "value": value, "remove": False}


def produce_for(node: BrokerProcess, client_id: str, topic: str, seconds: float) -> list:
    """Produce as fast as the client may for ``seconds``; (seconds since start, bytes)
    for each acknowledged record."""
    acked: list[tuple[float, int]] = []
    # Small batches and a small local queue: the quota is measured in requests, and a
    # throttled client's backlog is dropped at the end rather than waited for.
    producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 32768,
            "queue.buffering.max.kbytes": 512,
        }
    )
    began = time.monotonic()

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append((time.monotonic() - began, len(RECORD)))

    while time.monotonic() - began < seconds:
        try:
            producer.produce(topic, RECORD, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge()
    producer.flush(10)
    return acked


def rate(acked: list[tuple[float, int]], start: float, end: float) -> float:
    return sum(n for t, n in acked if start <= t < end) / (end - start)


def test_quotas_are_stored_and_described_per_entity(node: BrokerProcess) -> None:
    client = f"described-{uuid.uuid4().hex[:6]}"
    assert alter(node, [("client-id", client)], [set_quota("consumer_byte_rate", 5e6)]) == 0
    assert describe(node, client) == {"consumer_byte_rate": 5e6}
    removal = [{"key": "consumer_byte_rate", "value": 0.0, "remove": True}]
    assert alter(node, [("client-id", client)], removal) == 0
    assert describe(node, client) == {}


@pytest.mark.parametrize(
    "entity, ops",
    [
        ([("client-id", "c")], [set_quota("controller_mutation_rate", 10.0)]),
        ([("ip", "10.0.0.1")], [set_quota("connection_creation_rate", 10.0)]),
        ([("client-id", "c")], [set_quota("producer_byte_rate", -1.0)]),
        ([("client-id", "c")], [set_quota("producer_byte_rate", 10.5)]),
    ],
)
def test_quotas_kbroker_would_not_enforce_are_refused(
    node: BrokerProcess, entity: list, ops: list
) -> None:
    assert alter(node, entity, ops) == INVALID_REQUEST


def test_a_producer_over_its_byte_rate_is_held_to_it_and_another_is_not_slowed(
    node: BrokerProcess,
) -> None:
    slow = f"slow-{uuid.uuid4().hex[:6]}"
    assert alter(node, [("client-id", slow)], [set_quota("producer_byte_rate", QUOTA)]) == 0
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    results: dict[str, list] = {}
    other = threading.Thread(
        target=lambda: results.update(fast=produce_for(node, "unlimited", topic, 3.0))
    )
    other.start()
    results["slow"] = produce_for(node, slow, topic, 12.5)
    other.join()
    # After the first two seconds (a new client may burst into its window) the throttled
    # producer's acknowledged rate over ten seconds is its quota, within 10%.
    measured = rate(results["slow"], 2.0, 12.0)
    print(f"throttled producer: {measured:.0f} B/s against a quota of {QUOTA}")
    assert abs(measured - QUOTA) <= 0.1 * QUOTA, f"{measured:.0f} B/s against {QUOTA}"
    assert rate(results["fast"], 0.0, 3.0) > 10 * QUOTA


def test_a_consumer_over_its_byte_rate_gets_an_empty_throttled_fetch_and_a_muted_channel(
    node: BrokerProcess,
) -> None:
    """As Kafka's fetch path: a consumer with a consumer_byte_rate quota is asked no more
    than the quota lets through in one window (10 kB here), so its first fetch passes;
    the second, over the rate, gets no data, Kafka's throttle time and a muted channel;
    then the consumer reads on (tests/test_security_quotas.py: its bytes were not
    counted)."""
    reader = f"reader-{uuid.uuid4().hex[:6]}"
    assert alter(node, [("client-id", reader)], [set_quota("consumer_byte_rate", 10_000)]) == 0
    topic = f"quota-read-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0})
    for _ in range(30):  # one batch of about 1 kB each
        producer.produce(topic, RECORD[:1000])
        assert producer.flush(30) == 0
    fetch = fetch_fields(topic, max_wait=datetime.timedelta(milliseconds=10), min_bytes=1)

    def fetched_bytes(answer: object) -> int:
        return sum(len(p.records or b"") for t in answer.responses for p in t.partitions)  # type: ignore[attr-defined]

    with BrokerConnection.to(node.bootstrap, client_id=reader) as conn:
        first = conn.request(1, 12, **fetch)
        assert first.throttle_time.total_seconds() == 0
        assert 5_000 < fetched_bytes(first) <= 10_000  # of the topic's 30 kB
        second = conn.request(1, 12, **fetch)
        throttle_ms = second.throttle_time.total_seconds() * 1000
        # About 20 kB against 10 kB/s over a window padded to 1 s: (20 - 10) / 10 * 1 s.
        assert 500 < throttle_ms < 2_000
        assert second.responses == ()  # Kafka's throttled fetch carries no data
        began = time.monotonic()
        conn.sock.settimeout(0.4)
        with pytest.raises(ClientError, match="timed out"):
            conn.request(18, 0)  # muted: not even read for the throttle time
    assert time.monotonic() - began >= 0.4
    time.sleep(max(0.0, throttle_ms / 1000 - (time.monotonic() - began)) + 1.1)
    with BrokerConnection.to(node.bootstrap, client_id=reader) as conn:
        third = conn.request(1, 12, **fetch)
        # Once the throttle and the window have passed, the consumer reads on.
        assert third.throttle_time.total_seconds() == 0
        assert fetched_bytes(third) > 5_000
