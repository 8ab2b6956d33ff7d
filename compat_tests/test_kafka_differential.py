"""Kafka 4.3 as the oracle: the same raw requests to a Kafka node and a kbroker node, the
answers compared field by field (compat_tests/differential.py), at the lowest and highest
version both serve; then a few confluent-kafka scenarios compared the same way.

Both nodes run the StandardAuthorizer open to everyone where no ACL names a resource, with
one DENY for User:ANONYMOUS on the topic ``diff-denied``: the ACL denials are compared too.
Every API key both serve gets at least the request its defaults describe (mostly an error
path); the scenarios below add the ordinary and error paths that matter to clients.
Differences that remain are listed, with why, in docs/kafka-differences.md and KNOWN here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker_process import FAST_GROUP_SETTINGS, running_broker
from compat_tests.differential import (
    ALLOWED,
    Scenario,
    Side,
    ask,
    differences,
    shared_versions,
)
from compat_tests.kafka_reference import kafka_unavailable, running_kafka, start_tool_process
from compat_tests.waiting import eventually
from kbroker.admin.client import produce_fields
from kbroker.protocol.batch import encode_batch
from kbroker.protocol.messages import API_NAMES
from kbroker.protocol.one_shot import list_offsets_fields

pytestmark = pytest.mark.skipif(kafka_unavailable() is not None, reason=str(kafka_unavailable()))

SETTINGS = {
    **FAST_GROUP_SETTINGS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
}
TOPIC = "diff-topic"
DENIED = "diff-denied"
SMALL = "diff-small-segments"  # internal.segment.bytes: segments below Kafka 4's 1 MiB minimum
SMALL_SEGMENT_BYTES = 1024
MISSING = "diff-missing"

# Differences that are known and documented in docs/kafka-differences.md, each with why:
# "scenario vN" -> the paths that differ there (values are in the failure report). A listed
# difference that goes away fails the test too, so that the list stays true.
KNOWN: dict[str, set[str]] = {
    "CreateTopics validate only v7": {"topics[].configs"},
}

# Never sent as a bare request: they change the connection's state (SASL);
# Create/Renew/ExpireDelegationToken refused (as a PLAINTEXT caller is) carry -1
# timestamps, which kio's reader does not take (compat_tests/test_delegation_tokens.py
# compares their error codes instead). AddRaftVoter and RemoveRaftVoter are sent: a
# broker answers their defaults as Kafka's does.
NOT_SENT_BARE = {17, 36, 38, 39, 40}


def _records(count: int = 1) -> bytes:
    return encode_batch([(None, f"value-{i}".encode()) for i in range(count)], 1_700_000_000_000)


def _prepare(side: Side) -> None:
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    for future in admin.create_topics(
        [
            NewTopic(TOPIC, 2, 1),
            NewTopic(DENIED, 1, 1),
            NewTopic(SMALL, 1, 1, config={"internal.segment.bytes": str(SMALL_SEGMENT_BYTES)}),
        ],
        operation_timeout=30,
    ).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": side.bootstrap})
    for i in range(3):
        producer.produce(TOPIC, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    metadata = ask(side, 3, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
    side.context["topic_id"] = next(t["topic_id"] for t in metadata["topics"])
    created = ask(
        side,
        30,
        3,
        {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": DENIED,
                    "resource_pattern_type": 3,
                    "principal": "User:ANONYMOUS",
                    "host": "*",
                    "operation": op,
                    "permission_type": 2,
                }
                for op in (2, 3, 4, 8)  # ALL, READ, WRITE, DESCRIBE
            ]
        },
    )
    assert all(r["error_code"] == 0 for r in created["results"]), created
    # The group and transaction coordinators answer once their internal topics are loaded.
    for key_type, key in ((0, "diff-warm-up"), (1, "diff-warm-up")):
        _until(
            side,
            f"the coordinator for key type {key_type}",
            lambda k=key, t=key_type: (
                ask(side, 10, 3, {"key": k, "key_type": t})["error_code"] == 0
            ),
        )
    _until(
        side,
        "InitProducerId",
        lambda: (
            ask(
                side,
                22,
                4,
                {
                    "transactional_id": None,
                    "transaction_timeout": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )["error_code"]
            == 0
        ),
    )
    # The DENY applies once the node has the ACL: a metadata request for the topic fails.
    eventually(
        lambda: (
            ask(side, 3, 12, {"topics": [{"name": DENIED}], "allow_auto_topic_creation": False})[
                "topics"
            ][0]["error_code"]
            == 29
        ),
        timeout=30,
        what=f"{side.name}: the DENY on {DENIED} to apply",
        interval=0.2,
    )


def _until(side: Side, what: str, check: Any, timeout: float = 60.0) -> None:
    eventually(check, timeout=timeout, what=f"{side.name}: {what}", interval=0.2)


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:
    root = tmp_path_factory.mktemp("differential")
    with (
        running_kafka(root / "kafka", 1, SETTINGS) as kafka,
        running_broker(root / "kbroker", SETTINGS) as node,
    ):
        kafka_side = Side.of("kafka", kafka.bootstrap)
        kbroker_side = Side.of("kbroker", node.bootstrap)
        for side in (kafka_side, kbroker_side):
            _prepare(side)
        yield kafka_side, kbroker_side


def _uuid(side: Side) -> Any:
    return uuid.UUID(side.context["topic_id"])


def _fetch(offset: int, topic: str = TOPIC, partition: int = 0) -> Any:
    def body(side: Side) -> dict[str, Any]:
        topic_id = _uuid(side) if topic == TOPIC else uuid.uuid4()
        return {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition": partition,
                            "fetch_offset": offset,
                            "partition_max_bytes": 1 << 20,
                            "current_leader_epoch": -1,
                            "log_start_offset": -1,
                            "last_fetched_epoch": -1,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    return body


def _list_offsets(topic: str, partition: int, timestamp: int) -> dict[str, Any]:
    return list_offsets_fields(topic, timestamp, partition=partition)


def _create(
    name: str,
    partitions: int = 1,
    rf: int = 1,
    configs: dict[str, str] | None = None,
    validate_only: bool = True,
) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": rf,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout": 30000,
        "validate_only": validate_only,
    }


def _configs(
    resource_type: int, name: str, keys: list[str] | None, synonyms: bool = False
) -> dict[str, Any]:
    return {
        "resources": [
            {"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}
        ],
        "include_synonyms": synonyms,
        "include_documentation": False,
    }


def _incremental(
    name: str, key: str, value: str | None, op: int = 0, resource_type: int = 2
) -> dict[str, Any]:
    return {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [{"name": key, "config_operation": op, "value": value}],
            }
        ],
        "validate_only": True,
    }


GROUP = "diff-group"

SCENARIOS = [
    Scenario(
        "Metadata existing and missing topic",
        3,
        {"topics": [{"name": TOPIC}, {"name": MISSING}], "allow_auto_topic_creation": False},
    ),
    Scenario(
        "Metadata denied topic",
        3,
        {"topics": [{"name": DENIED}], "allow_auto_topic_creation": False},
    ),
    Scenario(
        "Metadata invalid topic name",
        3,
        {"topics": [{"name": "bad/name"}], "allow_auto_topic_creation": False},
    ),
    Scenario("Produce to a missing topic", 0, produce_fields(MISSING, _records(), acks=1)),
    Scenario(
        "Produce to a partition out of range",
        0,
        produce_fields(TOPIC, _records(), partition=7, acks=1),
    ),
    Scenario("Produce to a denied topic", 0, produce_fields(DENIED, _records(), acks=1)),
    Scenario("Produce without records", 0, produce_fields(TOPIC, b"", partition=1, acks=1)),
    Scenario("Fetch past the end", 1, _fetch(1000)),
    Scenario("Fetch a missing partition", 1, _fetch(0, TOPIC, 5)),
    Scenario("ListOffsets earliest and latest", 2, _list_offsets(TOPIC, 0, -1)),
    Scenario("ListOffsets earliest", 2, _list_offsets(TOPIC, 0, -2)),
    Scenario("ListOffsets missing topic", 2, _list_offsets(MISSING, 0, -1)),
    Scenario("ListOffsets denied topic", 2, _list_offsets(DENIED, 0, -1)),
    Scenario(
        "FindCoordinator group", 10, {"key": GROUP, "key_type": 0, "coordinator_keys": [GROUP]}
    ),
    Scenario(
        "FindCoordinator unknown transactional id",
        10,
        {"key": "diff-txn", "key_type": 1, "coordinator_keys": ["diff-txn"]},
    ),
    Scenario(
        "FindCoordinator bad key type",
        10,
        {"key": GROUP, "key_type": 7, "coordinator_keys": [GROUP]},
    ),
    Scenario(
        "Heartbeat unknown group",
        12,
        {"group_id": "diff-none", "generation_id": 1, "member_id": "m"},
    ),
    Scenario(
        "SyncGroup unknown member",
        14,
        {"group_id": "diff-none", "generation_id": 1, "member_id": "m", "assignments": []},
    ),
    Scenario(
        "LeaveGroup unknown member",
        13,
        {"group_id": "diff-none", "member_id": "m", "members": [{"member_id": "m"}]},
    ),
    Scenario(
        "JoinGroup bad session timeout",
        11,
        {
            "group_id": GROUP,
            "session_timeout": 1,
            "rebalance_timeout": 1000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    ),
    Scenario(
        "OffsetFetch unknown group",
        9,
        {
            "group_id": "diff-none",
            "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            "groups": [
                {"group_id": "diff-none", "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
            ],
        },
    ),
    Scenario(
        "OffsetCommit simple",
        8,
        {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 2, "committed_metadata": "m"}
                    ],
                }
            ],
        },
    ),
    Scenario("DescribeGroups unknown", 15, {"groups": ["diff-none"]}),
    Scenario("ListGroups", 16, {"states_filter": [], "types_filter": []}),
    Scenario("CreateTopics existing", 19, _create(TOPIC)),
    Scenario("CreateTopics invalid name", 19, _create("bad/name")),
    Scenario("CreateTopics bad config", 19, _create("diff-new", configs={"retention.ms": "soon"})),
    Scenario(
        "CreateTopics unknown config", 19, _create("diff-new", configs={"no.such.config": "1"})
    ),
    Scenario(
        "CreateTopics segment.bytes below 1 MiB",
        19,
        _create("diff-new", configs={"segment.bytes": "1048575"}),
    ),
    Scenario("CreateTopics zero partitions", 19, _create("diff-new", partitions=0)),
    Scenario("CreateTopics replication above brokers", 19, _create("diff-new", rf=3)),
    Scenario("CreateTopics validate only", 19, _create("diff-new", partitions=3)),
    Scenario(
        "DeleteTopics missing",
        20,
        {"topic_names": [MISSING], "topics": [{"name": MISSING}], "timeout": 30000},
    ),
    Scenario(
        "CreatePartitions fewer",
        37,
        {
            "topics": [{"name": TOPIC, "count": 1, "assignments": None}],
            "timeout": 30000,
            "validate_only": True,
        },
    ),
    Scenario(
        "CreatePartitions missing",
        37,
        {
            "topics": [{"name": MISSING, "count": 3, "assignments": None}],
            "timeout": 30000,
            "validate_only": True,
        },
    ),
    Scenario(
        "DescribeConfigs topic keys",
        32,
        _configs(2, TOPIC, ["cleanup.policy", "retention.ms", "max.message.bytes"]),
    ),
    Scenario(
        "DescribeConfigs topic keys with synonyms",
        32,
        _configs(2, TOPIC, ["cleanup.policy", "retention.ms", "segment.bytes"], synonyms=True),
    ),
    Scenario("DescribeConfigs missing topic", 32, _configs(2, MISSING, None)),
    # A new cluster keeps ELRs, so its controller wrote a cluster-level value (KIP-966).
    Scenario(
        "DescribeConfigs topic min.insync.replicas with synonyms",
        32,
        _configs(2, TOPIC, ["min.insync.replicas"], synonyms=True),
    ),
    Scenario(
        "DescribeConfigs internal.segment.bytes where set and where not",
        32,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": name,
                    "configuration_keys": ["internal.segment.bytes", "segment.bytes"],
                }
                for name in (SMALL, TOPIC)
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    ),
    Scenario(
        "IncrementalAlterConfigs segment.bytes below 1 MiB",
        44,
        _incremental(TOPIC, "segment.bytes", "200"),
    ),
    Scenario(
        "Produce larger than a segment",
        0,
        produce_fields(SMALL, encode_batch([(None, b"x" * 2000)], 1_700_000_000_000), acks=1),
    ),
    Scenario(
        "IncrementalAlterConfigs bad value", 44, _incremental(TOPIC, "cleanup.policy", "sometimes")
    ),
    Scenario(
        "IncrementalAlterConfigs unknown config", 44, _incremental(TOPIC, "no.such.config", "1")
    ),
    Scenario(
        "IncrementalAlterConfigs missing topic", 44, _incremental(MISSING, "retention.ms", "1000")
    ),
    Scenario(
        "IncrementalAlterConfigs unknown cluster-default broker config",
        44,
        _incremental("", "no.such.config", "1", resource_type=4),
    ),
    Scenario(
        "IncrementalAlterConfigs unknown per-broker config",
        44,
        _incremental("1", "no.such.config", "1", resource_type=4),
    ),
    Scenario(
        "IncrementalAlterConfigs per-broker min.insync.replicas with ELR",
        44,
        _incremental("1", "min.insync.replicas", "2", resource_type=4),
    ),
    Scenario(
        "DeleteRecords beyond the end",
        21,
        {
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 50}]}],
            "timeout": 30000,
        },
    ),
    Scenario(
        "DeleteRecords missing topic",
        21,
        {
            "topics": [{"name": MISSING, "partitions": [{"partition_index": 0, "offset": 1}]}],
            "timeout": 30000,
        },
    ),
    Scenario(
        "OffsetForLeaderEpoch",
        23,
        {
            "replica_id": -2,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
                }
            ],
        },
    ),
    Scenario(
        "InitProducerId idempotent",
        22,
        {
            "transactional_id": None,
            "transaction_timeout": -1,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    ),
    Scenario(
        "AddPartitionsToTxn unknown id",
        24,
        {
            "v3_and_below_transactional_id": "diff-txn",
            "v3_and_below_producer_id": 5,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}],
        },
    ),
    Scenario(
        "EndTxn unknown id",
        26,
        {"transactional_id": "diff-txn", "producer_id": 5, "producer_epoch": 0, "committed": True},
    ),
    Scenario("DescribeTransactions unknown id", 65, {"transactional_ids": ["diff-txn"]}),
    Scenario("ListTransactions", 66, {"state_filters": [], "producer_id_filters": []}),
    Scenario("DescribeProducers", 61, {"topics": [{"name": TOPIC, "partition_indexes": [0, 9]}]}),
    Scenario(
        "DescribeAcls denied topic",
        29,
        {
            "resource_type_filter": 2,
            "resource_name_filter": DENIED,
            "pattern_type_filter": 3,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        },
    ),
    Scenario(
        "CreateAcls bad principal",
        30,
        {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": "x",
                    "resource_pattern_type": 3,
                    "principal": "nobody",
                    "host": "*",
                    "operation": 3,
                    "permission_type": 3,
                }
            ]
        },
    ),
    Scenario("DescribeUserScramCredentials unknown user", 50, {"users": [{"name": "diff-nobody"}]}),
    Scenario(
        "DescribeClientQuotas none",
        48,
        {
            "components": [{"entity_type": "client-id", "match_type": 1, "match": None}],
            "strict": False,
        },
    ),
    Scenario(
        "AlterClientQuotas bad key",
        49,
        {
            "entries": [
                {
                    "entity": [{"entity_type": "client-id", "entity_name": "c"}],
                    "ops": [{"key": "no_such_quota", "value": 1.0, "remove": False}],
                }
            ],
            "validate_only": True,
        },
    ),
    Scenario(
        "ElectLeaders missing topic",
        43,
        {
            "election_type": 0,
            "topic_partitions": [{"topic": MISSING, "partitions": [0]}],
            "timeout": 30000,
        },
    ),
    Scenario("ListPartitionReassignments", 46, {"timeout": 30000, "topics": None}),
    Scenario(
        "AlterPartitionReassignments missing topic",
        45,
        {
            "timeout": 30000,
            "topics": [{"name": MISSING, "partitions": [{"partition_index": 0, "replicas": [1]}]}],
        },
    ),
    Scenario(
        "OffsetDelete unknown group",
        47,
        {
            "group_id": "diff-none",
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}],
        },
    ),
    Scenario(
        "ConsumerGroupDescribe unknown",
        69,
        {"group_ids": ["diff-none"], "include_authorized_operations": False},
    ),
    Scenario(
        "ShareGroupDescribe unknown",
        77,
        {"group_ids": ["diff-none"], "include_authorized_operations": False},
    ),
    Scenario(
        "DescribeTopicPartitions",
        75,
        {
            "topics": [{"name": TOPIC}, {"name": MISSING}],
            "response_partition_limit": 2000,
            "cursor": None,
        },
    ),
    Scenario(
        "DescribeLogDirs missing topic", 35, {"topics": [{"topic": MISSING, "partitions": [0]}]}
    ),
    Scenario("SaslHandshake on PLAINTEXT", 17, {"mechanism": "PLAIN"}),
]

SCENARIO_KEYS = {s.api_key for s in SCENARIOS}


def _compare(kafka: Side, kbroker: Side, scenario: Scenario, version: int) -> list[str]:
    kafka_answer = ask(kafka, scenario.api_key, version, scenario.body_for(kafka))
    kbroker_answer = ask(kbroker, scenario.api_key, version, scenario.body_for(kbroker))
    return differences(kafka_answer, kbroker_answer, [*ALLOWED, *scenario.allowed])


def _check(found: dict[str, list[str]], labels: set[str]) -> None:
    """Every difference found is KNOWN (by path), and every KNOWN one of these labels is found."""
    unexpected = {
        label: diffs
        for label, diffs in found.items()
        if {d.split(":", 1)[0] for d in diffs} != KNOWN.get(label, set())
    }
    gone = sorted(label for label in KNOWN if label in labels and label not in found)
    report = "\n".join(f"{label}:\n  " + "\n  ".join(diffs) for label, diffs in unexpected.items())
    assert not unexpected and not gone, report + (f"\nno longer differ: {gone}" if gone else "")


def test_scenarios(sides: tuple[Side, Side]) -> None:
    kafka, kbroker = sides
    found: dict[str, list[str]] = {}
    labels: set[str] = set()
    for scenario in SCENARIOS:
        if scenario.api_key not in kbroker.versions or scenario.api_key not in kafka.versions:
            continue
        for version in shared_versions(scenario.api_key, kafka, kbroker):
            labels.add(f"{scenario.name} v{version}")
            diffs = _compare(kafka, kbroker, scenario, version)
            if diffs:
                found[f"{scenario.name} v{version}"] = diffs
    _check(found, labels)


def test_every_shared_api_key_with_defaults(sides: tuple[Side, Side]) -> None:
    """Each API key both serve and no scenario covers: the request its defaults describe."""
    kafka, kbroker = sides
    found: dict[str, list[str]] = {}
    labels: set[str] = set()
    for api_key in sorted(set(kafka.versions) & set(kbroker.versions)):
        if api_key in SCENARIO_KEYS or api_key in NOT_SENT_BARE:
            continue
        scenario = Scenario(f"{API_NAMES.get(api_key, api_key)} defaults", api_key, {})
        for version in shared_versions(api_key, kafka, kbroker):
            labels.add(f"{scenario.name} v{version}")
            diffs = _compare(kafka, kbroker, scenario, version)
            if diffs:
                found[f"{scenario.name} v{version}"] = diffs
    _check(found, labels)


def test_api_keys_served(sides: tuple[Side, Side]) -> None:
    """Every API key only one of the two serves is documented in docs/kafka-differences.md."""
    kafka, kbroker = sides
    one_sided = set(kafka.versions) ^ set(kbroker.versions)
    names = {API_NAMES.get(k, str(k)) for k in one_sided}
    documented = Path(__file__).parents[1].joinpath("docs", "kafka-differences.md").read_text()
    assert all(f"`{name}`" in documented for name in names), names


def _client_run(bootstrap: str, topic: str) -> dict[str, Any]:
    """Produce keyed records with an idempotent producer, consume them in a group, commit,
    and read back what a client would see."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for i in range(30):
        producer.produce(topic, key=f"k{i % 5}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[int, int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 60
    while len(got) < 30 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        got.append((message.partition(), message.offset(), message.key(), message.value()))
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=20)
    consumer.close()
    bad = AdminClient({"bootstrap.servers": bootstrap})
    try:
        bad.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
        duplicate = "created"
    except KafkaException as exc:
        duplicate = exc.args[0].name()
    return {
        "records": sorted(got),
        "committed": sorted((tp.partition, tp.offset) for tp in committed),
        "create again": duplicate,
    }


