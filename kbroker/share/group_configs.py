"""Share-group configs (KIP-932, KIP-1191, KIP-1240): the broker's bounds and each group's own.

A group config set by IncrementalAlterConfigs on a GROUP resource overrides the
broker's default for that group, within the broker's minimum and maximum, as Kafka
checks it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# Group configs of share groups (KIP-932, KIP-1191, KIP-1240) and their checks.
GROUP_CONFIGS = (
    "share.auto.offset.reset",
    "share.isolation.level",
    "share.record.lock.duration.ms",
    "share.delivery.count.limit",
    "share.partition.max.record.locks",
    "share.renew.acknowledge.enable",
    "share.session.timeout.ms",
    "share.heartbeat.interval.ms",
    "errors.deadletterqueue.topic.name",
    "errors.deadletterqueue.copy.record.enable",
)


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """The broker's share-group settings (Kafka's group.share.* names)."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000
    record_lock_ms: int = 30_000
    min_record_lock_ms: int = 15_000
    max_record_lock_ms: int = 60_000
    delivery_count_limit: int = 5
    min_delivery_count_limit: int = 2
    max_delivery_count_limit: int = 10
    max_record_locks: int = 2000
    min_max_record_locks: int = 100
    max_max_record_locks: int = 2000
    max_size: int = 200
    num_partitions: int = 50  # of __share_group_state, which places each group's state
    max_share_sessions: int = 2000


class ShareGroupConfigs:
    """Each share group's own configs over the broker's defaults, as the group's
    coordinator (heartbeat interval, session timeout) and the share-partition leader
    (locks, delivery limit, isolation, offset reset, dead letters) read them."""

    def __init__(self, config: ShareConfig) -> None:
        self.config = config
        self.values: dict[str, dict[str, str]] = {}  # group id -> its configs set

    def get(self, group_id: str, name: str) -> str | None:
        return self.values.get(group_id, {}).get(name)

    def set(self, group_id: str, changes: dict[str, str | None]) -> None:
        configs = self.values.setdefault(group_id, {})
        for name, value in changes.items():
            if value is None:
                configs.pop(name, None)
            else:
                configs[name] = value

    def validate(self, name: str, value: str | None) -> str | None:
        """Why a group config is refused, or None when it is fine."""
        return validate_group_config(self.config, name, value)

    def lock_ms(self, group_id: str) -> int:
        value = self.get(group_id, "share.record.lock.duration.ms")
        return int(value) if value is not None else self.config.record_lock_ms

    def delivery_limit(self, group_id: str) -> int:
        value = self.get(group_id, "share.delivery.count.limit")
        return int(value) if value is not None else self.config.delivery_count_limit

    def max_record_locks(self, group_id: str) -> int:
        """KIP-1240's `share.partition.max.record.locks`: records in flight per share
        partition of the group."""
        value = self.get(group_id, "share.partition.max.record.locks")
        return int(value) if value is not None else self.config.max_record_locks

    def renew_enabled(self, group_id: str) -> bool:
        """KIP-1240's `share.renew.acknowledge.enable` (default true): whether the group's
        members may RENEW acquisition locks (KIP-1222)."""
        value = self.get(group_id, "share.renew.acknowledge.enable")
        return value is None or value.strip().lower() != "false"

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.get(group_id, "share.heartbeat.interval.ms")
        return int(value) if value is not None else self.config.heartbeat_interval_ms

    def session_timeout_ms(self, group_id: str) -> int:
        value = self.get(group_id, "share.session.timeout.ms")
        return int(value) if value is not None else self.config.session_timeout_ms

    def dead_letter_topic(self, group_id: str) -> str | None:
        name = (self.get(group_id, "errors.deadletterqueue.topic.name") or "").strip()
        return name or None

    def dead_letters_copy_records(self, group_id: str) -> bool:
        """KIP-1191's `errors.deadletterqueue.copy.record.enable`: whether a dead-letter
        record carries the original key, value and headers (off: only where from, why)."""
        value = self.get(group_id, "errors.deadletterqueue.copy.record.enable")
        return value is not None and value.strip().lower() == "true"


