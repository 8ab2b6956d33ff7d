"""Share groups (KIP-932) under the StandardAuthorizer, checked as Kafka checks them:
ShareGroupHeartbeat needs group READ and DESCRIBE on each subscribed topic, ShareFetch
and ShareAcknowledge group READ and topic READ, ShareGroupDescribe and
DescribeShareGroupOffsets group DESCRIBE (and topic DESCRIBE), AlterShareGroupOffsets
group READ and DeleteShareGroupOffsets group DELETE (and topic READ), each refused with
GROUP_AUTHORIZATION_FAILED or TOPIC_AUTHORIZATION_FAILED. Users log in over
SASL_PLAINTEXT (compat_tests/security_broker.py); `admin` is a super user.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, ShareConsumer
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from compat_tests.confluent_helpers import produce_all
from compat_tests.security_broker import SecureBroker, acl_broker, allow, login, plain_login
from compat_tests.security_broker import grant as grant_bindings
from kbroker.admin.client import BrokerConnection

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with acl_broker(
        tmp_path_factory.mktemp("share-acl-broker"),
        **{
            "group.share.heartbeat.interval.ms": "1000",
            "group.share.min.heartbeat.interval.ms": "1000",
        },
    ) as broker:
        yield broker


def grant(broker: SecureBroker, rtype: ResourceType, name: str, *ops: AclOperation) -> None:
    """Allow `alice` each of `ops` on the literal resource `name`."""
    grant_bindings(broker, *(allow(rtype, name, op) for op in ops))


def new_queue(broker: SecureBroker, count: int = 10) -> tuple[str, str, uuid.UUID]:
    """A topic holding `count` records, a share group reading it from the start, and the
    topic's id."""
    topic, group = f"sq-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(plain_login(broker, "admin"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    reset = ConfigResource(
        "GROUP",
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([reset]).values():
        future.result(20)
    produce_all(
        broker.address("SASL_PLAINTEXT"),
        topic,
        ({"value": str(i).encode()} for i in range(count)),
        **plain_login(broker, "admin"),
    )
    with login(broker, "admin") as conn:
        meta = conn.request(3, 12, topics=[{"name": topic}], allow_auto_topic_creation=False)
    return topic, group, meta.topics[0].topic_id


def heartbeat(conn: BrokerConnection, group: str, topics: list[str] | None, epoch: int = 0) -> Any:
    return conn.request(
        76,
        1,
        group_id=group,
        member_id=f"m-{uuid.uuid4().hex[:8]}",
        member_epoch=epoch,
        rack_id=None,
        subscribed_topic_names=topics,
    )


def share_fetch(conn: BrokerConnection, group: str, member: str, topic_id: uuid.UUID) -> Any:
    return conn.request(
        78,
        1,
        group_id=group,
        member_id=member,
        share_session_epoch=0,
        max_wait=200,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=[{"topic_id": topic_id, "partitions": [{"partition_index": 0}]}],
        forgotten_topics_data=[],
    )


