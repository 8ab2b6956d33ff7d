"""A multi-process kbroker cluster on loopback for compat tests: use it, don't rebuild it.

``KafkaCluster`` starts N real ``kbroker serve`` processes configured with KRaft's own
settings (``node.id``, ``process.roles=broker,controller``, ``listeners`` with a
``CONTROLLER://`` listener, ``controller.listener.names``, ``controller.quorum.voters``)
plus kbroker's ``cluster.secret``, each on free loopback ports with its own data dir.
Every node is a voter and a broker, like the docker-compose cluster. Ports and data
dirs survive restarts, so a restarted node rejoins as itself.

Fixtures (compat_tests/conftest.py):
- ``cluster``: one 3-node cluster per test module. A test that kills or stops a node
  must leave it running again (``cluster.heal()`` in a ``finally``), or use
  ``cluster_factory`` for a cluster of its own.
- ``cluster_factory``: ``cluster_factory.start(size=3, **overrides)`` per test.

What tests get:
- ``cluster.bootstrap``: every node's PLAINTEXT address, for ``bootstrap.servers``;
- ``cluster.nodes`` / ``cluster.node(node_id)``: the ``BrokerProcess`` objects (kill,
  stop, start, log_tail...); ``kill(node_id)`` is kill -9, ``restart(node_id)``;
- ``add_broker()``: one more node with ``process.roles=broker`` (a quorum observer);
- ``KafkaCluster(..., controller_only=(3,))``: node 3 with ``process.roles=controller``
  (a voter serving no Kafka API; ``live_nodes`` and ``bootstrap`` leave it out);
- ``KafkaCluster(..., node_overrides={1: {"broker.rack": "a"}})``: settings of one node
  on top of the ones every node gets (also ``running_cluster``, ``cluster_factory.start``);
- ``metadata()``: a confluent-kafka ``ClusterMetadata`` from a live node;
- ``wait_for_controller(exclude=...)``: the active controller's id once live nodes agree;
- ``partition(topic, p)``: leader, replicas, ISR as a live node reports them;
- ``raw_metadata(topic)``: the wire MetadataResponse (offline replicas, leader epochs);
- ``create_topic(name, partitions, replication_factor, config)``: once every live node
  knows it; ``wait_for_full_isr(topic)``: until every replica of each partition is in sync;
- ``coordinator(key, key_type)``: the node FindCoordinator names (0 for none);
  ``key_with_full_isr(prefix, key_type)``: a new group or transactional id whose
  coordinator can be killed with two replicas left in sync; ``kill_coordinator(key)``;
- ``wait_until(predicate, timeout, what)``: bounded polling with a readable failure.

Timings are shortened for tests (a broker is fenced 3 s after its last heartbeat).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from compat_tests.broker_process import (
    FAST_GROUP_SETTINGS,
    BrokerProcess,
    BrokerStartError,
    free_port,
)
from compat_tests.waiting import eventually

T = TypeVar("T")

# Three interpreters importing at once on a loaded 2-core machine, then a quorum to form:
# a cluster node gets longer than a lone broker to serve.
CLUSTER_START_TIMEOUT_S = 60.0
CLUSTER_METADATA_GRACE_S = 15.0

CLUSTER_SECRET = "compat-tests-cluster-secret"
TEST_TIMINGS = {
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
    "controller.quorum.election.timeout.ms": "1000",
}


# Where FindCoordinator's key types live: groups (0) and transactional ids (1).
INTERNAL_TOPIC_OF_KEY = {0: "__consumer_offsets", 1: "__transaction_state"}

CONTROLLER_READY_LINE = "serving the metadata quorum as a controller only"


class ClusterNode(BrokerProcess):
    """A BrokerProcess that knows its node id and CONTROLLER port. A controller-only
    node serves no Kafka API: it is ready when it says so in its log."""

    node_id: int = 0
    controller_port: int = 0
    controller_only: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.metadata_grace_s = CLUSTER_METADATA_GRACE_S

    def start(self, timeout: float = CLUSTER_START_TIMEOUT_S) -> float:
        return super().start(timeout)

    def wait_ready(self, timeout: float = CLUSTER_START_TIMEOUT_S) -> float:
        if not self.controller_only:
            return super().wait_ready(timeout)
        began = self._spawned_at
        deadline = began + timeout
        while time.monotonic() < deadline:
            this_start = self.log_text().rsplit("===== start #", 1)[-1]
            if CONTROLLER_READY_LINE in this_start:
                self.ready_seconds = time.monotonic() - began
                return self.ready_seconds
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.05)  # pacing: the log and the process are polled
        self.kill()
        raise BrokerStartError(f"controller node {self.node_id} did not start\n" + self.log_tail())


class KafkaCluster:
    def __init__(
        self,
        root: Path,
        size: int = 3,
        overrides: dict[str, str] | None = None,
        controller_only: tuple[int, ...] = (),
        node_overrides: dict[int, dict[str, str]] | None = None,
    ):
        self.root = root
        self.size = size
        ids = list(range(1, size + 1))
        controller_ports = {i: self._port(i) for i in ids}
        voters = ",".join(f"{i}@{self._host(i)}:{controller_ports[i]}" for i in ids)
        self.voters = voters
        self.overrides = dict(overrides or {})
        self.nodes: list[ClusterNode] = []
        for i in ids:
            port = self._port(i)
            host = self._host(i)
            settings = {
                "node.id": str(i),
                "process.roles": "broker,controller",
                "listeners": (
                    f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_ports[i]}"
                ),
                "advertised.listeners": f"PLAINTEXT://{host}:{port}",
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.voters": voters,
                "cluster.secret": CLUSTER_SECRET,
                **TEST_TIMINGS,
                **FAST_GROUP_SETTINGS,
                **self.overrides,
                **(node_overrides or {}).get(i, {}),
            }
            if i in controller_only:
                settings["process.roles"] = "controller"
                settings["listeners"] = f"CONTROLLER://{host}:{controller_ports[i]}"
                del settings["advertised.listeners"]
            node = self._node(i, root / f"node{i}", settings, port)
            node.node_id = i
            node.controller_port = controller_ports[i]
            node.controller_only = i in controller_only
            self.nodes.append(node)

    # Where node `node_id` listens: loopback and free ports here; a subclass may place
    # nodes elsewhere (compat_tests/netns.py puts each in a network namespace of its own).
    def _host(self, node_id: int) -> str:
        return "127.0.0.1"

    def _port(self, node_id: int) -> int:
        return self.unused_port()

    def unused_port(self) -> int:
        """A free loopback port none of this cluster's nodes was given: the kernel may
        hand a released port out again at once."""
        taken: set[int] = self.__dict__.setdefault("_ports_given", set())
        port = free_port()
        while port in taken:
            port = free_port()
        taken.add(port)
        return port

    def _node(self, node_id: int, base: Path, settings: dict[str, str], port: int) -> ClusterNode:
        return ClusterNode(base, settings, port=port)

    def add_broker(self, **settings: str) -> ClusterNode:
        """Start one more node with ``process.roles=broker``: it follows the quorum as an
        observer and votes in nothing. Its node id is the next after the last node's."""
        node_id = self.nodes[-1].node_id + 1
        port = free_port()
        overrides = {
            "node.id": str(node_id),
            "process.roles": "broker",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": self.voters,
            "cluster.secret": CLUSTER_SECRET,
            **TEST_TIMINGS,
            **FAST_GROUP_SETTINGS,
            **self.overrides,
            **{k.replace("_", "."): v for k, v in settings.items()},
        }
        node = ClusterNode(self.root / f"node{node_id}", overrides, port=port)
        node.node_id = node_id
        self.nodes.append(node)
        node.start()
        return node

    # -- life cycle -------------------------------------------------------------------------

    def start(self, timeout: float = CLUSTER_START_TIMEOUT_S) -> None:
        """Spawn every node, then wait for each: a node serves once a majority runs."""
        for node in self.nodes:
            if not node.running():
                node.spawn()
        for node in self.nodes:
            node.wait_ready(timeout)

    def kill_all(self) -> None:
        for node in self.nodes:
            node.kill()

    def node(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id - 1]

    def kill(self, node_id: int) -> None:
        """kill -9: no controlled shutdown, no flush."""
        self.node(node_id).kill()

    def kill_coordinator(self, key: str, key_type: int = 0) -> int:
        """kill -9 the broker FindCoordinator names for a group (key type 0) or a
        transactional id (1); returns its node id."""
        code, node_id = self.find_coordinator(key, key_type, node=self.live_nodes[0])
        assert code == 0, f"no coordinator for {key} (error {code})"
        self.kill(node_id)
        return node_id

    def stop(self, node_id: int) -> int:
        """SIGTERM: controlled shutdown; returns the exit code."""
        return self.node(node_id).stop()

    def restart(self, node_id: int) -> float:
        node = self.node(node_id)
        node.kill()
        return node.start()

    def heal(self) -> None:
        """Start every node that is not running (a test's clean-up after killing one)."""
        dead = [n for n in self.nodes if not n.running()]
        for node in dead:
            node.spawn()
        for node in dead:
            node.wait_ready()

    @property
    def live_nodes(self) -> list[ClusterNode]:
        """Running nodes that serve the Kafka API (controller-only nodes do not)."""
        return [n for n in self.nodes if n.running() and not n.controller_only]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes if not n.controller_only)

    # -- looking at it --------------------------------------------------------------------

    def admin(self, node: BrokerProcess | None = None) -> Any:
        from confluent_kafka.admin import AdminClient

        target = node.bootstrap if node else ",".join(n.bootstrap for n in self.live_nodes)
        return AdminClient({"bootstrap.servers": target, "socket.timeout.ms": 3000})

    def metadata(self, node: BrokerProcess | None = None, topic: str | None = None) -> Any:
        """ClusterMetadata as one node (default: any live one) answers it."""
        return self.admin(node).list_topics(topic=topic, timeout=5)

    def partition(self, topic: str, partition: int = 0, node: BrokerProcess | None = None) -> Any:
        """confluent-kafka's PartitionMetadata: .leader, .replicas, .isrs."""
        return self.metadata(node, topic).topics[topic].partitions[partition]

    def raw_metadata(self, topic: str, node: BrokerProcess | None = None) -> Any:
        """kio's MetadataResponse v12 for one topic, fields as on the wire (offline
        replicas, leader epochs and partition error codes, which confluent-kafka hides)."""
        from kbroker.admin.client import BrokerConnection

        target = node or self.live_nodes[0]
        with BrokerConnection(target.host, target.port, 5.0, "cluster-harness") as conn:
            return conn.request(3, 12, topics=[{"name": topic}], allow_auto_topic_creation=False)

    def find_coordinator(
        self, key: str, key_type: int = 0, node: BrokerProcess | None = None, version: int = 4
    ) -> tuple[int, int]:
        """(error code, node id) of FindCoordinator for a group (key type 0), a
        transactional id (1) or a share-partition (2, from v6), as `node` (default: any
        live one) answers it."""
        from kbroker.admin.client import BrokerConnection

        target = node or self.live_nodes[0]
        with BrokerConnection(target.host, target.port, 5.0, "cluster-harness") as conn:
            answer = conn.request(10, version, key_type=key_type, coordinator_keys=[key])
        found = answer.coordinators[0]
        return int(found.error_code), int(found.node_id)

    def coordinator(self, key: str, key_type: int = 0, node: BrokerProcess | None = None) -> int:
        """The node FindCoordinator names for `key`, 0 while it names none."""
        code, node_id = self.find_coordinator(key, key_type, node)
        return node_id if code == 0 else 0

    def key_with_full_isr(self, prefix: str, key_type: int = 0, timeout: float = 30.0) -> str:
        """A new group id (key type 0) or transactional id (1) starting with `prefix` whose
        partition of the internal topic has a leader and every replica in sync, so its
        coordinator's broker can be killed with the others in sync (nodes killed by
        earlier tests may leave others with a shrunken ISR for a while after they return)."""
        from kbroker.coordinator.records import partition_for

        topic = INTERNAL_TOPIC_OF_KEY[key_type]
        self.find_coordinator(f"bootstrap-{topic}", key_type, node=self.live_nodes[0])

        def pick() -> str | None:
            partitions = self.raw_metadata(topic).topics[0].partitions
            full = {p.partition_index for p in partitions if _in_sync(p) and p.leader_id > 0}
            while full:
                key = f"{prefix}-{uuid.uuid4().hex[:8]}"
                if partition_for(key, len(partitions)) in full:
                    return key
            return None

        return self.wait_until(pick, timeout, f"a {topic} partition with a full ISR")

    def wait_for_controller(self, exclude: tuple[int, ...] = (), timeout: float = 15.0) -> int:
        """The controller every live node names, once they agree on a live one."""

        def agreed() -> int | None:
            ids = set()
            for node in self.live_nodes:
                try:
                    ids.add(self.metadata(node).controller_id)
                except Exception:
                    return None
            if len(ids) != 1:
                return None
            (controller,) = ids
            live = {n.node_id for n in self.live_nodes}
            return controller if controller in live and controller not in exclude else None

        return self.wait_until(agreed, timeout, "live nodes to agree on a live controller")

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        config: dict[str, str] | None = None,
    ) -> None:
        """CreateTopics through any node (with topic `config`); returns once every live
        node's Metadata has it."""
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # kept alive until the answer arrives
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication_factor, config=config or {})],
            operation_timeout=10,
        )
        futures[name].result(timeout=15)

        def everywhere() -> bool:
            return all(
                len(self.raw_metadata(name, node).topics[0].partitions) == partitions
                for node in self.live_nodes
            )

        # Other nodes apply the metadata log a moment later, as on Kafka.
        self.wait_until(everywhere, 10.0, f"every live node to know topic {name}")

    def wait_for_full_isr(self, topic: str, timeout: float = 15.0) -> None:
        """Until every partition of `topic` has all its replicas in sync."""

        def full() -> bool:
            partitions = self.raw_metadata(topic).topics[0].partitions
            return bool(partitions) and all(_in_sync(p) for p in partitions)

        self.wait_until(
            full,
            timeout,
            f"{topic} to have a full ISR",
        )

    @staticmethod
    def wait_until(
        predicate: Callable[[], T | None],
        timeout: float,
        what: str,
        seen: Callable[[], Any] | None = None,
    ) -> T:
        """Poll `predicate` until it returns something truthy; fail naming `what`."""
        if seen is None:
            return eventually(predicate, timeout=timeout, what=what, interval=0.1)
        try:
            return eventually(predicate, timeout=timeout, what=what, interval=0.1)
        except AssertionError as missed:
            try:
                last = repr(seen())
            except Exception as unseen:  # the miss is the news, not the look after it
                last = f"nothing: looking failed with {unseen!r}"[:2000]
            raise AssertionError(f"{missed}, last seen {last}") from missed.__cause__

    def log_tails(self, lines: int = 80) -> str:
        return "\n".join(n.log_tail(lines) for n in self.nodes)


def _in_sync(partition: Any) -> bool:
    """A wire Metadata partition has every replica in its ISR."""
    return sorted(partition.isr_nodes) == sorted(partition.replica_nodes)


@contextmanager
def running_cluster(
    root: Path,
    size: int = 3,
    overrides: dict[str, str] | None = None,
    node_overrides: dict[int, dict[str, str]] | None = None,
) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(root, size, overrides, node_overrides=node_overrides)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()
