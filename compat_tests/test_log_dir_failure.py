"""A log directory whose disk fails while the broker runs goes offline with every
partition in it, as in Kafka: Produce and Fetch of those partitions answer
KAFKA_STORAGE_ERROR, Metadata shows them without this leader, DescribeLogDirs reports
the directory failed, and partitions in the other directories go on serving. In a
cluster the broker tells the controller, which elects another leader from the ISR and
never elects that broker for those partitions while its directory stays offline.

The failure is real: one of the broker's two log directories is a 1 MiB tmpfs mounted
by the test, filled by producing to its partition until a write fails with ENOSPC.
"""

from __future__ import annotations

import errno
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient

from compat_tests.broker_process import BrokerProcess, produce_one_error, topic_metadata
from compat_tests.confluent_helpers import consume_from_beginning, create_topic, unique_topic
from kbroker.admin.client import BrokerConnection, fetch_fields, produce_fields
from kbroker.protocol.batch import encode_batch

PRODUCE, FETCH, CREATE_TOPICS = 0, 1, 19
KAFKA_STORAGE_ERROR = 56
VALUE = b"v" * 100_000  # ten of them fill the small disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(node: BrokerProcess, topic: str, partition: int) -> list[int]:
    """Produce 100 kB records until the disk is full; the error codes, in order."""
    outcomes = [produce(node, topic, partition, VALUE) for _ in range(20)]
    codes = [int(o.error_code) for o in outcomes]
    assert KAFKA_STORAGE_ERROR in codes, codes
    first_failure = codes.index(KAFKA_STORAGE_ERROR)
    assert first_failure > 0 and set(codes[:first_failure]) == {0}, codes
    assert set(codes[first_failure:]) == {KAFKA_STORAGE_ERROR}, codes
    assert "No space left" in outcomes[first_failure].error_message
    return codes


def produce(node: BrokerProcess, topic: str, partition: int, value: bytes) -> Any:
    batch = bytes(encode_batch([value], int(time.time() * 1000)))
    with BrokerConnection(node.host, node.port, 10.0, "filler") as conn:
        answer = conn.request(
            PRODUCE, 9, **produce_fields(topic, batch, partition=partition, acks=1)
        )
    return answer.responses[0].partition_responses[0]


def fetch_error(node: BrokerProcess, topic: str, partition: int) -> int:
    with BrokerConnection(node.host, node.port, 10.0, "reader") as conn:
        answer = conn.request(
            FETCH, 12, **fetch_fields(topic, max_wait=0, min_bytes=0, partition=partition)
        )
    return int(answer.responses[0].partitions[0].error_code)


def metadata_partitions(node: BrokerProcess, topic: str) -> dict[int, Any]:
    return {int(p.partition_index): p for p in topic_metadata(node, topic, "meta").partitions}


def test_a_full_disk_takes_its_log_directory_and_partitions_offline(
    broker_factory: Any, small_disk: Path, tmp_path: Path
) -> None:
    big = tmp_path / "big-disk"
    node = broker_factory.start_with({"log.dirs": f"{big},{small_disk}"})
    topic = unique_topic("full-disk")
    create_topic(node.bootstrap, topic, partitions=2)
    [on_small] = [p for p in (0, 1) if (small_disk / f"{topic}-{p}").is_dir()]
    on_big = 1 - on_small

    fill(node, topic, on_small)

    assert fetch_error(node, topic, on_small) == KAFKA_STORAGE_ERROR
    shown = metadata_partitions(node, topic)
    assert int(shown[on_small].error_code) == KAFKA_STORAGE_ERROR
    assert int(shown[on_small].leader_id) == -1
    assert list(shown[on_small].offline_replicas) == [1]
    assert (int(shown[on_big].error_code), int(shown[on_big].leader_id)) == (0, 1)

    with closing(KafkaAdminClient(bootstrap_servers=node.bootstrap)) as admin:
        [answer] = admin.describe_log_dirs()
    errors = {r["log_dir"]: r["error_code"] for r in answer["log_dirs"]}
    assert errors == {str(big): 0, str(small_disk): KAFKA_STORAGE_ERROR}

    # The other directory serves on, before and after its neighbour failed.
    assert produce_one_error(node, topic, on_big, "after") == 0
    assert fetch_error(node, topic, on_big) == 0
    assert len(consume_from_beginning(node.bootstrap, topic, 1, partitions=[on_big])) == 1


def test_a_broker_whose_every_log_directory_failed_halts_with_a_non_zero_status(
    broker_factory: Any, small_disk: Path, tmp_path: Path
) -> None:
    # The metadata journal lives elsewhere: only the log directory fills up.
    node = broker_factory.start_with(
        {"log.dirs": str(small_disk), "metadata.log.dir": str(tmp_path / "meta")}
    )
    topic = unique_topic("last-disk")
    create_topic(node.bootstrap, topic, partitions=1)
    for _ in range(20):
        try:
            produce(node, topic, 0, VALUE)
        except Exception:  # the connection ends with the process
            break
    assert node.proc is not None
    assert node.proc.wait(timeout=15) == 1
    halted = [line for line in node.log_text().splitlines() if "Shutdown broker" in line]
    assert len(halted) == 1 and f"all log dirs in {small_disk} have failed" in halted[0]


