"""The client generation Kafka 4 dropped (KIP-896) next to a current one, on one topic.

kafka-python pinned to api_version (0, 9) speaks Produce v1 and Fetch v1 with message
format v0, ListOffsets v0, Metadata v0 and OffsetFetch v1; pinned to (0, 10, 0) it
speaks Produce v2 and Fetch v2 with message format v1. What they produce is stored as
v2 batches that confluent-kafka reads; what confluent-kafka produces they read
down-converted; offsets committed by one are the other's in the same group.
"""

from __future__ import annotations

import struct
from contextlib import closing

import confluent_kafka
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from compat_tests.broker_process import BrokerProcess
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_topic,
)
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection
from kbroker.protocol import legacy_messages

pytestmark = pytest.mark.timeout(90)

OLD = {"0.9": (0, 9), "0.10.0": (0, 10, 0)}
FETCH = 1
UNSUPPORTED_VERSION = 35
SECURITY_DISABLED = 54
TIMEOUT_MS = 15000


def _old_produce(
    bootstrap: str, api: tuple[int, ...], topic: str, n: int, codec: str | None
) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, api_version=api, compression_type=codec, linger_ms=5
    )
    with closing(producer):
        futures = [
            producer.send(
                topic, key=f"k{i}".encode(), value=f"old-{i}".encode(), timestamp_ms=1000 + i
            )
            for i in range(n)
        ]
        for f in futures:
            f.get(timeout=15)


def _old_group_read(bootstrap: str, api: tuple[int, ...], topic: str, group: str, n: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        api_version=api,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_MS + 1000,
    )
    consumer.subscribe([topic])
    got: list = []
    try:
        for _ in range(300):
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(batch)
            if len(got) >= n:
                break
        consumer.commit()
    finally:
        consumer.close(autocommit=False)
    return got


@pytest.mark.parametrize("codec", [None, "gzip"])
@pytest.mark.parametrize("old", list(OLD))
def test_old_producer_is_read_by_a_current_consumer(
    shared_broker: BrokerProcess, old: str, codec: str | None
) -> None:
    topic = unique_topic("old-produce")
    create_topic(shared_broker.bootstrap, topic)
    _old_produce(shared_broker.bootstrap, OLD[old], topic, 6, codec)
    got = consume_from_beginning(shared_broker.bootstrap, topic, 6)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, f"k{i}".encode(), f"old-{i}".encode()) for i in range(6)
    ]
    if OLD[old] >= (0, 10):  # message format v1 carries the producer's timestamps
        assert [r.timestamp for r in got] == [1000 + i for i in range(6)]
    else:  # v0 has none: Kafka stores -1 (NO_TIMESTAMP)
        assert {r.timestamp for r in got} == {-1}


@pytest.mark.parametrize("old", list(OLD))
def test_old_group_consumer_reads_current_producers_records_and_shares_its_offsets(
    shared_broker: BrokerProcess, old: str
) -> None:
    bootstrap = shared_broker.bootstrap
    topic, group = unique_topic("old-consume"), unique_topic("old-group")
    create_topic(bootstrap, topic)
    produce_all(
        bootstrap,
        topic,
        [
            {"key": f"k{i}".encode(), "value": f"new-{i}".encode(), "headers": [("h", b"x")]}
            for i in range(8)
        ],
        compression_type="lz4",
    )
    _old_produce(bootstrap, OLD[old], topic, 2, None)
    got = _old_group_read(bootstrap, OLD[old], topic, group, 10)
    assert [(r.offset, r.value) for r in got] == [(i, f"new-{i}".encode()) for i in range(8)] + [
        (8, b"old-0"),
        (9, b"old-1"),
    ]
    # The old consumer's commit (OffsetCommit, group membership) is the group's offset
    # for a current consumer of the same group.
    current = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = current.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=15)
        assert tp.offset == 10
        current.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 4)], asynchronous=False)
    finally:
        current.close()
    # ... and a current consumer's commit is an old one's (OffsetFetch v1).
    old_consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=OLD[old], group_id=group)
    with closing(old_consumer):
        assert old_consumer.committed(TopicPartition(topic, 0)) == 4


def _fetch_v2(conn: BrokerConnection, topic: str, offset: int) -> tuple[int, int, bytes]:
    name = topic.encode()
    body = struct.pack(">iiii", -1, 100, 1, 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">iiqi", 1, 0, offset, 1 << 20)
    answer = conn.receive_raw(conn.send_raw(FETCH, 2, body))
    pos = 4 + 4  # throttle time, topic count
    (size,) = struct.unpack_from(">h", answer, pos)
    pos += 2 + size + 4  # name, partition count
    _partition, error, high_watermark, records_size = struct.unpack_from(">ihqi", answer, pos)
    pos += 18
    return error, high_watermark, answer[pos : pos + records_size]


