"""`kbroker groups list|describe|lag` against a real broker, as an operator runs them."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from compat_tests.broker_process import BrokerProcess, kbroker_command, running_broker
from compat_tests.confluent_helpers import create_topic, produce_all, unique_topic

pytestmark = pytest.mark.timeout(120)

SETTINGS = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("cli-broker"), SETTINGS) as node:
        yield node


def groups_cli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kbroker_command(), "groups", *args, "--bootstrap", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.strip()]


def consumer(bootstrap: str, group: str, protocol: str, **conf: Any) -> Consumer:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "client.id": f"{protocol}-reader",
    }
    settings.update(conf)
    return Consumer(settings)


def consume_and_commit(c: Consumer, topic: str, count: int) -> None:
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None:
            seen += 1
    assert seen == count
    c.commit(asynchronous=False)


@pytest.fixture(scope="module")
def groups(cli_broker: BrokerProcess) -> Iterator[dict[str, Any]]:
    """A live consumer-protocol group that read 6 of 10 records and committed, and a
    classic group (now empty) that read everything."""
    bootstrap = cli_broker.bootstrap
    topic = unique_topic("cli")
    create_topic(bootstrap, topic, 2)
    produce_all(bootstrap, topic, ({"value": b"x", "partition": i % 2} for i in range(6)))
    live, classic = f"live-{uuid.uuid4().hex[:8]}", f"classic-{uuid.uuid4().hex[:8]}"
    reader = consumer(bootstrap, live, "consumer")
    consume_and_commit(reader, topic, 6)
    old = consumer(bootstrap, classic, "classic", **{"session.timeout.ms": 6000})
    consume_and_commit(old, topic, 6)
    old.close()
    produce_all(bootstrap, topic, ({"value": b"y", "partition": i % 2} for i in range(4)))
    try:
        yield {"topic": topic, "live": live, "classic": classic, "reader": reader}
    finally:
        reader.close()


def test_list_shows_both_groups_with_type_and_state(cli_broker, groups):
    result = groups_cli(cli_broker, "list")
    assert result.returncode == 0, result.stderr
    table = {r[0]: r for r in rows(result.stdout)}
    assert table["GROUP"] == ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]
    assert table[groups["live"]][1:] == ["consumer", "Stable", "consumer"]
    assert table[groups["classic"]][1:] == ["classic", "Empty", "consumer"]


def test_describe_shows_members_assignment_offsets_and_lag(cli_broker, groups):
    result = groups_cli(cli_broker, "describe", groups["live"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Group {groups['live']} (consumer), state Stable" in out
    assert "assignor uniform, 1 members" in out
    (member_row,) = [
        r for r in rows(out) if "consumer-reader" in r and r[-1].startswith(groups["topic"])
    ]
    assert member_row[-1] == f"{groups['topic']}:0-1"
    by_partition = {r[1]: r for r in rows(out) if r[0] == groups["topic"]}
    # 3 + 3 read and committed, 2 + 2 more produced since
    assert by_partition["0"][2:5] == ["3", "5", "2"]
    assert by_partition["1"][2:5] == ["3", "5", "2"]
    assert by_partition["0"][6] == "consumer-reader"
    assert out.rstrip().endswith("Total lag: 4")


def test_describe_decodes_a_classic_group(cli_broker, groups):
    result = groups_cli(cli_broker, "describe", groups["classic"])
    assert result.returncode == 0, result.stderr
    assert f"Group {groups['classic']} (classic), state Empty" in result.stdout
    by_partition = {r[1]: r for r in rows(result.stdout) if r[0] == groups["topic"]}
    assert by_partition["0"][2:5] == ["3", "5", "2"]


def test_lag_prints_the_partition_table_and_total(cli_broker, groups):
    result = groups_cli(cli_broker, "lag", groups["live"])
    assert result.returncode == 0, result.stderr
    lines = rows(result.stdout)
    assert lines[0][:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert lines[-1] == ["Total", "lag:", "4"]


def test_lag_follows_new_commits(cli_broker, groups):
    reader: Consumer = groups["reader"]
    topic = groups["topic"]
    reader.commit(
        offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 5)], asynchronous=False
    )
    result = groups_cli(cli_broker, "lag", groups["live"])
    assert rows(result.stdout)[-1] == ["Total", "lag:", "0"]


def test_describing_a_missing_group_fails_with_a_message(cli_broker):
    result = groups_cli(cli_broker, "describe", "no-such-group")
    assert result.returncode == 1
    assert "group no-such-group does not exist" in result.stderr


def test_unreachable_bootstrap_fails_with_a_message():
    result = subprocess.run(
        [*kbroker_command(), "groups", "list", "--bootstrap", "127.0.0.1:1", "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot connect to 127.0.0.1:1" in result.stderr