def test_a_broker_whose_metadata_log_dir_fills_up_halts_with_one_line(
    broker_factory: Any, small_disk: Path, tmp_path: Path
) -> None:
    # The metadata journal is on the small disk, the partition logs elsewhere.
    node = broker_factory.start_with(
        {"log.dirs": str(tmp_path / "data"), "metadata.log.dir": str(small_disk)}
    )
    fill_up(small_disk)
    created = 0
    for index in range(500):  # each topic adds an entry; the journal soon has to grow
        try:
            with BrokerConnection(node.host, node.port, 10.0, "creator") as conn:
                conn.request(CREATE_TOPICS, 7, **topic_fields(f"meta-full-{index}"))
            created += 1
        except Exception:  # the connection ends with the process
            break
    assert node.proc is not None
    assert node.proc.wait(timeout=15) == 1, created
    halted = [line for line in node.log_text().splitlines() if "Shutdown broker" in line]
    assert len(halted) == 1, halted
    assert f"the metadata log dir {small_disk} has failed" in halted[0]
    assert "No space left on device" in halted[0]


def fill_up(disk: Path) -> None:
    """Write a file until the disk has no space left."""
    with open(disk / "filler", "wb", buffering=0) as f:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc


def topic_fields(name: str) -> dict[str, Any]:
    topic = {
        "name": name,
        "num_partitions": 1,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }
    return {"topics": [topic], "timeout": 10_000, "validate_only": False}


def test_in_a_cluster_leadership_leaves_a_failed_directory_and_never_comes_back_to_it(
    cluster_factory: Any, small_disk: Path, tmp_path: Path
) -> None:
    big = tmp_path / "node2-big-disk"
    # Node 2's first log directory is the small disk (its first replica goes there);
    # its metadata journal is on the other one.
    cluster = cluster_factory.start(
        node_overrides={2: {"log.dirs": f"{small_disk},{big}", "metadata.log.dir": str(big)}}
    )
    # Topic `three` has an in-sync replica left when node 2's directory fails; topic
    # `two` has none (node 1 will be down).
    three, two = unique_topic("disk-rf3"), unique_topic("disk-rf2")
    admin = cluster.admin()
    admin.create_topics([NewTopic(three, 1, replica_assignment=[[2, 1, 3]])])[three].result(30)
    admin.create_topics([NewTopic(two, 1, replica_assignment=[[2, 1]])])[two].result(30)
    cluster.wait_until(
        lambda: (
            [(p.leader, len(p.isrs)) for p in partitions(cluster, (three, two), 2)]
            == [(2, 3), (2, 2)]
        ),
        15,
        "node 2 to lead both partitions with full ISRs",
    )
    # The second replica on node 2 went to the other directory: move it to the small one.
    with closing(KafkaAdminClient(bootstrap_servers=cluster.node(2).bootstrap)) as kafka_admin:
        kafka_admin.alter_replica_log_dirs({TopicPartitionReplica(two, 0, 2): str(small_disk)})
    cluster.wait_until(
        lambda: (small_disk / f"{two}-0").is_dir() and not (big / f"{two}-0").exists(),
        30,
        f"{two}-0 to move onto the small disk",
    )
    assert (small_disk / f"{three}-0").is_dir()
    # Without node 1, node 2 is the last in-sync replica of `two`.
    cluster.kill(1)
    cluster.wait_until(
        lambda: [p.isrs for p in partitions(cluster, (three, two), 2)] == [[2, 3], [2]],
        15,
        "node 1 to leave both ISRs",
    )

    fill(cluster.node(2), three, 0)

    # `three` moves to its other in-sync replica; `two` has none and goes offline rather
    # than stay with a replica that cannot serve it. With eligible leader replicas
    # (KIP-966, on for new clusters as in Kafka 4.1+) its ISR empties: node 2 is kept
    # among the eligible leaders, but is not elected while its directory is offline.
    cluster.wait_until(
        lambda: (
            [(p.leader, p.isrs) for p in partitions(cluster, (three, two), 3)]
            == [(3, [3]), (-1, [])]
        ),
        15,
        "the controller to take node 2's replicas out of service",
        seen=lambda: [(p.leader, p.isrs) for p in partitions(cluster, (three, two), 3)],
    )
    for node in (2, 3):
        for topic in (three, two):
            [shown] = cluster.raw_metadata(topic, node=cluster.node(node)).topics[0].partitions
            assert sorted(shown.offline_replicas) == [1, 2], (node, topic)
    assert produce_one_error(cluster.node(3), three, 0, "after") == 0

    # Node 1 returns: its return runs an election, which must not pick node 2.
    cluster.node(1).start()
    cluster.wait_until(
        lambda: 1 in cluster.metadata(cluster.node(3)).brokers, 15, "node 1 to register"
    )
    # Absence: no leader seen over 3 s (the election follows node 1's registration at once)
    # is node 2, nor anything but 3 for the topic node 3 holds.
    leaders: dict[str, set[int]] = {three: set(), two: set()}
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        for node in (1, 3):
            for topic in (three, two):
                [shown] = cluster.raw_metadata(topic, node=cluster.node(node)).topics[0].partitions
                leaders[topic].add(int(shown.leader_id))
        time.sleep(0.1)  # pacing: the leaders are sampled through the window
    assert leaders == {three: {3}, two: {-1}}
    for topic in (three, two):
        [shown] = cluster.raw_metadata(topic, node=cluster.node(1)).topics[0].partitions
        assert list(shown.offline_replicas) == [2], topic


def partitions(cluster: Any, topics: tuple[str, ...], node: int) -> list[Any]:
    """Partition 0 of each topic (confluent-kafka's PartitionMetadata) as `node` shows it."""
    shown = cluster.metadata(cluster.node(node)).topics
    return [shown[topic].partitions[0] for topic in topics]
