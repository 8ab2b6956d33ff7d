"""KafkaJS, the pure-JavaScript Kafka client, against kbroker.

The driver in compat_tests/kafkajs/ is a small node program: it takes one operation as a
JSON argument and prints JSON lines. KafkaJS (pinned in its package.json and
package-lock.json) is installed once with ``npm ci`` into a cache under
~/.cache/kbroker-test-tools, never into the repository; scripts/install-test-tools.sh
installs node and npm if they are missing and fills the cache ahead of time.

KafkaJS 2.2 speaks the protocol as Kafka 2.x brokers served it: Produce v7, Fetch v11,
Metadata v6, JoinGroup v5, ListOffsets v3, ApiVersions v2 and so on, several of which
Kafka 4 dropped (KIP-896) and kbroker serves as Kafka 3.9 did (docs/compatibility.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from compat_tests.broker_process import (
    FAST_GROUP_SETTINGS,
    BrokerProcess,
    free_ports,
    running_broker,
    stored_batches,
)
from compat_tests.cluster import running_cluster
from compat_tests.confluent_helpers import unique_topic
from compat_tests.json_lines import JsonLines
from compat_tests.waiting import eventually
from kbroker.security.jwt import unsigned_token

pytestmark = pytest.mark.timeout(120)

DRIVER_DIR = Path(__file__).with_name("kafkajs")
INSTALL_TIMEOUT_S = 300
GZIP = 1


def _cache_dir() -> Path:
    """Where ``npm ci`` puts KafkaJS: one folder per lock file, so a new pin installs anew."""
    lock = (DRIVER_DIR / "package-lock.json").read_bytes()
    root = Path(
        os.environ.get("KBROKER_KAFKAJS_CACHE", Path.home() / ".cache/kbroker-test-tools/kafkajs")
    )
    return root / hashlib.sha256(lock).hexdigest()[:16]


# -- the driver ------------------------------------------------------------------------


class Running(JsonLines):
    """A driver operation still running (a consumer or a streaming producer) whose JSON
    lines are collected as they come."""

    def wait_for(self, ready: Callable[[Running], bool], timeout: float, what: str) -> None:
        self.wait_until(lambda: ready(self), timeout, what)

    def finish(self, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for exit; return the last line, the operation's result."""
        self.proc.wait(timeout=timeout)
        self.wait_for(lambda r: r.proc.poll() is not None, 5, "exit")
        # The reader thread may still hold the last line for a moment.
        eventually(lambda: self._last_is_result(), timeout=5, what="the result line")
        result = self.events[-1]
        assert "error" not in result, result
        return result

    def _last_is_result(self) -> bool:
        with self.changed:
            return bool(self.events) and self.events[-1].get("event") in (None, "closed")


@dataclass
class KafkaJS:
    node: str
    node_path: Path
    running: list[Running] = field(default_factory=list)

    def command(self, op: str, bootstrap: str, options: dict[str, Any]) -> list[str]:
        spec = {"op": op, "brokers": bootstrap, **options}
        return [self.node, str(DRIVER_DIR / "driver.js"), json.dumps(spec)]

    def env(self) -> dict[str, str]:
        return {**os.environ, "NODE_PATH": str(self.node_path)}

    def run(self, op: str, bootstrap: str, timeout: float = 30.0, **options: Any) -> dict[str, Any]:
        cmd = self.command(op, bootstrap, options)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env())
        lines = proc.stdout.strip().splitlines()
        assert lines, f"kafkajs {op} printed nothing (exit {proc.returncode})\n{proc.stderr}"
        result: dict[str, Any] = json.loads(lines[-1])
        result["lines"] = [json.loads(line) for line in lines[:-1]]
        assert (proc.returncode == 0) == ("error" not in result), (proc.returncode, result)
        if "error" in result:
            result["stderr"] = proc.stderr[-4000:]
        return result

    def ok(self, op: str, bootstrap: str, timeout: float = 30.0, **options: Any) -> dict[str, Any]:
        result = self.run(op, bootstrap, timeout, **options)
        assert "error" not in result, f"kafkajs {op}: {result}"
        return result

    def start(self, op: str, bootstrap: str, **options: Any) -> Running:
        cmd = self.command(op, bootstrap, options)
        running = Running(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=self.env()))
        self.running.append(running)
        return running

    def kill_running(self) -> None:
        for running in self.running:
            running.kill()
        self.running.clear()