def test_downconversion_can_be_turned_off_per_topic(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    allowed, refused = unique_topic("down-on"), unique_topic("down-off")
    create_topic(bootstrap, allowed)
    create_topic(bootstrap, refused, config={"message.downconversion.enable": "false"})
    for topic in (allowed, refused):
        produce_all(bootstrap, topic, [{"value": b"a"}, {"value": b"b"}])
    with BrokerConnection(shared_broker.host, shared_broker.port, 10.0, "old-fetch") as conn:
        error, high_watermark, records = _fetch_v2(conn, allowed, 1)
        assert (error, high_watermark) == (0, 2)
        # one v1 message at offset 1 (the first was below the fetch offset): its magic
        assert struct.unpack_from(">q", records, 0)[0] == 1 and records[16] == 1
        assert _fetch_v2(conn, refused, 0) == (UNSUPPORTED_VERSION, -1, b"")


def _ask(conn: BrokerConnection, key: int, version: int, request: dict) -> dict:
    """A request of a version kio has no schema for, written and read with the layouts
    of protocol.legacy_messages."""
    layout, response, _fix = legacy_messages.LEGACY[(key, version)]
    assert response is not None
    answer = conn.receive_raw(
        conn.send_raw(key, version, legacy_messages.write(layout, version, request))
    )
    return legacy_messages.read(response, version, answer, 0, 1 << 20)


def test_the_old_versions_of_admin_offset_and_epoch_apis_answer_as_kafka_3_9(
    shared_broker: BrokerProcess,
) -> None:
    topic, group = unique_topic("old-admin"), unique_topic("old-admin-group")
    with BrokerConnection(shared_broker.host, shared_broker.port, 10.0, "old-admin") as conn:
        create = {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "3600000"}],
                }
            ],
            "timeout": 10000,
        }
        dry = _ask(conn, 19, 1, {**create, "validate_only": True})
        assert dry["topics"] == [{"name": topic, "error_code": 0, "error_message": None}]
        assert _ask(conn, 19, 0, create)["topics"] == [{"name": topic, "error_code": 0}]
        again = _ask(conn, 19, 1, create)["topics"][0]
        assert again["error_code"] == 36 and again["error_message"]  # TOPIC_ALREADY_EXISTS

        described = _ask(
            conn,
            32,
            0,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": topic, "configuration_keys": None}
                ]
            },
        )
        (result,) = described["results"]
        configs = {c["name"]: c for c in result["configs"]}
        assert (result["error_code"], configs["retention.ms"]["value"]) == (0, "3600000")
        assert not configs["retention.ms"]["is_default"] and configs["cleanup.policy"]["is_default"]

    produce_all(shared_broker.bootstrap, topic, [{"value": b"x", "partition": 0}] * 3)
    with BrokerConnection(shared_broker.host, shared_broker.port, 10.0, "old-admin") as conn:
        listed = _ask(
            conn,
            2,
            0,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "timestamp": -1, "max_num_offsets": 5},
                            {"partition_index": 1, "timestamp": -2, "max_num_offsets": 1},
                        ],
                    }
                ],
            },
        )
        assert [
            (p["error_code"], p["old_style_offsets"]) for p in listed["topics"][0]["partitions"]
        ] == [(0, [3, 0]), (0, [0])]  # the log end, then the segment base offsets

        for version in (0, 1):
            epochs = _ask(
                conn,
                23,
                version,
                {"topics": [{"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
            )
            (p,) = epochs["topics"][0]["partitions"]
            assert (p["error_code"], p["end_offset"]) == (0, 3)

        commit = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 2,
                            "commit_timestamp": -1,
                            "committed_metadata": "m",
                        }
                    ],
                }
            ],
        }
        conn.request(10, 0, key=group)  # FindCoordinator, as an old client asks first
        for version in (0, 1):
            # the group's coordinator may still be loading (NOT_COORDINATOR and kin)
            committed = eventually(
                lambda v=version: (
                    answer
                    if (answer := _ask(conn, 8, v, commit))["topics"][0]["partitions"][0][
                        "error_code"
                    ]
                    not in (14, 15, 16)
                    else None
                ),
                timeout=15,
                what=f"OffsetCommit v{version} past coordinator loading",
            )
            assert committed["topics"][0]["partitions"] == [{"partition_index": 0, "error_code": 0}]
        fetched = _ask(
            conn,
            9,
            0,
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]},
        )
        assert [
            (p["committed_offset"], p["metadata"], p["error_code"])
            for p in fetched["topics"][0]["partitions"]
        ] == [(2, "m", 0), (-1, "", 0)]

        # The ACL APIs' v0, answered as without an authorizer Kafka answers them.
        acl = {
            "resource_type_filter": 2,
            "resource_name_filter": topic,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        }
        assert _ask(conn, 29, 0, acl)["error_code"] == SECURITY_DISABLED
        creation = {
            "resource_type": 2,
            "resource_name": topic,
            "principal": "User:a",
            "host": "*",
            "operation": 3,
            "permission_type": 3,
        }
        assert (
            _ask(conn, 30, 0, {"creations": [creation]})["results"][0]["error_code"]
            == SECURITY_DISABLED
        )
        assert (
            _ask(conn, 31, 0, {"filters": [acl]})["filter_results"][0]["error_code"]
            == SECURITY_DISABLED
        )

        # Metadata v0 cannot say null: an empty list asks for every topic.
        everything = conn.request(3, 0, topics=[])
        assert topic in {t.name for t in everything.topics}

        dirs = _ask(conn, 35, 0, {"topics": None})
        (log_dir,) = dirs["results"]
        assert log_dir["error_code"] == 0
        assert topic in {t["name"] for t in log_dir["topics"]}

        assert _ask(conn, 20, 0, {"topic_names": [topic], "timeout": 10000})["responses"] == [
            {"name": topic, "error_code": 0}
        ]
