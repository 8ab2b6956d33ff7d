"""Where broker settings come from, and the raw ``name = text`` pairs each place gives.

Precedence, lowest to highest: built-in defaults, the ``--config`` file, ``KBROKER_*``
environment variables, ``--override name=value`` flags. Dynamic layers (per-broker and
cluster-wide, set through the Admin API) sit above all of them, as in Kafka. Every raw
pair remembers its origin so a bad value can be reported where it was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from kbroker.config.errors import ConfigError
from kbroker.config.properties import read_properties
from kbroker.config.types import ConfigSource

ENV_PREFIX = "KBROKER_"


class SourceKind(Enum):
    DEFAULT = "default"
    FILE = "file"
    ENV = "env"
    OVERRIDE = "override"
    DYNAMIC_DEFAULT = "dynamic-default"
    DYNAMIC_BROKER = "dynamic-broker"


_CONFIG_SOURCE = {
    SourceKind.DEFAULT: ConfigSource.DEFAULT_CONFIG,
    SourceKind.FILE: ConfigSource.STATIC_BROKER_CONFIG,
    SourceKind.ENV: ConfigSource.STATIC_BROKER_CONFIG,
    SourceKind.OVERRIDE: ConfigSource.STATIC_BROKER_CONFIG,
    SourceKind.DYNAMIC_DEFAULT: ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    SourceKind.DYNAMIC_BROKER: ConfigSource.DYNAMIC_BROKER_CONFIG,
}


@dataclass(frozen=True)
class SettingSource:
    """The place one value came from: a kind plus a human-readable location."""

    kind: SourceKind
    location: str | None = None

    @property
    def config_source(self) -> ConfigSource:
        """The DescribeConfigs source: file, environment and flags are all static config."""
        return _CONFIG_SOURCE[self.kind]

    def __str__(self) -> str:
        if self.kind is SourceKind.DEFAULT:
            return "default"
        if self.kind is SourceKind.FILE:
            return f"config file {self.location}"
        if self.kind is SourceKind.ENV:
            return f"environment variable {self.location}"
        if self.kind is SourceKind.OVERRIDE:
            return f"--override {self.location}"
        return f"dynamic config ({self.kind.value})"


DEFAULT_SOURCE = SettingSource(SourceKind.DEFAULT)


@dataclass(frozen=True)
class RawSetting:
    name: str
    value: str
    source: SettingSource


def settings_from_file(path: Path) -> list[RawSetting]:
    return [
        RawSetting(entry.key, entry.value, SettingSource(SourceKind.FILE, f"{path}:{entry.line}"))
        for entry in read_properties(path)
    ]


def env_var_for(name: str) -> str:
    """``log.dirs`` -> ``KBROKER_LOG_DIRS``. Unambiguous because no setting name has ``_``."""
    return ENV_PREFIX + name.upper().replace(".", "_")


def settings_from_environ(environ: Mapping[str, str]) -> list[RawSetting]:
    """Every ``KBROKER_*`` variable, sorted so the result does not depend on env order."""
    found = []
    for key in sorted(environ):
        if not key.startswith(ENV_PREFIX) or key == ENV_PREFIX:
            continue
        name = key[len(ENV_PREFIX) :].lower().replace("_", ".")
        found.append(RawSetting(name, environ[key], SettingSource(SourceKind.ENV, key)))
    return found


def settings_from_overrides(overrides: Iterable[str]) -> list[RawSetting]:
    found = []
    for item in overrides:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(
                f"--override {item!r} is not of the form name=value", origin=f"--override {item}"
            )
        found.append(RawSetting(name, value, SettingSource(SourceKind.OVERRIDE, name)))
    return found


def settings_from_mapping(values: Mapping[str, str], kind: SourceKind) -> list[RawSetting]:
    """Dynamic layers arrive as plain mappings from the controller's metadata."""
    return [RawSetting(name, value, SettingSource(kind, name)) for name, value in values.items()]
