"""DescribeConfigs entries: values, sources, synonyms, types, flags."""

from kbroker.config import (
    BROKER_CONFIGS,
    INTERNAL_TOPIC_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    describe_broker_config,
    describe_topic_config,
)

TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG
STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = ConfigSource.DEFAULT_CONFIG


def by_name(entries):
    return {e.name: e for e in entries}


def test_kafka_wire_numbers():
    assert [int(s) for s in ConfigSource] == list(range(9))
    assert (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG) == (1, 2)
    assert (ConfigType.BOOLEAN, ConfigType.LIST, ConfigType.PASSWORD) == (1, 7, 9)


def test_topic_describe_lists_every_topic_config_but_the_internal_ones_left_unset():
    entries = describe_topic_config({}, BrokerConfig.from_settings())
    assert [e.name for e in entries] == sorted(set(TOPIC_CONFIGS) - INTERNAL_TOPIC_CONFIGS)
    assert all(not e.read_only and not e.is_sensitive for e in entries)


def test_an_internal_topic_config_is_described_where_the_topic_sets_it():
    """As Kafka's resolveEffectiveTopicConfigs: internal.segment.bytes shows only when set."""
    entries = by_name(
        describe_topic_config({"internal.segment.bytes": "4096"}, BrokerConfig.from_settings())
    )
    entry = entries["internal.segment.bytes"]
    assert (entry.value, entry.source, entry.is_default) == ("4096", TOPIC, False)
    assert entries["segment.bytes"].value == "1073741824"  # what the topic would have without it


def test_topic_default_entry_has_default_source_and_broker_default_synonym():
    entry = by_name(describe_topic_config({}, BrokerConfig.from_settings()))["cleanup.policy"]
    assert (entry.value, entry.source, entry.is_default) == ("delete", DEFAULT, True)
    assert entry.synonyms == [ConfigSynonym("log.cleanup.policy", "delete", DEFAULT)]
    assert entry.config_type == ConfigType.LIST
    assert entry.documentation


def test_topic_override_comes_first_then_static_then_default():
    broker = BrokerConfig.from_settings({"log.retention.ms": "86400000"})
    entry = by_name(describe_topic_config({"retention.ms": "1000"}, broker))["retention.ms"]
    assert (entry.value, entry.source, entry.is_default) == ("1000", TOPIC, False)
    assert entry.synonyms == [
        ConfigSynonym("retention.ms", "1000", TOPIC),
        ConfigSynonym("log.retention.ms", "86400000", STATIC),
        ConfigSynonym("log.retention.hours", "168", DEFAULT),
    ]
    assert entry.config_type == ConfigType.LONG


def test_broker_synonyms_before_the_primary_server_property_are_dropped_as_kafka_drops_them():
    """Kafka lists a topic config's broker synonyms from the first value of its primary
    property (log.retention.ms for retention.ms) on; log.retention.ms has no default, so
    while only the hours are set, none is listed and the source is DEFAULT_CONFIG."""
    for settings in ({}, {"log.retention.hours": "24"}):
        entries = by_name(describe_topic_config({}, BrokerConfig.from_settings(settings)))
        entry = entries["retention.ms"]
        hours = int(settings.get("log.retention.hours", "168"))
        assert (entry.value, entry.source, entry.synonyms) == (str(hours * 3_600_000), DEFAULT, [])
    overridden = describe_topic_config({"retention.ms": "5"}, BrokerConfig.from_settings())
    assert by_name(overridden)["retention.ms"].synonyms == [
        ConfigSynonym("retention.ms", "5", TOPIC)
    ]


def test_topic_value_from_static_broker_setting_reports_static_source():
    broker = BrokerConfig.from_settings({"log.segment.bytes": "2097152"})
    entry = by_name(describe_topic_config({}, broker))["segment.bytes"]
    assert (entry.value, entry.source, entry.is_default) == ("2097152", STATIC, False)


