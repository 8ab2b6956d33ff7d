"""Sarama, the Go Kafka client, against kbroker.

The Go driver in compat_tests/sarama/ is built once per session into a temporary
directory (GOPATH mode, offline, from Debian's golang-github-shopify-sarama-dev) and
run once per operation; it prints JSON that the tests read.

Sarama assumes the newest protocol version it knows (``sarama.MaxVersion``) unless a
test says ``version="default"``. Debian's Sarama is 1.22, whose newest is Kafka 2.2
and whose default is 0.8.2. Several of its request choices are versions Kafka 4 removed
(KIP-896) and kbroker serves as Kafka 3.9 did: OffsetCommit v1 whenever
``Consumer.Offsets.Retention`` is unset (the driver sets a retention, which makes Sarama
send v2), DescribeConfigs v0 from ``ClusterAdmin.DescribeConfig`` and ``ListTopics``,
and with its default version Produce v0 with magic-0 messages, ListOffsets v0 and
Fetch v0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from compat_tests.broker_process import stored_batches
from compat_tests.confluent_helpers import unique_topic
from compat_tests.json_lines import JsonLines
from compat_tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

DRIVER_SOURCE = Path(__file__).with_name("sarama")
SARAMA_PACKAGE = "github.com/Shopify/sarama"
DEBIAN_GOPATH = "/usr/share/gocode"
BUILD_TIMEOUT_S = 300
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_ALREADY_EXISTS = 36


# -- the driver ------------------------------------------------------------------------


def _gopath_with_sarama() -> str | None:
    """The first GOPATH root holding Sarama's source: $GOPATH's, then Debian's."""
    roots = [r for r in os.environ.get("GOPATH", "").split(os.pathsep) if r]
    for root in [*roots, DEBIAN_GOPATH]:
        if (Path(root) / "src" / SARAMA_PACKAGE).is_dir():
            return root
    return None


def _flags(options: dict[str, Any]) -> list[str]:
    """Go flag syntax: ``-name=value``; True is a bare ``-name``, False/None leave it out."""
    args = []
    for name, value in options.items():
        flag = "-" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            args += [f"{flag}={item}" for item in value]
        elif value is not None and value is not False:
            args.append(f"{flag}={value}")
    return args


