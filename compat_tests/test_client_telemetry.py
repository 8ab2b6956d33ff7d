"""Client telemetry (KIP-714) with a stock client: a client-metrics subscription set as
kafka-client-metrics.sh sets it (IncrementalAlterConfigs on CLIENT_METRICS), librdkafka's
pushes accepted, and its metrics on /metrics labelled by client id and instance id."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.index import load_request_schema

from compat_tests.broker_process import BrokerProcess, free_port, running_broker
from compat_tests.java_driver import JavaDriver
from compat_tests.metrics_scrape import scrape
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection, parse_address
from kbroker.protocol.messages import build

pytestmark = pytest.mark.timeout(120)

CLIENT_METRICS = 16
SET, DELETE = 0, 1


def ask(node: BrokerProcess, api_key: int, version: int, body: dict[str, Any]) -> Any:
    host, port = parse_address(node.bootstrap)
    with BrokerConnection(host, port, 15.0, "telemetry-test") as conn:
        return conn.ask(build(load_request_schema(api_key, version), body))


def alter(node: BrokerProcess, name: str, ops: list[tuple[str, int, str | None]]) -> Any:
    body = {
        "resources": [
            {
                "resource_type": CLIENT_METRICS,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
            }
        ],
        "validate_only": False,
    }
    return ask(node, 44, 1, body).responses[0]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    http = f"127.0.0.1:{free_port()}"
    settings = {"http.listeners": f"http://{http}", "telemetry.max.bytes": "65536"}
    with running_broker(tmp_path_factory.mktemp("telemetry"), settings) as broker:
        yield broker, http


def test_a_subscription_is_kept_described_and_listed(node):
    broker, _ = node
    answer = alter(
        broker,
        "described",
        [("metrics", SET, "org.apache.kafka.producer."), ("interval.ms", SET, "60000")],
    )
    assert int(answer.error_code) == 0, answer.error_message
    described = ask(
        broker,
        32,
        4,
        {
            "resources": [
                {
                    "resource_type": CLIENT_METRICS,
                    "resource_name": "described",
                    "configuration_keys": None,
                }
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    ).results[0]
    assert int(described.error_code) == 0
    values = {c.name: c.value for c in described.configs}
    assert values == {
        "metrics": "org.apache.kafka.producer.",
        "interval.ms": "60000",
        "match": "",
    }
    listed = ask(broker, 74, 1, {"resource_types": [CLIENT_METRICS]})
    assert "described" in {r.resource_name for r in listed.config_resources}
    # Deleting every config removes the subscription.
    alter(broker, "described", [("metrics", DELETE, None), ("interval.ms", DELETE, None)])
    listed = ask(broker, 74, 1, {"resource_types": [CLIENT_METRICS]})
    assert "described" not in {r.resource_name for r in listed.config_resources}


def test_bad_subscriptions_get_kafkas_errors(node):
    broker, _ = node
    assert int(alter(broker, "bad", [("interval.ms", SET, "50")]).error_code) == 42
    assert int(alter(broker, "bad", [("colour", SET, "red")]).error_code) == 42
    assert int(alter(broker, "bad", [("match", SET, "client_colour=red")]).error_code) == 40


def test_librdkafka_pushes_its_metrics_to_prometheus(node):
    broker, http = node
    answer = alter(
        broker,
        "everything",
        [("metrics", SET, "*"), ("interval.ms", SET, "500"), ("match", SET, "client_id=tele-.*")],
    )
    assert int(answer.error_code) == 0, answer.error_message
    client_id = f"tele-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id})
    try:
        producer.produce("telemetry-topic", b"v")
        producer.flush(10)

        def pushed() -> list[tuple[str, dict[str, str]]] | None:
            producer.poll(0)
            found = [
                (name, dict(labels))
                for name, labels in scrape(http)
                if name.startswith("org_apache_kafka_producer")
                and dict(labels).get("client_id") == client_id
            ]
            return found or None

        found = eventually(pushed, timeout=60, what="librdkafka's producer metrics on /metrics")
        assert all(labels["client_instance_id"] for _, labels in found)
    finally:
        producer.flush(5)


def test_bad_pushes_are_refused_with_kafkas_codes(node):
    broker, _ = node
    host, port = parse_address(broker.bootstrap)
    with BrokerConnection(host, port, 15.0, "tele-raw") as conn:
        got = conn.ask(build(load_request_schema(71, 0), {"client_instance_id": None}))
        assert int(got.error_code) == 0
        instance, subscription = got.client_instance_id, got.subscription_id

        def push(**changes: Any) -> int:
            body = {
                "client_instance_id": instance,
                "subscription_id": subscription,
                "terminating": False,
                "compression_type": 0,
                "metrics": b"",
                **changes,
            }
            return int(conn.ask(build(load_request_schema(72, 0), body)).error_code)

        assert push(client_instance_id=uuid.UUID(int=0)) == 42  # INVALID_REQUEST
        assert push(subscription_id=subscription + 1) == 117  # UNKNOWN_SUBSCRIPTION_ID
        # Asked again after an unknown subscription: answered at once.
        assert (
            int(
                conn.ask(
                    build(load_request_schema(71, 0), {"client_instance_id": instance})
                ).error_code
            )
            == 0
        )
        assert push(metrics=b"x" * 65537, terminating=True) == 118  # TELEMETRY_TOO_LARGE


def test_the_java_client_pushes_its_metrics_to_prometheus(node, java4_classpath, tmp_path):
    broker, http = node
    answer = alter(
        broker,
        "java-clients",
        [("metrics", SET, "org.apache.kafka."), ("interval.ms", SET, "500")],
    )
    assert int(answer.error_code) == 0, answer.error_message
    client_id = f"java-tele-{uuid.uuid4().hex[:8]}"
    with JavaDriver(java4_classpath, broker.bootstrap, tmp_path / "driver.log") as java:
        java.call(
            "producer-open", bootstrap=broker.bootstrap, name="p", producer={"client.id": client_id}
        )
        java.call("produce", bootstrap=broker.bootstrap, producer="p", topic="java-tele", count=3)

        def pushed() -> list[str] | None:
            found = [
                name
                for name, labels in scrape(http)
                if name.startswith("org_apache_kafka_producer")
                and dict(labels).get("client_id") == client_id
            ]
            return found or None

        eventually(pushed, timeout=60, what="the Java producer's metrics on /metrics")
        java.call("close", name="p")
