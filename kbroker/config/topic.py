"""Topic-level configs: Kafka's table, validation, effective values, storage settings.

A topic config not overridden on the topic takes its value from the broker setting
Kafka names as its "server default property" (``retention.ms`` <- ``log.retention.ms``
and, through it, minutes and hours; ``max.message.bytes`` <- ``message.max.bytes``...).
The table holds every topic config Kafka 3.9 documents, the deprecated ones included,
so DescribeConfigs lists what a client expects; kbroker acts on those the storage and
replication layers implement and keeps the rest for display.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbroker.config.broker import BrokerConfig
from kbroker.config.broker_settings import (
    MIN_SEGMENT_BYTES,
    cleanup_policy_validator,
    compression_validator,
    gzip_level_validator,
    lz4_level_validator,
    message_format_version_validator,
    no_tiered_storage_validator,
    timestamp_type_validator,
    zstd_level_validator,
)
from kbroker.config.errors import ConfigError
from kbroker.config.types import (
    LONG_MAX,
    ConfigDef,
    ConfigType,
    SettingRole,
    Validator,
    at_least,
    between,
    described,
    table,
)

INERT = SettingRole.INERT
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
)


def _throttled_replicas(value: list[str]) -> None:
    """``*`` or ``partition:broker`` pairs, as Kafka's ThrottledReplicaListValidator."""
    if value == ["*"]:
        return
    for item in value:
        partition, sep, broker = item.partition(":")
        if not (sep and partition.strip().isdigit() and broker.strip().isdigit()):
            raise ValueError("must be * or a list of partitionId:brokerId")


throttled_replicas_validator = described(
    _throttled_replicas, "* or partitionId:brokerId, comma-separated"
)


def _t(
    name: str,
    config_type: ConfigType,
    default: Any,
    documentation: str,
    validator: Validator | None = None,
    *,
    role: SettingRole = SettingRole.APPLIED,
) -> ConfigDef:
    return ConfigDef(
        name, config_type, default, documentation, validator, read_only=False, role=role
    )


_SUBJECT_STRATEGIES = tuple(
    f"io.confluent.kafka.serializers.subject.{name}"
    for name in ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
)


def _subject_strategy(value: str) -> None:
    if value not in _SUBJECT_STRATEGIES and value not in [
        s.rsplit(".", 1)[1] for s in _SUBJECT_STRATEGIES
    ]:
        raise ValueError(
            "must be TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy "
            "(io.confluent.kafka.serializers.subject.*)"
        )


subject_strategy_validator = described(_subject_strategy, "a subject name strategy")