def test_confluent_client_scenario(sides: tuple[Side, Side]) -> None:
    kafka, kbroker = sides
    topic = "diff-client"
    assert (
        differences(_client_run(kafka.bootstrap, topic), _client_run(kbroker.bootstrap, topic))
        == []
    )


BURST = 30  # records produced into each source topic before the move, and again after


def _produce(bootstrap: str, topic: str, start: int) -> dict[tuple[int, int], bytes]:
    """BURST records into `topic`, each value unique: (partition, offset) -> value."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    placed: dict[tuple[int, int], bytes] = {}

    def delivered(err: Any, message: Any) -> None:
        assert err is None, err
        placed[(message.partition(), message.offset())] = message.value()

    for i in range(start, start + BURST):
        producer.produce(
            topic, f"{topic}-{i}".encode(), key=f"k{i}".encode(), on_delivery=delivered
        )
    assert producer.flush(30) == 0
    return placed


def _consume_and_commit(
    bootstrap: str, topic: str, group: str, placed: dict[tuple[int, int], bytes]
) -> dict[int, int]:
    """A group reads every record `placed` and commits where it stopped (the end of each
    partition); the offsets it committed."""
    ends = {p: 1 + max((o for q, o in placed if q == p), default=-1) for p in (0, 1)}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    read: dict[int, int] = {0: 0, 1: 0}
    deadline = time.monotonic() + 60
    try:
        while any(read[p] < ends[p] for p in read) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                read[message.partition()] = max(read[message.partition()], message.offset() + 1)
        assert read == ends, f"{group} read up to {read} of {topic}, which ends at {ends}"
        consumer.commit(
            offsets=[TopicPartition(topic, p, ends[p]) for p in ends], asynchronous=False
        )
    finally:
        consumer.close()
    return ends


def _translated(bootstrap: str, group: str, topic: str) -> dict[int, int] | None:
    """The group's committed offsets for both partitions of `topic`, or None until both are."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(2)])
    try:
        (future,) = admin.list_consumer_group_offsets([request]).values()
        answer = future.result(timeout=10)
    except KafkaException:
        return None
    offsets = {tp.partition: tp.offset for tp in answer.topic_partitions if not tp.error}
    return offsets if len(offsets) == 2 and all(o >= 0 for o in offsets.values()) else None


