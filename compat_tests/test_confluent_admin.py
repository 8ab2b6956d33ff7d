"""confluent-kafka's AdminClient against kbroker: cluster, topics, configs, partitions."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)

from compat_tests.confluent_helpers import (
    admin_client,
    consume,
    create_topic,
    produce_all,
    unique_topic,
    wait_for_partitions,
    watermarks,
)
from compat_tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

KAFKA_DEFAULT_RETENTION_MS = "604800000"
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = "1048588"


def _describe_topic_configs(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin_client(bootstrap)
    futures = admin.describe_configs([resource], request_timeout=10)
    return futures[resource].result(timeout=15)


def _source(entry: ConfigEntry) -> ConfigSource:
    """librdkafka hands the source over as its integer; compare as the enum either way."""
    return entry.source if isinstance(entry.source, ConfigSource) else ConfigSource(entry.source)


def _node_id(bootstrap: str) -> int:
    metadata = admin_client(bootstrap).list_topics(timeout=10)
    (node_id,) = metadata.brokers
    return int(node_id)


def test_describe_cluster_lists_this_node_as_broker_and_controller(shared_broker):
    admin = admin_client(shared_broker.bootstrap)
    result = admin.describe_cluster(request_timeout=10)
    cluster = result.result(timeout=15)
    assert cluster.cluster_id
    assert [(n.host, n.port) for n in cluster.nodes] == [("127.0.0.1", shared_broker.port)]
    assert cluster.controller is not None
    assert cluster.controller.id == cluster.nodes[0].id


def test_describe_topics_reports_partitions_leaders_and_topic_id(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, partitions=4)
    node_id = _node_id(shared_broker.bootstrap)
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=10)
    described = futures[topic].result(timeout=15)
    assert described.name == topic
    assert not described.is_internal
    assert str(described.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA")
    assert [p.id for p in described.partitions] == [0, 1, 2, 3]
    for partition in described.partitions:
        assert partition.leader.id == node_id
        assert [n.id for n in partition.replicas] == [node_id]
        assert [n.id for n in partition.isr] == [node_id]


def test_describe_unknown_topic_fails_with_unknown_topic(shared_broker):
    topic = unique_topic("missing")
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=10)
    with pytest.raises(KafkaException) as raised:
        futures[topic].result(timeout=15)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_shows_topic_override_and_kafka_defaults(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, config={"retention.ms": "3600000"})
    entries = _describe_topic_configs(shared_broker.bootstrap, topic)
    assert entries["retention.ms"].value == "3600000"
    assert _source(entries["retention.ms"]) is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"].value == "delete"
    assert _source(entries["cleanup.policy"]) is ConfigSource.DEFAULT_CONFIG
    assert entries["max.message.bytes"].value == KAFKA_DEFAULT_MAX_MESSAGE_BYTES
    assert entries["segment.bytes"].value == str(1024 * 1024 * 1024)


def test_describe_broker_configs_shows_static_settings(shared_broker):
    node_id = _node_id(shared_broker.bootstrap)
    resource = ConfigResource(ResourceType.BROKER, str(node_id))
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.describe_configs([resource], request_timeout=10)
    entries = futures[resource].result(timeout=15)
    assert entries["log.dirs"].value == str(shared_broker.data_dir)
    assert _source(entries["log.dirs"]) is ConfigSource.STATIC_BROKER_CONFIG
    assert entries["num.partitions"].value == "1"
    assert _source(entries["num.partitions"]) is ConfigSource.DEFAULT_CONFIG


def test_alter_configs_replaces_the_whole_topic_override_set(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, config={"max.message.bytes": "200000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "1000000"})
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.alter_configs([resource], request_timeout=10)
    futures[resource].result(timeout=15)
    entries = _describe_topic_configs(shared_broker.bootstrap, topic)
    assert entries["retention.ms"].value == "1000000"
    assert _source(entries["retention.ms"]) is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["max.message.bytes"].value == KAFKA_DEFAULT_MAX_MESSAGE_BYTES
    assert _source(entries["max.message.bytes"]) is ConfigSource.DEFAULT_CONFIG


def _incremental(bootstrap: str, topic: str, *ops: tuple[str, str | None, AlterConfigOpType]):
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops
        ],
    )
    admin = admin_client(bootstrap)
    futures = admin.incremental_alter_configs([resource], request_timeout=10)
    return futures[resource].result(timeout=15)


def test_incremental_alter_configs_set_keeps_other_overrides(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, config={"max.message.bytes": "200000"})
    _incremental(shared_broker.bootstrap, topic, ("retention.ms", "123456", AlterConfigOpType.SET))
    entries = _describe_topic_configs(shared_broker.bootstrap, topic)
    assert entries["retention.ms"].value == "123456"
    assert entries["max.message.bytes"].value == "200000"
    assert _source(entries["max.message.bytes"]) is ConfigSource.DYNAMIC_TOPIC_CONFIG


def test_incremental_alter_configs_delete_reverts_to_default(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, config={"retention.ms": "3600000"})
    _incremental(shared_broker.bootstrap, topic, ("retention.ms", None, AlterConfigOpType.DELETE))
    entries = _describe_topic_configs(shared_broker.bootstrap, topic)
    assert entries["retention.ms"].value == KAFKA_DEFAULT_RETENTION_MS
    assert _source(entries["retention.ms"]) is ConfigSource.DEFAULT_CONFIG


def test_subtracting_the_last_cleanup_policy_leaves_it_empty_as_kafka_4_does(shared_broker):
    """confluent-kafka-python's own test_incremental_alter_configs: an empty
    cleanup.policy is valid since Kafka 4 (neither retention nor compaction)."""
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, config={"cleanup.policy": "compact,delete"})
    subtract = AlterConfigOpType.SUBTRACT
    _incremental(shared_broker.bootstrap, topic, ("cleanup.policy", "delete", subtract))
    assert _describe_topic_configs(shared_broker.bootstrap, topic)["cleanup.policy"].value == (
        "compact"
    )
    _incremental(shared_broker.bootstrap, topic, ("cleanup.policy", "compact", subtract))
    emptied = _describe_topic_configs(shared_broker.bootstrap, topic)["cleanup.policy"]
    assert (emptied.value, _source(emptied)) == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    _incremental(
        shared_broker.bootstrap, topic, ("cleanup.policy", "delete", AlterConfigOpType.SET)
    )
    assert _describe_topic_configs(shared_broker.bootstrap, topic)["cleanup.policy"].value == (
        "delete"
    )


def test_incremental_alter_configs_rejects_invalid_value_and_keeps_old_one(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, config={"retention.ms": "3600000"})
    with pytest.raises(KafkaException) as raised:
        _incremental(
            shared_broker.bootstrap, topic, ("retention.ms", "not-a-number", AlterConfigOpType.SET)
        )
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert _describe_topic_configs(shared_broker.bootstrap, topic)["retention.ms"].value == (
        "3600000"
    )


def test_a_consumer_groups_session_timeout_is_set_on_the_group_as_librdkafka_sets_it(
    shared_broker,
):
    """librdkafka's own admin test (0081) sets consumer.session.timeout.ms on a GROUP."""
    group = unique_topic("group-config")
    admin = admin_client(shared_broker.bootstrap)

    def set_group(value: str) -> None:
        entry = ConfigEntry(
            "consumer.session.timeout.ms", value, incremental_operation=AlterConfigOpType.SET
        )
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
        admin.incremental_alter_configs([resource], request_timeout=10)[resource].result(15)

    set_group("50000")
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([resource], request_timeout=10)[resource].result(15)
    assert entries["consumer.session.timeout.ms"].value == "50000"
    assert entries["consumer.heartbeat.interval.ms"].value == "5000"
    with pytest.raises(KafkaException) as raised:
        set_group("5000")  # not above the heartbeat interval, nor within the broker's bounds
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_create_topic_with_invalid_config_fails_with_invalid_config(shared_broker):
    from confluent_kafka.admin import NewTopic

    topic = unique_topic()
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"cleanup.policy": "shred"})], request_timeout=10
    )
    with pytest.raises(KafkaException) as raised:
        futures[topic].result(timeout=15)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_create_partitions_grows_topic_and_new_partitions_take_records(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.create_partitions([NewPartitions(topic, 5)], request_timeout=10)
    futures[topic].result(timeout=15)
    wait_for_partitions(admin, topic, 5, timeout=10)
    produce_all(shared_broker.bootstrap, topic, [{"value": b"in-p4", "partition": 4}])
    (record,) = consume(shared_broker.bootstrap, topic, 1, partitions=[4])
    assert (record.partition, record.offset, record.value) == (4, 0, b"in-p4")


def test_create_partitions_cannot_shrink_a_topic(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.create_partitions([NewPartitions(topic, 2)], request_timeout=10)
    with pytest.raises(KafkaException) as raised:
        futures[topic].result(timeout=15)
    assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def _wait_until_unlisted(bootstrap: str, topic: str, timeout: float = 10.0) -> None:
    eventually(
        lambda: topic not in admin_client(bootstrap).list_topics(timeout=10).topics,
        timeout=timeout,
        what=f"{topic} unlisted after its deletion",
    )


def test_delete_topics_removes_topic_from_metadata(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.delete_topics([topic], request_timeout=10, operation_timeout=10)
    futures[topic].result(timeout=15)
    _wait_until_unlisted(shared_broker.bootstrap, topic)


def test_recreated_topic_starts_empty(shared_broker):
    topic = unique_topic()
    create_topic(shared_broker.bootstrap, topic)
    produce_all(
        shared_broker.bootstrap, topic, ({"value": b"old", "partition": 0} for _ in range(5))
    )
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.delete_topics([topic], operation_timeout=10)
    futures[topic].result(timeout=15)
    _wait_until_unlisted(shared_broker.bootstrap, topic)
    create_topic(shared_broker.bootstrap, topic)
    assert watermarks(shared_broker.bootstrap, topic) == (0, 0)
    log = produce_all(shared_broker.bootstrap, topic, [{"value": b"new", "partition": 0}])
    assert [offset for _, offset, _ in log.delivered] == [0]


def test_deleting_unknown_topic_fails_with_unknown_topic(shared_broker):
    topic = unique_topic("missing")
    admin = admin_client(shared_broker.bootstrap)
    futures = admin.delete_topics([topic], operation_timeout=10)
    with pytest.raises(KafkaException) as raised:
        futures[topic].result(timeout=15)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_acl_changes_are_refused_as_security_disabled(shared_broker):
    admin = admin_client(shared_broker.bootstrap)
    binding = AclBinding(
        ResourceType.TOPIC,
        "t",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    any_acl = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    (created,) = admin.create_acls([binding], request_timeout=10).values()
    (deleted,) = admin.delete_acls([any_acl], request_timeout=10).values()
    for future in (created, deleted):
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=15)
        assert raised.value.args[0].code() == KafkaError.SECURITY_DISABLED
    # librdkafka reports DescribeAcls' top-level SECURITY_DISABLED as no bindings.
    assert admin.describe_acls(any_acl, request_timeout=10).result(timeout=15) == []
