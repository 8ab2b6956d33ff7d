"""Several log directories per broker (JBOD) through stock clients: kafka-python's admin
describes them (DescribeLogDirs) and moves a replica between them (AlterReplicaLogDirs)
while a confluent-kafka producer keeps writing; every acknowledged record is read back,
after a restart and after a kill -9 in the middle of a move too."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import NoError

from compat_tests.broker_process import BrokerProcess, produce_one_error, running_broker
from compat_tests.confluent_helpers import (
    DeliveryLog,
    consume_from_beginning,
    create_topic,
    make_producer,
    produce_all,
    unique_topic,
)
from compat_tests.waiting import eventually
from kbroker.storage.meta_properties import read_meta_properties

TIMEOUT_MS = 15000
SMALL_SEGMENTS = {"internal.segment.bytes": str(64 * 1024)}


@pytest.fixture(scope="module")
def jbod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("jbod")
    dirs = f"{base / 'disk-a'},{base / 'disk-b'}"
    with running_broker(base, {"log.dirs": dirs}) as node:
        yield node


def disks(node: BrokerProcess) -> list[str]:
    return [str(node.base_dir / "disk-a"), str(node.base_dir / "disk-b")]


def admin(node: BrokerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=node.bootstrap,
        request_timeout_ms=TIMEOUT_MS,
        bootstrap_timeout_ms=TIMEOUT_MS,
    )


def layout(node: BrokerProcess, topic: str) -> dict[str, list[tuple[int, bool]]]:
    """log dir -> [(partition, is_future_key)] of `topic`, as DescribeLogDirs tells."""
    with closing(admin(node)) as client:
        [answer] = client.describe_log_dirs()
    found: dict[str, list[tuple[int, bool]]] = {}
    for result in answer["log_dirs"]:
        assert result["error_code"] == 0, result
        assert result["total_bytes"] > 0 and result["usable_bytes"] > 0
        found[result["log_dir"]] = sorted(
            (p["partition_index"], p["is_future_key"])
            for t in result["topics"]
            if t["name"] == topic
            for p in t["partitions"]
        )
    return found


def dir_of(node: BrokerProcess, topic: str, partition: int) -> str:
    return next(d for d, ps in layout(node, topic).items() if (partition, False) in ps)


def move(node: BrokerProcess, topic: str, partition: int, destination: str) -> None:
    with closing(admin(node)) as client:
        errors = client.alter_replica_log_dirs(
            {TopicPartitionReplica(topic, partition, 1): destination}
        )
    assert list(errors.values()) == [NoError]


def wait_moved(node: BrokerProcess, topic: str, partition: int, destination: str) -> None:
    def moved() -> bool:
        now = layout(node, topic)
        assert now[destination] == [(partition, False)] and all(
            partition not in [p for p, _ in ps] for d, ps in now.items() if d != destination
        ), now  # the failure shows the last layout
        return True

    eventually(moved, timeout=60, what=f"{topic}-{partition} moved to {destination}", interval=0.1)


class Writer:
    """A confluent-kafka producer writing numbered records to partition 0 until stopped."""

    def __init__(self, node: BrokerProcess, topic: str) -> None:
        # Batches under SMALL_SEGMENTS' size (a larger append is RECORD_LIST_TOO_LARGE).
        self.producer = make_producer(
            node.bootstrap, acks="all", enable_idempotence=True, batch_size=16384
        )
        self.topic = topic
        self.log = DeliveryLog()
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"{self.sent:08d}".encode() + b"." * 500
            try:
                self.producer.produce(
                    self.topic, value=value, partition=0, on_delivery=self.log.callback
                )
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.001 if self.sent % 50 else 0.005)

    def stop(self) -> list[bytes]:
        """Stop, wait for every delivery report; the acknowledged values in offset order."""
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(30) == 0
        assert not self.log.failed, self.log.failed[:3]
        return [v for _, _, v in sorted(self.log.delivered, key=lambda d: d[1]) if v is not None]


def read_back(node: BrokerProcess, topic: str, count: int) -> list[bytes]:
    return [r.value for r in consume_from_beginning(node.bootstrap, topic, count, timeout=60)]


def test_each_log_directory_is_described_with_the_partitions_placed_in_it(jbod):
    topic = unique_topic("jbod-layout")
    create_topic(jbod.bootstrap, topic, partitions=4)
    found = layout(jbod, topic)
    assert sorted(found) == disks(jbod)
    assert [len(ps) for ps in found.values()] == [2, 2]  # the fewest partitions first
    metas = [read_meta_properties(Path(d)) for d in disks(jbod)]
    assert len({m.directory_id for m in metas if m is not None and m.node_id == 1}) == 2


def test_a_replica_moved_under_produce_keeps_every_acknowledged_record(jbod):
    topic = unique_topic("jbod-move")
    create_topic(jbod.bootstrap, topic, config=SMALL_SEGMENTS)
    source = dir_of(jbod, topic, 0)
    destination = next(d for d in disks(jbod) if d != source)
    writer = Writer(jbod, topic)
    eventually(lambda: len(writer.log.delivered) >= 3000, timeout=60, what="3000 records written")
    move(jbod, topic, 0, destination)
    wait_moved(jbod, topic, 0, destination)
    delivered_at_swap = len(writer.log.delivered)
    eventually(  # writes go on after the swap
        lambda: len(writer.log.delivered) >= delivered_at_swap + 1000,
        timeout=60,
        what="1000 records written after the swap",
    )
    acknowledged = writer.stop()
    assert len(acknowledged) > delivered_at_swap  # writes went on after the swap
    assert read_back(jbod, topic, len(acknowledged)) == acknowledged

    jbod.restart()
    assert dir_of(jbod, topic, 0) == destination
    assert read_back(jbod, topic, len(acknowledged)) == acknowledged


def test_a_kill_during_a_move_leaves_one_whole_copy(jbod):
    topic = unique_topic("jbod-kill")
    create_topic(jbod.bootstrap, topic, config=SMALL_SEGMENTS)
    source = dir_of(jbod, topic, 0)
    destination = next(d for d in disks(jbod) if d != source)
    values = [f"{i:08d}".encode() * 1000 for i in range(2000)]  # 16 MB to copy
    produce_all(
        jbod.bootstrap,
        topic,
        ({"value": v, "partition": 0} for v in values),
        acks="all",
        batch_size=16384,  # under the 64 KiB segments (a larger append is refused)
    )
    move(jbod, topic, 0, destination)
    eventually(
        lambda: layout(jbod, topic)[destination],
        timeout=30,
        what="the copy under way (or done)",
        interval=0.005,
    )
    jbod.kill()
    jbod.start()
    assert dir_of(jbod, topic, 0) in disks(jbod)
    assert sum(len(ps) for ps in layout(jbod, topic).values()) == 1
    assert read_back(jbod, topic, len(values)) == values
    leftovers = [p for d in disks(jbod) for p in Path(d).iterdir() if p.name.endswith("-future")]
    assert leftovers == []


def test_a_failed_directory_is_offline_and_its_partitions_return_with_it(broker_factory):
    base = broker_factory.root / "failing"
    node = broker_factory.start_with({"log.dirs": f"{base / 'disk-a'},{base / 'disk-b'}"})
    a, b = str(base / "disk-a"), str(base / "disk-b")
    topic = unique_topic("jbod-fail")
    create_topic(node.bootstrap, topic, partitions=2)
    produce_all(node.bootstrap, topic, [{"value": b"%d" % p, "partition": p} for p in (0, 1)])
    on_b = next(p for p, _ in layout(node, topic)[b])
    node.stop()
    Path(b).rename(base / "disk-b.unplugged")
    Path(b).write_text("not a directory any more")

    node.start()
    with closing(admin(node)) as client:
        [answer] = client.describe_log_dirs()
    errors = {r["log_dir"]: r["error_code"] for r in answer["log_dirs"]}
    assert errors == {a: 0, b: 56}  # KAFKA_STORAGE_ERROR
    assert produce_one_error(node, topic, on_b, "jbod") == 56
    assert produce_one_error(node, topic, 1 - on_b, "jbod") == 0
    fresh = unique_topic("jbod-after")
    create_topic(node.bootstrap, fresh, partitions=2)
    assert layout_of_online(node, fresh) == {a: [0, 1]}  # new partitions avoid the failed one

    node.stop()
    Path(b).unlink()
    (base / "disk-b.unplugged").rename(b)
    node.start()
    assert layout(node, topic) == {a: [(1 - on_b, False)], b: [(on_b, False)]}
    assert (
        consume_from_beginning(node.bootstrap, topic, 1, partitions=[on_b])[0].value == b"%d" % on_b
    )


def layout_of_online(node: BrokerProcess, topic: str) -> dict[str, list[int]]:
    with closing(admin(node)) as client:
        [answer] = client.describe_log_dirs()
    return {
        r["log_dir"]: sorted(p["partition_index"] for t in r["topics"] if t["name"] == topic
                              for p in t["partitions"])
        for r in answer["log_dirs"]
        if r["error_code"] == 0
    }  # fmt: skip