@dataclass
class SaramaDriver:
    """The built driver binary; ``cgo`` says whether Sarama has zstd (a cgo binding)."""

    path: Path
    cgo: bool
    members: list[GroupMember] = field(default_factory=list)

    def command(self, subcommand: str, bootstrap: str, timeout: float, **options: Any) -> list[str]:
        return [
            str(self.path),
            subcommand,
            f"-brokers={bootstrap}",
            f"-timeout={timeout}s",
            *_flags(options),
        ]

    def run(
        self, subcommand: str, bootstrap: str, timeout: float = 20.0, **options: Any
    ) -> dict[str, Any]:
        """Run one subcommand to its end; return its JSON result (``error`` on failure)."""
        cmd = self.command(subcommand, bootstrap, timeout, **options)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 15)
        lines = proc.stdout.strip().splitlines()
        assert lines, f"{cmd} printed nothing (exit {proc.returncode})\n{proc.stderr}"
        result: dict[str, Any] = json.loads(lines[-1])
        assert (proc.returncode == 0) == ("error" not in result), (proc.returncode, result)
        return result

    def ok(
        self, subcommand: str, bootstrap: str, timeout: float = 20.0, **options: Any
    ) -> dict[str, Any]:
        result = self.run(subcommand, bootstrap, timeout, **options)
        assert "error" not in result, f"sarama {subcommand} {options}: {result}"
        return result

    def member(
        self, bootstrap: str, topic: str, group: str, timeout: float = 60.0, **options: Any
    ) -> GroupMember:
        cmd = self.command("group", bootstrap, timeout, topic=topic, group=group, **options)
        member = GroupMember(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        self.members.append(member)
        return member

    def kill_members(self) -> None:
        for member in self.members:
            member.kill()
        self.members.clear()


class GroupMember(JsonLines):
    """A running ``group`` subcommand whose JSON-line events are collected as they come."""

    def wait_for(
        self, ready: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str
    ) -> None:
        self.wait_until(lambda: ready(self.events), timeout, what)

    def latest_assignment(self) -> dict[str, Any] | None:
        with self.changed:
            assigned = [e for e in self.events if e.get("event") == "assigned"]
        return assigned[-1] if assigned else None

    def records(self) -> list[dict[str, Any]]:
        with self.changed:
            return [e for e in self.events if e.get("event") == "record"]

    def finish(self, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for exit; return the ``closed`` event (the group commits on the way out)."""
        self.proc.wait(timeout=timeout)
        self.wait_for(lambda ev: any(e.get("event") == "closed" for e in ev), 5, "close")
        (closed,) = [e for e in self.events if e.get("event") == "closed"]
        return closed


@pytest.fixture(scope="session")
def sarama_driver(tmp_path_factory: pytest.TempPathFactory) -> SaramaDriver:
    go = shutil.which("go")
    if go is None:
        pytest.skip("go not installed (scripts/install-test-tools.sh installs golang-go)")
    gopath = _gopath_with_sarama()
    if gopath is None:
        pytest.skip(
            f"Sarama source ({SARAMA_PACKAGE}) not under $GOPATH or {DEBIAN_GOPATH} "
            "(scripts/install-test-tools.sh installs golang-github-shopify-sarama-dev)"
        )
    work = tmp_path_factory.mktemp("sarama-build")
    cgo = shutil.which(os.environ.get("CC", "gcc")) is not None or shutil.which("cc") is not None
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{work / 'gopath'}{os.pathsep}{gopath}",
        "GOFLAGS": "",
        "CGO_ENABLED": "1" if cgo else "0",
    }
    if not (os.environ.get("GOCACHE") or os.environ.get("XDG_CACHE_HOME") or "HOME" in os.environ):
        env["GOCACHE"] = str(work / "gocache")
    binary = work / "sarama-driver"
    build = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=DRIVER_SOURCE,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    if build.returncode != 0:
        pytest.fail(f"building the Sarama driver failed:\n{build.stderr}", pytrace=False)
    return SaramaDriver(binary, cgo)


@pytest.fixture
def sarama(sarama_driver: SaramaDriver) -> Iterator[SaramaDriver]:
    try:
        yield sarama_driver
    finally:
        sarama_driver.kill_members()


# -- helpers ---------------------------------------------------------------------------


def expected_record(
    i: int, null_keys: bool = False, null_values: bool = False, headers: bool = False
) -> dict[str, Any]:
    """The record the driver's producer sends as its i-th (see recordKey/recordValue)."""
    return {
        "key": None if null_keys and i % 4 == 3 else f"key-{i}",
        "value": None if null_values and i % 3 == 2 else f"value-{i}",
        "headers": {"h": str(i), "idx": f"{i:06d}"} if headers else {},
    }


def create_topic(sarama: SaramaDriver, bootstrap: str, prefix: str, partitions: int = 1) -> str:
    topic = unique_topic(f"sarama-{prefix}")
    sarama.ok("create-topic", bootstrap, topic=topic, partitions=partitions)
    return topic


# -- producing -------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CODECS))
def test_sync_producer_round_trips_keys_headers_and_nulls_with_codec(sarama, shared_broker, codec):
    if codec == "zstd" and not sarama.cgo:
        pytest.skip("Sarama's zstd is a cgo binding and no C compiler was found")
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, codec)
    shape = {"null_keys": True, "null_values": True, "headers": True}
    count = 60
    produced = sarama.ok(
        "produce", bootstrap, topic=topic, count=count, partition=0, compression=codec, **shape
    )
    assert [p["offset"] for p in produced["produced"]] == list(range(count))
    consumed = sarama.ok("consume", bootstrap, topic=topic, partition=0, count=count)
    got = [{k: r[k] for k in ("key", "value", "headers")} for r in consumed["records"]]
    assert got == [expected_record(i, **shape) for i in range(count)]
    assert [r["offset"] for r in consumed["records"]] == list(range(count))
    assert {b.compression for b in stored_batches(shared_broker, topic)} == {CODECS[codec]}


@pytest.mark.parametrize("acks", [1, 0])
def test_sync_producer_records_arrive_with_acks(sarama, shared_broker, acks):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, f"acks{acks}")
    sarama.ok("produce", bootstrap, topic=topic, count=20, partition=0, acks=acks, batch=5)
    consumed = sarama.ok("consume", bootstrap, topic=topic, partition=0, count=20)
    assert [r["value"] for r in consumed["records"]] == [f"value-{i}" for i in range(20)]


