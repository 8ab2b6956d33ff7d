"""Broker settings: sources and precedence, parsing, Kafka's fallbacks, errors."""

from pathlib import Path

import pytest

from kbroker.config import (
    BROKER_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    Endpoint,
    SourceKind,
    load_broker_config,
    validate_dynamic_broker_configs,
)
from kbroker.config import broker as broker_module
from kbroker.config.types import LONG_MAX, UpdateMode


def load(overrides=(), environ=None, config_file=None) -> BrokerConfig:
    return load_broker_config(config_file, list(overrides), environ or {})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.properties"
    path.write_text(text)
    return path


# -- defaults -----------------------------------------------------------------------------


def test_defaults_suit_a_single_local_node():
    cfg = load()
    assert cfg.node_id == 1
    assert cfg.listeners == "PLAINTEXT://127.0.0.1:9092"
    assert cfg.log_dirs == ["./data"]
    assert cfg.num_partitions == 1
    assert cfg.default_replication_factor == 1
    assert cfg.auto_create_topics_enable is True
    assert cfg.message_max_bytes == 1048588
    assert cfg.log_segment_bytes == 1073741824
    assert cfg.log_retention_bytes == -1
    assert cfg.log_retention_check_interval_ms == 300000
    assert cfg.log_flush_interval_messages == LONG_MAX
    assert cfg.log_cleanup_policy == ["delete"]
    assert cfg.log_message_timestamp_type == "CreateTime"
    assert cfg.min_insync_replicas == 1
    assert cfg.socket_request_max_bytes == 104857600
    assert cfg.offsets_topic_replication_factor == 1
    assert cfg.offsets_topic_num_partitions == 50
    assert cfg.offsets_retention_minutes == 10080
    assert cfg.group_initial_rebalance_delay_ms == 3000
    assert cfg.compression_type == "producer"
    assert cfg.delete_topic_enable is True


def test_every_setting_is_reachable_by_kafka_name_and_python_name():
    cfg = load()
    for name, definition in BROKER_CONFIGS.items():
        assert getattr(cfg, definition.python_name) == cfg.get(name)


def test_derived_views_do_not_shadow_settings():
    shadowed = [
        d.python_name for d in BROKER_CONFIGS.values() if d.python_name in vars(BrokerConfig)
    ]
    assert shadowed == []


def test_unknown_attribute_is_attribute_error():
    with pytest.raises(AttributeError):
        load().no_such_setting  # noqa: B018


def test_config_is_immutable():
    cfg = load()
    with pytest.raises(AttributeError):
        cfg.node_id = 2  # type: ignore[misc]


# -- precedence -----------------------------------------------------------------------------


def test_file_overrides_default(tmp_path):
    cfg = load(config_file=write(tmp_path, "num.partitions=3\n"))
    assert cfg.num_partitions == 3
    assert cfg.source("num.partitions").kind is SourceKind.FILE


def test_env_overrides_file(tmp_path):
    cfg = load(
        config_file=write(tmp_path, "num.partitions=3\n"),
        environ={"KBROKER_NUM_PARTITIONS": "4"},
    )
    assert cfg.num_partitions == 4
    assert cfg.source("num.partitions").location == "KBROKER_NUM_PARTITIONS"


def test_override_overrides_env(tmp_path):
    cfg = load(
        ["num.partitions=5"],
        config_file=write(tmp_path, "num.partitions=3\n"),
        environ={"KBROKER_NUM_PARTITIONS": "4"},
    )
    assert cfg.num_partitions == 5
    assert cfg.source("num.partitions").kind is SourceKind.OVERRIDE


def test_later_override_wins():
    assert load(["num.partitions=2", "num.partitions=7"]).num_partitions == 7


def test_later_line_in_file_wins(tmp_path):
    assert (
        load(config_file=write(tmp_path, "num.partitions=2\nnum.partitions=6\n")).num_partitions
        == 6
    )


def test_env_name_maps_dots_to_underscores():
    cfg = load(environ={"KBROKER_LOG_DIRS": "/a,/b", "HOME": "/root", "KAFKA_X": "1"})
    assert cfg.log_dirs == ["/a", "/b"]


def test_override_value_may_contain_equals_sign():
    cfg = load(["broker.rack=a=b"])
    assert cfg.broker_rack == "a=b"


