"""Client telemetry (KIP-714): client-metrics subscriptions and the metrics clients push.

Subscriptions are Kafka's CLIENT_METRICS config resources, kept in the metadata log;
`ClientTelemetry` answers GetTelemetrySubscriptions and PushTelemetry as Kafka's
ClientMetricsManager does, decodes the OTLP payloads and keeps what they carry as
Prometheus series labelled by client id and client instance id.
"""

from kbroker.telemetry.service import ClientInfo, ClientTelemetry, TelemetryAnswer
from kbroker.telemetry.subscriptions import (
    CLIENT_METRICS_CONFIGS,
    INTERVAL_MS_DEFAULT,
    Subscription,
    SubscriptionError,
    parse_subscription,
    validate_subscription,
)

__all__ = [
    "CLIENT_METRICS_CONFIGS",
    "INTERVAL_MS_DEFAULT",
    "ClientInfo",
    "ClientTelemetry",
    "Subscription",
    "SubscriptionError",
    "TelemetryAnswer",
    "parse_subscription",
    "validate_subscription",
]