def _resume(bootstrap: str, topic: str, group: str, count: int) -> list[bytes]:
    """The values the group reads from where its committed offsets say, until `count`
    (or a while longer, to catch records read again)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_mirror_maker_moves_topics_and_groups_both_ways(
    sides: tuple[Side, Side], tmp_path: Path
) -> None:
    """MirrorMaker 2 (Kafka's own, dedicated mode) between the Kafka node and the kbroker
    node, both ways at once. On each side a group reads a ``mig-*`` topic to its end and
    commits; MirrorSourceConnector copies the topic to the other side,
    MirrorHeartbeatConnector beats into each side, and MirrorCheckpointConnector translates
    the group's offsets and (sync.group.offsets.enabled) commits them on the other side.
    Then more records arrive at the source, and the group, moved to the other side, resumes
    from the translated offsets: it reads every new record and none it had read before.
    The Connect worker's config, offset and status topics live on both sides."""
    kafka, kbroker = sides
    clusters = {"kafka": kafka.bootstrap, "kbroker": kbroker.bootstrap}
    placed: dict[str, dict[tuple[int, int], bytes]] = {}
    for name, address in clusters.items():
        admin = AdminClient({"bootstrap.servers": address})
        admin.create_topics([NewTopic(f"mig-{name}", 2, 1)])[f"mig-{name}"].result(timeout=30)
        placed[name] = _produce(address, f"mig-{name}", 0)
    committed = {
        name: _consume_and_commit(address, f"mig-{name}", f"mig-{name}-app", placed[name])
        for name, address in clusters.items()
    }
    settings = {
        "clusters": "kafka, kbroker",
        "kafka.bootstrap.servers": kafka.bootstrap,
        "kbroker.bootstrap.servers": kbroker.bootstrap,
        "kafka->kbroker.enabled": "true",
        "kbroker->kafka.enabled": "true",
        "topics": "mig-.*",
        "groups": "mig-.*",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1",
        "emit.heartbeats.interval.seconds": "1",
        "refresh.topics.interval.seconds": "1",
        "refresh.groups.interval.seconds": "1",
        # Each target's Connect worker flushes its offsets, which is also when the source
        # task sends the offset sync of the last record it copied, every second (60 s by
        # default, most of this test's time otherwise).
        "kafka.offset.flush.interval.ms": "1000",
        "kbroker.offset.flush.interval.ms": "1000",
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "sync.topic.acls.enabled": "false",
        "tasks.max": "1",
    }
    config = tmp_path / "mm2.properties"
    config.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    log = tmp_path / "mm2.log"
    other = {"kafka": "kbroker", "kbroker": "kafka"}
    mirror = start_tool_process("org.apache.kafka.connect.mirror.MirrorMaker", str(config), log=log)
    try:
        for source, target in other.items():
            group, remote = f"mig-{source}-app", f"{source}.mig-{source}"
            eventually(
                lambda t=target, g=group, r=remote, s=source: (
                    _translated(clusters[t], g, r) == committed[s]
                ),
                timeout=120,
                what=f"{group}'s offsets {committed[source]} committed in {target} for {remote}",
                interval=0.5,
            )
        for source, target in other.items():
            placed[source].update(_produce(clusters[source], f"mig-{source}", BURST))
            assert _read_all(clusters[target], "heartbeats", 1, timeout=60), target
            copied = _read_all(clusters[target], f"{source}.mig-{source}", 2 * BURST, timeout=60)
            assert sorted(copied.values()) == sorted(placed[source].values())
    finally:
        mirror.kill()
        mirror.wait(timeout=10)
    for source, target in other.items():
        before = {v for (p, o), v in placed[source].items() if o < committed[source][p]}
        after = set(placed[source].values()) - before
        resumed = _resume(clusters[target], f"{source}.mig-{source}", f"mig-{source}-app", BURST)
        assert set(resumed) == after and len(resumed) == BURST, (
            f"{source} -> {target}: read {sorted(resumed)}, expected {sorted(after)}",
            log.read_text(errors="replace")[-3000:],
        )


def _read_all(bootstrap: str, topic: str, count: int, timeout: float) -> dict[bytes, bytes]:
    """Key -> value of the first `count` records of `topic`, waiting for it to exist."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.subscribe([topic])
    got: dict[bytes, bytes] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            got[message.key()] = message.value()
    finally:
        consumer.close()
    return got