TOPIC_CONFIG_DEFS: tuple[ConfigDef, ...] = (
    _t(
        "cleanup.policy",
        LIST,
        ["delete"],
        "What happens to old segments: 'delete' removes "
        "them by retention time or size, 'compact' keeps the latest record of each key; "
        "'compact,delete' does both; empty does neither, and the log is kept whole.",
        cleanup_policy_validator,
    ),
    _t(
        "compression.type",
        STRING,
        "producer",
        "Codec of stored batches: gzip, snappy, lz4, zstd or uncompressed (a batch "
        "produced in another codec is rewritten in this one on append), or producer to "
        "keep each batch as the producer sent it.",
        compression_validator,
    ),
    _t(
        "compression.gzip.level",
        INT,
        -1,
        "gzip level when compression.type is gzip.",
        gzip_level_validator,
    ),
    _t(
        "compression.lz4.level",
        INT,
        9,
        "lz4 level when compression.type is lz4.",
        lz4_level_validator,
    ),
    _t(
        "compression.zstd.level",
        INT,
        3,
        "zstd level when compression.type is zstd.",
        zstd_level_validator,
    ),
    _t(
        "delete.retention.ms",
        LONG,
        86400000,
        "How long tombstones are kept in a compacted "
        "topic; also how long a consumer reading from the start may take to see them.",
        at_least(0),
    ),
    _t(
        "file.delete.delay.ms",
        LONG,
        60000,
        "Delay before a deleted segment's files are removed from disk.",
        at_least(0),
    ),
    _t(
        "flush.messages",
        LONG,
        LONG_MAX,
        "Messages appended before the partition is fsynced; "
        "1 syncs every batch. The default leaves durability to replication.",
        at_least(1),
    ),
    _t("flush.ms", LONG, LONG_MAX, "Longest a message stays unflushed.", at_least(0)),
    _t(
        "follower.replication.throttled.replicas",
        LIST,
        [],
        "Replicas whose follower fetches are throttled by follower.replication.throttled.rate "
        "while out of the ISR, as partitionId:brokerId pairs or *.",
        throttled_replicas_validator,
    ),
    _t(
        "index.interval.bytes",
        INT,
        4096,
        "Bytes of log between two offset index entries.",
        at_least(0),
    ),
    _t(
        "leader.replication.throttled.replicas",
        LIST,
        [],
        "Replicas whose leader-side replication is throttled by "
        "leader.replication.throttled.rate while the follower is out of the ISR, as "
        "partitionId:brokerId pairs or *.",
        throttled_replicas_validator,
    ),
    _t(
        "local.retention.bytes",
        LONG,
        -2,
        "Tiered storage only (unsupported); -2 means retention.bytes.",
        at_least(-2),
        role=INERT,
    ),
    _t(
        "local.retention.ms",
        LONG,
        -2,
        "Tiered storage only (unsupported); -2 means retention.ms.",
        at_least(-2),
        role=INERT,
    ),
    _t(
        "max.compaction.lag.ms",
        LONG,
        LONG_MAX,
        "Oldest a record may get before it must be compacted.",
        at_least(1),
    ),
    _t(
        "max.message.bytes",
        INT,
        1048588,
        "Largest record batch the topic accepts, after compression.",
        at_least(0),
    ),
    _t(
        "message.downconversion.enable",
        BOOLEAN,
        True,
        "Whether Fetch v0-3 (clients before Kafka 0.11) is answered with the records "
        "down-converted to message format v0/v1; off, such fetches get UNSUPPORTED_VERSION.",
    ),
    _t(
        "message.format.version",
        STRING,
        "3.0-IV1",
        "Deprecated and ignored: batches are stored in record batch format v2.",
        message_format_version_validator,
        role=INERT,
    ),
    _t(
        "message.timestamp.after.max.ms",
        LONG,
        3_600_000,
        "How far a CreateTime timestamp may "
        "lie after the broker's clock before the batch is rejected.",
        at_least(0),
    ),
    _t(
        "message.timestamp.before.max.ms",
        LONG,
        LONG_MAX,
        "How far a CreateTime timestamp may "
        "lie before the broker's clock before the batch is rejected.",
        at_least(0),
    ),
    _t(
        "message.timestamp.difference.max.ms",
        LONG,
        LONG_MAX,
        "Deprecated: see message.timestamp.before.max.ms and message.timestamp.after.max.ms.",
        at_least(0),
        role=INERT,
    ),
    _t(
        "message.timestamp.type",
        STRING,
        "CreateTime",
        "Timestamp kept in stored batches: the "
        "producer's (CreateTime) or the broker's at append (LogAppendTime).",
        timestamp_type_validator,
    ),
    _t(
        "errors.deadletterqueue.group.enable",
        BOOLEAN,
        False,
        "Whether share groups may write their dead-letter records to this topic (KIP-1191).",
    ),
    _t(
        "min.cleanable.dirty.ratio",
        DOUBLE,
        0.5,
        "Share of a log not yet compacted at which the cleaner compacts it.",
        between(0, 1),
    ),
    _t(
        "min.compaction.lag.ms",
        LONG,
        0,
        "Youngest a record may be and still be compacted.",
        at_least(0),
    ),
    _t(
        "min.insync.replicas",
        INT,
        1,
        "Fewest in-sync replicas for an acks=all produce to "
        "succeed; fewer fails it with NOT_ENOUGH_REPLICAS.",
        at_least(1),
    ),
    _t(
        "preallocate",
        BOOLEAN,
        False,
        "Allocate the active segment's file ahead of its data (always done when "
        "flush.messages is 1).",
    ),
    _t("remote.log.copy.disable", BOOLEAN, False, "Tiered storage only (unsupported).", role=INERT),
    _t(
        "remote.log.delete.on.disable",
        BOOLEAN,
        False,
        "Tiered storage only (unsupported).",
        role=INERT,
    ),
    _t(
        "remote.storage.enable",
        BOOLEAN,
        False,
        "Tiered storage; kbroker has none, so only false is accepted.",
        no_tiered_storage_validator,
        role=INERT,
    ),
    _t(
        "retention.bytes",
        LONG,
        -1,
        "Size a partition may grow to before its oldest segments are deleted; -1 means no limit.",
        None,
    ),
    _t(
        "retention.ms",
        LONG,
        604800000,
        "How long a segment is kept after its newest record; -1 keeps data forever.",
        at_least(-1),
    ),
    _t(
        "segment.bytes",
        INT,
        1073741824,
        "Size at which the active segment is rolled, and the largest append a "
        "partition takes (RECORD_LIST_TOO_LARGE beyond it).",
        at_least(MIN_SEGMENT_BYTES),
    ),
    _t(
        "internal.segment.bytes",
        INT,
        None,
        "Kafka's internal override of segment.bytes, below its 1 MiB minimum (for "
        "tests): when set, the segment size. Listed by DescribeConfigs only where set.",
    ),
    _t(
        "segment.index.bytes",
        INT,
        10485760,
        "Size of a segment's offset and time index files.",
        at_least(4),
    ),
    _t(
        "segment.jitter.ms",
        LONG,
        0,
        "Random jitter subtracted from segment.ms so segments do not all roll at once.",
        at_least(0),
    ),
    _t(
        "segment.ms",
        LONG,
        604800000,
        "Age at which the active segment is rolled even if not "
        "full, so retention and compaction can act on it.",
        at_least(1),
    ),
    _t(
        "unclean.leader.election.enable",
        BOOLEAN,
        False,
        "Allow an out-of-sync replica to "
        "become leader, losing data, when no in-sync replica is left.",
    ),
    _t(
        "confluent.key.schema.validation",
        BOOLEAN,
        False,
        "Confluent's: the leader refuses (INVALID_RECORD, naming each record) a batch whose "
        "keys do not start with magic byte 0 and the id of a schema registered under the "
        "topic's key subject (see docs/schema-registry.md).",
    ),
    _t(
        "confluent.value.schema.validation",
        BOOLEAN,
        False,
        "Confluent's: as confluent.key.schema.validation, for record values.",
    ),
    _t(
        "confluent.key.subject.name.strategy",
        STRING,
        _SUBJECT_STRATEGIES[0],
        "Confluent's: the key subject validation checks: TopicNameStrategy (<topic>-key), "
        "RecordNameStrategy (the schema's record name) or TopicRecordNameStrategy "
        "(<topic>-<record name>).",
        subject_strategy_validator,
    ),
    _t(
        "confluent.value.subject.name.strategy",
        STRING,
        _SUBJECT_STRATEGIES[0],
        "Confluent's: the value subject validation checks, as "
        "confluent.key.subject.name.strategy (<topic>-value with TopicNameStrategy).",
        subject_strategy_validator,
    ),
)

