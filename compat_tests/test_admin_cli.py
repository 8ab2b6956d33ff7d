"""`kbroker topics|configs|groups reset-offsets|produce|consume|cluster` against a real broker.

The commands run in this process (`kbroker.cli.main`, output captured) against one
broker process shared by the module; confluent-kafka checks what they did where a
stock client can see it. One test runs the installed command against no broker.
"""

from __future__ import annotations

import io
import json
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from compat_tests.broker_process import BrokerProcess, kbroker_command, running_broker
from compat_tests.confluent_helpers import (
    admin_client,
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_group,
    unique_topic,
)
from kbroker.admin.client import BrokerConnection
from kbroker.cli import main

pytestmark = pytest.mark.timeout(120)

LIST_CONFIG_RESOURCES = 74


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    settings = {"group.initial.rebalance.delay.ms": "0", "num.partitions": "2"}
    with running_broker(tmp_path_factory.mktemp("admin-cli"), settings) as node:
        yield node


@pytest.fixture
def kb(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run `kbroker ARGS --bootstrap <broker>`; returns (exit code, stdout, stderr)."""

    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main([*args, "--bootstrap", broker.bootstrap])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def topic_names(bootstrap: str) -> set[str]:
    return set(admin_client(bootstrap).list_topics(timeout=10).topics)


# -- topics -------------------------------------------------------------------------------


def test_topics_create_makes_a_topic_with_the_partitions_and_configs_asked(kb, broker):
    topic = unique_topic("cli")
    code, out, err = kb(
        "topics", "create", topic, "--partitions", "3", "--config", "retention.ms=123456"
    )
    assert code == 0, err
    assert f"Created topic {topic}." in out
    md = admin_client(broker.bootstrap).list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 3
    code, out, _ = kb("configs", "describe", "--topic", topic)
    assert ["retention.ms", "123456", "DYNAMIC_TOPIC_CONFIG", "false"] in rows(out)


def test_topics_create_of_an_existing_topic_fails_unless_if_not_exists(kb, broker):
    topic = unique_topic("cli")
    assert kb("topics", "create", topic)[0] == 0
    code, _, err = kb("topics", "create", topic)
    assert code == 1
    assert "TOPIC_ALREADY_EXISTS" in err and len(err.strip().splitlines()) == 1
    code, out, _ = kb("topics", "create", topic, "--if-not-exists")
    assert code == 0 and f"Topic {topic} exists." in out


def test_topics_list_shows_each_topic_with_partition_count(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic, partitions=4)
    code, out, _ = kb("topics", "list")
    assert code == 0
    assert [topic, "4", "1", "false"] in rows(out)
    assert "__consumer_offsets" not in out
    code, out, _ = kb("topics", "list", "--output", "json")
    listed = {t["name"]: t for t in json.loads(out)}
    assert listed[topic]["partitions"] == 4


def test_topics_describe_shows_leader_replicas_and_isr_per_partition(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic, partitions=2)
    code, out, _ = kb("topics", "describe", topic)
    assert code == 0
    assert out.startswith(f"Topic: {topic}\t")
    assert "PartitionCount: 2\tReplicationFactor: 1" in out
    assert ["0", "1", "1", "1", "-", "0", "0", "0", "0"] in rows(out)
    assert ["1", "1", "1", "1", "-", "0", "0", "0", "0"] in rows(out)
    code, out, _ = kb("topics", "describe", topic, "-o", "json")
    (doc,) = json.loads(out)
    assert [p["isr"] for p in doc["partitions"]] == [[1], [1]]


def test_topics_describe_without_names_shows_every_topic_with_its_overrides(kb, broker):
    first, second = unique_topic("cli"), unique_topic("cli")
    assert kb("topics", "create", first, "--config", "retention.ms=111111")[0] == 0
    assert kb("topics", "create", second, "--config", "segment.ms=222222")[0] == 0
    code, out, _ = kb("topics", "describe", "-o", "json")
    assert code == 0
    docs = {d["name"]: d for d in json.loads(out)}
    assert docs[first]["configs"] == {"retention.ms": "111111"}
    assert docs[second]["configs"] == {"segment.ms": "222222"}
    assert "__consumer_offsets" not in docs


def test_topics_describe_of_a_missing_topic_names_the_error(kb):
    code, _, err = kb("topics", "describe", "no-such-topic-anywhere")
    assert code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err


def test_topics_alter_adds_partitions_and_sets_configs(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic, partitions=1)
    code, _, err = kb(
        "topics", "alter", topic, "--partitions", "3", "--config", "cleanup.policy=compact"
    )
    assert code == 0, err
    md = admin_client(broker.bootstrap).list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 3
    code, out, _ = kb("configs", "describe", "--topic", topic, "-o", "json")
    values = {c["name"]: c["value"] for c in json.loads(out)["configs"]}
    assert values["cleanup.policy"] == "compact"


def test_topics_delete_removes_the_topic(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic)
    code, out, _ = kb("topics", "delete", topic)
    assert code == 0 and f"Deleted topic {topic}." in out
    deadline = time.monotonic() + 10
    while topic in topic_names(broker.bootstrap) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in topic_names(broker.bootstrap)
    assert kb("topics", "delete", topic)[0] == 1
    assert kb("topics", "delete", topic, "--if-exists")[0] == 0


# -- configs ------------------------------------------------------------------------------


def test_configs_alter_sets_and_deletes_topic_overrides(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic)
    code, out, err = kb(
        "configs", "alter", "--topic", topic, "--add-config", "retention.ms=5000,segment.ms=600000"
    )
    assert code == 0, err
    code, out, _ = kb("configs", "describe", "--topic", topic)
    assert ["retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG", "false"] in rows(out)
    assert kb("configs", "alter", "--topic", topic, "--delete-config", "retention.ms")[0] == 0
    code, out, _ = kb("configs", "describe", "--topic", topic, "--all")
    by_name = {r[0]: r for r in rows(out)}
    assert by_name["retention.ms"][2] == "DEFAULT_CONFIG"
    assert by_name["segment.ms"][1:3] == ["600000", "DYNAMIC_TOPIC_CONFIG"]


def test_configs_alter_with_a_bad_value_fails_with_kafkas_error(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic)
    code, _, err = kb("configs", "alter", "--topic", topic, "--add-config", "retention.ms=soon")
    assert code == 1
    assert "INVALID_CONFIG" in err


def test_configs_describe_a_broker_shows_its_static_settings(kb):
    code, out, _ = kb("configs", "describe", "--broker", "1", "--all", "-o", "json")
    assert code == 0
    values = {c["name"]: c for c in json.loads(out)["configs"]}
    assert values["num.partitions"]["value"] == "2"
    assert values["num.partitions"]["source"] == "STATIC_BROKER_CONFIG"


def test_configs_list_names_topics_and_brokers_by_list_config_resources(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic)
    code, out, _ = kb("configs", "list")
    assert code == 0
    assert ["topic", topic] in rows(out)
    assert ["broker", "1"] in rows(out)
    assert ["broker-logger", "1"] in rows(out)
    code, out, _ = kb("configs", "list", "--type", "broker", "-o", "json")
    assert json.loads(out) == [{"resource_type": "broker", "resource_name": "1"}]


# -- produce and consume ------------------------------------------------------------------


def test_produce_sends_each_line_as_a_record(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic, partitions=1)
    code, _, err = kb("produce", topic, stdin="one\ntwo\nthree\n")
    assert code == 0, err
    assert "Produced 3 records" in err
    got = consume_from_beginning(broker.bootstrap, topic, 3)
    assert [r.value for r in got] == [b"one", b"two", b"three"]
    assert all(r.key is None for r in got)


def test_produce_places_keyed_records_as_the_java_partitioner_does(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic, partitions=5)
    keys = [f"key-{i}" for i in range(12)]
    code, out, _ = kb(
        "produce",
        topic,
        "--key-separator",
        "=",
        "-o",
        "json",
        stdin="".join(f"{k}=v\n" for k in keys),
    )
    assert code == 0
    summary = json.loads(out)
    assert summary["produced"] == 12
    assert sum(p["records"] for p in summary["partitions"]) == 12
    got = consume_from_beginning(broker.bootstrap, topic, 12, partitions=range(5))
    ours = {r.key.decode(): r.partition for r in got}
    log = produce_all(
        broker.bootstrap,
        topic,
        [{"key": k.encode(), "value": k.encode()} for k in keys],
        partitioner="murmur2_random",
    )
    theirs = {value.decode(): partition for partition, _, value in log.delivered}
    assert ours == theirs
    assert len(set(ours.values())) > 1


def test_consume_prints_records_from_the_beginning_with_keys(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_all(
        broker.bootstrap, topic, [{"key": b"k1", "value": b"v1"}, {"key": b"k2", "value": b"v2"}]
    )
    code, out, err = kb("consume", topic, "--from-beginning", "--max-messages", "2", "--print-key")
    assert code == 0
    assert out.splitlines() == ["k1\tv1", "k2\tv2"]
    assert "Processed a total of 2 messages" in err


def test_consume_as_json_reports_offsets_and_headers_and_stops_when_idle(kb, broker):
    topic = unique_topic("cli")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_all(
        broker.bootstrap, topic, [{"value": b"a", "headers": [("h", b"x")]}, {"value": b"b"}]
    )
    began = time.monotonic()
    code, out, _ = kb("consume", topic, "--offset", "1", "--idle-timeout", "1", "-o", "json")
    assert code == 0
    assert time.monotonic() - began < 10
    docs = [json.loads(chunk) for chunk in out.replace("}\n{", "}\x00{").split("\x00")]
    assert [(d["offset"], d["value"]) for d in docs] == [(1, "b")]
    code, out, _ = kb("consume", topic, "--from-beginning", "--max-messages", "1", "-o", "json")
    assert json.loads(out)["headers"] == {"h": "x"}


# -- groups reset-offsets -----------------------------------------------------------------


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in tps]
    finally:
        consumer.close()


@pytest.fixture
def idle_group(broker: BrokerProcess) -> tuple[str, str]:
    """A group with offsets 4 and 4 committed on a 2-partition topic of 6 records each."""
    topic, group = unique_topic("cli"), unique_group("cli")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_all(broker.bootstrap, topic, [{"value": b"x", "partition": i % 2} for i in range(12)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 4)], asynchronous=False
    )
    consumer.close()
    return topic, group


def planned(
    kb: Callable[..., tuple[int, str, str]], group: str, topic: str, *how: str
) -> list[int]:
    """The new offsets `groups reset-offsets` plans for `topic` (a dry run, in JSON)."""
    code, out, _ = kb("groups", "reset-offsets", group, "--topic", topic, *how, "-o", "json")
    assert code == 0
    return [p["new"] for p in json.loads(out)["partitions"]]


def test_reset_offsets_is_a_dry_run_without_execute(kb, broker, idle_group):
    topic, group = idle_group
    code, out, err = kb("groups", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert code == 0
    assert [group, topic, "0", "0"] in rows(out) and [group, topic, "1", "0"] in rows(out)
    assert "Dry run" in err
    assert committed(broker.bootstrap, group, topic, 2) == [4, 4]


def test_reset_offsets_execute_commits_earliest_or_latest(kb, broker, idle_group):
    topic, group = idle_group
    assert (
        kb("groups", "reset-offsets", group, "--topic", f"{topic}:1", "--to-earliest", "--execute")[
            0
        ]
        == 0
    )
    assert committed(broker.bootstrap, group, topic, 2) == [4, 0]
    assert kb("groups", "reset-offsets", group, "--all-topics", "--to-latest", "--execute")[0] == 0
    assert committed(broker.bootstrap, group, topic, 2) == [6, 6]


def test_reset_offsets_to_offset_stays_within_the_log(kb, broker, idle_group):
    topic, group = idle_group
    assert planned(kb, group, topic, "--to-offset", "99") == [6, 6]
    assert (
        kb("groups", "reset-offsets", group, "--topic", topic, "--to-offset", "2", "--execute")[0]
        == 0
    )
    assert committed(broker.bootstrap, group, topic, 2) == [2, 2]


def test_reset_offsets_to_datetime_finds_the_first_record_at_or_after_it(kb, broker, idle_group):
    topic, group = idle_group
    assert planned(kb, group, topic, "--to-datetime", "2000-01-01T00:00:00+00:00") == [0, 0]
    assert planned(kb, group, topic, "--to-datetime", "2999-01-01T00:00:00") == [6, 6]


def test_reset_offsets_shift_by_moves_from_the_committed_offset_within_the_log(
    kb, broker, idle_group
):
    topic, group = idle_group
    assert planned(kb, group, topic, "--shift-by", "-3") == [1, 1]
    code, out, _ = kb(
        "groups", "reset-offsets", group, "--topic", f"{topic}:0", "--shift-by", "50", "--execute"
    )
    assert code == 0
    assert committed(broker.bootstrap, group, topic, 2) == [6, 4]


def test_groups_delete_removes_an_idle_group_and_its_offsets(kb, broker, idle_group):
    topic, group = idle_group
    code, out, err = kb("groups", "delete", group)
    assert code == 0, err
    assert f"Deleted group {group}." in out
    assert committed(broker.bootstrap, group, topic, 2) == [-1001, -1001]
    code, _, err = kb("groups", "delete", group)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err


@pytest.fixture
def active_group(broker: BrokerProcess, idle_group: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """The idle group with one subscribed consumer that has its assignment."""
    topic, group = idle_group
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        yield topic, group
    finally:
        consumer.close()


def test_reset_offsets_refuses_while_the_group_has_members(kb, active_group):
    topic, group = active_group
    code, _, err = kb(
        "groups", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute"
    )
    assert code == 1
    assert "inactive" in err and "Stable" in err


def test_groups_delete_refuses_a_group_with_members(kb, active_group):
    topic, group = active_group
    code, _, err = kb("groups", "delete", group)
    assert code == 1 and "NON_EMPTY_GROUP" in err


# -- cluster ------------------------------------------------------------------------------


def test_cluster_status_names_brokers_controller_and_partition_health(kb, broker):
    code, out, _ = kb("cluster", "status")
    assert code == 0
    assert "controller 1" in out.splitlines()[0]
    assert "0 under-replicated, 0 offline" in out
    assert ["1", "127.0.0.1", str(broker.port)] == rows(out)[-1][:3]
    code, out, _ = kb("cluster", "status", "-o", "json")
    doc = json.loads(out)
    assert doc["offline_partitions"] == 0 and doc["brokers"][0]["node_id"] == 1
    assert doc["partitions"] == sum(b["leader_partitions"] for b in doc["brokers"])


# -- a broker that is down ----------------------------------------------------------------


@pytest.mark.parametrize("command", [["topics", "list"], ["cluster", "status"], ["groups", "list"]])
def test_a_command_against_a_broker_that_is_down_says_so_in_one_line(command):
    result = subprocess.run(
        [*kbroker_command(), *command, "--bootstrap", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"kbroker {command[0]}: cannot connect to 127.0.0.1:1: Connection refused"
    ]
    assert result.stdout == ""


def test_list_config_resources_v0_lists_only_client_metrics_of_which_there_are_none(broker):
    with BrokerConnection.to(broker.bootstrap) as conn:
        answer = conn.request(LIST_CONFIG_RESOURCES, 0)
    assert int(answer.error_code) == 0
    assert answer.config_resources == ()


def test_list_config_resources_refuses_a_type_it_does_not_list(broker):
    with BrokerConnection.to(broker.bootstrap) as conn:
        answer = conn.request(LIST_CONFIG_RESOURCES, 1, resource_types=(2, 64))
    assert answer.error_code == ErrorCode.unsupported_version
    assert answer.config_resources == ()


def test_configs_alter_a_share_groups_config_and_list_it_as_a_group_resource(kb):
    group = unique_group("cli-share")
    code, _, err = kb(
        "configs", "alter", "--group", group, "--add-config", "share.record.lock.duration.ms=20000"
    )
    assert code == 0, err
    code, out, _ = kb("configs", "describe", "--group", group)
    assert ["share.record.lock.duration.ms", "20000", "GROUP_CONFIG", "false"] in rows(out)
    code, out, _ = kb("configs", "list", "--type", "group", "-o", "json")
    assert {"resource_type": "group", "resource_name": group} in json.loads(out)
