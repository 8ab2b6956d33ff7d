"""kbroker's schema registry on a 3-node cluster: registered through any node, read
through every node at once (read-your-writes), and a stream of registrations that
survives kill -9 of the writer with every acknowledged id kept and no id given twice;
a fourth node holding no replica of _schemas serves it too, through a kill -9 of the
_schemas leader."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from compat_tests.broker_process import free_ports
from compat_tests.cluster import KafkaCluster
from compat_tests.schema_registry_helpers import avro_record, call, wait_serving

pytestmark = pytest.mark.timeout(240)

TOPIC = "_schemas"


def _start(cluster_factory: Any) -> tuple[KafkaCluster, dict[int, str]]:
    ports = free_ports(["1", "2", "3"])
    urls = {int(i): f"http://127.0.0.1:{p}" for i, p in ports.items()}
    cluster = cluster_factory.start(
        size=3,
        node_overrides={i: {"schema.registry.listeners": url} for i, url in urls.items()},
        offsets_topic_replication_factor="3",
    )
    for url in urls.values():
        wait_serving(url)
    cluster.wait_for_full_isr(TOPIC, timeout=30)
    return cluster, urls


def _schema(n: int) -> dict[str, str]:
    return {"schema": avro_record(f"Event{n}", [{"name": "n", "type": "int"}])}


def _register(url: str, subject: str, n: int, timeout: float = 20.0) -> int | None:
    """The id a registration was acknowledged with, None if it was not."""
    try:
        status, body = call(url, "POST", f"/subjects/{subject}/versions", _schema(n), timeout)
    except OSError:
        return None
    return body["id"] if status == 200 else None


def test_register_anywhere_read_everywhere_and_writer_failover(cluster_factory):
    cluster, urls = _start(cluster_factory)
    # Read-your-writes: a registration through one node is readable through every node
    # at once, with no retry.
    for n, via in enumerate(urls):
        subject = f"rw-{n}"
        schema_id = _register(urls[via], subject, 1000 + n)
        assert schema_id is not None
        for url in urls.values():
            status, got = call(url, "GET", f"/schemas/ids/{schema_id}")
            assert status == 200, (url, got)
            assert json.loads(got["schema"])["name"] == f"Event{1000 + n}"
            status, version = call(url, "GET", f"/subjects/{subject}/versions/latest")
            assert (status, version["id"]) == (200, schema_id)

    writer = cluster.partition(TOPIC).leader
    survivors = [i for i in urls if i != writer]

    # Validation on a topic led by a node that is not the writer: a schema registered
    # through the third node is accepted by the topic's leader at once.
    validated = "validated-orders"
    cluster.create_topic(
        validated, partitions=3, config={"confluent.value.schema.validation": "true"}
    )
    cluster.wait_for_full_isr(validated)
    leaders = {p: cluster.partition(validated, p).leader for p in range(3)}
    partition = next(p for p, leader in leaders.items() if leader != writer)
    via = next(i for i in urls if i not in (writer, leaders[partition]))
    call(urls[via], "PUT", f"/config/{validated}-value", {"compatibility": "NONE"})
    for attempt in range(5):
        schema_id = _register(urls[via], f"{validated}-value", 5000 + attempt)
        assert schema_id is not None
        framed = b"\x00" + schema_id.to_bytes(4, "big") + b"\x02"
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        outcomes: list[Any] = []

        def delivered(err: Any, _msg: Any, outcomes: list[Any] = outcomes) -> None:
            outcomes.append(err)

        # Each in a batch of its own: a refusal takes the whole batch.
        producer.produce(validated, framed, partition=partition, on_delivery=delivered)
        assert producer.flush(20) == 0
        producer.produce(validated, b"unframed", partition=partition, on_delivery=delivered)
        assert producer.flush(20) == 0
        assert outcomes[0] is None, outcomes
        assert outcomes[1] is not None and outcomes[1].code() == KafkaError.INVALID_RECORD
    acknowledged: dict[str, int] = {}
    attempts = 0

    def stream(count: int) -> list[float]:
        """Register `count` new schemas through the surviving nodes in turn, retrying each
        until acknowledged; the times of acknowledgement."""
        nonlocal attempts
        times = []
        for _ in range(count):
            n = len(acknowledged)
            subject = f"stream-{n}"
            deadline = time.monotonic() + 60
            while True:
                attempts += 1
                schema_id = _register(urls[survivors[attempts % 2]], subject, n)
                if schema_id is not None:
                    acknowledged[subject] = schema_id
                    times.append(time.monotonic())
                    break
                assert time.monotonic() < deadline, f"registration {n} not acknowledged in 60s"
                time.sleep(0.05)
        return times

    stream(15)
    killed_at = time.monotonic()
    cluster.kill(writer)
    after = stream(15)
    resumed = after[0] - killed_at
    print(f"registrations resumed {resumed:.2f}s after kill -9 of the writer")
    assert resumed < 20, f"registrations resumed {resumed:.1f}s after the writer died"
    new_writer = cluster.partition(TOPIC, node=cluster.node(survivors[0])).leader
    assert new_writer in survivors

    # Every acknowledged registration keeps its id; no id was given to two schemas.
    ids = list(acknowledged.values())
    assert len(set(ids)) == len(ids), sorted(ids)
    for i in survivors:
        for subject, schema_id in acknowledged.items():
            status, got = call(urls[i], "GET", f"/subjects/{subject}/versions/1")
            assert (status, got["id"]) == (200, schema_id), (i, subject, got)

    # The killed writer comes back as a follower and serves the same registry.
    cluster.heal()
    wait_serving(urls[writer])
    deadline = time.monotonic() + 30
    while True:
        status, subjects = call(urls[writer], "GET", "/subjects")
        if status == 200 and set(acknowledged) <= set(subjects):
            break
        assert time.monotonic() < deadline, "the restarted node did not catch up"
        time.sleep(0.2)
    for subject, schema_id in acknowledged.items():
        assert call(urls[writer], "GET", f"/subjects/{subject}/versions/1")[1]["id"] == schema_id
    fresh = _register(urls[writer], "after-restart", 9999)
    assert fresh is not None and fresh > max(ids)

    # A fourth node, holding no replica of _schemas, serves the registry too: it reads
    # _schemas from the partition's leader, with the same read-your-writes promise.
    fourth_url = f"http://127.0.0.1:{free_ports(['4'])['4']}"
    fourth = cluster.add_broker(schema_registry_listeners=fourth_url).node_id
    wait_serving(fourth_url)
    assert fourth not in cluster.partition(TOPIC).replicas
    everyone = {**urls, fourth: fourth_url}
    client = SchemaRegistryClient({"url": fourth_url})
    for subject, schema_id in acknowledged.items():
        assert client.get_latest_version(subject).schema_id == schema_id, subject
    via_fourth = client.register_schema("via-fourth", Schema(_schema(4444)["schema"], "AVRO"))
    assert via_fourth > max(ids)
    for i, url in everyone.items():
        reader = SchemaRegistryClient({"url": url})
        got = reader.get_schema(via_fourth)
        assert json.loads(got.schema_str)["name"] == "Event4444", i
        assert reader.get_latest_version("via-fourth").schema_id == via_fourth, i
    via_replica = _register(urls[survivors[0]], "via-replica", 5555)
    status, got = call(fourth_url, "GET", "/subjects/via-replica/versions/latest")
    assert (status, got["id"]) == (200, via_replica), got

    # kill -9 of the _schemas leader: the fourth node keeps serving reads, and writes
    # once a new leader has taken over.
    leader = cluster.partition(TOPIC).leader
    cluster.kill(leader)
    killed_at = time.monotonic()
    status, got = call(fourth_url, "GET", "/subjects/via-fourth/versions/latest")
    assert (status, got["id"]) == (200, via_fourth), got
    deadline = time.monotonic() + 60
    while (after_failover := _register(fourth_url, "after-failover", 6666)) is None:
        assert time.monotonic() < deadline, "no registration through the fourth node after failover"
        time.sleep(0.1)
    print(f"fourth node registered {time.monotonic() - killed_at:.2f}s after kill -9 of the leader")
    assert after_failover > via_replica
    for i, url in everyone.items():
        if i == leader:
            continue
        status, got = call(url, "GET", "/subjects/after-failover/versions/latest")
        assert (status, got["id"]) == (200, after_failover), (i, got)

    # A reassignment gives the fourth node a replica: once that is in sync, the node reads
    # it instead of the leader's, and still sees every write at once.
    kept = [i for i in urls if i != leader]
    admin = KafkaAdminClient(
        bootstrap_servers=[n.bootstrap for n in cluster.live_nodes], request_timeout_ms=15000
    )
    try:
        answer = admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): [*kept, fourth]})
        assert answer == {TopicPartition(TOPIC, 0): None}, answer
    finally:
        admin.close()
    cluster.wait_until(
        lambda: sorted(cluster.partition(TOPIC).replicas) == sorted([*kept, fourth]),
        30,
        "the reassignment of _schemas onto the fourth node",
    )
    cluster.wait_for_full_isr(TOPIC, timeout=30)
    via_kept = _register(urls[kept[0]], "after-reassignment", 7777)
    assert via_kept is not None and via_kept > after_failover
    status, got = call(fourth_url, "GET", "/subjects/after-reassignment/versions/latest")
    assert (status, got["id"]) == (200, via_kept), got

    def reads_own_replica() -> bool:
        call(fourth_url, "GET", "/subjects")  # a read notices the replica is in sync
        return "reads its own in-sync replica of _schemas now" in cluster.node(fourth).log_text()

    cluster.wait_until(reads_own_replica, 15, "the fourth node to read its own replica")
    status, got = call(fourth_url, "GET", "/subjects/after-reassignment/versions/latest")
    assert (status, got["id"]) == (200, via_kept), got
