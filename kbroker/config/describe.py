"""DescribeConfigs entries for topics and this broker, with Kafka's sources and synonyms.

Synonyms list where a value could come from, most specific first: the topic override
(DYNAMIC_TOPIC_CONFIG), then per layer - dynamic per-broker, dynamic cluster default,
static (file, environment, flags), default - each layer's broker settings in the
synonym group's priority order. An entry's source is that of its first synonym,
DEFAULT_CONFIG when it has none.

Then, as Kafka's ConfigHelper does, the broker synonyms before the first one named
for the described setting (a topic config's primary server property) are dropped: a
topic's ``retention.ms`` shows no broker synonym, and the source DEFAULT_CONFIG, while
only ``log.retention.hours`` is set, since ``log.retention.ms`` has no default. Clients'
own test suites compare these lists with Kafka's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kbroker.config.broker import BrokerConfig, dynamic_definition
from kbroker.config.broker_settings import BROKER_CONFIGS, broker_synonyms
from kbroker.config.topic import (
    INTERNAL_TOPIC_CONFIGS,
    TOPIC_BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    parse_topic_configs,
    topic_config_values,
)
from kbroker.config.types import ConfigDef, ConfigSource, ConfigType


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: int


@dataclass
class ConfigEntry:
    """One DescribeConfigs result row; ints are the wire values of Kafka's enums."""

    name: str
    value: str | None
    source: int
    is_default: bool
    read_only: bool
    is_sensitive: bool
    synonyms: list[ConfigSynonym] = field(default_factory=list)
    config_type: int = ConfigType.UNKNOWN
    documentation: str | None = None


def _broker_synonyms(
    described: str, names: tuple[str, ...], broker: BrokerConfig
) -> list[ConfigSynonym]:
    """The values `names` (a synonym group) have, layer by layer, from the first one
    named `described` on."""
    by_source: dict[ConfigSource, list[ConfigSynonym]] = {}
    for name in names:
        definition = dynamic_definition(name)
        for source, value in broker.values_by_source(name):
            text = None if definition.is_sensitive else definition.format(value)
            by_source.setdefault(source, []).append(ConfigSynonym(name, text, int(source)))
    ordered = sorted(by_source.items(), key=lambda item: _LAYER_ORDER.index(item[0]))
    synonyms = [synonym for _, synonyms in ordered for synonym in synonyms]
    first = next((i for i, s in enumerate(synonyms) if s.name == described), len(synonyms))
    return synonyms[first:]


_LAYER_ORDER = (
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    ConfigSource.STATIC_BROKER_CONFIG,
    ConfigSource.DEFAULT_CONFIG,
)


def _entry(
    definition: ConfigDef,
    value: str | None,
    synonyms: list[ConfigSynonym],
    read_only: bool,
    include_synonyms: bool,
    include_documentation: bool,
    name: str | None = None,
) -> ConfigEntry:
    source = synonyms[0].source if synonyms else int(ConfigSource.DEFAULT_CONFIG)
    return ConfigEntry(
        name=name or definition.name,
        value=None if definition.is_sensitive else value,
        source=source,
        is_default=source == ConfigSource.DEFAULT_CONFIG,
        read_only=read_only,
        is_sensitive=definition.is_sensitive,
        synonyms=synonyms if include_synonyms else [],
        config_type=int(definition.type),
        documentation=definition.described if include_documentation else None,
    )


def describe_topic_config(
    overrides: Mapping[str, str],
    broker: BrokerConfig,
    names: Collection[str] | None = None,
    *,
    include_synonyms: bool = True,
    include_documentation: bool = True,
) -> list[ConfigEntry]:
    """Entries for a topic with ``overrides``; ``names`` limits them (None or empty: all).

    Names that are not topic configs are skipped, as Kafka does.
    """
    values = topic_config_values(overrides, broker)
    parsed = parse_topic_configs(overrides)
    entries = []
    for name in sorted(TOPIC_CONFIGS):
        if (names and name not in names) or (name in INTERNAL_TOPIC_CONFIGS and name not in parsed):
            continue
        definition = TOPIC_CONFIGS[name]
        text = definition.format(values[name])
        synonyms = []
        if name in parsed:
            synonyms.append(ConfigSynonym(name, text, int(ConfigSource.DYNAMIC_TOPIC_CONFIG)))
        broker_name = TOPIC_BROKER_SYNONYMS.get(name)
        if broker_name is not None:
            synonyms.extend(_broker_synonyms(broker_name, broker_synonyms(broker_name), broker))
        entries.append(
            _entry(definition, text, synonyms, False, include_synonyms, include_documentation)
        )
    return entries


def describe_broker_config(
    broker: BrokerConfig,
    names: Collection[str] | None = None,
    *,
    include_synonyms: bool = True,
    include_documentation: bool = True,
) -> list[ConfigEntry]:
    """Entries for this broker (DescribeConfigs on its id); ``names`` limits them.

    Values are the settings as given (``raw``), as Kafka reports them: an unset
    ``log.retention.ms`` shows null even though retention comes from the hours. A
    setting's synonyms are its group's, from the first value of the setting itself on.
    """
    entries = []
    for name in sorted([*BROKER_CONFIGS, *broker.scoped_names()]):
        if names and name not in names:
            continue
        definition = dynamic_definition(name)
        if name not in BROKER_CONFIGS:  # listener.name.<listener>.<setting>: itself only
            synonyms = _broker_synonyms(name, (name,), broker)
            entries.append(
                _entry(
                    definition,
                    definition.format(broker.raw(name)),
                    synonyms,
                    definition.read_only,
                    include_synonyms,
                    include_documentation,
                    name=name,
                )
            )
            continue
        synonyms = _broker_synonyms(name, broker_synonyms(name), broker)
        entries.append(
            _entry(
                definition,
                definition.format(broker.raw(name)),
                synonyms,
                definition.read_only,
                include_synonyms,
                include_documentation,
            )
        )
    return entries


def describe_dynamic_default_config(
    broker: BrokerConfig,
    names: Collection[str] | None = None,
    *,
    include_synonyms: bool = True,
    include_documentation: bool = True,
) -> list[ConfigEntry]:
    """Entries of the cluster-wide default BROKER resource (name ``""``): only the
    settings set there, each with the source DYNAMIC_DEFAULT_BROKER_CONFIG, as Kafka
    describes it."""
    cluster_default, _own = broker.dynamic_layers()
    entries = []
    for name in sorted(cluster_default):
        if names and name not in names:
            continue
        definition = dynamic_definition(name)
        text = None if definition.is_sensitive else definition.format(cluster_default[name])
        source = int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        entries.append(
            _entry(
                definition,
                text,
                [ConfigSynonym(name, text, source)],
                definition.read_only,
                include_synonyms,
                include_documentation,
                name=name,
            )
        )
    return entries