@pytest.fixture(scope="session")
def kafkajs_driver() -> KafkaJS:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node or npm not installed (scripts/install-test-tools.sh installs them)")
    cache = _cache_dir()
    if not (cache / "node_modules" / "kafkajs" / "package.json").is_file():
        # Installed beside the cache folder and renamed into place, so a folder that is
        # there is a whole install.
        staging = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(DRIVER_DIR / name, staging / name)
        install = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        if install.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.skip(f"npm could not install KafkaJS into {cache}:\n{install.stderr[-2000:]}")
        shutil.rmtree(cache, ignore_errors=True)
        staging.rename(cache)
    return KafkaJS(node, cache / "node_modules")


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One node for the module whose classic groups form at once (no initial delay)."""
    with running_broker(tmp_path_factory.mktemp("kafkajs-broker"), FAST_GROUP_SETTINGS) as node:
        yield node


@pytest.fixture
def kafkajs(kafkajs_driver: KafkaJS) -> Iterator[KafkaJS]:
    try:
        yield kafkajs_driver
    finally:
        kafkajs_driver.kill_running()


# -- helpers ---------------------------------------------------------------------------


def message(i: int, partition: int | None = None, headers: bool = True) -> dict[str, Any]:
    m: dict[str, Any] = {"key": f"key-{i}", "value": f"value-{i}"}
    if headers:
        m["headers"] = {"idx": f"{i:06d}", "h": str(i)}
    if partition is not None:
        m["partition"] = partition
    return m


def create_topic(kafkajs: KafkaJS, bootstrap: str, prefix: str, partitions: int = 1) -> str:
    topic = unique_topic(f"kafkajs-{prefix}")
    assert kafkajs.ok("create-topic", bootstrap, topic=topic, partitions=partitions)["created"]
    return topic


def records(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in result["lines"] if e.get("event") == "record"]


# -- admin -----------------------------------------------------------------------------


def test_admin_creates_lists_describes_and_deletes_a_topic(kafkajs, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("kafkajs-admin")
    created = kafkajs.ok(
        "create-topic", bootstrap, topic=topic, partitions=3, config={"retention.ms": 600000}
    )
    assert created["created"] is True
    again = kafkajs.ok("create-topic", bootstrap, topic=topic, partitions=3)
    assert again["created"] is False  # KafkaJS's answer to TOPIC_ALREADY_EXISTS
    for bad, code in [
        ({"replication": 3}, "INVALID_REPLICATION_FACTOR"),  # one node
        ({"config": {"cleanup.policy": "nonsense"}}, "INVALID_CONFIG"),
        ({"config": {"no.such.setting": "1"}}, "INVALID_CONFIG"),
    ]:
        refused = kafkajs.run("create-topic", bootstrap, topic=unique_topic("kafkajs-bad"), **bad)
        assert refused["errors"] == [code], refused
    assert topic in kafkajs.ok("list-topics", bootstrap)["topics"]

    described = kafkajs.ok("describe-topic", bootstrap, topic=topic)
    (meta,) = described["topics"]
    assert meta["name"] == topic
    partitions = sorted(meta["partitions"], key=lambda p: p["partitionId"])
    assert [p["partitionId"] for p in partitions] == [0, 1, 2]
    assert all(p["partitionErrorCode"] == 0 and p["leader"] >= 0 for p in partitions)
    assert all(p["isr"] == p["replicas"] for p in partitions)
    assert described["configs"]["retention.ms"] == {"value": "600000", "default": False}
    assert described["configs"]["cleanup.policy"]["default"] is True

    kafkajs.ok("produce", bootstrap, topic=topic, messages=[message(i, i % 3) for i in range(9)])
    offsets = kafkajs.ok("offsets", bootstrap, topic=topic, timestamp=0)
    by_partition = {p["partition"]: p for p in offsets["topic"]}
    assert {p: (o["low"], o["high"], o["offset"]) for p, o in by_partition.items()} == {
        p: ("0", "3", "3") for p in range(3)
    }
    assert {p["partition"]: p["offset"] for p in offsets["by_time"]} == {p: "0" for p in range(3)}

    kafkajs.ok("delete-topic", bootstrap, topic=topic)
    eventually(
        lambda: topic not in kafkajs.ok("list-topics", bootstrap)["topics"],
        timeout=15,
        what=f"{topic} gone from KafkaJS's listTopics",
    )


# -- producing -------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_producer_round_trips_keys_and_headers(kafkajs, shared_broker, codec):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(kafkajs, bootstrap, codec)
    count = 30
    sent = kafkajs.ok(
        "produce",
        bootstrap,
        topic=topic,
        compression=codec,
        batch=10,
        messages=[message(i, 0) for i in range(count)],
    )["sent"]
    assert [(s["partition"], s["offset"], s["error"]) for s in sent] == [
        (0, base, 0) for base in (0, 10, 20)
    ]
    got = records(kafkajs.ok("consume", bootstrap, topic=topic, count=count))
    assert [r["offset"] for r in got] == list(range(count))
    assert [(r["key"], r["value"], r["headers"]) for r in got] == [
        (f"key-{i}", f"value-{i}", {"idx": f"{i:06d}", "h": str(i)}) for i in range(count)
    ]
    codecs = {b.compression for b in stored_batches(shared_broker, topic)}
    assert codecs == {GZIP if codec == "gzip" else 0}


def test_idempotent_producer_writes_each_record_once_in_sequence(kafkajs, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(kafkajs, bootstrap, "idempotent")
    count = 50
    kafkajs.ok(
        "produce",
        bootstrap,
        topic=topic,
        idempotent=True,
        batch=10,
        messages=[message(i, 0, headers=False) for i in range(count)],
    )
    got = records(kafkajs.ok("consume", bootstrap, topic=topic, count=count))
    assert [r["value"] for r in got] == [f"value-{i}" for i in range(count)]
    batches = stored_batches(shared_broker, topic)
    assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1
    assert batches[0].producer_id >= 0
    assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]


def test_read_committed_consumer_sees_only_committed_transactions(kafkajs, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(kafkajs, bootstrap, "txn", partitions=2)
    group = unique_topic("kafkajs-tx-group")
    steps = [
        {"commit": True, "messages": [message(i, i % 2) for i in range(0, 6)], "offsets": {0: 3}},
        {
            "commit": False,
            "messages": [message(i, i % 2) for i in range(6, 12)],
            "offsets": {0: 99, 1: 50},
        },
        {"commit": True, "messages": [message(i, i % 2) for i in range(12, 16)], "offsets": {0: 7}},
    ]
    done = kafkajs.ok(
        "transaction",
        bootstrap,
        topic=topic,
        group=group,
        transactional_id=unique_topic("kafkajs-tx"),
        transactions=steps,
    )
    assert done["results"] == ["committed", "aborted", "committed"]
    committed = [f"value-{i}" for i in [*range(0, 6), *range(12, 16)]]
    got = records(kafkajs.ok("consume", bootstrap, topic=topic, count=len(committed)))
    assert sorted(r["value"] for r in got) == sorted(committed)
    every = records(kafkajs.ok("consume", bootstrap, topic=topic, count=16, read_uncommitted=True))
    assert sorted(r["value"] for r in every) == sorted(f"value-{i}" for i in range(16))
    # The aborted records and both transactions' markers take offsets of their own.
    offsets = kafkajs.ok("offsets", bootstrap, topic=topic, group=group)
    assert {p["partition"]: p["high"] for p in offsets["topic"]} == {0: "11", 1: "11"}
    # sendOffsets: the group's offsets commit with their transaction, or not at all.
    assert {p["partition"]: p["offset"] for p in offsets["group"]} == {0: 7, 1: -1}


# -- consuming -------------------------------------------------------------------------


def _split(members: list[Running], topic: str, partitions: int) -> Callable[[Running], bool]:
    """True once the members' latest assignments are disjoint and cover every partition."""

    def ready(_r: Running) -> bool:
        latest = [m.of("assigned") for m in members]
        if not all(latest):
            return False
        owned = [set(a[-1]["assignment"].get(topic, [])) for a in latest]
        union = set().union(*owned)
        return union == set(range(partitions)) and sum(map(len, owned)) == partitions and all(owned)

    return ready