def test_share_group_heartbeat_needs_group_read_then_describe_on_each_subscribed_topic(
    secure: SecureBroker,
) -> None:
    topic, group, _ = new_queue(secure, 0)
    with login(secure, "alice") as conn:
        assert (
            int(heartbeat(conn, group, [topic]).error_code) == KafkaError.GROUP_AUTHORIZATION_FAILED
        )
        grant(secure, ResourceType.GROUP, group, AclOperation.READ)
        refused = heartbeat(conn, group, [topic])
        assert int(refused.error_code) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert topic in refused.error_message
        grant(secure, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
        assert int(heartbeat(conn, group, [topic]).error_code) == 0


def test_share_fetch_needs_group_read_and_topic_read(secure: SecureBroker) -> None:
    topic, group, topic_id = new_queue(secure)
    grant(secure, ResourceType.GROUP, group, AclOperation.READ)
    grant(secure, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    with login(secure, "alice") as conn:
        joined = heartbeat(conn, group, [topic])
        assert int(joined.error_code) == 0
        refused = share_fetch(conn, group, joined.member_id, topic_id)
        assert int(refused.error_code) == 0
        (partition,) = refused.responses[0].partitions
        assert int(partition.error_code) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert not partition.acquired_records and not partition.records
    with login(secure, "bob") as stranger:
        other = share_fetch(stranger, group, joined.member_id, topic_id)
        assert int(other.error_code) == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_share_acknowledge_needs_topic_read(secure: SecureBroker) -> None:
    topic, group, topic_id = new_queue(secure)
    grant(secure, ResourceType.GROUP, group, AclOperation.READ)
    grant(secure, ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    with login(secure, "alice") as conn:
        joined = heartbeat(conn, group, [topic])
        opened = share_fetch(conn, group, joined.member_id, topic_id)  # the share session
        assert int(opened.error_code) == 0
        batch = {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}
        answer = conn.request(
            79,
            1,
            group_id=group,
            member_id=joined.member_id,
            share_session_epoch=1,
            topics=[
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": [batch]}],
                }
            ],
        )
    assert (
        int(answer.responses[0].partitions[0].error_code) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    )


def test_describe_and_the_offsets_apis_need_describe_read_and_delete_on_the_group(
    secure: SecureBroker,
) -> None:
    topic, group, _ = new_queue(secure, 0)
    with login(secure, "admin") as admin:  # a share group that exists and is empty
        joined = heartbeat(admin, group, [topic])
        left = admin.request(
            76,
            1,
            group_id=group,
            member_id=joined.member_id,
            member_epoch=-1,
            rack_id=None,
            subscribed_topic_names=None,
        )
        assert int(left.error_code) == 0
    alter = {
        "group_id": group,
        "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 0}]}
        ],
    }
    with login(secure, "alice") as conn:
        described = conn.request(77, 1, group_ids=[group], include_authorized_operations=False)
        assert int(described.groups[0].error_code) == KafkaError.GROUP_AUTHORIZATION_FAILED
        offsets = conn.request(90, 1, groups=[{"group_id": group, "topics": None}])
        assert int(offsets.groups[0].error_code) == KafkaError.GROUP_AUTHORIZATION_FAILED
        assert int(conn.request(91, 0, **alter).error_code) == KafkaError.GROUP_AUTHORIZATION_FAILED
        deleted = conn.request(92, 0, group_id=group, topics=[{"topic_name": topic}])
        assert int(deleted.error_code) == KafkaError.GROUP_AUTHORIZATION_FAILED

        grant(
            secure,
            ResourceType.GROUP,
            group,
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.DELETE,
        )
        described = conn.request(77, 1, group_ids=[group], include_authorized_operations=False)
        assert int(described.groups[0].error_code) == 0
        named = conn.request(
            90,
            1,
            groups=[{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}],
        )
        part = named.groups[0].topics[0].partitions[0]
        assert int(part.error_code) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        altered = conn.request(91, 0, **alter)
        assert int(altered.error_code) == 0
        assert (
            int(altered.responses[0].partitions[0].error_code)
            == KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
        deleted = conn.request(92, 0, group_id=group, topics=[{"topic_name": topic}])
        assert int(deleted.error_code) == 0
        assert int(deleted.responses[0].error_code) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_share_consumer_reads_the_queue_over_sasl_once_its_acls_allow(
    secure: SecureBroker,
) -> None:
    topic, group, _ = new_queue(secure, 50)
    grant(secure, ResourceType.GROUP, group, AclOperation.READ)
    grant(secure, ResourceType.TOPIC, topic, AclOperation.READ)
    consumer = ShareConsumer({**plain_login(secure, "alice"), "group.id": group})
    consumer.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 40
    try:
        while len(seen) < 50 and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                assert message.error() is None, message.error()
                seen.append(int(message.value()))
    finally:
        consumer.close()
    assert sorted(seen) == list(range(50))
