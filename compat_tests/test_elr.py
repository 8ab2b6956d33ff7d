"""Eligible Leader Replicas (KIP-966), UpdateFeatures and UnregisterBroker on a running
cluster, through the Java AdminClient 4.x and confluent-kafka.

Three voters (brokers too) and two broker-only nodes (4 and 5), so that freezing or
killing the replicas of the test topic never takes the metadata quorum's majority. The
topic has replicas 1, 4, 5 and min.insync.replicas=2: with 4 and 5 frozen (SIGSTOP) the
ISR shrinks to [1] and the last replica to leave it is eligible; node 1 is then killed,
and when the frozen nodes resume, the eligible one leads, with every acknowledged record.
Without ELR the partition would wait for node 1. A second topic on nodes 4 and 5 shows
how a broker's restart after kill -9 (no clean-shutdown marker) takes it out of the
ELR, how ElectLeaders UNCLEAN then recovers the partition, and how a clean stop keeps a
broker eligible.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import KafkaCluster
from compat_tests.java_driver import JavaDriver

pytestmark = pytest.mark.timeout(300)

ELR = "eligible.leader.replicas.version"
TOPIC = "elr-topic"
RECORDS = 200


class ElrCluster:
    def __init__(self, root: Path, classpath: str) -> None:
        self.cluster = KafkaCluster(
            root,
            3,
            {
                "replica.lag.time.max.ms": "2000",
                "replica.fetch.backoff.ms": "200",
                "auto.leader.rebalance.enable": "false",
            },
        )
        self.root = root
        self.classpath = classpath
        self.java: JavaDriver | None = None
        self.frozen: set[int] = set()

    def start(self) -> None:
        self.cluster.start()
        for _ in range(2):
            self.cluster.add_broker()
        self.java = JavaDriver(self.classpath, self.cluster.bootstrap, self.root / "java.log")
        self.java.start()

    def stop(self) -> None:
        if self.java is not None:
            self.java.stop()
        for node in self.cluster.nodes:
            if node.running():
                os.kill(node.pid, signal.SIGCONT)
        self.cluster.kill_all()

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def freeze(self, *node_ids: int) -> None:
        for node_id in node_ids:
            os.kill(self.cluster.node(node_id).pid, signal.SIGSTOP)
            self.frozen.add(node_id)

    def thaw(self) -> None:
        for node_id in sorted(self.frozen):
            os.kill(self.cluster.node(node_id).pid, signal.SIGCONT)
        self.frozen.clear()

    # Once bootstrapped, the admin client asks any node of the metadata, frozen ones too
    # (their kernel still accepts the connection, nothing answers): give up on a silent
    # node well inside the call's timeout, and leave it alone long enough afterwards that
    # the retry goes to a live node rather than to the other frozen one. A call that still
    # finds no node to send to (a CI run saw one wait its whole 20 s for listNodes, right
    # after the kill of node 1) ends within a few seconds, so the wait asks again.
    ADMIN_PATIENCE = {
        "request.timeout.ms": 3000,
        "default.api.timeout.ms": 8000,
        "reconnect.backoff.ms": 10000,
        "reconnect.backoff.max.ms": 10000,
    }

    def partition(self, topic: str = TOPIC, among: set[int] | None = None) -> dict[str, Any]:
        """The partition as the Java AdminClient describes it, asked of the nodes that
        answer (of `among` only, when given): an admin client bootstrapped from every
        node may spend its whole call timeout on a frozen one or a killed one, and time
        out without asking a live node."""
        assert self.java is not None
        answering = ",".join(
            n.bootstrap
            for n in self.cluster.live_nodes
            if n.node_id not in self.frozen and (among is None or n.node_id in among)
        )
        described = self.java.call(
            "describe-topics", topics=topic, bootstrap=answering, admin=self.ADMIN_PATIENCE
        )
        result: dict[str, Any] = described["topics"][topic]["partitions"][0]
        return result


@pytest.fixture(scope="module")
def elr(tmp_path_factory: pytest.TempPathFactory, java4_classpath: str) -> Iterator[ElrCluster]:
    started = ElrCluster(tmp_path_factory.mktemp("elr"), java4_classpath)
    try:
        started.start()
        yield started
    finally:
        started.stop()


def features(elr: ElrCluster) -> dict[str, list[int]]:
    assert elr.java is not None
    finalized: dict[str, list[int]] = elr.java.call("describe-features")["finalized"]
    return finalized


def test_a_new_cluster_finalizes_elr_and_update_features_moves_it(elr: ElrCluster) -> None:
    java = elr.java
    assert java is not None
    assert features(elr)[ELR] == [1, 1]
    java.call("update-features", feature={ELR: 0}, type="safe-downgrade", validate_only=True)
    assert features(elr)[ELR] == [1, 1]
    java.call("update-features", feature={ELR: 0}, type="safe-downgrade")
    KafkaCluster.wait_until(lambda: ELR not in features(elr), 15, "ELR downgraded")
    failure = java.fails("update-features", feature={ELR: 1}, type="safe-downgrade")
    assert failure.error == "InvalidUpdateVersionException"
    assert (
        f"Invalid update version 1 for feature {ELR}. Can't downgrade to a newer version."
        in str(failure)
    )
    java.call("update-features", feature={ELR: 1})
    KafkaCluster.wait_until(lambda: features(elr).get(ELR) == [1, 1], 15, "ELR upgraded")
    failure = java.fails("update-features", feature={"kraft.version": 1})
    assert failure.error == "InvalidUpdateVersionException"
    assert "does not support this feature" in str(failure)


def _produce_acked(bootstrap: str, count: int) -> list[bytes]:
    acked: list[bytes] = []
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        value = f"acked-{i}".encode()

        def report(err: KafkaError | None, _msg: Any, value: bytes = value) -> None:
            (errors.append(err) if err is not None else acked.append(value))

        producer.produce(TOPIC, value, partition=0, on_delivery=report)
    producer.flush(30)
    assert not errors, errors
    return acked


def _watermarks(consumer: Consumer) -> tuple[int, int]:
    """The partition's watermarks, asked again (as an operator would) while librdkafka
    reports a transient local error: right after a leader change it may drop the handle
    of a fenced broker with the question still on it (_DESTROY_BROKER)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=15)
            return int(low), int(high)
        except KafkaException as exc:
            code = exc.args[0].code()
            if code not in (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT):
                raise
            if time.monotonic() > deadline:
                raise