def test_topic_synonym_groups_keep_kafka_priority_within_a_layer():
    broker = BrokerConfig.from_settings({"log.retention.ms": "5", "log.retention.hours": "2"})
    entry = by_name(describe_topic_config({}, broker))["retention.ms"]
    assert entry.value == "5"
    assert [(s.name, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", STATIC),
        ("log.retention.hours", STATIC),
        ("log.retention.hours", DEFAULT),
    ]


def test_topic_describe_filters_by_name_and_omits_synonyms_on_request():
    entries = describe_topic_config(
        {},
        BrokerConfig.from_settings(),
        ["segment.ms", "nope"],
        include_synonyms=False,
        include_documentation=False,
    )
    assert [(e.name, e.synonyms, e.documentation) for e in entries] == [("segment.ms", [], None)]


def test_topic_values_print_like_kafka():
    entries = by_name(describe_topic_config({}, BrokerConfig.from_settings()))
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert entries["preallocate"].value == "false"
    assert entries["flush.ms"].value == "9223372036854775807"
    assert entries["leader.replication.throttled.replicas"].value == ""


def test_broker_describe_lists_every_setting():
    entries = describe_broker_config(BrokerConfig.from_settings())
    assert [e.name for e in entries] == sorted(BROKER_CONFIGS)


def test_broker_describe_reports_raw_values_and_sources():
    broker = BrokerConfig.from_settings({"num.partitions": "3"})
    entries = by_name(describe_broker_config(broker))
    assert (entries["num.partitions"].value, entries["num.partitions"].source) == ("3", STATIC)
    assert entries["num.partitions"].synonyms == [
        ConfigSynonym("num.partitions", "3", STATIC),
        ConfigSynonym("num.partitions", "1", DEFAULT),
    ]
    unset = entries["log.retention.ms"]
    assert (unset.value, unset.source, unset.is_default, unset.synonyms) == (
        None,
        DEFAULT,
        True,
        [],
    )
    assert entries["listeners"].read_only is True
    assert entries["log.retention.ms"].read_only is False


def test_broker_describe_synonyms_start_at_the_settings_own_first_value():
    broker = BrokerConfig.from_settings({"log.retention.minutes": "5"})
    entries = by_name(describe_broker_config(broker))
    assert entries["log.retention.minutes"].synonyms == [
        ConfigSynonym("log.retention.minutes", "5", STATIC),
        ConfigSynonym("log.retention.hours", "168", DEFAULT),
    ]
    assert entries["log.retention.hours"].synonyms == [
        ConfigSynonym("log.retention.hours", "168", DEFAULT)
    ]
    # The synonyms of other names, in every layer, follow the described name's first
    # value, as in Kafka's list (log.retention.hours is not dynamic; log.retention.ms is).
    layered = BrokerConfig.from_settings({"log.retention.hours": "6"}).with_dynamic(
        cluster_default={"log.retention.ms": "7"}, per_broker={}
    )
    described = by_name(describe_broker_config(layered))
    assert described["log.retention.ms"].synonyms == [
        ConfigSynonym("log.retention.ms", "7", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "6", STATIC),
        ConfigSynonym("log.retention.hours", "168", DEFAULT),
    ]
    assert described["log.retention.hours"].synonyms == [
        ConfigSynonym("log.retention.hours", "6", STATIC),
        ConfigSynonym("log.retention.hours", "168", DEFAULT),
    ]


def test_broker_describe_shows_dynamic_layers_first():
    broker = BrokerConfig.from_settings({"message.max.bytes": "2000"}).with_dynamic(
        cluster_default={"message.max.bytes": "3000"}, per_broker={"message.max.bytes": "4000"}
    )
    entry = by_name(describe_broker_config(broker))["message.max.bytes"]
    assert entry.value == "4000" and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [s.source for s in entry.synonyms] == [2, 3, 4, 5]


def test_double_prints_as_java_does():
    entry = by_name(describe_broker_config(BrokerConfig.from_settings()))[
        "log.cleaner.io.max.bytes.per.second"
    ]
    assert entry.value == "1.7976931348623157E308"
    assert entry.config_type == ConfigType.DOUBLE