def test_sources_map_to_describe_configs_sources(tmp_path):
    cfg = load(["num.partitions=2"])
    assert cfg.source("num.partitions").config_source == ConfigSource.STATIC_BROKER_CONFIG == 4
    assert cfg.source("num.io.threads").config_source == ConfigSource.DEFAULT_CONFIG == 5
    assert cfg.is_set("num.partitions") and not cfg.is_set("num.io.threads")


def test_kafka_server_properties_loads(tmp_path):
    text = """\
# A Kafka 3.x KRaft server.properties
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""
    cfg = load(config_file=write(tmp_path, text))
    assert cfg.broker_endpoints == (Endpoint("PLAINTEXT", "", 9092),)
    assert cfg.advertised_endpoints == (Endpoint("PLAINTEXT", "localhost", 9092),)
    assert cfg.controller_listeners == frozenset({"CONTROLLER"})
    assert cfg.data_dirs == (Path("/tmp/kraft-combined-logs"),)


def test_zookeeper_era_server_properties_loads(tmp_path):
    text = "broker.id=0\nzookeeper.connect=localhost:2181\nzookeeper.connection.timeout.ms=18000\n"
    cfg = load(config_file=write(tmp_path, text))
    assert cfg.node_id == 0 and cfg.broker_id == 0


# -- errors -----------------------------------------------------------------------------------


def test_unknown_setting_in_file_names_setting_file_and_line(tmp_path):
    path = write(tmp_path, "num.partitions=1\n\nlog.retention.hour=1\n")
    with pytest.raises(ConfigError) as info:
        load(config_file=path)
    message = str(info.value)
    assert "log.retention.hour" in message and f"{path}:3" in message
    assert "did you mean log.retention.hours" in message
    assert info.value.setting == "log.retention.hour"


def test_invalid_value_in_file_names_setting_and_line(tmp_path):
    path = write(tmp_path, "num.partitions=many\n")
    with pytest.raises(ConfigError, match=rf"num.partitions.*{path}:1.*Not a number of type INT"):
        load(config_file=path)


def test_unknown_env_var_names_variable():
    with pytest.raises(ConfigError, match="KBROKER_NUM_PARTITION"):
        load(environ={"KBROKER_NUM_PARTITION": "1"})


def test_invalid_env_value_names_variable():
    with pytest.raises(ConfigError, match="auto.create.topics.enable.*KBROKER_AUTO_CREATE"):
        load(environ={"KBROKER_AUTO_CREATE_TOPICS_ENABLE": "yes"})


def test_invalid_override_names_override():
    with pytest.raises(ConfigError, match="num.partitions.*--override num.partitions.*at least 1"):
        load(["num.partitions=0"])


def test_override_without_equals_sign_fails():
    with pytest.raises(ConfigError, match="name=value"):
        load(["num.partitions"])


def test_bad_value_fails_even_if_overridden_later(tmp_path):
    with pytest.raises(ConfigError, match="num.partitions"):
        load(["num.partitions=3"], config_file=write(tmp_path, "num.partitions=x\n"))


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("message.max.bytes", "2147483648"),  # beyond a Java int
        ("log.cleanup.policy", "remove"),
        ("log.message.timestamp.type", "createtime"),
        ("compression.type", "brotli"),
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.segment.bytes", "10"),
        ("log.segment.bytes", "1048575"),  # Kafka 4's minimum is 1 MiB
        ("security.inter.broker.protocol", "TLS"),
        ("remote.log.storage.system.enable", "true"),
        ("logging.level", "verbose"),
    ],
)
def test_out_of_range_or_bad_enum_values_fail(setting, value):
    with pytest.raises(ConfigError, match=setting.replace(".", r"\.")):
        load([f"{setting}={value}"])


def test_values_are_trimmed_and_booleans_case_insensitive():
    cfg = load(["num.partitions= 3 ", "auto.create.topics.enable=FALSE"])
    assert cfg.num_partitions == 3 and cfg.auto_create_topics_enable is False


# -- Kafka's fallbacks ----------------------------------------------------------------------


def test_retention_defaults_to_168_hours():
    assert load().log_retention_ms == 168 * 3_600_000


def test_retention_minutes_beat_hours():
    assert load(["log.retention.hours=1", "log.retention.minutes=5"]).log_retention_ms == 300_000


def test_retention_ms_beats_minutes_and_hours():
    cfg = load(["log.retention.ms=1234", "log.retention.minutes=5", "log.retention.hours=1"])
    assert cfg.log_retention_ms == 1234


def test_retention_precedence_is_by_name_not_by_source(tmp_path):
    cfg = load(["log.retention.hours=1"], config_file=write(tmp_path, "log.retention.ms=1000\n"))
    assert cfg.log_retention_ms == 1000


def test_negative_retention_means_unlimited():
    assert load(["log.retention.hours=-1"]).log_retention_ms == -1
    assert load(["log.retention.ms=-5"]).log_retention_ms == -1


def test_zero_retention_is_rejected():
    with pytest.raises(ConfigError, match="log.retention.minutes"):
        load(["log.retention.minutes=0"])


def test_raw_retention_ms_stays_unset():
    cfg = load()
    assert cfg.raw("log.retention.ms") is None
    assert cfg.raw("log.retention.hours") == 168


def test_roll_hours_feed_roll_ms():
    assert load().log_roll_ms == 168 * 3_600_000
    assert load(["log.roll.hours=2"]).log_roll_ms == 7_200_000
    assert load(["log.roll.hours=2", "log.roll.ms=10"]).log_roll_ms == 10


def test_flush_interval_falls_back_to_scheduler_interval():
    assert load().log_flush_interval_ms == LONG_MAX
    assert load(["log.flush.scheduler.interval.ms=500"]).log_flush_interval_ms == 500
    assert load(["log.flush.interval.ms=5"]).log_flush_interval_ms == 5


def test_log_dir_used_when_log_dirs_unset():
    assert load(["log.dir=/var/k"]).log_dirs == ["/var/k"]
    assert load(["log.dir=/var/k", "log.dirs=/a,/b"]).log_dirs == ["/a", "/b"]


def test_broker_id_is_a_synonym_of_node_id():
    cfg = load(["broker.id=7"])
    assert cfg.node_id == 7 and cfg.broker_id == 7


def test_conflicting_node_id_and_broker_id_fail():
    with pytest.raises(ConfigError, match="broker.id"):
        load(["node.id=1", "broker.id=2"])


def test_group_session_timeout_bounds_are_checked():
    with pytest.raises(ConfigError, match="group.min.session.timeout.ms"):
        load(["group.min.session.timeout.ms=2000000"])


def test_share_group_delivery_and_record_lock_bounds_are_checked():
    with pytest.raises(ConfigError, match="group.share.max.delivery.count.limit"):
        load(["group.share.delivery.count.limit=8", "group.share.max.delivery.count.limit=6"])
    with pytest.raises(ConfigError, match="group.share.min.partition.max.record.locks"):
        load(["group.share.min.partition.max.record.locks=3000"])
    cfg = load(["group.share.max.partition.max.record.locks=5000"])
    assert cfg.group_share_max_partition_max_record_locks == 5000
    assert cfg.group_share_min_delivery_count_limit == 2


# -- listeners ------------------------------------------------------------------------------


def test_advertised_defaults_to_listeners():
    cfg = load(["listeners=PLAINTEXT://127.0.0.1:19092"])
    assert cfg.advertised_endpoints == (Endpoint("PLAINTEXT", "127.0.0.1", 19092),)
    assert cfg.advertised_listeners == "PLAINTEXT://127.0.0.1:19092"


def test_wildcard_listener_advertises_host_name(monkeypatch):
    monkeypatch.setattr(broker_module, "advertised_host_name", lambda: "node7")
    cfg = load(["listeners=PLAINTEXT://0.0.0.0:9092"])
    assert cfg.advertised_endpoints == (Endpoint("PLAINTEXT", "node7", 9092),)
    assert cfg.broker_endpoints[0].host == "0.0.0.0"


def test_advertising_a_wildcard_fails():
    with pytest.raises(ConfigError, match="advertised.listeners.*wildcard"):
        load(["advertised.listeners=PLAINTEXT://0.0.0.0:9092"])


def test_advertised_listener_must_name_a_listener():
    with pytest.raises(ConfigError, match="advertised.listeners.*OTHER"):
        load(["advertised.listeners=OTHER://h:1"])


def test_named_listener_through_protocol_map():
    cfg = load(
        [
            "listeners=INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9094",
            "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name=internal",
        ]
    )
    assert [e.name for e in cfg.broker_endpoints] == ["INTERNAL", "EXTERNAL"]
    assert cfg.inter_broker_endpoint == Endpoint("INTERNAL", "127.0.0.1", 9092)
    assert cfg.advertised_endpoint("external") == Endpoint("EXTERNAL", "127.0.0.1", 9094)


def test_listener_and_advertised_listener_pair_up_by_name(monkeypatch):
    monkeypatch.setattr(broker_module, "advertised_host_name", lambda: "node7")
    cfg = load(
        [
            "listeners=EXTERNAL://:9094,INTERNAL://:9092",
            "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name=INTERNAL",
        ]
    )
    assert cfg.listener() == Endpoint("INTERNAL", "", 9092)
    assert cfg.advertised_listener() == Endpoint("INTERNAL", "node7", 9092)
    assert cfg.listener("external").port == 9094
    with pytest.raises(KeyError):
        cfg.listener("OTHER")


def test_inter_broker_listener_defaults_to_plaintext():
    assert load().inter_broker_listener_name == "PLAINTEXT"


def test_listeners_of_every_security_protocol_are_served():
    cfg = load(
        [
            "listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,CLIENT://127.0.0.1:9094",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CLIENT:SASL_SSL",
        ]
    )
    assert [e.name for e in cfg.broker_endpoints] == ["PLAINTEXT", "SSL", "CLIENT"]
    assert cfg.protocol_map["CLIENT"] == "SASL_SSL"


def test_a_listener_prefixed_setting_overrides_the_broker_wide_one_for_that_listener():
    cfg = load(
        [
            "listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
            "ssl.client.auth=requested",
            "listener.name.ssl.ssl.client.auth=required",
        ]
    )
    assert cfg.for_listener("SSL", "ssl.client.auth") == "required"
    assert cfg.for_listener("PLAINTEXT", "ssl.client.auth") == "requested"


def test_a_mechanism_jaas_line_is_found_for_its_listener_before_sasl_jaas_config():
    scoped = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    cfg = load(
        [
            "listeners=SASL_PLAINTEXT://127.0.0.1:9092",
            f"{scoped}=org.apache.kafka.common.security.plain.PlainLoginModule required;",
            "sasl.jaas.config=fallback required;",
        ]
    )
    assert cfg.jaas_config("SASL_PLAINTEXT", "PLAIN").endswith("PlainLoginModule required;")
    assert cfg.jaas_config("SASL_PLAINTEXT", "SCRAM-SHA-256") == "fallback required;"


def test_a_listener_prefixed_setting_naming_no_listener_fails():
    with pytest.raises(ConfigError, match="listener.name.ssl.ssl.client.auth.*SSL"):
        load(["listener.name.ssl.ssl.client.auth=required"])


def test_a_listener_prefix_on_a_setting_that_has_none_fails():
    with pytest.raises(ConfigError, match="unknown setting 'listener.name.plaintext.log.dirs'"):
        load(["listener.name.plaintext.log.dirs=/tmp/x"])


def test_listener_missing_from_protocol_map_fails():
    with pytest.raises(ConfigError, match="INTERNAL has no entry"):
        load(["listeners=INTERNAL://127.0.0.1:9092"])


def test_listeners_sharing_a_port_fail():
    with pytest.raises(ConfigError, match="share a port"):
        load(
            [
                "listeners=PLAINTEXT://127.0.0.1:9092,B://127.0.0.2:9092",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,B:PLAINTEXT",
            ]
        )


def test_malformed_listener_names_setting_and_source():
    with pytest.raises(ConfigError, match="listeners.*KBROKER_LISTENERS"):
        load(environ={"KBROKER_LISTENERS": "127.0.0.1:9092"})


def test_http_raft_and_peers():
    cfg = load(
        [
            "http.listeners=http://0.0.0.0:9700",
            "controller.raft.listener=node1:19093",
            "cluster.peers=1@node1:19093,2@node2:19093",
            "cluster.secret=s3cret",
        ]
    )
    assert cfg.http_endpoints == (Endpoint("HTTP", "0.0.0.0", 9700),)
    assert cfg.raft_address == ("node1", 19093)
    assert [p.node_id for p in cfg.peers] == [1, 2]
    assert load().raft_address is None
    assert load(["http.listeners="]).http_endpoints == ()


def test_duplicate_peer_ids_fail():
    with pytest.raises(ConfigError, match="cluster.peers"):
        load(["cluster.peers=1@a:1,1@b:2"])


# -- dynamic layers -------------------------------------------------------------------------


def test_dynamic_values_override_static_and_report_their_source():
    cfg = load(["log.retention.hours=5"]).with_dynamic(
        cluster_default={"log.retention.ms": "6000"}, per_broker={"message.max.bytes": "100"}
    )
    assert cfg.log_retention_ms == 6000
    assert (
        cfg.source("log.retention.ms").config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    )
    assert cfg.source("message.max.bytes").config_source == ConfigSource.DYNAMIC_BROKER_CONFIG


def test_read_only_setting_cannot_be_updated_dynamically():
    with pytest.raises(ConfigError) as refused:
        validate_dynamic_broker_configs({"listeners": "PLAINTEXT://a:1", "log.dirs": "/x"})
    assert str(refused.value) == "Cannot update these configs dynamically: Set(listeners, log.dirs)"


@pytest.mark.parametrize(
    "name",
    [
        "log.retention.hours",
        "log.retention.minutes",
        "log.roll.hours",
        "log.roll.jitter.hours",
        "log.flush.scheduler.interval.ms",
    ],
)
def test_the_coarse_synonyms_are_static_as_in_kafka(name):
    """Kafka updates only the primary name of a log setting dynamically (log.retention.ms,
    not its hours or minutes), and describes the others read-only."""
    with pytest.raises(ConfigError, match="Cannot update these configs dynamically"):
        validate_dynamic_broker_configs({name: "1"})


def test_an_unknown_setting_is_accepted_as_kafka_accepts_a_custom_one_and_not_applied():
    parsed = validate_dynamic_broker_configs({"no.such": "1", "message.max.bytes": "100"})
    assert parsed == {"message.max.bytes": 100}
    cfg = load_broker_config(overrides=["node.id=1"]).with_dynamic({"no.such": "1"}, {"x.y": "2"})
    assert cfg.dynamic_layers() == ({}, {})


def test_kerberos_and_login_refresh_settings_are_accepted_per_broker_and_inert():
    """Kafka changes them on one broker at run time (librdkafka's AlterConfigs test sets
    sasl.kerberos.min.time.before.relogin as a valid broker config); kbroker serves neither
    GSSAPI nor OAUTHBEARER, where they act, so they are stored, described, named inert at
    start, and refused on the cluster default as Kafka refuses a per-broker setting."""
    name = "sasl.kerberos.min.time.before.relogin"
    assert validate_dynamic_broker_configs({name: "58000"}) == {name: 58000}
    with pytest.raises(ConfigError) as refused:
        validate_dynamic_broker_configs({name: "58000"}, per_broker=False)
    assert str(refused.value) == (
        "Cannot update these configs at default cluster level, broker id must be "
        f"specified: Set({name})"
    )
    with pytest.raises(ConfigError, match="sasl.login.refresh.window.factor"):
        validate_dynamic_broker_configs({"sasl.login.refresh.window.factor": "0.2"})
    cfg = load([f"{name}=58000"])
    assert cfg.inert_settings() == [name]
    assert cfg.with_dynamic({}, {name: "59000"}).dynamic_layers() == ({}, {name: 59000})


def test_security_settings_change_only_under_a_listener_prefix():
    with pytest.raises(ConfigError) as refused:
        validate_dynamic_broker_configs({"ssl.keystore.location": "/k.pem"})
    assert str(refused.value) == (
        "These security configs can be dynamically updated only per-listener using the "
        "listener prefix: Set(ssl.keystore.location)"
    )
    scoped = "listener.name.ssl.ssl.keystore.location"
    assert validate_dynamic_broker_configs({scoped: "/k.pem"}, per_broker=True) == {
        scoped: "/k.pem"
    }
    with pytest.raises(ConfigError) as refused:
        validate_dynamic_broker_configs({scoped: "/k.pem"}, per_broker=False)
    assert str(refused.value) == (
        "Cannot update these configs at default cluster level, broker id must be "
        f"specified: Set({scoped})"
    )


def test_a_listener_setting_kafka_does_not_reload_is_not_dynamic():
    with pytest.raises(ConfigError, match="Cannot update these configs dynamically"):
        validate_dynamic_broker_configs({"listener.name.ssl.ssl.client.auth": "required"})


def test_every_setting_has_an_update_mode_matching_read_only():
    for definition in BROKER_CONFIGS.values():
        assert definition.read_only == (definition.mode is UpdateMode.READ_ONLY)
    assert BROKER_CONFIGS["max.connections"].mode is UpdateMode.CLUSTER_WIDE
    assert BROKER_CONFIGS["ssl.keystore.location"].mode is UpdateMode.PER_BROKER
    assert BROKER_CONFIGS["node.id"].mode is UpdateMode.READ_ONLY


def test_dynamic_update_is_validated():
    with pytest.raises(ConfigError, match="message.max.bytes"):
        validate_dynamic_broker_configs({"message.max.bytes": "-3"})
    validate_dynamic_broker_configs({"message.max.bytes": None})


def test_kafkas_standard_authorizer_is_accepted():
    name = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert load([f"authorizer.class.name={name}"]).get("authorizer.class.name") == name


def test_another_authorizer_class_is_refused_rather_than_run_without_its_checks():
    with pytest.raises(ConfigError, match="authorizer.class.name.*StandardAuthorizer"):
        load(["authorizer.class.name=kafka.security.authorizer.AclAuthorizer"])


def test_replica_selector_class_takes_only_kafkas_two_selectors():
    rack_aware = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    assert (
        BrokerConfig.from_settings({"replica.selector.class": rack_aware}).get(
            "replica.selector.class"
        )
        == rack_aware
    )
    assert BrokerConfig.from_settings({}).get("replica.selector.class") is None
    with pytest.raises(ConfigError, match="replica.selector.class.*must be one of"):
        BrokerConfig.from_settings({"replica.selector.class": "com.example.NearestSelector"})


def test_a_listeners_max_connections_is_set_per_listener_and_changes_at_either_level():
    cfg = load(
        [
            "listeners=PLAINTEXT://127.0.0.1:9092,CLIENT://127.0.0.1:9093",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
            "listener.name.client.max.connections=3",
        ]
    )
    assert cfg.listener_settings("CLIENT").max_connections == 3
    assert cfg.listener_settings("PLAINTEXT").max_connections == cfg.max_connections
    scoped = "listener.name.client.max.connections"
    assert validate_dynamic_broker_configs({scoped: "5"}, per_broker=False) == {scoped: 5}
    assert validate_dynamic_broker_configs({scoped: "5"}, per_broker=True) == {scoped: 5}
    with pytest.raises(ConfigError) as refused:
        validate_dynamic_broker_configs({scoped: "-1"})
    assert str(refused.value).startswith(f"Invalid value -1 for configuration {scoped}:")
    assert cfg.with_dynamic({}, {scoped: "7"}).listener_settings("CLIENT").max_connections == 7


def test_max_connections_per_ip_has_no_listener_prefix():
    with pytest.raises(ConfigError, match="unknown setting"):
        load(["listener.name.plaintext.max.connections.per.ip=3"])


def test_the_schema_registrys_listener_name_takes_listener_prefixed_settings_when_it_serves():
    settings = {
        "node.id": "1",
        "listener.name.schema_registry.ssl.keystore.type": "PEM",
        "listener.name.schema_registry.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": "file:///k",
    }
    with pytest.raises(ConfigError, match="names listener SCHEMA_REGISTRY"):
        BrokerConfig.from_settings(settings)
    serving = BrokerConfig.from_settings(
        {**settings, "schema.registry.listeners": "https://127.0.0.1:8081"}
    )
    assert serving.listener_settings("SCHEMA_REGISTRY").ssl_keystore_type == "PEM"
    assert (
        serving.for_mechanism(
            "SCHEMA_REGISTRY", "OAUTHBEARER", "sasl.oauthbearer.jwks.endpoint.url"
        )
        == "file:///k"
    )
