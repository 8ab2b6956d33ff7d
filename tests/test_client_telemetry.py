"""Client telemetry (KIP-714): subscriptions matched, pushes checked in Kafka's order, and
the OTLP metrics they carry kept as Prometheus series, capped per client instance."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kbroker.protocol.compression import GZIP, NONE, ZSTD, compress
from kbroker.telemetry import ClientInfo, ClientTelemetry, SubscriptionError, validate_subscription
from kbroker.telemetry.service import kafka_uuid

CLIENT = ClientInfo("app-1", "librdkafka", "2.16.0", "127.0.0.1", "40000")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def metrics_data(*points: tuple[str, str, float, dict[str, str]], delta: bool = True) -> bytes:
    """MetricsData with one metric per point: (name, "gauge" or "sum", value, attributes)."""
    scope = metrics_pb2.ScopeMetrics()
    for name, kind, value, attributes in points:
        metric = scope.metrics.add()
        metric.name = name
        point = (metric.gauge if kind == "gauge" else metric.sum).data_points.add()
        if kind == "sum":
            metric.sum.is_monotonic = True
            metric.sum.aggregation_temporality = (
                metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
                if delta
                else metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
            )
        point.as_double = value
        for key, text in attributes.items():
            point.attributes.append(
                common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=text))
            )
    data = metrics_pb2.MetricsData()
    data.resource_metrics.add().scope_metrics.append(scope)
    return data.SerializeToString()


def exported(telemetry: ClientTelemetry) -> dict[tuple[str, frozenset], float]:
    registry = CollectorRegistry()

    class Source:
        def collect(self):  # type: ignore[no-untyped-def]
            return telemetry.collect()

    registry.register(Source())
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def subscriptions() -> dict[str, dict[str, str]]:
    return {}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def telemetry(subscriptions, clock) -> ClientTelemetry:  # type: ignore[no-untyped-def]
    # The service notices a change by the mapping's identity, as the metadata image
    # replaces its dict on every change: hand it a copy each time.
    return ClientTelemetry(lambda: dict(subscriptions), 2000, 5, clock)


def subscribe(telemetry: ClientTelemetry, client: ClientInfo = CLIENT) -> dict:
    answer = telemetry.get_subscriptions(None, client)
    assert answer.error == ErrorCode.none
    return answer.body


def test_without_a_subscription_a_client_is_asked_for_nothing(telemetry):
    body = subscribe(telemetry)
    assert body["requested_metrics"] == []
    assert body["push_interval"] == 300000
    assert body["telemetry_max_bytes"] == 2000
    assert body["accepted_compression_types"] == [4, 3, 1, 2]
    assert body["delta_temporality"] is True
    assert isinstance(body["client_instance_id"], uuid.UUID)


def test_matching_subscriptions_give_their_metrics_and_the_shortest_interval(
    telemetry, subscriptions
):
    subscriptions["a"] = {"metrics": "org.apache.kafka.producer", "interval.ms": "1000"}
    subscriptions["b"] = {
        "metrics": "org.apache.kafka.consumer",
        "interval.ms": "500",
        "match": "client_software_name=librdkafka,client_id=app-.*",
    }
    subscriptions["c"] = {"metrics": "*", "interval.ms": "100", "match": "client_id=other"}
    body = subscribe(telemetry)
    assert body["requested_metrics"] == ["org.apache.kafka.consumer", "org.apache.kafka.producer"]
    assert body["push_interval"] == 500
    other = subscribe(telemetry, ClientInfo("other", "java", "4.3", "127.0.0.1", "1"))
    assert other["requested_metrics"] == ["*"]
    assert other["push_interval"] == 100


def test_a_second_get_within_the_interval_is_throttled(telemetry, subscriptions, clock):
    subscriptions["a"] = {"metrics": "*", "interval.ms": "1000"}
    body = subscribe(telemetry)
    again = telemetry.get_subscriptions(body["client_instance_id"], CLIENT)
    assert again.error == ErrorCode.throttling_quota_exceeded
    clock.now += 1.0
    assert telemetry.get_subscriptions(body["client_instance_id"], CLIENT).error == ErrorCode.none


def test_pushed_metrics_are_exported_with_client_labels(telemetry, subscriptions, clock):
    subscriptions["a"] = {"metrics": "*", "interval.ms": "1000"}
    body = subscribe(telemetry)
    instance, sub = body["client_instance_id"], body["subscription_id"]
    payload = metrics_data(
        ("org.apache.kafka.producer.node.request.latency.avg", "gauge", 2.5, {"node.id": "1"}),
        ("org.apache.kafka.producer.connection.creation.total", "sum", 3, {}),
    )
    answer = telemetry.push(instance, sub, False, ZSTD, compress(ZSTD, payload), CLIENT)
    assert answer.error == ErrorCode.none
    labels = {"client_id": "app-1", "client_instance_id": kafka_uuid(instance)}
    samples = exported(telemetry)
    gauge = "org_apache_kafka_producer_node_request_latency_avg"
    assert samples[(gauge, frozenset({**labels, "node_id": "1"}.items()))] == 2.5
    counter = "org_apache_kafka_producer_connection_creation_total"
    assert samples[(counter, frozenset(labels.items()))] == 3
    # Deltas add up; gauges are replaced.
    clock.now += 1.0
    payload = metrics_data(
        ("org.apache.kafka.producer.node.request.latency.avg", "gauge", 1.0, {"node.id": "1"}),
        ("org.apache.kafka.producer.connection.creation.total", "sum", 2, {}),
    )
    assert telemetry.push(instance, sub, False, NONE, payload, CLIENT).error == ErrorCode.none
    samples = exported(telemetry)
    assert samples[(gauge, frozenset({**labels, "node_id": "1"}.items()))] == 1.0
    assert samples[(counter, frozenset(labels.items()))] == 5


def test_series_past_the_cap_are_counted_not_exported(telemetry, subscriptions):
    subscriptions["a"] = {"metrics": "*", "interval.ms": "1000"}
    body = subscribe(telemetry)
    payload = metrics_data(*[(f"m{i}", "gauge", float(i), {}) for i in range(8)])
    answer = telemetry.push(
        body["client_instance_id"], body["subscription_id"], False, NONE, payload, CLIENT
    )
    assert answer.error == ErrorCode.none
    samples = exported(telemetry)
    assert sum(1 for name, _ in samples if name.startswith("m")) == 5
    labels = {"client_id": "app-1", "client_instance_id": kafka_uuid(body["client_instance_id"])}
    assert (
        samples[("kbroker_client_telemetry_dropped_series_total", frozenset(labels.items()))] == 3
    )


def test_bad_pushes_get_kafkas_error_codes(telemetry, subscriptions, clock):
    subscriptions["a"] = {"metrics": "*", "interval.ms": "1000"}
    body = subscribe(telemetry)
    instance, sub = body["client_instance_id"], body["subscription_id"]
    # No instance id, or a reserved one.
    for wrong in (None, uuid.UUID(int=0), uuid.UUID(int=1)):
        assert (
            telemetry.push(wrong, sub, False, NONE, b"", CLIENT).error == ErrorCode.invalid_request
        )
    # An instance the broker never gave out has no subscription of that id.
    stranger = telemetry.push(uuid.uuid4(), sub, False, NONE, b"", CLIENT)
    assert stranger.error == ErrorCode.unknown_subscription_id
    assert telemetry.push(instance, sub + 1, False, NONE, b"", CLIENT).error == (
        ErrorCode.unknown_subscription_id
    )
    # After UNKNOWN_SUBSCRIPTION_ID the client may ask again at once; it pushes an
    # interval later.
    clock.now += 0.01
    assert telemetry.get_subscriptions(instance, CLIENT).error == ErrorCode.none
    clock.now += 1.0
    too_big = b"x" * 2001
    answer = telemetry.push(instance, sub, False, NONE, too_big, CLIENT)
    assert answer.error == ErrorCode.telemetry_too_large
    clock.now += 1.0
    bomb = compress(
        GZIP, metrics_data(*[(f"long.name.{i}" * 20, "gauge", 1.0, {}) for i in range(50)])
    )
    assert len(bomb) < 2000
    assert telemetry.push(instance, sub, False, GZIP, bomb, CLIENT).error == (
        ErrorCode.telemetry_too_large
    )
    clock.now += 1.0
    assert telemetry.push(instance, sub, False, 9, b"", CLIENT).error == (
        ErrorCode.unsupported_compression_type
    )
    clock.now += 1.0
    assert telemetry.push(instance, sub, False, NONE, b"\xff\xff", CLIENT).error == (
        ErrorCode.invalid_record
    )
    # Too early, unless terminating; nothing after a terminating push.
    clock.now += 1.0
    assert telemetry.push(instance, sub, False, NONE, b"", CLIENT).error == ErrorCode.none
    assert telemetry.push(instance, sub, False, NONE, b"", CLIENT).error == (
        ErrorCode.throttling_quota_exceeded
    )
    assert telemetry.push(instance, sub, True, NONE, b"", CLIENT).error == ErrorCode.none
    clock.now += 5.0
    assert telemetry.push(instance, sub, False, NONE, b"", CLIENT).error == (
        ErrorCode.invalid_request
    )


def test_a_changed_subscription_makes_the_old_id_unknown(telemetry, subscriptions, clock):
    subscriptions["a"] = {"metrics": "org.apache.kafka.producer", "interval.ms": "1000"}
    body = subscribe(telemetry)
    subscriptions["a"] = {"metrics": "org.apache.kafka.consumer", "interval.ms": "1000"}
    answer = telemetry.push(
        body["client_instance_id"], body["subscription_id"], False, NONE, b"", CLIENT
    )
    assert answer.error == ErrorCode.unknown_subscription_id
    fresh = telemetry.get_subscriptions(body["client_instance_id"], CLIENT)
    assert fresh.error == ErrorCode.none
    assert fresh.body["requested_metrics"] == ["org.apache.kafka.consumer"]
    assert fresh.body["subscription_id"] != body["subscription_id"]


def test_quiet_instances_are_forgotten_with_their_series(telemetry, subscriptions, clock):
    subscriptions["a"] = {"metrics": "*", "interval.ms": "1000"}
    body = subscribe(telemetry)
    payload = metrics_data(("m", "gauge", 1.0, {}))
    telemetry.push(
        body["client_instance_id"], body["subscription_id"], False, NONE, payload, CLIENT
    )
    assert any(name == "m" for name, _ in exported(telemetry))
    clock.now += 61
    assert not any(name == "m" for name, _ in exported(telemetry))


@pytest.mark.parametrize(
    ("configs", "code", "message"),
    [
        ({"colour": "red"}, ErrorCode.invalid_request, "Unknown client metrics configuration"),
        ({"interval.ms": "99"}, ErrorCode.invalid_request, "between 100 and 3600000"),
        ({"interval.ms": "3600001"}, ErrorCode.invalid_request, "between 100 and 3600000"),
        ({"interval.ms": "soon"}, ErrorCode.invalid_config, "Not a number"),
        ({"match": "client_colour=red"}, ErrorCode.invalid_config, "Illegal client matching"),
        ({"match": "client_id"}, ErrorCode.invalid_config, "Illegal client matching"),
        ({"match": "client_id=(unclosed"}, ErrorCode.invalid_config, "not a valid regular"),
    ],
)
def test_bad_subscriptions_are_refused_as_kafka_refuses_them(configs, code, message):
    with pytest.raises(SubscriptionError) as refused:
        validate_subscription("s", configs)
    assert refused.value.code == code
    assert message in refused.value.message


def test_a_subscription_needs_a_name():
    with pytest.raises(SubscriptionError) as refused:
        validate_subscription("", {"metrics": "*"})
    assert refused.value.code == ErrorCode.invalid_request
