"""A real Kafka broker for other projects' tests.

    from kbroker.testing import kafka_broker, kafka_cluster

    with kafka_broker() as kafka:                  # one node
        topic = kafka.create_topic("orders", partitions=3)
        my_producer(bootstrap_servers=kafka.bootstrap).send(topic, b"hello")
        assert [r.value for r in kafka.read(topic)] == [b"hello"]

    with kafka_cluster(nodes=3) as kafka:          # three nodes, each a voter and a broker
        kafka.create_topic("orders", replication_factor=3)

Each node is a `kbroker serve` process on free loopback ports with its data in a
temporary directory (removed afterwards unless `directory` is given); the block is
entered once every node answers Metadata naming all of them, and left after each node
has stopped (SIGTERM, then kill after 30 s). Installed with kbroker, the pytest plugin
(kbroker.testing.plugin) offers the same as the `kafka_broker` and `kafka_cluster`
fixtures.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.testing.nodes import (
    Node,
    NodeStartError,
    cluster_nodes,
    free_ports,
    new_secret,
    single_node,
    start_all,
    stop_all,
)

if TYPE_CHECKING:
    from kbroker.testing.records import Consumed

__all__ = ["KafkaServer", "NodeStartError", "kafka_broker", "kafka_cluster"]

# A classic group forms at once instead of after Kafka's 3 s initial delay.
TEST_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


class KafkaServer:
    """A running kbroker node or cluster: its `bootstrap` string and a few helpers."""

    def __init__(self, nodes: list[Node], directory: Path) -> None:
        self.nodes = nodes
        self.directory = directory

    @property
    def bootstrap(self) -> str:
        """`bootstrap.servers` for any client: every node's address."""
        return ",".join(node.address for node in self.nodes)

    @property
    def started_in(self) -> float:
        """Seconds from starting the processes to the last node answering Metadata."""
        return max(node.started_in for node in self.nodes)

    def rss_bytes(self) -> int:
        """Resident memory of all the nodes' processes now."""
        return sum(node.rss_bytes() for node in self.nodes)

    def create_topic(
        self,
        name: str | None = None,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> str:
        """Create a topic (a fresh `test-<uuid>` name when none is given) and return its
        name once every node's Metadata shows a leader for each partition. The
        replication factor defaults to the broker's `default.replication.factor`."""
        from kbroker.admin.client import cluster
        from kbroker.admin.topics import create_topic

        name = name or f"test-{uuid.uuid4().hex[:12]}"
        with cluster(self.bootstrap, timeout=timeout) as c:
            create_topic(c, name, partitions, replication_factor or -1, dict(config or {}), False)
        self._wait_for_leaders(name, partitions, timeout)
        return name

    def _wait_for_leaders(self, topic: str, partitions: int, timeout: float) -> None:
        from kbroker.admin.client import ClientError, cluster
        from kbroker.admin.topics import metadata

        deadline = time.monotonic() + timeout
        for node in self.nodes:
            while True:
                try:
                    with cluster(node.address, timeout=timeout) as c:
                        (info,) = metadata(c, [topic]).topics
                    if len(info.partitions) >= partitions and all(
                        p.leader >= 0 for p in info.partitions
                    ):
                        break
                except ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {topic} has no leader on node {node.node_id}")
                time.sleep(0.05)

    def produce(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Mapping[str, bytes | str | None] | None = None,
    ) -> tuple[int, int]:
        """Write one record with acks=all; returns its (partition, offset). Keyed records
        go where Kafka's default partitioner puts them."""
        from kbroker.admin.client import cluster
        from kbroker.testing.records import produce_one

        def encode(v: bytes | str | None) -> bytes | None:
            return v.encode() if isinstance(v, str) else v

        fields = [(name, encode(v)) for name, v in (headers or {}).items()]
        with cluster(self.bootstrap) as c:
            return produce_one(c, topic, encode(key), encode(value), partition, fields)

    def read(self, topic: str, timeout: float = 30.0) -> list[Consumed]:
        """Every record of the topic from each partition's start to its end as the call
        begins (as a read_uncommitted consumer sees them), ordered by partition then
        offset. Each has topic, partition, offset, timestamp, key, value and headers."""
        from kbroker.admin.client import cluster
        from kbroker.testing.records import read_all

        with cluster(self.bootstrap, timeout=timeout) as c:
            return read_all(c, topic, timeout)

    def stop(self) -> dict[int, int | None]:
        """Stop every node (SIGTERM, kill after 30 s); each node's exit status."""
        return stop_all(self.nodes)


@contextmanager
def _running(
    nodes: list[Node], directory: Path, keep: bool, python: str | None = None
) -> Iterator[KafkaServer]:
    server = KafkaServer(nodes, directory)
    try:
        start_all(nodes, python=python)
        yield server
    finally:
        stop_all(nodes)
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def kafka_broker(
    directory: Path | str | None = None,
    settings: Mapping[str, str] | None = None,
    http: bool = False,
    python: str | None = None,
) -> Iterator[KafkaServer]:
    """One kbroker node on a free loopback port. `settings` are broker properties with
    Kafka's names; `http=True` also serves /metrics, /health and /ready (the port is
    `server.nodes[0].http_port`); `python` runs it with another interpreter (or a
    wrapper that runs another kbroker tree, as bench/paired_cost.py does)."""
    keep = directory is not None
    root = Path(tempfile.mkdtemp(prefix="kbroker-") if directory is None else directory)
    port, *more = free_ports(2 if http else 1)
    node = single_node(
        root, port, more[0] if http else None, **{**TEST_SETTINGS, **(settings or {})}
    )
    with _running([node], root, keep, python) as server:
        yield server


@contextmanager
def kafka_cluster(
    nodes: int = 3,
    directory: Path | str | None = None,
    settings: Mapping[str, str] | None = None,
    http: bool = False,
) -> Iterator[KafkaServer]:
    """`nodes` kbroker processes forming one cluster (each a voter and a broker) on free
    loopback ports, with a random cluster secret."""
    if nodes < 1:
        raise ValueError("a cluster needs at least one node")
    keep = directory is not None
    root = Path(tempfile.mkdtemp(prefix="kbroker-cluster-") if directory is None else directory)
    ports = free_ports(nodes * (3 if http else 2))
    members = cluster_nodes(
        root,
        ports[:nodes],
        ports[nodes : 2 * nodes],
        ports[2 * nodes :] if http else None,
        new_secret(),
        {**TEST_SETTINGS, **(settings or {})},
    )
    with _running(members, root, keep) as server:
        yield server
