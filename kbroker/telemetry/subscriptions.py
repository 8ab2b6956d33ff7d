"""Client-metrics subscriptions: the `metrics`, `interval.ms` and `match` configs of a
CLIENT_METRICS resource, validated and matched as Kafka's ClientMetricsConfigs does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import re2
from kio.schema.errors import ErrorCode

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
CLIENT_METRICS_CONFIGS = (METRICS, INTERVAL_MS, MATCH)

INTERVAL_MS_DEFAULT = 5 * 60 * 1000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000
ALL_METRICS = "*"

# What a match pattern may name (ClientMetricsConfigs.ALLOWED_MATCH_PARAMS).
MATCH_PARAMS = (
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
)

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


class SubscriptionError(Exception):
    """A refused subscription: Kafka's error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _split_pattern(pattern: str) -> tuple[str, str]:
    param, sep, value = pattern.partition("=")
    if not sep or param.strip() not in MATCH_PARAMS:
        raise SubscriptionError(
            ErrorCode.invalid_config, f"Illegal client matching pattern: {pattern}"
        )
    return param.strip(), value.strip()


def _compile(param: str, value: str) -> Any:
    try:
        return re2.compile(value, _RE2_OPTIONS)
    except re2.error as exc:
        raise SubscriptionError(
            ErrorCode.invalid_config,
            f"Client match pattern `{param}={value}` is not a valid regular expression: {exc}.",
        ) from None


def validate_subscription(name: str, configs: Mapping[str, str]) -> None:
    """Kafka's checks of the whole set of configs a subscription would hold."""
    if not name:
        raise SubscriptionError(ErrorCode.invalid_request, "Subscription name can't be empty")
    for key in configs:
        if key not in CLIENT_METRICS_CONFIGS:
            raise SubscriptionError(
                ErrorCode.invalid_request, f"Unknown client metrics configuration: {key}"
            )
    if INTERVAL_MS in configs:
        raw = configs[INTERVAL_MS]
        try:
            interval = int(raw.strip())
        except ValueError:
            raise SubscriptionError(
                ErrorCode.invalid_config,
                f"Invalid value {raw} for configuration {INTERVAL_MS}: Not a number of type INT",
            ) from None
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise SubscriptionError(
                ErrorCode.invalid_request,
                f"Invalid value {interval} for {INTERVAL_MS}, interval must be between 100 "
                "and 3600000 (1 hour)",
            )
    for name_ in (METRICS, MATCH):
        items = _list(configs.get(name_))
        if len(set(items)) != len(items):
            raise SubscriptionError(
                ErrorCode.invalid_config,
                f"Invalid value {configs[name_]} for configuration {name_}: "
                "Values must not be duplicated.",
            )
    for pattern in _list(configs.get(MATCH)):
        _compile(*_split_pattern(pattern))


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: frozenset[str]
    interval_ms: int
    match: dict[str, Any] = field(default_factory=dict)  # param -> compiled RE2 pattern

    def matches(self, attributes: Mapping[str, str]) -> bool:
        """Every pattern matches its attribute whole (no patterns: every client)."""
        for param, pattern in self.match.items():
            value = attributes.get(param)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def parse_subscription(name: str, configs: Mapping[str, str]) -> Subscription:
    """A stored subscription (validated when it was set) ready to match clients."""
    interval = configs.get(INTERVAL_MS)
    match: dict[str, Any] = {}
    for pattern in _list(configs.get(MATCH)):
        param, value = _split_pattern(pattern)
        match[param] = _compile(param, value)
    return Subscription(
        name,
        frozenset(_list(configs.get(METRICS))),
        int(interval) if interval else INTERVAL_MS_DEFAULT,
        match,
    )