TOPIC_CONFIGS: dict[str, ConfigDef] = table(TOPIC_CONFIG_DEFS)

# Kafka's internal topic configs (ConfigDef.defineInternal): accepted and applied, but
# described only on a topic that sets them.
INTERNAL_TOPIC_CONFIGS = frozenset({"internal.segment.bytes"})

# Kafka's "server default property" of each topic config (its ServerTopicConfigSynonyms).
# Where several broker settings feed one topic config (retention.ms <- ms/minutes/hours),
# the first is named; BrokerConfig computes its effective value from the others.
TOPIC_BROKER_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "message.format.version": "log.message.format.version",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


def _invalid(name: str, raw: Any, reason: str) -> ConfigError:
    return ConfigError(
        f"Invalid value {raw} for configuration {name}: {reason}",
        setting=name,
        origin="topic config",
    )


def parse_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse and check topic overrides; the parsed values by name. Raises ConfigError."""
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise ConfigError(f"unknown topic config {name!r}", setting=name, origin="topic config")
        if raw is None:
            raise _invalid(name, raw, "a topic config needs a value")
        try:
            parsed[name] = definition.parse(raw)
        except ValueError as exc:
            raise _invalid(name, raw, str(exc)) from None
    low = parsed.get("min.compaction.lag.ms")
    high = parsed.get("max.compaction.lag.ms")
    if low is not None and high is not None and low > high:
        raise _invalid(
            "min.compaction.lag.ms",
            configs["min.compaction.lag.ms"],
            f"must not exceed max.compaction.lag.ms ({high})",
        )
    return parsed


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    """Raise ConfigError naming the first unknown, malformed or out-of-range config."""
    parse_topic_configs(configs)


def normalize_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Validate and return the canonical text of each override (what should be stored).

    Canonical means as Kafka prints it: booleans lower case, numbers without sign or
    padding, ``cleanup.policy`` sorted and de-duplicated (``delete,compact`` and
    ``compact,delete`` are one policy).
    """
    parsed = parse_topic_configs(configs)
    if "cleanup.policy" in parsed:
        parsed["cleanup.policy"] = sorted(set(parsed["cleanup.policy"]))
    return {name: TOPIC_CONFIGS[name].format(value) or "" for name, value in parsed.items()}


