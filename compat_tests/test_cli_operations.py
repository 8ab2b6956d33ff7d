"""The admin commands against a 3-node cluster: produce and consume across leaders,
topics describe with offsets and sizes, trim, preferred leader election, features,
transactions and producers. One cluster for the module; no test stops a node.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from compat_tests.cluster import KafkaCluster
from compat_tests.confluent_helpers import unique_topic
from compat_tests.waiting import eventually
from kbroker.cli import main

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    started = KafkaCluster(tmp_path_factory.mktemp("cli-ops"))
    try:
        started.start()
        yield started
    finally:
        started.kill_all()


@pytest.fixture
def kb(cluster: KafkaCluster, capsysbinary, monkeypatch):
    def run(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main([*args, "--bootstrap-server", cluster.bootstrap])
        captured = capsysbinary.readouterr()
        return code, captured.out.decode(), captured.err.decode()

    return run


def describe(kb, topic: str) -> dict[int, dict]:
    code, out, err = kb("topics", "describe", topic, "-o", "json")
    assert code == 0, err
    (doc,) = json.loads(out)
    return {p["partition"]: p for p in doc["partitions"]}


def test_produce_consume_describe_and_trim_across_three_leaders(kb, cluster):
    topic = unique_topic("cli-ops")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    lines = [f"{i % 7}:value-{i}" for i in range(3000)]
    code, _, err = kb("produce", topic, "-K", ":", stdin="\n".join(lines).encode())
    assert code == 0, err
    assert "Produced 3000 records" in err
    code, out, err = kb("consume", topic, "--from", "beginning", "-e", "-f", "%p %k:%s\\n")
    assert code == 0, err
    got = [line.split(" ", 1) for line in out.splitlines()]
    assert sorted(v for _, v in got) == sorted(lines)
    for p in "012":  # each partition in the order produced, each key on one partition
        assert [v for q, v in got if q == p] == [v for v in lines if [p, v] in got]
    assert len({(q, v.split(":")[0]) for q, v in got}) == 7
    parts = describe(kb, topic)
    leaders = {p["leader"] for p in parts.values()}
    assert leaders == {1, 2, 3}
    assert sum(p["end_offset"] for p in parts.values()) == 3000
    assert all(p["start_offset"] == 0 and p["size"] > 0 for p in parts.values())
    full = max(parts, key=lambda p: parts[p]["end_offset"])
    code, out, err = kb("topics", "trim", topic, "-p", str(full), "--offset", "10", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["partitions"] == [{"partition": full, "start_offset": 10}]
    assert describe(kb, topic)[full]["start_offset"] == 10
    code, out, _ = kb("topics", "describe", topic)
    header = out.splitlines()[1].split()
    assert header[-3:] == ["START-OFFSET", "END-OFFSET", "SIZE"]
    code, out, _ = kb("consume", topic, "--from", "beginning", "-e", "-p", str(full))
    assert len(out.splitlines()) == parts[full]["end_offset"] - 10


def test_elect_leaders_moves_leadership_to_the_preferred_replica(kb, cluster):
    topic = unique_topic("cli-elect")
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_for_full_isr(topic)
    part = describe(kb, topic)[0]
    leader, others = part["leader"], [r for r in part["replicas"] if r != part["leader"]]
    preferred = [others[0], leader, others[1]]
    assert kb("topics", "reassign", topic, f"0={','.join(map(str, preferred))}")[0] == 0
    cluster.wait_until(
        lambda: describe(kb, topic)[0]["replicas"] == preferred, 15, "the new replica order"
    )
    assert describe(kb, topic)[0]["leader"] == leader
    code, out, err = kb("cluster", "elect-leaders", "--topic", topic, "-p", "0", "-o", "json")
    assert code == 0, err
    assert json.loads(out) == [{"topic": topic, "partition": 0, "result": "elected"}]
    assert describe(kb, topic)[0]["leader"] == preferred[0]
    code, out, _ = kb("cluster", "elect-leaders", "--topic", topic)
    assert out.split()[-2:] == ["not", "needed"]


def test_features_are_described_and_updated_and_a_refused_level_is_one_line(kb):
    code, out, err = kb("cluster", "features", "-o", "json")
    assert code == 0, err
    features = {f["feature"]: f for f in json.loads(out)["features"]}
    meta = features["metadata.version"]
    assert meta["supported_min"] <= meta["finalized"] <= meta["supported_max"]
    level = features["group.version"]["finalized"]
    code, out, err = kb(
        "cluster", "features", "upgrade", "--feature", f"group.version={level}", "--dry-run"
    )
    assert code == 0, err
    assert out.strip() == f"Would set group.version to level {level}."
    code, _, err = kb(
        "cluster",
        "features",
        "downgrade",
        "--feature",
        f"metadata.version={meta['supported_min'] - 1}",
    )
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("kbroker cluster: ")


def test_transactions_list_describe_and_abort_a_hanging_one(kb, cluster):
    topic = unique_topic("cli-txn")
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    txid = unique_topic("cli-txid")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    producer.flush(30)
    code, out, err = kb("transactions", "list", "-o", "json")
    assert code == 0, err
    listed = {t["transactional_id"]: t for t in json.loads(out)}
    assert listed[txid]["state"] == "Ongoing"
    code, out, err = kb("transactions", "describe", txid, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["state"], doc["partitions"]) == ("Ongoing", [f"{topic}-0"])
    code, out, err = kb("producers", "describe", topic, "-o", "json")
    assert code == 0, err
    (open_txn,) = [p for p in json.loads(out) if p["current_txn_start_offset"] >= 0]
    assert open_txn["producer_id"] == doc["producer_id"]
    start = open_txn["current_txn_start_offset"]
    code, out, err = kb(
        "transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start)
    )
    assert code == 0, err

    def closed() -> bool:
        code, out, _ = kb("producers", "describe", topic, "-o", "json")
        open_txns = [p for p in json.loads(out) if p["current_txn_start_offset"] >= 0]
        assert not open_txns, open_txns  # the failure shows the transaction still open
        return True

    eventually(closed, timeout=15, what="the aborted transaction closed", interval=0.2)
    code, out, _ = kb(
        "consume", topic, "--from", "beginning", "-e", "--isolation-level", "read_committed"
    )
    assert out.splitlines() == ["committed"]
    code, _, err = kb(
        "transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "999"
    )
    assert code == 1 and "no open transaction starts at offset 999" in err