def test_idempotent_producer_writes_each_record_once_in_sequence(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "idempotent")
    count = 100
    produced = sarama.ok(
        "produce", bootstrap, topic=topic, count=count, partition=0, idempotent=True, batch=10
    )
    assert [p["offset"] for p in produced["produced"]] == list(range(count))
    consumed = sarama.ok("consume", bootstrap, topic=topic, partition=0, count=count)
    assert [r["value"] for r in consumed["records"]] == [f"value-{i}" for i in range(count)]
    batches = stored_batches(shared_broker, topic)
    assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1
    assert batches[0].producer_id >= 0
    # Sequences run on from batch to batch exactly as offsets do: no gap, no repeat.
    assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]


# -- consuming -------------------------------------------------------------------------


def test_partition_consumer_reads_all_from_offset_zero(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "consume")
    count = 400  # 4 KB values: ~1.6 MB, more than one of Sarama's 1 MB fetches
    sarama.ok(
        "produce", bootstrap, topic=topic, count=count, partition=0, value_size=4096, batch=50
    )
    consumed = sarama.ok("consume", bootstrap, topic=topic, partition=0, count=count)
    assert [r["offset"] for r in consumed["records"]] == list(range(count))
    assert [r["key"] for r in consumed["records"]] == [f"key-{i}" for i in range(count)]
    assert all(len(r["value"]) == 4096 for r in consumed["records"])
    assert consumed["high_watermark"] == count


# -- consumer groups -------------------------------------------------------------------


def _split_assignments(members: list[GroupMember]) -> Callable[[Any], bool]:
    """True once every member's latest assignment is of one generation and holds 2 of 4."""

    def ready(_events: Any) -> bool:
        latest = [m.latest_assignment() for m in members]
        if any(a is None for a in latest):
            return False
        generations = {a["generation"] for a in latest}  # type: ignore[index]
        sizes = [sum(len(ps) for ps in a["claims"].values()) for a in latest]  # type: ignore[index]
        return len(generations) == 1 and sizes == [2] * len(members)

    return ready


def test_consumer_group_of_two_members_splits_four_partitions_and_commits(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "group", partitions=4)
    group = unique_topic("sarama-group")
    members = [sarama.member(bootstrap, topic, group) for _ in range(2)]
    members[0].wait_for(_split_assignments(members), 30, "two members with 2 partitions each")
    claims = [set(m.latest_assignment()["claims"][topic]) for m in members]
    assert claims[0] | claims[1] == {0, 1, 2, 3} and not claims[0] & claims[1]

    sarama.ok("produce", bootstrap, topic=topic, count=40)  # round robin: 10 per partition
    for member in members:
        member.wait_for(lambda ev: sum(e.get("event") == "record" for e in ev) >= 20, 30, "20")
    closed = [m.stop() for m in members]
    assert [c["consumed"] for c in closed] == [20, 20]
    for member, owned in zip(members, claims, strict=True):
        assert {r["partition"] for r in member.records()} == owned
    seen = [(r["partition"], r["offset"]) for m in members for r in m.records()]
    assert sorted(seen) == [(p, o) for p in range(4) for o in range(10)]

    committed = sarama.ok("offsets", bootstrap, topic=topic, group=group, partitions=4)
    assert {p: c["offset"] for p, c in committed["offsets"].items()} == {
        str(p): 10 for p in range(4)
    }


def test_new_group_member_resumes_at_committed_offset(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "resume", partitions=4)
    group = unique_topic("sarama-group")
    sarama.ok("produce", bootstrap, topic=topic, count=40)
    first = sarama.member(bootstrap, topic, group, count=40)
    assert first.finish()["reason"] == "count"
    assert len(first.records()) == 40

    sarama.ok("produce", bootstrap, topic=topic, count=20, start=40)  # offsets 10-14 each
    second = sarama.member(bootstrap, topic, group, count=20)
    assert second.finish()["reason"] == "count"
    records = second.records()
    assert sorted(r["value"] for r in records) == sorted(f"value-{i}" for i in range(40, 60))
    first_offsets = {p: min(r["offset"] for r in records if r["partition"] == p) for p in range(4)}
    assert first_offsets == {p: 10 for p in range(4)}


# -- admin -----------------------------------------------------------------------------


