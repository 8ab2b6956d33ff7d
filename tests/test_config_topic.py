"""Topic configs: the table, validation, values from broker defaults, storage settings."""

import pytest

from kbroker.config import (
    BROKER_CONFIGS,
    TOPIC_BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    log_config_for,
    normalize_topic_configs,
    segment_size_config,
    topic_config_values,
    validate_topic_configs,
)
from kbroker.config.types import LONG_MAX

DEFAULT_BROKER = BrokerConfig.from_settings()

KAFKA_39_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.message.bytes", "message.downconversion.enable",
    "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "min.insync.replicas", "preallocate", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes", "retention.ms",
    "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}  # fmt: skip
# Later Kafka topic configs kbroker serves: KIP-1191's opt-in of a dead-letter topic, and
# Kafka 4's internal override of segment.bytes below its 1 MiB minimum (KIP-1030).
LATER_TOPIC_CONFIGS = {"errors.deadletterqueue.group.enable", "internal.segment.bytes"}
# Confluent Server's broker-side schema validation (kbroker.schemas.validation).
CONFLUENT_TOPIC_CONFIGS = {
    "confluent.key.schema.validation",
    "confluent.value.schema.validation",
    "confluent.key.subject.name.strategy",
    "confluent.value.subject.name.strategy",
}


def test_table_holds_every_kafka_topic_config():
    assert (
        set(TOPIC_CONFIGS) == KAFKA_39_TOPIC_CONFIGS | LATER_TOPIC_CONFIGS | CONFLUENT_TOPIC_CONFIGS
    )


def test_every_broker_synonym_is_a_broker_setting():
    assert set(TOPIC_BROKER_SYNONYMS) <= set(TOPIC_CONFIGS)
    assert [s for s in TOPIC_BROKER_SYNONYMS.values() if s not in BROKER_CONFIGS] == []


def test_topic_defaults_equal_the_broker_defaults():
    values = topic_config_values({}, DEFAULT_BROKER)
    for name, definition in TOPIC_CONFIGS.items():
        assert values[name] == definition.default, name


# -- validation -----------------------------------------------------------------------------


def test_valid_configs_pass():
    validate_topic_configs(
        {
            "cleanup.policy": "compact,delete",
            "retention.ms": "-1",
            "segment.bytes": "1048576",
            "compression.type": "zstd",
            "message.timestamp.type": "LogAppendTime",
            "min.insync.replicas": "2",
            "min.cleanable.dirty.ratio": "0.1",
            "unclean.leader.election.enable": "true",
            "leader.replication.throttled.replicas": "0:1,1:2",
        }
    )


def test_unknown_config_names_it():
    with pytest.raises(ConfigError, match="retention.days") as info:
        validate_topic_configs({"retention.days": "1"})
    assert info.value.setting == "retention.days"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retention.ms", "a week"),
        ("retention.ms", "-2"),
        ("segment.bytes", "13"),
        ("segment.bytes", "1048575"),  # Kafka 4's minimum is 1 MiB
        ("segment.bytes", "4294967296"),
        ("max.message.bytes", "-1"),
        ("min.insync.replicas", "0"),
        ("min.cleanable.dirty.ratio", "2"),
        ("preallocate", "yes"),
        ("cleanup.policy", "archive"),
        ("message.timestamp.type", "BrokerTime"),
        ("compression.type", "none"),
        ("compression.zstd.level", "23"),
        ("compression.gzip.level", "0"),
        ("segment.ms", "0"),
        ("leader.replication.throttled.replicas", "0-1"),
        ("remote.storage.enable", "true"),
    ],
)
def test_bad_values_fail_naming_the_config(name, value):
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        validate_topic_configs({name: value})


@pytest.mark.parametrize("policy", ["delete", "compact", "compact,delete", "delete, compact", ""])
def test_cleanup_policy_accepts_kafka_spellings(policy):
    validate_topic_configs({"cleanup.policy": policy})