def test_two_group_members_split_partitions_and_commit(kafkajs, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(kafkajs, bootstrap, "group", partitions=4)
    group = unique_topic("kafkajs-group")
    members = [kafkajs.start("consume", bootstrap, topic=topic, group=group) for _ in range(2)]
    members[0].wait_for(_split(members, topic, 4), 45, "two members splitting 4 partitions")

    kafkajs.ok("produce", bootstrap, topic=topic, messages=[message(i, i % 4) for i in range(40)])
    members[0].wait_for(
        lambda _r: sum(len(m.of("record")) for m in members) >= 40, 30, "40 records"
    )
    closed = [m.stop() for m in members]
    seen = [(r["partition"], r["offset"]) for m in members for r in m.of("record")]
    assert sorted(seen) == [(p, o) for p in range(4) for o in range(10)]
    assert sum(c["consumed"] for c in closed) == 40
    for member in members:
        owned = set(member.of("assigned")[-1]["assignment"][topic])
        assert {r["partition"] for r in member.of("record")} <= owned

    committed = kafkajs.ok("offsets", bootstrap, topic=topic, group=group)["group"]
    assert {c["partition"]: c["offset"] for c in committed} == {p: 10 for p in range(4)}


def test_restarted_consumer_resumes_from_its_commit(kafkajs, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(kafkajs, bootstrap, "resume")
    group = unique_topic("kafkajs-group")
    kafkajs.ok("produce", bootstrap, topic=topic, messages=[message(i, 0) for i in range(30)])
    first = records(kafkajs.ok("consume", bootstrap, topic=topic, group=group, count=12))
    assert [r["offset"] for r in first] == list(range(12))
    committed = kafkajs.ok("offsets", bootstrap, topic=topic, group=group)["group"]
    assert committed == [{"partition": 0, "offset": 12}]

    second = records(kafkajs.ok("consume", bootstrap, topic=topic, group=group, count=18))
    assert [r["offset"] for r in second] == list(range(12, 30))


def test_seek_moves_the_consumer_to_an_offset(kafkajs, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(kafkajs, bootstrap, "seek")
    kafkajs.ok("produce", bootstrap, topic=topic, messages=[message(i, 0) for i in range(20)])
    got = records(kafkajs.ok("consume", bootstrap, topic=topic, seek={"0": 13}, count=7))
    assert [r["offset"] for r in got] == list(range(13, 20))
    assert [r["value"] for r in got] == [f"value-{i}" for i in range(13, 20)]


# -- a cluster whose partition leader dies ---------------------------------------------


def test_producer_and_consumer_carry_on_when_the_leader_is_killed(kafkajs, tmp_path):
    with running_cluster(tmp_path) as cluster:
        bootstrap = cluster.bootstrap
        topic = unique_topic("kafkajs-failover")
        cluster.create_topic(topic, 1, 3, config={"min.insync.replicas": "2"})
        cluster.wait_for_full_isr(topic)
        leader = cluster.partition(topic).leader
        # The group's coordinator dies with the leader: KafkaJS keeps asking the dead node
        # until its retries run out, then restarts the consumer, which finds the new one.
        group = next(
            g
            for g in (unique_topic("kafkajs-group") for _ in range(100))
            if cluster.coordinator(g) == leader
        )

        consumer = kafkajs.start(
            "consume", bootstrap, topic=topic, group=group, session_timeout=6000
        )
        producer = kafkajs.start(
            "stream", bootstrap, topic=topic, idempotent=True, batch=5, retries=20
        )
        consumer.wait_for(lambda r: len(r.of("record")) >= 20, 30, "20 records consumed")
        cluster.kill(leader)
        at_kill = len(producer.of("acked"))
        producer.wait_for(
            lambda r: len(r.of("acked")) >= at_kill + 20, 60, "100 records acked after the kill"
        )
        producer.stop()
        assert producer.of("send-error") == []
        acked = [v for e in producer.of("acked") for v in e["values"]]
        assert cluster.partition(topic).leader != leader

        def consumed() -> set[str]:
            return {r["value"] for r in consumer.of("record")}

        # At least once through the group: a batch read but not committed when the
        # coordinator died is read again after the restart.
        consumer.wait_for(lambda _r: consumed() >= set(acked), 60, "every acked record")
        consumer.stop()
        # Exactly once in the log: the idempotent producer's retries wrote nothing twice.
        (end,) = kafkajs.ok("offsets", bootstrap, topic=topic)["topic"]
        assert end["high"] == str(len(acked))
        log = records(kafkajs.ok("consume", bootstrap, topic=topic, count=len(acked)))
        assert [r["value"] for r in log] == acked


# -- SASL/OAUTHBEARER --------------------------------------------------------------------


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    """A node whose SASL_PLAINTEXT listener takes unsigned OAUTHBEARER tokens (Kafka's
    default check) that carry the scope ``kafka``."""
    node = BrokerProcess(tmp_path_factory.mktemp("kafkajs-oauth"))
    (sasl_port,) = free_ports(("SASL_PLAINTEXT",), node.port).values()
    node.overrides = {
        **FAST_GROUP_SETTINGS,
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredValidatorRequiredScope="kafka";'
        ),
    }
    node.start()
    try:
        yield node, f"127.0.0.1:{sasl_port}"
    finally:
        node.kill()


def test_kafkajs_logs_in_with_an_oauthbearer_token_and_produces_and_consumes(kafkajs, oauth_broker):
    node, sasl = oauth_broker
    topic = unique_topic("kafkajs-oauth")
    token = unsigned_token({"sub": "alice", "exp": time.time() + 600, "scope": "kafka"})
    kafkajs.ok("create-topic", sasl, topic=topic, partitions=1, oauth_token=token)
    kafkajs.ok(
        "produce", sasl, topic=topic, messages=[message(i) for i in range(3)], oauth_token=token
    )
    got = records(kafkajs.ok("consume", sasl, topic=topic, count=3, oauth_token=token))
    assert [r["value"] for r in got] == [f"value-{i}" for i in range(3)]
    refused = kafkajs.run(
        "list-topics",
        sasl,
        retries=0,
        oauth_token=unsigned_token({"sub": "alice", "exp": time.time() + 600}),  # no scope
    )
    assert "error" in refused, refused
    assert "missing a required scope" in node.log_path.read_text()