def _read_all(bootstrap: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"elr-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        low, high = _watermarks(consumer)
        consumer.assign([TopicPartition(TOPIC, 0, low)])
        values: list[bytes] = []
        while len(values) < high - low:
            msg = consumer.poll(5)
            assert msg is not None, f"read {len(values)} of {high - low}"
            if msg.error() is None:
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def test_an_eligible_replica_leads_when_the_last_isr_member_dies(elr: ElrCluster) -> None:
    cluster = elr.cluster
    admin = AdminClient({"bootstrap.servers": elr.bootstrap})
    topic = NewTopic(
        TOPIC,
        num_partitions=1,
        replica_assignment=[[1, 4, 5]],
        config={"min.insync.replicas": "2"},
    )
    admin.create_topics([topic])[TOPIC].result(30)
    cluster.wait_for_full_isr(TOPIC, timeout=30)
    acked = _produce_acked(elr.bootstrap, RECORDS)
    assert len(acked) == RECORDS

    elr.freeze(4, 5)
    try:
        # Both followers may leave together (one AlterPartition) or one by one (fenced
        # in turn): either way those that left an ISR below 2 are eligible.
        shrunk = KafkaCluster.wait_until(
            lambda: (p := elr.partition())["isr"] == [1] and p["elr"] and p,
            30,
            "the ISR to shrink to [1] with eligible replicas",
            seen=elr.partition,
        )
        eligible = set(shrunk["elr"])
        assert eligible <= {4, 5}
        cluster.kill(1)
        KafkaCluster.wait_until(
            lambda: (p := elr.partition())["leader"] is None and p["isr"] == [] and p,
            45,
            "the last ISR member to leave, the partition without a leader",
            seen=elr.partition,
        )
        assert set(elr.partition()["elr"]) == {1, *eligible}
    finally:
        elr.thaw()

    # A node just thawed answers from its metadata of before the freeze (node 1 leading)
    # until it has caught up, as a Kafka broker does: ask the nodes that saw it all.
    def seen() -> dict[str, Any]:
        return elr.partition(among={2, 3})

    led = KafkaCluster.wait_until(
        lambda: (p := seen())["leader"] is not None and p,
        30,
        "an eligible replica to lead while node 1 is down",
        seen=seen,
    )
    assert led["leader"] in eligible
    assert not cluster.node(1).running()
    assert _read_all(elr.bootstrap)[:RECORDS] == acked


def test_a_broker_back_from_kill_9_is_not_eligible_and_a_cleanly_stopped_one_is(
    elr: ElrCluster,
) -> None:
    cluster = elr.cluster
    topic = "elr-unclean"
    # Nodes 4 and 5 may have been thawed a moment ago (the test before freezes them): they
    # are fenced until their next heartbeat, and a topic cannot be placed on them.
    # Asked of the voters that saw it all: a node just thawed answers from its old view.
    KafkaCluster.wait_until(
        lambda: all({4, 5} <= set(cluster.metadata(cluster.node(n)).brokers) for n in (2, 3)),
        30,
        "nodes 4 and 5 unfenced (in Metadata's brokers)",
    )
    admin = AdminClient({"bootstrap.servers": elr.bootstrap})
    new = NewTopic(
        topic, num_partitions=1, replica_assignment=[[4, 5]], config={"min.insync.replicas": "2"}
    )
    admin.create_topics([new])[topic].result(30)
    cluster.wait_for_full_isr(topic, timeout=30)

    def seen() -> dict[str, Any]:
        return elr.partition(topic)

    def wait_for(what: str, **expected: Any) -> dict[str, Any]:
        def matching() -> dict[str, Any] | None:
            p = seen()
            return p if all(p[k] == v for k, v in expected.items()) else None

        def seen_with_fences() -> dict[str, Any]:
            # On a miss, whether the controller fenced the brokers the test killed.
            tails = cluster.log_tails(400).splitlines()
            marks = ("fenced broker", "fencing broker")
            return {
                **seen(),
                "controller": [line for line in tails if any(m in line for m in marks)],
            }

        found: dict[str, Any] = KafkaCluster.wait_until(matching, 30, what, seen=seen_with_fences)
        return found

    cluster.kill(5)
    wait_for("5 to leave the ISR into the ELR", isr=[4], elr=[5])
    cluster.kill(4)
    p = wait_for("the partition without a leader", leader=None, isr=[])
    assert sorted(p["elr"]) == [4, 5]
    cluster.node(5).start()  # killed: its log may lack acknowledged records
    p = wait_for("5 to leave the ELR at its registration", elr=[4])
    # the last known ELR holds the partition's last leader (Kafka's balanced recovery),
    # which, down, cannot lead again; 5's unclean shutdown keeps it out of the ELR
    assert (p["leader"], p["isr"], p["lastKnownElr"]) == (None, [], [4])
    outcome = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 0)]).result(30)
    assert list(outcome.values()) == [None]
    p = wait_for("an unclean election of 5", leader=5)
    assert (p["isr"], p["elr"], p["lastKnownElr"]) == ([5], [], [])

    cluster.node(4).start()
    cluster.wait_for_full_isr(topic, timeout=30)
    assert cluster.stop(5) == 0  # a clean stop: controlled shutdown and the marker
    wait_for("5 to leave the ISR into the ELR", isr=[4], elr=[5])
    assert cluster.stop(4) == 0
    wait_for("the partition without a leader", leader=None, isr=[])
    cluster.node(5).start()
    p = wait_for("5, stopped cleanly, to lead from the ELR", leader=5)
    assert (p["isr"], p["elr"]) == ([5], [4])
    cluster.node(4).start()
    cluster.wait_for_full_isr(topic, timeout=30)


def test_unregister_broker_forgets_a_decommissioned_broker(elr: ElrCluster) -> None:
    java = elr.java
    assert java is not None
    failure = java.fails("unregister-broker", id=99)
    assert failure.error == "BrokerIdNotRegisteredException"
    assert "Broker ID 99 is not currently registered" in str(failure)
    if elr.cluster.node(1).running():  # decommissioned: down for good
        elr.cluster.kill(1)
    java.call("unregister-broker", id=1)
    failure = java.fails("unregister-broker", id=1)
    assert failure.error == "BrokerIdNotRegisteredException"


def test_voter_changes_are_refused_as_a_static_quorum_refuses_them(elr: ElrCluster) -> None:
    java = elr.java
    assert java is not None
    added = java.fails("add-raft-voter", id=7)
    assert added.error == "UnsupportedVersionException"
    assert "Cluster doesn't support adding voter because the kraft.version feature is 0" in str(
        added
    )
    removed = java.fails("remove-raft-voter", id=2)
    assert removed.error == "UnsupportedVersionException"
    assert "Cluster doesn't support removing voter because the kraft.version feature is 0" in str(
        removed
    )
