"""Broker and topic configuration with Kafka's names, defaults and DescribeConfigs model.

- ``load_broker_config`` / ``BrokerConfig``: settings from defaults, a server.properties
  file, ``KBROKER_*`` environment variables and ``--override`` flags.
- ``validate_topic_configs``, ``topic_config_values``, ``log_config_for``: topic configs.
- ``describe_topic_config`` / ``describe_broker_config``: DescribeConfigs entries.
"""

from kbroker.config.broker import (
    BrokerConfig,
    load_broker_config,
    refuse_unapplied_kafka_names,
    validate_dynamic_broker_configs,
)
from kbroker.config.broker_settings import BROKER_CONFIGS
from kbroker.config.describe import (
    ConfigEntry,
    ConfigSynonym,
    describe_broker_config,
    describe_dynamic_default_config,
    describe_topic_config,
)
from kbroker.config.errors import ConfigError
from kbroker.config.listeners import Endpoint, Peer, parse_listeners
from kbroker.config.sources import SettingSource, SourceKind
from kbroker.config.topic import (
    INTERNAL_TOPIC_CONFIGS,
    TOPIC_BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    log_config_for,
    normalize_topic_configs,
    parse_topic_configs,
    segment_size_config,
    topic_config_values,
    validate_topic_configs,
)
from kbroker.config.types import ConfigDef, ConfigSource, ConfigType

__all__ = [
    "BROKER_CONFIGS",
    "INTERNAL_TOPIC_CONFIGS",
    "TOPIC_BROKER_SYNONYMS",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Endpoint",
    "Peer",
    "SettingSource",
    "SourceKind",
    "describe_broker_config",
    "describe_dynamic_default_config",
    "describe_topic_config",
    "load_broker_config",
    "log_config_for",
    "normalize_topic_configs",
    "parse_listeners",
    "parse_topic_configs",
    "segment_size_config",
    "topic_config_values",
    "refuse_unapplied_kafka_names",
    "validate_dynamic_broker_configs",
    "validate_topic_configs",
]