def _topic_value_from_broker(name: str, broker: BrokerConfig) -> Any:
    synonym = TOPIC_BROKER_SYNONYMS.get(name)
    if synonym is None:
        return TOPIC_CONFIGS[name].default
    value = broker.get(synonym)
    return TOPIC_CONFIGS[name].default if value is None else value


def topic_config_values(overrides: Mapping[str, str], broker: BrokerConfig) -> dict[str, Any]:
    """Effective typed value of every topic config: the override, else the broker default."""
    parsed = parse_topic_configs(overrides)
    return {
        name: parsed[name] if name in parsed else _topic_value_from_broker(name, broker)
        for name in TOPIC_CONFIGS
    }


def segment_size_config(segment_bytes: int) -> dict[str, str]:
    """The topic config that gives an internal topic segments of `segment_bytes` (its
    broker setting, offsets.topic.segment.bytes say, allows any size): segment.bytes, or
    below segment.bytes' 1 MiB minimum, internal.segment.bytes."""
    name = "segment.bytes" if segment_bytes >= MIN_SEGMENT_BYTES else "internal.segment.bytes"
    return {name: str(segment_bytes)}


def cleanup_policy_text(policy: list[str]) -> str:
    """``["delete", "compact"]`` -> ``"compact,delete"``: one spelling per policy."""
    return ",".join(sorted(set(policy)))


def log_config_for(overrides: Mapping[str, str], broker: BrokerConfig) -> dict[str, Any]:
    """Keyword arguments for the storage layer's ``LogConfig`` of one partition.

    Kafka's encodings are kept: -1 for unlimited retention, ``2**63-1`` for "never" in
    ``flush_interval_messages`` / ``flush_interval_ms``. ``cleanup_policy`` is
    "delete", "compact" or "compact,delete".
    """
    values = topic_config_values(overrides, broker)
    return {
        "segment_bytes": values["segment.bytes"]
        if values["internal.segment.bytes"] is None
        else values["internal.segment.bytes"],
        "segment_ms": values["segment.ms"],
        "segment_jitter_ms": values["segment.jitter.ms"],
        "retention_ms": values["retention.ms"],
        "retention_bytes": values["retention.bytes"],
        "index_interval_bytes": values["index.interval.bytes"],
        "segment_index_bytes": values["segment.index.bytes"],
        "max_message_bytes": values["max.message.bytes"],
        "message_timestamp_type": values["message.timestamp.type"],
        "flush_interval_messages": values["flush.messages"],
        "flush_interval_ms": values["flush.ms"],
        "cleanup_policy": cleanup_policy_text(values["cleanup.policy"]),
        "file_delete_delay_ms": values["file.delete.delay.ms"],
        "preallocate": values["preallocate"],
        "message_timestamp_before_max_ms": values["message.timestamp.before.max.ms"],
        "message_timestamp_after_max_ms": values["message.timestamp.after.max.ms"],
        "compression_type": values["compression.type"],
        "compression_gzip_level": values["compression.gzip.level"],
        "compression_lz4_level": values["compression.lz4.level"],
        "compression_zstd_level": values["compression.zstd.level"],
    }
