"""GetTelemetrySubscriptions and PushTelemetry as Kafka's ClientMetricsManager answers
them, and the pushed metrics kept as Prometheus series.

Each client instance (its id given by the broker on its first request) is matched
against the subscriptions; its subscription id is a CRC-32C of the metrics and interval
it gets, XORed with its id, so it changes when the subscriptions it matches change and
is the same on every broker. A push is checked in Kafka's order (terminated before,
early, unknown subscription, compression, size), then its OTLP MetricsData is decoded
(opentelemetry-proto) and each data point becomes one series labelled by client_id,
client_instance_id and the point's own attributes, at most `max_series` per instance.
Instances quiet for three push intervals (a minute at least) are forgotten.
"""

from __future__ import annotations

import base64
import logging
import re
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c
from google.protobuf.message import DecodeError
from kio.schema.errors import ErrorCode
from opentelemetry.proto.metrics.v1 import metrics_pb2
from prometheus_client.core import CounterMetricFamily, Metric

from kbroker.protocol import responses
from kbroker.protocol.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CompressionError,
    DecompressionBombError,
    decompress,
)
from kbroker.telemetry.subscriptions import (
    ALL_METRICS,
    INTERVAL_MS_DEFAULT,
    Subscription,
    SubscriptionError,
    parse_subscription,
)

log = logging.getLogger("kbroker.telemetry")

# Kafka's ClientMetricsManager.SUPPORTED_COMPRESSION_TYPES, the preferred first.
ACCEPTED_COMPRESSION = (ZSTD, LZ4, GZIP, SNAPPY)
_KNOWN_COMPRESSION = (NONE, *ACCEPTED_COMPRESSION)
# Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID: never a client instance's id.
RESERVED_IDS = (uuid.UUID(int=0), uuid.UUID(int=1))
MIN_EXPIRY_S = 60.0

DELTA = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_]")


def kafka_uuid(value: uuid.UUID) -> str:
    """As Kafka's Uuid.toString: url-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def prometheus_name(name: str) -> str:
    """An OTLP metric name as a Prometheus one: every other character an underscore."""
    cleaned = _NAME_CHARS.sub("_", name)
    return cleaned if cleaned[:1].isalpha() or cleaned[:1] == "_" else "_" + cleaned


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who asks: what a subscription's match patterns look at."""

    client_id: str
    software_name: str
    software_version: str
    address: str
    port: str


def _no_body() -> responses.GetTelemetrySubscriptionsResponse:
    return {}


@dataclass(frozen=True, slots=True)
class TelemetryAnswer:
    error: ErrorCode
    message: str | None = None
    body: responses.GetTelemetrySubscriptionsResponse = field(default_factory=_no_body)


@dataclass(slots=True)
class _Instance:
    instance_id: uuid.UUID
    client: ClientInfo
    version: int
    subscription_id: int
    metrics: tuple[str, ...]
    interval_ms: int
    last_get: float | None = None
    last_push: float | None = None
    last_seen: float = 0.0
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.none
    # (family name, kind, sorted label pairs) -> value; kind "gauge" or "counter"
    series: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    dropped: int = 0

    def expired(self, now: float) -> bool:
        return now - self.last_seen > max(MIN_EXPIRY_S, 3 * self.interval_ms / 1000)

    def may_get(self, now: float) -> bool:
        last = max((t for t in (self.last_get, self.last_push) if t is not None), default=None)
        if last is None or (now - last) * 1000 >= self.interval_ms:
            self.last_get = now
            return True
        return False

    def may_push(self, now: float) -> bool:
        # A push right after GetTelemetrySubscriptions is taken whenever it comes: the
        # client jitters its interval (Kafka's maybeUpdatePushRequestTimestamp).
        accept = self.last_get is not None and (
            self.last_push is None or self.last_get > self.last_push
        )
        if not accept:
            accept = self.last_push is None or (now - self.last_push) * 1000 >= self.interval_ms
        if accept:
            self.last_push = now
        return accept


def subscription_id(metrics: tuple[str, ...], interval_ms: int, instance_id: uuid.UUID) -> int:
    """CRC-32C of the metrics and interval XORed with the instance id's hash, as int32."""
    crc = crc32c((",".join(metrics) + str(interval_ms)).encode())
    hi, lo = struct.unpack(">QQ", instance_id.bytes)
    mixed = crc ^ ((hi ^ lo) & 0xFFFFFFFF) ^ ((hi ^ lo) >> 32)
    return struct.unpack(">i", struct.pack(">I", mixed & 0xFFFFFFFF))[0]