@pytest.mark.parametrize("codec", ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"])
def test_compression_type_accepts_kafka_codecs(codec):
    validate_topic_configs({"compression.type": codec})


def test_null_value_fails():
    with pytest.raises(ConfigError, match="retention.ms"):
        validate_topic_configs({"retention.ms": None})


def test_min_compaction_lag_above_max_fails():
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_normalize_gives_canonical_text():
    assert normalize_topic_configs(
        {"cleanup.policy": "delete, compact,delete", "preallocate": "TRUE", "retention.ms": " +5"}
    ) == {"cleanup.policy": "compact,delete", "preallocate": "true", "retention.ms": "5"}


# -- values ---------------------------------------------------------------------------------


def test_override_beats_broker_default():
    broker = BrokerConfig.from_settings({"log.retention.hours": "1"})
    assert topic_config_values({"retention.ms": "5000"}, broker)["retention.ms"] == 5000


def test_broker_retention_minutes_become_topic_retention_ms():
    broker = BrokerConfig.from_settings({"log.retention.minutes": "3"})
    assert topic_config_values({}, broker)["retention.ms"] == 180_000


def test_broker_roll_hours_become_segment_ms():
    broker = BrokerConfig.from_settings({"log.roll.hours": "2"})
    assert topic_config_values({}, broker)["segment.ms"] == 7_200_000


@pytest.mark.parametrize(
    ("broker_setting", "value", "topic_config", "expected"),
    [
        ("log.segment.bytes", "2097152", "segment.bytes", 2097152),
        ("message.max.bytes", "999", "max.message.bytes", 999),
        ("log.cleanup.policy", "compact", "cleanup.policy", ["compact"]),
        ("log.message.timestamp.type", "LogAppendTime", "message.timestamp.type", "LogAppendTime"),
        ("min.insync.replicas", "2", "min.insync.replicas", 2),
        ("log.flush.interval.messages", "1", "flush.messages", 1),
        ("log.flush.interval.ms", "10", "flush.ms", 10),
        ("log.index.interval.bytes", "100", "index.interval.bytes", 100),
        ("log.index.size.max.bytes", "4096", "segment.index.bytes", 4096),
        ("log.retention.bytes", "77", "retention.bytes", 77),
        ("log.cleaner.delete.retention.ms", "5", "delete.retention.ms", 5),
        ("log.segment.delete.delay.ms", "6", "file.delete.delay.ms", 6),
        ("log.cleaner.min.cleanable.ratio", "0.25", "min.cleanable.dirty.ratio", 0.25),
        ("compression.type", "lz4", "compression.type", "lz4"),
        ("unclean.leader.election.enable", "true", "unclean.leader.election.enable", True),
    ],
)
def test_topic_config_follows_its_broker_synonym(broker_setting, value, topic_config, expected):
    broker = BrokerConfig.from_settings({broker_setting: value})
    assert topic_config_values({}, broker)[topic_config] == expected


def test_log_config_for_defaults():
    assert log_config_for({}, DEFAULT_BROKER) == {
        "segment_bytes": 1073741824,
        "segment_ms": 604800000,
        "segment_jitter_ms": 0,
        "retention_ms": 604800000,
        "retention_bytes": -1,
        "index_interval_bytes": 4096,
        "segment_index_bytes": 10485760,
        "max_message_bytes": 1048588,
        "message_timestamp_type": "CreateTime",
        "flush_interval_messages": LONG_MAX,
        "flush_interval_ms": LONG_MAX,
        "cleanup_policy": "delete",
        "file_delete_delay_ms": 60000,
        "preallocate": False,
        "message_timestamp_before_max_ms": LONG_MAX,
        "message_timestamp_after_max_ms": 3_600_000,
        "compression_type": "producer",
        "compression_gzip_level": -1,
        "compression_lz4_level": 9,
        "compression_zstd_level": 3,
    }


def test_log_config_for_applies_overrides():
    config = log_config_for(
        {"cleanup.policy": "delete,compact", "retention.ms": "-1", "segment.bytes": "2097152"},
        BrokerConfig.from_settings({"log.flush.interval.messages": "1"}),
    )
    assert config["cleanup_policy"] == "compact,delete"
    assert config["retention_ms"] == -1
    assert config["segment_bytes"] == 2097152
    assert config["flush_interval_messages"] == 1


def test_an_internal_topics_segment_size_below_1_mib_goes_through_internal_segment_bytes():
    """offsets.topic.segment.bytes and its like allow any size; segment.bytes does not."""
    assert segment_size_config(104857600) == {"segment.bytes": "104857600"}
    assert segment_size_config(4096) == {"internal.segment.bytes": "4096"}
    for small in (4096, 1048575):
        normalize_topic_configs(segment_size_config(small))  # accepted as a topic config


def test_internal_segment_bytes_wins_over_segment_bytes_below_its_minimum():
    broker = BrokerConfig.from_settings()
    assert log_config_for({}, broker)["segment_bytes"] == 1 << 30
    small = {"segment.bytes": "2097152", "internal.segment.bytes": "1024"}
    assert log_config_for(small, broker)["segment_bytes"] == 1024


def test_log_config_for_takes_preallocate_from_the_broker_default():
    config = log_config_for({}, BrokerConfig.from_settings({"log.preallocate": "true"}))
    assert config["preallocate"] is True
    assert (
        log_config_for({"preallocate": "false"}, BrokerConfig.from_settings({}))["preallocate"]
        is False
    )


def test_log_config_for_rejects_bad_override():
    with pytest.raises(ConfigError, match="segment.bytes"):
        log_config_for({"segment.bytes": "x"}, DEFAULT_BROKER)