def validate_group_config(c: ShareConfig, name: str, value: str | None) -> str | None:
    """Why a group config is refused, or None when it is fine (None deletes it)."""
    if name not in GROUP_CONFIGS:
        return f"Unknown group config name: {name}"
    if value is None:
        return None
    bounds = _BOUNDS.get(name)
    if bounds is not None:
        return _check_bounds(c, name, value, *bounds)
    checks: dict[str, Callable[[str], bool]] = {
        "share.auto.offset.reset": lambda v: (
            v in ("latest", "earliest")
            or (v.startswith("by_duration:") and _is_duration(v.removeprefix("by_duration:")))
        ),
        "share.isolation.level": lambda v: v in ("read_uncommitted", "read_committed"),
        "share.record.lock.duration.ms": lambda v: (
            v.isdigit() and c.min_record_lock_ms <= int(v) <= c.max_record_lock_ms
        ),
        "share.renew.acknowledge.enable": lambda v: v.strip().lower() in ("true", "false"),
        "share.session.timeout.ms": lambda v: (
            v.isdigit() and c.min_session_timeout_ms <= int(v) <= c.max_session_timeout_ms
        ),
        "share.heartbeat.interval.ms": lambda v: (
            v.isdigit() and c.min_heartbeat_interval_ms <= int(v) <= c.max_heartbeat_interval_ms
        ),
        "errors.deadletterqueue.topic.name": lambda v: True,
        "errors.deadletterqueue.copy.record.enable": lambda v: (
            v.strip().lower() in ("true", "false")
        ),
    }
    if not checks[name](value):
        return f"Invalid value {value} for configuration {name}"
    return None


# Integer group configs checked against the broker's bounds (KIP-1240): the least value
# any group may have, and the ShareConfig fields and settings of the broker's bounds.
_BOUNDS: dict[str, tuple[int, str, str, str, str]] = {
    "share.delivery.count.limit": (
        2,
        "min_delivery_count_limit",
        "group.share.min.delivery.count.limit",
        "max_delivery_count_limit",
        "group.share.max.delivery.count.limit",
    ),
    "share.partition.max.record.locks": (
        100,
        "min_max_record_locks",
        "group.share.min.partition.max.record.locks",
        "max_max_record_locks",
        "group.share.max.partition.max.record.locks",
    ),
}


def _check_bounds(
    c: ShareConfig,
    name: str,
    value: str,
    least: int,
    low: str,
    low_name: str,
    high: str,
    high_name: str,
) -> str | None:
    """Kafka's checks and messages: an INT at least `least`, then within the broker's
    minimum and maximum settings."""
    text = value.strip()
    try:
        number = int(text)
    except ValueError:
        return f"Invalid value {value} for configuration {name}: Not a number of type INT"
    if not -(1 << 31) <= number < 1 << 31:
        return f"Invalid value {value} for configuration {name}: Not a number of type INT"
    if number < least:
        return f"Invalid value {number} for configuration {name}: Value must be at least {least}"
    if number < getattr(c, low):
        return f"{name} must be greater than or equal to {low_name}"
    if number > getattr(c, high):
        return f"{name} must be less than or equal to {high_name}"
    return None


_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


def _is_duration(text: str) -> bool:
    match = _DURATION.fullmatch(text)
    return match is not None and text not in ("P", "PT") and not text.endswith("T")


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as `share.auto.offset.reset=by_duration:` takes it (PnDTnHnMnS,
    as Java's Duration.parse), in milliseconds."""
    match = _DURATION.fullmatch(text)
    if match is None or not _is_duration(text):
        raise ValueError(f"not an ISO-8601 duration: {text}")
    days, hours, minutes = (int(match[k] or 0) for k in ("d", "h", "m"))
    seconds = float(match["s"] or 0)
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)
