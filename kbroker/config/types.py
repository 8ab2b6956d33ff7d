"""Kafka's configuration value model: types, sources, parsing, formatting, validators.

Kafka describes every setting with a ``ConfigDef.Type`` and reports where a value came
from with a ``ConfigSource``; both travel on the wire in DescribeConfigs as small
integers, so the enums here carry Kafka's exact numbers. Values are parsed the way
Kafka's ``ConfigDef.parseType`` does (trimmed, case-insensitive booleans, comma lists)
and printed the way ``ConfigDef.convertToString`` does, so a client sees the strings
it would see from a Kafka broker.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum, IntEnum
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MAX = 1.7976931348623157e308


class ConfigType(IntEnum):
    """DescribeConfigs ``ConfigType`` (DescribeConfigsResponse v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs ``ConfigSource`` (DescribeConfigsResponse v1+)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


_INTEGER = re.compile(r"[+-]?[0-9]+")
_RANGES = {
    ConfigType.INT: (INT_MIN, INT_MAX),
    ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
    ConfigType.LONG: (LONG_MIN, LONG_MAX),
}


def parse_value(config_type: ConfigType, raw: str) -> Any:
    """Parse one textual value; raise ValueError with Kafka's reason (ConfigDef's
    parseType: a value out of its type's range is "not a number" of it, as Java's
    parsers say)."""
    text = raw.strip()
    if config_type in _RANGES:
        low, high = _RANGES[config_type]
        if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
            raise ValueError(f"Not a number of type {config_type.name}")
        return int(text)
    if config_type is ConfigType.BOOLEAN:
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return lowered == "true"
    if config_type is ConfigType.DOUBLE:
        try:
            real = float(text) if "_" not in text else math.nan
        except ValueError:
            real = math.nan
        if not math.isfinite(real):
            raise ValueError("Not a number of type DOUBLE")
        return real
    if config_type is ConfigType.LIST:
        return [] if not text else [item.strip() for item in text.split(",")]
    return text


def format_value(config_type: ConfigType, value: Any) -> str | None:
    """Render a parsed value as Kafka prints it in DescribeConfigs."""
    if value is None:
        return None
    if config_type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if config_type is ConfigType.LIST:
        return ",".join(value)
    if config_type is ConfigType.DOUBLE:
        return java_double_str(float(value))
    return str(value)


def java_double_str(value: float) -> str:
    """``Double.toString``: plain between 1e-3 and 1e7, else ``d.dddE<exp>``."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    digit_text = "".join(map(str, digits)).rstrip("0") or "0"
    point_exponent = len(digits) + int(exponent) - 1
    mantissa = digit_text[0] + "." + (digit_text[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{point_exponent}"


class SettingRole(Enum):
    """What a setting does in kbroker, so none is accepted silently for nothing.

    APPLIED: read where it makes kbroker do what Kafka's does. SYNONYM: another name
    feeding an applied setting (``broker.id`` for ``node.id``, ``log.retention.hours``
    for ``log.retention.ms``). INERT: accepted so copied server.properties files and
    tools load, with no effect here; listed at start-up when set and marked so in
    DescribeConfigs documentation.
    """

    APPLIED = "applied"
    SYNONYM = "synonym"
    INERT = "inert"


class UpdateMode(Enum):
    """Kafka's "Update Mode" of a broker setting (KIP-226): whether, and at which level,
    IncrementalAlterConfigs on a BROKER resource may change it while the broker runs.

    READ_ONLY: only by restart. PER_BROKER: on one broker's resource (``"<id>"``).
    CLUSTER_WIDE: on one broker's resource or the cluster default (``""``).
    """

    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"


INERT_NOTE = "Inert in kbroker (accepted for compatibility, changes nothing). "


Validator = Callable[[Any], None]
"""Checks a parsed value; raises ValueError saying what is wrong. None is never passed."""


_VALID_VALUES: dict[Validator, str] = {}


def described(validator: Validator, valid_values: str) -> Validator:
    """Record what ``validator`` accepts, as Kafka's documentation prints "Valid Values"."""
    _VALID_VALUES[validator] = valid_values
    return validator


def valid_values(validator: Validator | None) -> str:
    """What a setting accepts ("[0,...]", "[delete, compact]"), or "" when unstated."""
    return "" if validator is None else _VALID_VALUES.get(validator, "")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else java_double_str(float(value))


def at_least(minimum: float) -> Validator:
    def check(value: Any) -> None:
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")

    return described(check, f"[{_number(minimum)},...]")


def between(low: float, high: float) -> Validator:
    def check(value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")

    return described(check, f"[{_number(low)},...,{_number(high)}]")


def one_of(*allowed: str, ignore_case: bool = False) -> Validator:
    folded = {a.lower() for a in allowed} if ignore_case else set(allowed)

    def check(value: Any) -> None:
        if (value.lower() if ignore_case else value) not in folded:
            raise ValueError(f"String must be one of: {', '.join(allowed)}")

    return described(check, f"[{', '.join(allowed)}]" + (" (any case)" if ignore_case else ""))


def each_of(*allowed: str, non_empty: bool = False) -> Validator:
    """For LIST settings: every element must be one of ``allowed``."""

    def check(value: Any) -> None:
        if non_empty and not value:
            raise ValueError(f"must list at least one of {', '.join(allowed)}")
        bad = [item for item in value if item not in allowed]
        if bad:
            raise ValueError(f"String must be one of: {', '.join(allowed)}")

    return described(
        check, f"a list of [{', '.join(allowed)}]" + (", not empty" if non_empty else "")
    )


def all_of(*validators: Validator) -> Validator:
    def check(value: Any) -> None:
        for validator in validators:
            validator(value)

    parts = [valid_values(validator) for validator in validators]
    return described(check, ", and ".join(part for part in parts if part))


@dataclass(frozen=True)
class ConfigDef:
    """One row of a settings table: the contract for a single named setting."""

    name: str
    type: ConfigType
    default: Any
    documentation: str
    validator: Validator | None = None
    is_sensitive: bool = False
    read_only: bool = True
    role: SettingRole = SettingRole.APPLIED
    # None: CLUSTER_WIDE when not read_only (topic configs), else READ_ONLY.
    update_mode: UpdateMode | None = None

    @property
    def mode(self) -> UpdateMode:
        """The setting's update mode (``read_only`` is the same as READ_ONLY)."""
        if self.update_mode is not None:
            return self.update_mode
        return UpdateMode.READ_ONLY if self.read_only else UpdateMode.CLUSTER_WIDE

    @property
    def described(self) -> str:
        """The documentation DescribeConfigs shows: an inert setting says it is inert."""
        if self.role is SettingRole.INERT:
            return INERT_NOTE + self.documentation
        return self.documentation

    @property
    def python_name(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, raw: str) -> Any:
        """Parse and validate ``raw``; ValueError carries the reason only."""
        value = parse_value(self.type, raw)
        if self.validator is not None:
            self.validator(value)
        return value

    def format(self, value: Any) -> str | None:
        return format_value(self.type, value)


def table(defs: Sequence[ConfigDef]) -> dict[str, ConfigDef]:
    """Index a definition list by name, refusing duplicates (a table typo, not input)."""
    indexed: dict[str, ConfigDef] = {}
    for definition in defs:
        if definition.name in indexed:
            raise AssertionError(f"setting {definition.name} defined twice")
        indexed[definition.name] = definition
    return indexed