def test_admin_created_topic_is_described_with_its_partitions(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("sarama-admin")
    sarama.ok("create-topic", bootstrap, topic=topic, partitions=3, config=["retention.ms=60000"])
    (described,) = sarama.ok("describe-topic", bootstrap, topic=topic)["topics"]
    assert described["name"] == topic and described["error"] == 0
    assert [p["id"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["leader"] >= 0 and p["isr"] == p["replicas"] for p in described["partitions"])


def test_admin_creating_existing_topic_answers_topic_already_exists(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "twice")
    again = sarama.run("create-topic", bootstrap, topic=topic, partitions=1)
    assert again.get("error_code") == TOPIC_ALREADY_EXISTS, again


def test_admin_deleted_topic_becomes_unknown(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "delete", partitions=2)
    sarama.ok("delete-topic", bootstrap, topic=topic)

    def unknown() -> bool:
        (described,) = sarama.ok("describe-topic", bootstrap, topic=topic)["topics"]
        assert described["error"] == UNKNOWN_TOPIC_OR_PARTITION, described
        return True

    eventually(unknown, timeout=10, what=f"{topic} unknown after its deletion", interval=0.2)


def test_describe_configs_v1_shows_topic_override_and_defaults(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("sarama-config")
    sarama.ok("create-topic", bootstrap, topic=topic, config=["retention.ms=123456"])
    configs = sarama.ok("describe-config", bootstrap, topic=topic, request_version=1)["configs"]
    assert configs["retention.ms"]["value"] == "123456"
    assert configs["retention.ms"]["source"] == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"] == {
        "value": "delete",
        "read_only": False,
        "default": False,  # v1 has no is_default: the source says it
        "source": 5,  # DEFAULT_CONFIG
        "sensitive": False,
    }


def test_cluster_admin_describe_config_sends_v0_which_is_served_as_kafka_3_9_served_it(
    sarama, shared_broker
):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "config-v0")
    configs = sarama.ok("describe-config", bootstrap, topic=topic)["configs"]
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["default"] is True  # v0 says is_default
    assert configs["cleanup.policy"]["read_only"] is False


# -- metadata --------------------------------------------------------------------------


def test_metadata_without_auto_creation_answers_unknown_topic(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("sarama-unknown")
    for _ in range(2):  # and asking did not create it
        (described,) = sarama.ok("describe-topic", bootstrap, topic=topic)["topics"]
        assert described["error"] == UNKNOWN_TOPIC_OR_PARTITION
        assert described["partitions"] == []


def test_client_metadata_auto_creates_unknown_topic(sarama, shared_broker):
    topic = unique_topic("sarama-auto")
    assert sarama.ok("partitions", shared_broker.bootstrap, topic=topic)["partitions"] == [0]


def test_client_metadata_unknown_topic_without_auto_create_fails(sarama, broker_factory):
    node = broker_factory.start_with({"auto.create.topics.enable": "false"})
    topic = unique_topic("sarama-unknown")
    result = sarama.run("partitions", node.bootstrap, topic=topic)
    assert result.get("error_code") == UNKNOWN_TOPIC_OR_PARTITION, result


# -- Sarama's default protocol version (0.8.2 in Debian's 1.22) -----------------------


def test_default_version_client_reads_metadata(sarama, shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "v082", partitions=3)
    described = sarama.ok("partitions", bootstrap, topic=topic, version="default")
    assert described["partitions"] == [0, 1, 2]


@pytest.mark.parametrize("version", ["default", "0.10.0.0"])
def test_old_version_producer_and_consumer_beside_the_newest(sarama, shared_broker, version):
    """Sarama's default 0.8.2 speaks Produce v0 with magic-0 messages, ListOffsets v0 and
    Fetch v0; pinned to 0.10.0 it speaks Produce v2 and Fetch v2 with magic 1: served
    as Kafka 3.9 served them, on the topic a client of the newest version writes."""
    bootstrap = shared_broker.bootstrap
    topic = create_topic(sarama, bootstrap, "old")
    old = sarama.ok("produce", bootstrap, topic=topic, count=3, partition=0, version=version)
    assert [p["offset"] for p in old["produced"]] == [0, 1, 2]
    new = sarama.ok("produce", bootstrap, topic=topic, count=2, partition=0)
    assert [p["offset"] for p in new["produced"]] == [3, 4]
    for reader in (version, "newest"):
        consumed = sarama.ok(
            "consume", bootstrap, topic=topic, partition=0, count=5, version=reader
        )
        assert [r["offset"] for r in consumed["records"]] == list(range(5))
        values = [r["value"] for r in consumed["records"]]
        assert values == [f"value-{i}" for i in range(3)] + [f"value-{i}" for i in range(2)]
