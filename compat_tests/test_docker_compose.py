"""The image built from the Dockerfile and the 3-node docker-compose.yml, run as shipped
(settings, volumes, health checks) on host networking: a stock client produces and
consumes through the nodes' EXTERNAL listener, a node is killed while producing with
acks=all and restarted, and every acknowledged record is read back.

scripts/docker-test-setup.sh builds the image (starting a Docker daemon if none answers);
where Docker cannot run it says why and the test skips. The copy of the compose file this
test runs changes only networking: host networking, with each node's listeners on free loopback
ports, since the daemon here has no bridge (dockerd --bridge=none --iptables=false); the
nodes still reach each other by their service names, kb1, kb2 and kb3.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.broker_process import free_ports

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "docker-test-setup.sh"
CACHE = Path(
    os.environ.get("KBROKER_DOCKER_CACHE", Path.home() / ".cache/kbroker-test-tools/docker")
)
NODES = (1, 2, 3)
PARTITIONS = 3

pytestmark = pytest.mark.timeout(900)


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    pytest.skip("no compose client (make test installs docker-compose with apt-get as root)")


@dataclass
class Cluster:
    compose: list[str]
    ports: dict[str, int]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[f'external{n}']}" for n in NODES)

    def run(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [*self.compose, *args], capture_output=True, text=True, timeout=timeout
        )
        assert result.returncode == 0, f"compose {' '.join(args)}: {result.stderr[-2000:]}"
        return result.stdout

    def container(self, node: int) -> str:
        return self.run("ps", "-q", f"kb{node}").strip()

    def health(self, node: int) -> str:
        result = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Status}} {{.State.Health.Status}}"]
            + [self.container(node)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return result.stdout.strip()

    def wait_healthy(self, nodes: tuple[int, ...], timeout: float = 180) -> None:
        """The image's own health check (/ready on the node's HTTP listener) passes."""
        deadline = time.monotonic() + timeout
        states: dict[int, str] = {}
        while time.monotonic() < deadline:
            states = {n: self.health(n) for n in nodes}
            if all(s == "running healthy" for s in states.values()):
                return
            time.sleep(1)
        raise AssertionError(f"nodes not healthy: {states}\n{self.logs()}")

    def logs(self) -> str:
        result = subprocess.run(
            [*self.compose, "logs", "--no-color", "--tail", "30"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return result.stdout[-6000:]


def on_host_network(compose_file: dict, ports: dict[str, int]) -> dict:
    """The compose file with only its networking changed: every node in the host's network
    namespace (so no published ports) on its own loopback ports. The nodes still know each
    other by their service names, as on a compose network (kbN, here in /etc/hosts): the
    voters and the INTERNAL listeners are named kb1, kb2, kb3; EXTERNAL is 127.0.0.1."""
    voters = ",".join(f"{n}@kb{n}:{ports[f'controller{n}']}" for n in NODES)
    for n in NODES:
        service = compose_file["services"][f"kb{n}"]
        internal, external = ports[f"internal{n}"], ports[f"external{n}"]
        service["network_mode"] = "host"
        service.pop("ports", None)
        service["extra_hosts"] = [f"kb{m}:127.0.0.1" for m in NODES]
        service["environment"].update(
            {
                "KBROKER_LISTENERS": f"INTERNAL://127.0.0.1:{internal},"
                f"EXTERNAL://127.0.0.1:{external},"
                f"CONTROLLER://127.0.0.1:{ports[f'controller{n}']}",
                "KBROKER_ADVERTISED_LISTENERS": f"INTERNAL://kb{n}:{internal},"
                f"EXTERNAL://127.0.0.1:{external}",
                "KBROKER_CONTROLLER_QUORUM_VOTERS": voters,
                "KBROKER_HTTP_LISTENERS": f"http://127.0.0.1:{ports[f'http{n}']}",
            }
        )
    return compose_file


def stop_started_daemon() -> None:
    """Stop the dockerd the setup script started, if it did (never one found running)."""
    pidfile = CACHE / "dockerd.pid"
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    pidfile.unlink()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    started = time.monotonic()
    try:
        result = subprocess.run(
            ["bash", str(SETUP)],
            env={**os.environ, "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode == 3:
            pytest.skip(result.stderr.strip())
        assert result.returncode == 0, result.stderr
        print(f"image ready in {time.monotonic() - started:.0f}s: {result.stdout.strip()}")
        yield "kbroker:latest"
    finally:
        # Also when the build failed: no daemon of the test's is left running.
        stop_started_daemon()


@pytest.fixture(scope="module")
def cluster(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    names = [f"{kind}{n}" for n in NODES for kind in ("internal", "external", "controller", "http")]
    ports = free_ports(names)
    # The shipped file (its anchors resolved) with host networking; a second -f file
    # cannot take the published ports away, which host networking refuses.
    shipped = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    hosted = tmp_path_factory.mktemp("compose") / "docker-compose.yml"
    hosted.write_text(yaml.safe_dump(on_host_network(shipped, ports)))
    compose = [
        *compose_command(),
        "--project-name",
        f"kbtest{uuid.uuid4().hex[:8]}",
        "--project-directory",
        str(ROOT),
        "-f",
        str(hosted),
    ]
    cluster = Cluster(compose, ports)
    try:
        cluster.run("up", "-d", "--no-build", *[f"kb{n}" for n in NODES], timeout=300)
        cluster.wait_healthy(NODES)
        yield cluster
    finally:
        subprocess.run(
            [*compose, "down", "--volumes", "--timeout", "10"],
            capture_output=True,
            timeout=300,
        )


@dataclass
class Acked:
    records: dict[bytes, tuple[int, int]]
    failed: list[KafkaError]

    def callback(self, err: KafkaError | None, msg) -> None:
        if err is None:
            self.records[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.failed.append(err)


def produce(producer: Producer, acked: Acked, prefix: str, count: int, spread: float = 0) -> None:
    for i in range(count):
        while True:
            try:
                producer.produce(
                    "durable",
                    f"{prefix}-{i}".encode(),
                    partition=i % PARTITIONS,
                    on_delivery=acked.callback,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if spread:
            time.sleep(spread)


def ends_of(acked: Acked) -> dict[int, int]:
    """Each partition's offset after its last acknowledged record."""
    return {
        p: max((o for q, o in acked.records.values() if q == p), default=-1) + 1
        for p in range(PARTITIONS)
    }


