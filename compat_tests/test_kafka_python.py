"""kafka-python (pure-Python client) against kbroker: admin, produce, assign + seek, codecs."""

from __future__ import annotations

import time
from contextlib import closing
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kafka_codec
from kafka.admin import ConfigResource, ConfigResourceType

from compat_tests.confluent_helpers import unique_topic
from compat_tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

CODEC_AVAILABLE = {
    None: True,
    "gzip": kafka_codec.has_gzip(),
    "snappy": kafka_codec.has_snappy(),
    "lz4": kafka_codec.has_lz4(),
    "zstd": kafka_codec.has_zstd(),
}
TIMEOUT_MS = 15000


def _admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS, bootstrap_timeout_ms=TIMEOUT_MS
    )


def _create(bootstrap: str, topic: str, partitions: int = 1, configs: dict | None = None) -> None:
    with closing(_admin(bootstrap)) as admin:
        admin.create_topics(
            {
                topic: {
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "configs": configs or {},
                }
            },
            timeout_ms=TIMEOUT_MS,
        )
        eventually(lambda: topic in admin.list_topics(), timeout=10, what=f"{topic} in metadata")


def _consume_all(bootstrap: str, topic: str, count: int, partition: int = 0) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=TIMEOUT_MS + 1000,
    )
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records: list = []
        deadline = time.monotonic() + 30
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        assert len(records) == count, f"read {len(records)} of {count} records"
        return records
    finally:
        consumer.close(autocommit=False)


def test_admin_creates_topic_with_partitions(shared_broker):
    topic = unique_topic("kp")
    _create(shared_broker.bootstrap, topic, partitions=3)
    with closing(_admin(shared_broker.bootstrap)) as admin:
        (described,) = admin.describe_topics([topic])
    assert described["name"] == topic
    assert described["error_code"] == 0
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]


def test_admin_describe_configs_reports_topic_override_and_defaults(shared_broker):
    topic = unique_topic("kp")
    _create(shared_broker.bootstrap, topic, configs={"retention.ms": "3600000"})
    with closing(_admin(shared_broker.bootstrap)) as admin:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        modified = admin.describe_configs([resource])["topic"][topic]
        everything = admin.describe_configs([resource], config_filter="all")["topic"][topic]
    assert set(modified) == {"retention.ms"}
    assert modified["retention.ms"]["value"] == "3600000"
    assert modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert everything["cleanup.policy"]["value"] == "delete"
    assert everything["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"


def test_admin_deletes_topic(shared_broker):
    topic = unique_topic("kp")
    _create(shared_broker.bootstrap, topic)
    with closing(_admin(shared_broker.bootstrap)) as admin:
        result = admin.delete_topics([topic], timeout_ms=TIMEOUT_MS)
        assert [t["error_code"] for t in result["topics"]] == [0]
        eventually(
            lambda: topic not in admin.list_topics(),
            timeout=10,
            what=f"{topic} unlisted after its deletion",
        )


def test_deleting_a_topic_removes_its_committed_offsets_from_groups(shared_broker):
    """As Kafka's coordinator does on topic deletion: the group's offsets of the deleted
    topic go (a topic created again under the name starts with none), its others stay."""
    from kafka.structs import OffsetAndMetadata

    doomed, kept, group = unique_topic("kp"), unique_topic("kp"), unique_topic("kp-group")
    _create(shared_broker.bootstrap, doomed, partitions=2)
    _create(shared_broker.bootstrap, kept)
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=group)
    with closing(consumer):
        consumer.commit(
            {
                TopicPartition(doomed, 0): OffsetAndMetadata(5, "", -1),
                TopicPartition(doomed, 1): OffsetAndMetadata(7, "", -1),
                TopicPartition(kept, 0): OffsetAndMetadata(3, "", -1),
            }
        )
    with closing(_admin(shared_broker.bootstrap)) as admin:
        admin.delete_topics([doomed], timeout_ms=TIMEOUT_MS)

        def one_left() -> Any:
            offsets = admin.list_group_offsets(group)[group]
            assert len(offsets) == 1, offsets  # the failure shows the last ones
            return offsets

        offsets = eventually(one_left, timeout=10, what="the deleted topic's offsets gone")
    assert {tp: o.offset for tp, o in offsets.items()} == {TopicPartition(kept, 0): 3}


@pytest.mark.parametrize("codec", list(CODEC_AVAILABLE), ids=lambda c: c or "none")
def test_round_trip_with_compression_codec(shared_broker, codec):
    if not CODEC_AVAILABLE[codec]:
        pytest.skip(f"kafka-python has no {codec} library installed")
    topic = unique_topic("kp")
    _create(shared_broker.bootstrap, topic)
    sent = [
        (f"k{i}".encode(), (f"kafka-python-{i} " * 10).encode(), [("seq", str(i).encode())])
        for i in range(500)
    ]
    producer = KafkaProducer(
        bootstrap_servers=shared_broker.bootstrap, compression_type=codec, linger_ms=10
    )
    try:
        futures = [producer.send(topic, key=k, value=v, headers=h, partition=0) for k, v, h in sent]
        producer.flush(timeout=20)
        offsets = [f.get(timeout=10).offset for f in futures]
    finally:
        producer.close(timeout=5)
    assert offsets == list(range(len(sent)))
    records = _consume_all(shared_broker.bootstrap, topic, len(sent))
    assert [(r.key, r.value, list(r.headers)) for r in records] == sent
    assert [r.offset for r in records] == list(range(len(sent)))


def test_tombstone_round_trips_as_none(shared_broker):
    topic = unique_topic("kp")
    _create(shared_broker.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    try:
        producer.send(topic, key=b"k", value=b"v", partition=0).get(timeout=10)
        producer.send(topic, key=b"k", value=None, partition=0).get(timeout=10)
    finally:
        producer.close(timeout=5)
    records = _consume_all(shared_broker.bootstrap, topic, 2)
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (b"k", None)]
