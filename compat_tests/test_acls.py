"""The StandardAuthorizer on a live broker: users logged in over SASL/PLAIN (and one by
its client certificate) are refused or let through exactly as their ACLs say, with
Kafka's error codes. ``admin`` is a super user and manages the ACLs with the stock
admin client."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from compat_tests.confluent_helpers import make_consumer
from compat_tests.security_broker import SecureBroker, acl_broker, allow, grant, login, plain_login
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection, fetch_fields

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with acl_broker(
        tmp_path_factory.mktemp("acl-broker"),
        **{"listener.name.ssl.ssl.client.auth": "required"},
    ) as broker:
        yield broker


def admin(broker: SecureBroker) -> AdminClient:
    return AdminClient(plain_login(broker, "admin"))


def new_topic(broker: SecureBroker, prefix: str = "acl") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    client = admin(broker)
    client.create_topics([NewTopic(name, 1, 1)])[name].result(20)
    producer = Producer(plain_login(broker, "admin"))
    producer.produce(name, b"from admin")
    assert producer.flush(20) == 0
    return name


def produce_error(broker: SecureBroker, user: str, topic: str) -> int | None:
    """The error code of one record's delivery (None when delivered)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**plain_login(broker, user), "message.timeout.ms": 15000})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report"
    return None if outcome[0] is None else outcome[0].code()


def fetch_error(broker: SecureBroker, user: str, topic: str) -> int | None:
    """None when Fetch (v12, from offset 0) returns records, else its partition's error."""
    with login(broker, user) as conn:
        answer = conn.request(
            1,
            12,
            **fetch_fields(topic, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1),
        )
    partition = answer.responses[0].partitions[0]
    if partition.error_code:
        return int(partition.error_code)
    assert partition.records, "no error and no records"
    return None