def topic_state(admin: AdminClient) -> dict[int, tuple[int, list[int]]]:
    topic = admin.list_topics(topic="durable", timeout=10).topics["durable"]
    return {p.id: (p.leader, sorted(p.isrs)) for p in topic.partitions.values()}


def wait_for(condition, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def read_everything(bootstrap: str, ends: dict[int, int]) -> dict[bytes, tuple[int, int]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"compose-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("durable", p, 0) for p in range(PARTITIONS)])
    seen: dict[bytes, tuple[int, int]] = {}
    positions = dict.fromkeys(range(PARTITIONS), 0)
    deadline = time.monotonic() + 90
    try:
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1):
                if msg.error() is None:
                    seen[msg.value()] = (msg.partition(), msg.offset())
                    positions[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return seen


def test_a_container_reaches_the_cluster_on_the_internal_listener(cluster: Cluster):
    hosts = [f"--add-host=kb{n}:127.0.0.1" for n in NODES]
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", *hosts, "kbroker:latest"]
        + ["cluster", "status", "--bootstrap", f"kb1:{cluster.ports['internal1']}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    # Metadata asked on a listener names the brokers by that listener's addresses.
    rows = {tuple(line.split()[:3]) for line in result.stdout.splitlines()}
    for n in NODES:
        assert (str(n), f"kb{n}", str(cluster.ports[f"internal{n}"])) in rows, result.stdout


def test_acknowledged_records_survive_a_killed_node(cluster: Cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    (future,) = admin.create_topics(
        [NewTopic("durable", num_partitions=PARTITIONS, replication_factor=3)],
        operation_timeout=30,
    ).values()
    future.result(timeout=60)
    wait_for(
        lambda: all(len(isr) == 3 and leader > 0 for leader, isr in topic_state(admin).values()),
        "every partition led with 3 in-sync replicas",
    )
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
        }
    )
    acked = Acked({}, [])
    produce(producer, acked, "before", 300)
    assert producer.flush(60) == 0 and not acked.failed, acked.failed[:3]
    assert read_everything(cluster.bootstrap, ends_of(acked)) == acked.records

    # Kill the leader of partition 0 and keep producing while it is gone.
    victim = topic_state(admin)[0][0]
    cluster.run("kill", f"kb{victim}")
    during = len(acked.records)
    produce(producer, acked, "during", 400, spread=0.01)
    producer.flush(90)
    acked_while_down = len(acked.records) - during
    assert acked_while_down > 0, f"nothing acknowledged with kb{victim} down: {acked.failed[:3]}"
    wait_for(
        lambda: all(leader not in (-1, victim) for leader, _ in topic_state(admin).values()),
        f"leaders elected away from kb{victim}",
    )

    cluster.run("start", f"kb{victim}")
    cluster.wait_healthy((victim,))
    produce(producer, acked, "after", 300)
    assert producer.flush(60) == 0
    wait_for(
        lambda: all(len(isr) == 3 for _, isr in topic_state(admin).values()),
        f"kb{victim} back in every ISR",
        timeout=120,
    )

    seen = read_everything(cluster.bootstrap, ends_of(acked))
    lost = {v: at for v, at in acked.records.items() if seen.get(v) != at}
    assert not lost, (
        f"{len(lost)} acknowledged records lost or moved, e.g. {list(lost.items())[:3]}"
    )