class ClientTelemetry:
    """One broker's client instances and the series their pushes left."""

    def __init__(
        self,
        subscriptions: Callable[[], Mapping[str, Mapping[str, str]]],
        max_bytes: int,
        max_series: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._configs = subscriptions
        self.max_bytes = max_bytes
        self.max_series = max_series
        self._clock = clock
        self._seen_configs: Mapping[str, Mapping[str, str]] | None = None
        self._subscriptions: list[Subscription] = []
        self._version = 0
        self.instances: dict[uuid.UUID, _Instance] = {}

    # -- subscriptions -----------------------------------------------------------------

    def _refresh(self) -> None:
        configs = self._configs()
        if configs is self._seen_configs:
            return
        parsed: list[Subscription] = []
        for name, values in sorted(configs.items()):
            try:
                parsed.append(parse_subscription(name, values))
            except SubscriptionError as exc:  # validated when set; never expected
                log.warning("client-metrics subscription %s is unusable: %s", name, exc.message)
        self._seen_configs = configs
        if [(s.name, s.metrics, s.interval_ms) for s in parsed] != [
            (s.name, s.metrics, s.interval_ms) for s in self._subscriptions
        ] or [list(s.match) for s in parsed] != [list(s.match) for s in self._subscriptions]:
            self._version += 1
        self._subscriptions = parsed

    def _attributes(self, instance_id: uuid.UUID, client: ClientInfo) -> dict[str, str]:
        return {
            "client_instance_id": kafka_uuid(instance_id),
            "client_id": client.client_id,
            "client_software_name": client.software_name,
            "client_software_version": client.software_version,
            "client_source_address": client.address,
            "client_source_port": client.port,
        }

    def _new_instance(self, instance_id: uuid.UUID, client: ClientInfo) -> _Instance:
        attributes = self._attributes(instance_id, client)
        interval = INTERVAL_MS_DEFAULT
        metrics: set[str] = set()
        every = False
        for sub in self._subscriptions:
            if sub.matches(attributes):
                every = every or ALL_METRICS in sub.metrics
                metrics |= sub.metrics
                interval = min(interval, sub.interval_ms)
        chosen = (ALL_METRICS,) if every else tuple(sorted(metrics))
        return _Instance(
            instance_id,
            client,
            self._version,
            subscription_id(chosen, interval, instance_id),
            chosen,
            interval,
        )

    def _instance(self, instance_id: uuid.UUID, client: ClientInfo, now: float) -> _Instance:
        self._refresh()
        self._expire(now)
        found = self.instances.get(instance_id)
        if found is None:
            found = self.instances[instance_id] = self._new_instance(instance_id, client)
        elif found.version < self._version:  # the subscriptions changed: evaluate again
            fresh = self._new_instance(instance_id, found.client)
            fresh.series, fresh.dropped = found.series, found.dropped
            found = self.instances[instance_id] = fresh
        found.last_seen = now
        return found

    def _expire(self, now: float) -> None:
        for key in [k for k, i in self.instances.items() if i.expired(now)]:
            del self.instances[key]

    # -- the two requests --------------------------------------------------------------

    def get_subscriptions(
        self, instance_id: uuid.UUID | None, client: ClientInfo
    ) -> TelemetryAnswer:
        now = self._clock()
        if instance_id is None or instance_id == RESERVED_IDS[0]:
            instance_id = uuid.uuid4()
            while instance_id in self.instances or instance_id in RESERVED_IDS:
                instance_id = uuid.uuid4()
        instance = self._instance(instance_id, client, now)
        if not instance.may_get(now) and instance.last_error not in (
            ErrorCode.unknown_subscription_id,
            ErrorCode.unsupported_compression_type,
        ):
            return TelemetryAnswer(
                ErrorCode.throttling_quota_exceeded,
                f"Request from the client [{kafka_uuid(instance_id)}] arrived before the next "
                "push interval time",
            )
        instance.last_error = ErrorCode.none
        return TelemetryAnswer(
            ErrorCode.none,
            body={
                "client_instance_id": instance_id,
                "subscription_id": instance.subscription_id,
                "accepted_compression_types": list(ACCEPTED_COMPRESSION),
                "push_interval": instance.interval_ms,
                "telemetry_max_bytes": self.max_bytes,
                "delta_temporality": True,
                "requested_metrics": list(instance.metrics),
            },
        )

    def push(
        self,
        instance_id: uuid.UUID | None,
        subscription: int,
        terminating: bool,
        compression: int,
        payload: bytes,
        client: ClientInfo,
    ) -> TelemetryAnswer:
        if instance_id is None or instance_id in RESERVED_IDS:
            return TelemetryAnswer(
                ErrorCode.invalid_request,
                f"Invalid request from the client [{instance_id}], invalid client instance id",
            )
        now = self._clock()
        instance = self._instance(instance_id, client, now)
        refused = self._check_push(instance, subscription, terminating, compression, payload, now)
        instance.terminating = terminating
        if refused is not None:
            instance.last_error = refused.error
            return refused
        if payload:
            try:
                data = decompress(compression, payload, self.max_bytes)
                metrics = metrics_pb2.MetricsData.FromString(data)
            except DecompressionBombError:
                instance.last_error = ErrorCode.telemetry_too_large
                return TelemetryAnswer(
                    ErrorCode.telemetry_too_large,
                    f"Telemetry request from [{kafka_uuid(instance_id)}] decompresses to more "
                    f"than the maximum allowed size [{self.max_bytes}]",
                )
            except (CompressionError, DecodeError) as exc:
                instance.last_error = ErrorCode.invalid_record
                log.warning(
                    "client instance %s pushed metrics that do not decode: %s",
                    kafka_uuid(instance_id),
                    exc,
                )
                return TelemetryAnswer(ErrorCode.invalid_record, None)
            self._keep(instance, metrics)
        instance.last_error = ErrorCode.none
        return TelemetryAnswer(ErrorCode.none)

    def _check_push(
        self,
        instance: _Instance,
        subscription: int,
        terminating: bool,
        compression: int,
        payload: bytes,
        now: float,
    ) -> TelemetryAnswer | None:
        name = kafka_uuid(instance.instance_id)
        if instance.terminating:
            return TelemetryAnswer(
                ErrorCode.invalid_request,
                f"Client [{name}] sent the previous request with state terminating to TRUE, "
                "can not accept any requests after that",
            )
        if not instance.may_push(now) and not terminating:
            return TelemetryAnswer(
                ErrorCode.throttling_quota_exceeded,
                f"Request from the client [{name}] arrived before the next push interval time",
            )
        if subscription != instance.subscription_id:
            return TelemetryAnswer(
                ErrorCode.unknown_subscription_id,
                f"Unknown client subscription id for the client [{name}]",
            )
        if compression not in _KNOWN_COMPRESSION:
            return TelemetryAnswer(
                ErrorCode.unsupported_compression_type,
                f"Unknown compression type [{compression}] is received in telemetry request "
                f"from [{name}]",
            )
        if len(payload) > self.max_bytes:
            return TelemetryAnswer(
                ErrorCode.telemetry_too_large,
                f"Telemetry request from [{name}] is larger than the maximum allowed size "
                f"[{self.max_bytes}]",
            )
        return None

    # -- series --------------------------------------------------------------------------

    def _keep(self, instance: _Instance, data: Any) -> None:
        base = (
            ("client_id", instance.client.client_id),
            ("client_instance_id", kafka_uuid(instance.instance_id)),
        )
        for resource_metrics in data.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    self._keep_metric(instance, metric, base)

    def _keep_metric(
        self, instance: _Instance, metric: Any, base: tuple[tuple[str, str], ...]
    ) -> None:
        kind_of = metric.WhichOneof("data")
        if kind_of == "gauge":
            points, kind, accumulate = metric.gauge.data_points, "gauge", False
        elif kind_of == "sum":
            total = metric.sum
            delta = total.aggregation_temporality == DELTA
            kind = "counter" if total.is_monotonic else "gauge"
            points, accumulate = total.data_points, delta
        else:
            return  # histograms and summaries: no client sends them today
        name = prometheus_name(metric.name)
        if kind == "counter" and name.endswith("_total"):
            name = name[: -len("_total")]
        for point in points:
            value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
            labels = dict(base)
            for attribute in point.attributes:
                label = prometheus_name(attribute.key)
                if label not in labels:
                    labels[label] = _attribute_text(attribute.value)
            key = (name, kind, tuple(sorted(labels.items())))
            series = instance.series
            if key not in series and len(series) >= self.max_series:
                if not instance.dropped:
                    log.warning(
                        "client instance %s (client id %s) pushed more than %d series; "
                        "the rest are not exported",
                        kafka_uuid(instance.instance_id),
                        instance.client.client_id,
                        self.max_series,
                    )
                instance.dropped += 1
                continue
            series[key] = series.get(key, 0.0) + value if accumulate else float(value)

    def collect(self) -> Iterator[Metric]:
        """The pushed series as metric families, one per metric name."""
        self._expire(self._clock())
        families: dict[str, Metric] = {}
        dropped = CounterMetricFamily(
            "kbroker_client_telemetry_dropped_series",
            "Data points a client instance pushed beyond "
            "telemetry.export.max.series.per.client, not exported.",
            labels=["client_id", "client_instance_id"],
        )
        for instance in list(self.instances.values()):
            for (name, kind, labels), value in list(instance.series.items()):
                family = families.get(name)
                if family is None:
                    family = families[name] = Metric(name, f"Client metric {name}.", kind)
                elif family.type != kind:
                    continue
                sample = f"{name}_total" if kind == "counter" else name
                family.add_sample(sample, dict(labels), value)
            if instance.dropped:
                dropped.add_metric(
                    [instance.client.client_id, kafka_uuid(instance.instance_id)],
                    instance.dropped,
                )
        yield from families.values()
        yield dropped


def _attribute_text(value: Any) -> str:
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    return str(getattr(value, kind))