def test_without_acls_a_user_is_refused_writes_and_reads(secure: SecureBroker) -> None:
    topic = new_topic(secure)
    assert produce_error(secure, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert fetch_error(secure, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_without_acls_topic_creation_and_group_joins_are_refused(secure: SecureBroker) -> None:
    with login(secure, "alice") as conn:
        created = conn.request(
            19,
            4,
            topics=[
                {
                    "name": f"denied-{uuid.uuid4().hex[:8]}",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            timeout=10000,
            validate_only=False,
        )
        assert created.topics[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        joined = conn.request(
            11,
            5,
            group_id="alice-group",
            session_timeout=10000,
            rebalance_timeout=10000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": b""}],
        )
        assert joined.error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
        found = conn.request(10, 2, key="alice-group", key_type=0)
        assert found.error_code == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_consumer_group_heartbeat_needs_describe_on_each_subscribed_topic(
    secure: SecureBroker,
) -> None:
    topic, group = new_topic(secure), f"cg-{uuid.uuid4().hex[:8]}"
    grant(secure, allow(ResourceType.GROUP, group, AclOperation.READ))

    def heartbeat(conn: BrokerConnection) -> Any:
        return conn.request(
            68,
            0,
            group_id=group,
            member_id=uuid.uuid4().hex,
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=30000,
            subscribed_topic_names=[topic],
            server_assignor=None,
            topic_partitions=[],
        )

    with login(secure, "alice") as conn:
        refused = heartbeat(conn)
        assert refused.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert topic in refused.error_message
        grant(secure, allow(ResourceType.TOPIC, topic, AclOperation.DESCRIBE))

        def answered_without_coordinator_errors():  # type: ignore[no-untyped-def]
            answered = heartbeat(conn)
            if answered.error_code in (14, 15, 16):
                conn.request(10, 2, key=group, key_type=0)  # creates the offsets topic
                return None
            return answered

        answered = eventually(
            answered_without_coordinator_errors,
            timeout=15,
            what="a heartbeat answered by a loaded coordinator",
            interval=0.2,
        )
        assert answered.error_code == 0


def test_one_acl_grants_exactly_that(secure: SecureBroker) -> None:
    topic = new_topic(secure)
    grant(secure, allow(ResourceType.TOPIC, topic, AclOperation.READ))
    assert fetch_error(secure, "alice", topic) is None
    assert produce_error(secure, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert fetch_error(secure, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_prefixed_acl_covers_every_topic_with_the_prefix(secure: SecureBroker) -> None:
    prefix = f"pre{uuid.uuid4().hex[:6]}"
    inside, outside = new_topic(secure, prefix), new_topic(secure, "elsewhere")
    grant(
        secure,
        allow(
            ResourceType.TOPIC,
            prefix,
            AclOperation.WRITE,
            pattern=ResourcePatternType.PREFIXED,
        ),
    )
    assert produce_error(secure, "alice", inside) is None
    assert produce_error(secure, "alice", outside) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_wins_over_allow(secure: SecureBroker) -> None:
    prefix = f"shared{uuid.uuid4().hex[:6]}"
    open_topic, secret = new_topic(secure, prefix), new_topic(secure, prefix)
    grant(
        secure,
        allow(ResourceType.TOPIC, prefix, AclOperation.ALL, pattern=ResourcePatternType.PREFIXED),
        allow(
            ResourceType.TOPIC,
            secret,
            AclOperation.READ,
            permission=AclPermissionType.DENY,
        ),
    )
    assert fetch_error(secure, "alice", open_topic) is None
    assert fetch_error(secure, "alice", secret) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(secure, "alice", secret) is None  # the deny is for READ only


def test_metadata_lists_only_topics_the_user_may_describe(secure: SecureBroker) -> None:
    visible, hidden = new_topic(secure), new_topic(secure)
    grant(secure, allow(ResourceType.TOPIC, visible, AclOperation.DESCRIBE))
    listed = AdminClient(plain_login(secure, "alice")).list_topics(timeout=20).topics
    assert visible in listed and hidden not in listed
    with login(secure, "alice") as conn:
        answer = conn.request(
            3,
            9,
            topics=[{"name": hidden}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        assert answer.topics[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # DescribeTopicPartitions (the Java admin's describeTopics) the same way: a named
        # topic one may not describe answers TOPIC_AUTHORIZATION_FAILED, after the others
        # and without its id; a listing of all leaves it out.
        named = conn.request(75, 0, topics=[{"name": hidden}, {"name": visible}])
        assert [(t.name, t.error_code, t.topic_id) for t in named.topics][1] == (
            hidden,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            None,  # the zero id, as kio reads it
        )
        assert named.topics[0].name == visible and named.topics[0].partitions
        listing = conn.request(75, 0, topics=[], response_partition_limit=2000)
        assert visible in {t.name for t in listing.topics}
        assert hidden not in {t.name for t in listing.topics}


def test_acls_are_described_and_deleted_by_filter(secure: SecureBroker) -> None:
    topic = new_topic(secure)
    grant(secure, allow(ResourceType.TOPIC, topic, AclOperation.READ, principal="User:carol"))
    client = admin(secure)
    match = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    described = client.describe_acls(match).result(20)
    assert [(b.name, b.principal, b.operation) for b in described] == [
        (topic, "User:carol", AclOperation.READ)
    ]
    deleted = list(client.delete_acls([match]).values())[0].result(20)
    assert len(deleted) == 1
    assert client.describe_acls(match).result(20) == []


def test_acl_requests_need_cluster_alter(secure: SecureBroker) -> None:
    client = AdminClient(plain_login(secure, "alice"))
    futures = client.create_acls([allow(ResourceType.TOPIC, "x", AclOperation.READ)])
    with pytest.raises(KafkaException) as failure:
        list(futures.values())[0].result(20)
    assert failure.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_client_certificate_is_the_principal_acls_name(secure: SecureBroker) -> None:
    topic = new_topic(secure)
    # The broker maps CN=alice,OU=eng,... to alice@eng (MAPPING_RULES).
    grant(secure, allow(ResourceType.TOPIC, topic, AclOperation.READ, principal="User:alice@eng"))
    conf = {
        "bootstrap.servers": secure.address("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(secure.tls.ca.cert),
        "ssl.certificate.location": str(secure.tls.client.cert),
        "ssl.key.location": str(secure.tls.client.key),
    }
    consumer = make_consumer(secure.address("SSL"), **conf)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 15
        msg = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            # The group lookup alice@eng may not make reports an error of its own; skip it.
            if msg is not None and (msg.error() is None or msg.topic() == topic):
                break
        assert msg is not None and msg.error() is None and msg.value() == b"from admin"
    finally:
        consumer.close()


def init_producer_id(conn: BrokerConnection, transactional_id: str | None) -> int:
    answer = conn.request(
        22,
        1,
        transactional_id=transactional_id,
        transaction_timeout=datetime.timedelta(seconds=10),
    )
    return int(answer.error_code)


def test_producer_ids_need_write_on_the_transactional_id_or_idempotent_write(
    secure: SecureBroker,
) -> None:
    with login(secure, "bob") as conn:
        assert init_producer_id(conn, "bob-tx") == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert init_producer_id(conn, None) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    grant(
        secure,
        allow(ResourceType.TRANSACTIONAL_ID, "bob-tx", AclOperation.WRITE, principal="User:bob"),
        allow(
            ResourceType.BROKER,
            "kafka-cluster",
            AclOperation.IDEMPOTENT_WRITE,
            principal="User:bob",
        ),
    )
    with login(secure, "bob") as conn:
        assert init_producer_id(conn, "bob-tx") == 0
        assert init_producer_id(conn, None) == 0


def test_an_idempotent_producer_id_needs_write_on_some_topic_pattern_not_an_existing_topic(
    secure: SecureBroker,
) -> None:
    """KIP-679: WRITE on any topic the ACLs name (here a prefix no topic has yet) grants
    an idempotent producer id, unless a DENY covers that pattern."""
    prefix = f"future-{uuid.uuid4().hex[:6]}-"
    with login(secure, "carol") as conn:
        assert init_producer_id(conn, None) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    carol = {"principal": "User:carol", "pattern": ResourcePatternType.PREFIXED}
    grant(secure, allow(ResourceType.TOPIC, prefix, AclOperation.WRITE, **carol))
    with login(secure, "carol") as conn:
        assert init_producer_id(conn, None) == 0
    deny = AclPermissionType.DENY
    grant(
        secure, allow(ResourceType.TOPIC, "future-", AclOperation.WRITE, **carol, permission=deny)
    )
    with login(secure, "carol") as conn:
        assert init_producer_id(conn, None) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_groups_are_listed_and_described_only_where_the_user_may_describe(
    secure: SecureBroker,
) -> None:
    group = f"listed-{uuid.uuid4().hex[:6]}"
    settings = {**plain_login(secure, "admin"), "group.id": group}
    consumer = make_consumer(secure.address("SASL_PLAINTEXT"), **settings)
    consumer.subscribe([new_topic(secure)])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)  # joined: the group exists
    with login(secure, "admin") as conn:
        assert group in {g.group_id for g in conn.request(16, 4, states_filter=[]).groups}
    with login(secure, "alice") as conn:
        described = conn.request(15, 5, groups=[group], include_authorized_operations=False)
        assert described.groups[0].error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
        listed = conn.request(16, 4, states_filter=[])
        assert group not in {g.group_id for g in listed.groups}
    consumer.close()


def _operations(bits: int) -> set[AclOperation]:
    return {op for op in AclOperation if op.value > 2 and bits & (1 << op.value)}


def test_described_topics_groups_and_the_cluster_carry_what_the_acls_allow(
    secure: SecureBroker,
) -> None:
    """KIP-430's authorized operations, worked out for the principal that asks, as the
    admin clients' describeTopics, describeCluster and describeConsumerGroups show them
    (every operation the resource type has for a super user)."""
    topic, group = new_topic(secure), f"ops-{uuid.uuid4().hex[:6]}"
    with login(secure, "admin") as conn:  # an offset commit makes an empty classic group
        eventually(
            lambda: conn.request(10, 2, key=group, key_type=0).error_code == 0,
            timeout=30,
            what="the group's coordinator",
            interval=0.2,
        )
        committed = conn.request(
            8,
            2,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            retention_time=-1,
            topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0}]}],
        )
        assert committed.topics[0].partitions[0].error_code == 0
    grant(
        secure,
        allow(ResourceType.TOPIC, topic, AclOperation.READ, principal="User:carol"),
        allow(ResourceType.GROUP, group, AclOperation.READ, principal="User:carol"),
        allow(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER, principal="User:carol"),
    )
    read, describe = AclOperation.READ, AclOperation.DESCRIBE
    for user, topic_ops, cluster_ops, group_ops in (
        ("carol", {read, describe}, {AclOperation.ALTER, describe}, {read, describe}),
        (
            "admin",
            {read, describe, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE}
            | {AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS},
            {AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS}
            | {AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER}
            | {describe},
            {read, describe, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS}
            | {AclOperation.ALTER_CONFIGS},
        ),
        ("alice", None, set(), None),  # may describe neither the topic, the group nor the cluster
    ):
        client = AdminClient(plain_login(secure, user))
        cluster = client.describe_cluster(include_authorized_operations=True).result(20)
        assert set(cluster.authorized_operations or ()) == cluster_ops, user
        described = client.describe_topics(
            TopicCollection([topic]), include_authorized_operations=True
        )[topic]
        if topic_ops is None:
            with pytest.raises(KafkaException) as refused:
                described.result(20)
            assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        else:
            assert set(described.result(20).authorized_operations) == topic_ops, user
        with login(secure, user) as conn:
            (answer,) = conn.request(
                15, 5, groups=[group], include_authorized_operations=True
            ).groups
        if group_ops is None:
            assert answer.error_code == KafkaError.GROUP_AUTHORIZATION_FAILED
            assert answer.authorized_operations == -(2**31)
        else:
            assert (answer.error_code, _operations(answer.authorized_operations)) == (0, group_ops)


def test_configs_need_describe_configs_and_alter_configs(secure: SecureBroker) -> None:
    topic = new_topic(secure)

    def describe(conn: BrokerConnection, resource_type: int, name: str) -> int:
        answer = conn.request(
            32,
            4,
            resources=[
                {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}
            ],
            include_synonyms=False,
            include_documentation=False,
        )
        return int(answer.results[0].error_code)

    with login(secure, "alice") as conn:
        assert describe(conn, 2, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert describe(conn, 4, "1") == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    grant(secure, allow(ResourceType.TOPIC, topic, AclOperation.ALTER_CONFIGS))
    with login(secure, "alice") as conn:
        assert describe(conn, 2, topic) == 0  # ALTER_CONFIGS implies DESCRIBE_CONFIGS


def test_log_dirs_leader_epochs_and_transactions_need_describe(secure: SecureBroker) -> None:
    topic = new_topic(secure)
    with login(secure, "bob") as conn:
        dirs = conn.request(35, 4, topics=None)
        assert dirs.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        epochs = conn.request(
            23,
            4,
            replica_id=-1,
            topics=[
                {
                    "topic": topic,
                    "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
                }
            ],
        )
        assert epochs.topics[0].partitions[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        described = conn.request(65, 0, transactional_ids=["someone-elses"])
        assert described.transaction_states[0].error_code == 53


def test_moving_a_replica_between_log_dirs_needs_cluster_alter(secure: SecureBroker) -> None:
    topic = new_topic(secure)
    move = {
        "dirs": [
            {
                "path": str(secure.node.data_dir.resolve()),
                "topics": [{"name": topic, "partitions": [0]}],
            }
        ]
    }
    with login(secure, "bob") as conn:
        refused = conn.request(34, 2, **move)
    assert refused.results[0].partitions[0].error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with login(secure, "admin") as conn:
        allowed = conn.request(34, 2, **move)
    assert allowed.results[0].partitions[0].error_code == 0  # already there: nothing to move


def test_replica_fetches_and_transaction_markers_need_cluster_action(
    secure: SecureBroker,
) -> None:
    """What another broker sends: a follower's Fetch (replica id set) and WriteTxnMarkers
    need CLUSTER_ACTION, not topic rights (Kafka's KafkaApis)."""
    topic = new_topic(secure)
    grant(secure, allow(ResourceType.TOPIC, topic, AclOperation.ALL))
    as_follower = {
        **fetch_fields(topic, max_wait=datetime.timedelta(milliseconds=10), min_bytes=0),
        "replica_id": 7,
    }
    markers = {
        "markers": [
            {
                "producer_id": 1,
                "producer_epoch": 0,
                "transaction_result": True,
                "topics": [{"name": topic, "partition_indexes": [0]}],
                "coordinator_epoch": 0,
            }
        ]
    }
    with login(secure, "alice") as conn:
        fetched = conn.request(1, 12, **as_follower)
        assert (
            fetched.responses[0].partitions[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
        written = conn.request(27, 1, **markers)
        assert written.markers[0].topics[0].partitions[0].error_code == (
            KafkaError.CLUSTER_AUTHORIZATION_FAILED
        )
    grant(secure, allow(ResourceType.BROKER, "kafka-cluster", AclOperation.CLUSTER_ACTION))
    with login(secure, "alice") as conn:
        fetched = conn.request(1, 12, **as_follower)
        assert (
            fetched.responses[0].partitions[0].error_code != KafkaError.TOPIC_AUTHORIZATION_FAILED
        )


def test_acls_survive_a_restart(secure: SecureBroker) -> None:
    topic = new_topic(secure)
    grant(secure, allow(ResourceType.TOPIC, topic, AclOperation.READ))
    secure.node.restart()
    assert fetch_error(secure, "alice", topic) is None
    assert fetch_error(secure, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
