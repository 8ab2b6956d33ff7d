"""The official Java client (Apache Kafka clients 3.9.1) against kbroker.

Java applications and Spark's Kafka source and sink are built on this client, so it is
driven the way they use it: KafkaProducer with its defaults (idempotent, acks=all) and
every codec, KafkaConsumer by assign()/seek and by subscribe() in classic and KIP-848
groups, transactions with read_committed readers, and the AdminClient calls tools and
Spark make.

compat_tests/java_driver.py runs a small driver (KafkaDriver) compiled once per session
with javac. One JVM per module serves commands over stdin and answers JSON lines, so a
test costs a few client round trips rather than a JVM start.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests.broker_process import BrokerProcess, running_broker
from compat_tests.java_driver import JavaDriver, Reply
from compat_tests.waiting import eventually

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

pytestmark = pytest.mark.timeout(90)


def unique(prefix: str) -> str:
    return f"java-{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def java_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One node for the module, with Kafka's defaults but for the initial rebalance delay:
    a dozen tests start classic groups, and 3 s each would dominate the module's time."""
    with running_broker(
        tmp_path_factory.mktemp("java-broker"), {"group.initial.rebalance.delay.ms": "200"}
    ) as node:
        yield node


@pytest.fixture(scope="module")
def java_session(
    java_classpath: str, java_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaDriver]:
    log = tmp_path_factory.mktemp("java-client") / "driver.stderr.log"
    with JavaDriver(java_classpath, java_broker.bootstrap, log) as driver:
        yield driver


@pytest.fixture
def java(java_session: JavaDriver) -> Iterator[JavaDriver]:
    """The module's driver, restarted if a test killed it; named clients closed afterwards.

    The client's stderr of the test is printed at teardown, so pytest shows it with a
    failure and keeps it out of the way otherwise.
    """
    if not java_session.alive():
        java_session.start()
    java_session.mark_log()
    try:
        yield java_session
    finally:
        if java_session.alive():
            try:
                java_session.call("close-all", timeout=30)
            except AssertionError as exc:
                print(f"close-all failed: {exc}")
        print(java_session.log_since_mark())


def create_topic(java: JavaDriver, partitions: int = 1, prefix: str = "t", **config: str) -> str:
    topic = unique(prefix)
    java.call("create-topics", topics=topic, partitions=partitions, config=config)
    return topic


def offsets_of(reply: Reply, partition: int | None = None) -> list[int]:
    return [r["offset"] for r in reply.records if partition is None or r["partition"] == partition]


# ------------------------------------------------------------------------------ producer


def test_default_producer_delivers_in_order_at_contiguous_offsets(java):
    topic = create_topic(java)
    sent = java.call("produce", topic=topic, count=200)["sent"]
    assert [offset for _, offset, _ in sent] == list(range(200))
    got = java.call("consume", topic=topic, from_="beginning", expect=200)
    assert got.values() == [f"v{i}" for i in range(200)]
    assert offsets_of(got) == list(range(200))


def test_default_producer_is_idempotent_with_a_producer_id(java):
    """3.x producers default to enable.idempotence=true: the broker must have handed out a
    producer id and tracked the last sequence."""
    topic = create_topic(java)
    java.call("produce", topic=topic, count=30, partition=0)
    (state,) = java.call("describe-producers", topic=topic)["producers"][f"{topic}:0"]
    assert state["producerId"] >= 0
    assert state["producerEpoch"] >= 0
    assert state["lastSequence"] == 29


@pytest.mark.parametrize("codec", CODECS)
def test_producer_compression_round_trips(java, codec):
    topic = create_topic(java, prefix=codec)
    java.call(
        "produce",
        topic=topic,
        count=500,
        value_pad=200,
        producer={"compression.type": codec, "linger.ms": 20},
    )
    got = java.call("consume", topic=topic, from_="beginning", expect=500)
    assert got.values() == [f"v{i}" + "x" * 200 for i in range(500)]
    assert offsets_of(got) == list(range(500))


def test_keys_headers_and_null_values_round_trip(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=12, key_prefix="k", headers=True, null_every=3)
    got = java.call("consume", topic=topic, from_="beginning", expect=12)
    assert [r["key"] for r in got.records] == [f"k{i}" for i in range(12)]
    assert got.values() == [None if i % 3 == 0 else f"v{i}" for i in range(12)]
    assert [r["headers"] for r in got.records] == [
        [["idx", str(i)], ["dup", "a"], ["dup", "b"], ["nul", None]] for i in range(12)
    ]


def test_keyed_records_spread_over_partitions_by_key(java):
    topic = create_topic(java, partitions=3)
    sent = java.call("produce", topic=topic, count=60, key_prefix="key")["sent"]
    again = java.call("produce", topic=topic, count=60, key_prefix="key")["sent"]
    assert {p for p, _, _ in sent} == {0, 1, 2}
    assert [p for p, _, _ in again] == [p for p, _, _ in sent]


def test_explicit_create_time_timestamps_are_kept(java):
    topic = create_topic(java)
    base = 1_700_000_000_000
    java.call("produce", topic=topic, count=5, timestamp_base=base, timestamp_step=1000)
    got = java.call("consume", topic=topic, from_="beginning", expect=5)
    assert [r["timestamp"] for r in got.records] == [base + 1000 * i for i in range(5)]
    assert {r["timestampType"] for r in got.records} == {"CreateTime"}


def test_idempotent_producer_with_many_batches_in_flight_keeps_every_record_once(java):
    topic = create_topic(java, partitions=3)
    sent = java.call(
        "produce",
        topic=topic,
        count=3000,
        key_prefix="k",
        value_pad=50,
        producer={"batch.size": 1024, "max.in.flight.requests.per.connection": 5},
    )["sent"]
    for partition in range(3):
        offsets = sorted(o for p, o, _ in sent if p == partition)
        assert offsets == list(range(len(offsets)))
    got = java.call("consume", topic=topic, from_="beginning", until_end=True)
    assert sorted(r["key"] for r in got.records) == sorted(f"k{i}" for i in range(3000))


@pytest.mark.parametrize("graceful", [True, False], ids=["restart", "crash"])
def test_idempotent_producer_carries_on_across_a_broker_restart(java, broker, graceful):
    """The producer keeps its id and sequences; the restarted broker must have recovered
    its producer state, or the next batch is refused as out of order (or duplicated)."""
    topic = unique("t")
    java.call("create-topics", bootstrap=broker.bootstrap, topics=topic)
    java.call("producer-open", name="p", bootstrap=broker.bootstrap)
    java.call("produce", producer="p", topic=topic, count=10, value_prefix="before")
    broker.restart(graceful=graceful)
    java.call("produce", producer="p", topic=topic, count=10, value_prefix="after")
    got = java.call(
        "consume", bootstrap=broker.bootstrap, topic=topic, from_="beginning", until_end=True
    )
    assert got.values() == [f"before{i}" for i in range(10)] + [f"after{i}" for i in range(10)]
    (state,) = java.call("describe-producers", bootstrap=broker.bootstrap, topic=topic)[
        "producers"
    ][f"{topic}:0"]
    assert state["lastSequence"] == 19


@pytest.mark.parametrize("acks", ["0", "1"])
def test_non_idempotent_producer_with_acks(java, acks):
    topic = create_topic(java)
    java.call(
        "produce",
        topic=topic,
        count=50,
        producer={"acks": acks, "enable.idempotence": "false"},
    )
    got = java.call("consume", topic=topic, from_="beginning", expect=50, timeout_ms=10000)
    assert got.values() == [f"v{i}" for i in range(50)]


def test_record_of_half_a_megabyte_round_trips(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=2, value_pad=500_000)
    got = java.call("consume", topic=topic, from_="beginning", expect=2)
    assert got.values() == [f"v{i}" + "x" * 500_000 for i in range(2)]


def test_record_larger_than_the_topic_allows_is_refused(java):
    topic = create_topic(java, **{"max.message.bytes": "100000"})
    failure = java.fails("produce", topic=topic, count=1, value_pad=200_000)
    assert failure.error == "RecordTooLargeException"


def test_producing_to_a_missing_topic_creates_it(java):
    topic = unique("auto")
    sent = java.call("produce", topic=topic, count=3)["sent"]
    assert [o for _, o, _ in sent] == [0, 1, 2]
    assert topic in java.call("list-topics")["topics"]


# ------------------------------------------------------------------------------ consumer


def test_assign_and_seek_to_beginning_reads_every_partition(java):
    topic = create_topic(java, partitions=3)
    sent = java.call("produce", topic=topic, count=90, key_prefix="k")["sent"]
    got = java.call("consume", topic=topic, from_="beginning", until_end=True)
    assert got["reached"]
    assert sorted(r["value"] for r in got.records) == sorted(f"v{i}" for i in range(90))
    for partition in range(3):
        count = sum(1 for p, _, _ in sent if p == partition)
        assert offsets_of(got, partition) == list(range(count))
    assert got["assignment"] == [f"{topic}:{p}" for p in range(3)]


def test_assign_and_seek_to_an_offset_starts_there(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=20)
    got = java.call("consume", topic=topic, from_=15, until_end=True)
    assert offsets_of(got) == [15, 16, 17, 18, 19]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_commit_then_new_consumer_resumes_from_committed_offset(java, protocol):
    topic = create_topic(java, partitions=2)
    group = unique("group")
    settings = {"group.protocol": protocol}
    java.call("produce", topic=topic, count=40, key_prefix="k")
    first = java.call(
        "consume",
        topic=topic,
        mode="subscribe",
        group=group,
        until_end=True,
        commit=True,
        consumer=settings,
    )
    assert first["reached"]
    assert len(first.records) == 40
    assert first["assignment"] == [f"{topic}:0", f"{topic}:1"]
    committed = {tp: c["offset"] for tp, c in first["committed"].items()}
    assert committed == first["positions"]

    java.call("produce", topic=topic, count=10, key_prefix="k", value_prefix="later")
    second = java.call(
        "consume",
        topic=topic,
        mode="subscribe",
        group=group,
        expect=10,
        extra_ms=500,
        commit=True,
        consumer=settings,
    )
    assert sorted(second.values()) == sorted(f"later{i}" for i in range(10))
    for r in second.records:
        assert r["offset"] >= committed[f"{topic}:{r['partition']}"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_member_gets_generation_and_member_id(java, protocol):
    topic = create_topic(java)
    group = unique("group")
    java.call("consumer-open", name="c", group=group, consumer={"group.protocol": protocol})
    java.call("subscribe", name="c", topics=topic)
    polled = java.call("poll", name="c", until_end=True)
    assert polled["assignment"] == [f"{topic}:0"]
    meta = java.call("group-metadata", name="c")
    assert meta["groupId"] == group
    assert meta["generationId"] >= 1
    assert meta["memberId"]


COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
GROUP_SETTINGS = {
    "classic": {"group.protocol": "classic"},
    "classic-cooperative": {
        "group.protocol": "classic",
        "partition.assignment.strategy": COOPERATIVE,
    },
    "consumer": {"group.protocol": "consumer"},
    "consumer-range": {"group.protocol": "consumer", "group.remote.assignor": "range"},
}


@pytest.mark.parametrize("protocol", list(GROUP_SETTINGS))
def test_two_group_members_split_partitions(java, protocol):
    topic = create_topic(java, partitions=4)
    group = unique("group")
    java.call("produce", topic=topic, count=40, key_prefix="k")
    settings = GROUP_SETTINGS[protocol]
    for name in ("a", "b"):
        java.call("consumer-open", name=name, group=group, consumer=settings)
        java.call("subscribe", name=name, topics=topic)
    deadline = time.monotonic() + 30
    assignments: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        for name in ("a", "b"):
            assignments[name] = java.call("poll", name=name, timeout_ms=300)["assignment"]
        if all(len(a) == 2 for a in assignments.values()):
            break
    assert sorted(assignments["a"] + assignments["b"]) == [f"{topic}:{p}" for p in range(4)]
    assert len(assignments["a"]) == 2


def test_fetch_byte_limits_below_one_batch_still_make_progress(java):
    """KIP-74: the first batch is returned whole even when it exceeds the fetch limits."""
    topic = create_topic(java)
    java.call("produce", topic=topic, count=5, value_pad=20_000)
    got = java.call(
        "consume",
        topic=topic,
        from_="beginning",
        expect=5,
        consumer={"max.partition.fetch.bytes": "1000", "fetch.max.bytes": "1000"},
    )
    assert got.values() == [f"v{i}" + "x" * 20_000 for i in range(5)]


def test_fetch_min_bytes_unmet_answers_after_max_wait(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=3)
    began = time.monotonic()
    got = java.call(
        "consume",
        topic=topic,
        from_="beginning",
        expect=3,
        timeout_ms=10_000,
        consumer={"fetch.min.bytes": "1000000", "fetch.max.wait.ms": "300"},
    )
    assert got.values() == ["v0", "v1", "v2"]
    assert time.monotonic() - began < 8


def test_seek_past_the_end_resets_to_earliest(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=5)
    got = java.call("consume", topic=topic, from_=100, expect=5)
    assert offsets_of(got) == [0, 1, 2, 3, 4]


def test_seek_past_the_end_without_reset_policy_raises_out_of_range(java):
    """Spark's source runs with auto.offset.reset=none and relies on this error."""
    topic = create_topic(java)
    java.call("produce", topic=topic, count=5)
    failure = java.fails(
        "consume", topic=topic, from_=100, expect=1, consumer={"auto.offset.reset": "none"}
    )
    assert failure.error == "OffsetOutOfRangeException"


def test_pattern_subscription_reads_matching_topics(java):
    prefix = unique("pat")
    topics = [f"{prefix}-{n}" for n in ("a", "b")]
    other = create_topic(java)
    java.call("create-topics", topics=topics)
    for topic in [*topics, other]:
        java.call("produce", topic=topic, count=3, value_prefix=topic)
    got = java.call(
        "consume",
        mode="subscribe",
        group=unique("group"),
        pattern=f"{prefix}-.*",
        expect=6,
        extra_ms=300,
    )
    assert got["assignment"] == [f"{t}:0" for t in topics]
    assert sorted(got.values()) == sorted(f"{t}{i}" for t in topics for i in range(3))


def test_auto_commit_commits_positions_on_close(java):
    topic = create_topic(java)
    group = unique("group")
    java.call("produce", topic=topic, count=8)
    java.call(
        "consume",
        topic=topic,
        mode="subscribe",
        group=group,
        until_end=True,
        consumer={"enable.auto.commit": "true"},
    )
    offsets = java.call("list-group-offsets", group=group)["offsets"]
    assert offsets[f"{topic}:0"]["offset"] == 8


def test_new_group_with_auto_offset_reset_latest_skips_old_records(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=5, value_prefix="old")
    java.call(
        "consumer-open",
        name="c",
        group=unique("group"),
        consumer={"auto.offset.reset": "latest"},
    )
    java.call("subscribe", name="c", topics=topic)
    assert java.call("poll", name="c", until_end=True)["positions"] == {f"{topic}:0": 5}
    java.call("produce", topic=topic, count=3, value_prefix="new")
    got = java.call("poll", name="c", expect=3, extra_ms=300)
    assert got.values() == ["new0", "new1", "new2"]


def test_read_committed_consumer_sees_plain_records(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=25)
    got = java.call(
        "consume",
        topic=topic,
        from_="beginning",
        until_end=True,
        consumer={"isolation.level": "read_committed"},
    )
    assert got.values() == [f"v{i}" for i in range(25)]


def test_consumer_beginning_and_end_offsets(java):
    topic = create_topic(java, partitions=2)
    java.call("produce", topic=topic, count=7, partition=0)
    java.call("produce", topic=topic, count=3, partition=1)
    begin = java.call("offsets", topic=topic, kind="beginning")["offsets"]
    end = java.call("offsets", topic=topic, kind="end")["offsets"]
    assert begin == {f"{topic}:0": 0, f"{topic}:1": 0}
    assert end == {f"{topic}:0": 7, f"{topic}:1": 3}


def test_consumer_offsets_for_times(java):
    topic = create_topic(java)
    base = 1_700_000_000_000
    java.call("produce", topic=topic, count=10, timestamp_base=base, timestamp_step=1000)
    tp = f"{topic}:0"
    exact = java.call("offsets", topic=topic, kind="times", timestamp=base + 3000)["offsets"][tp]
    assert exact == {"offset": 3, "timestamp": base + 3000, "leaderEpoch": exact["leaderEpoch"]}
    between = java.call("offsets", topic=topic, kind="times", timestamp=base + 3500)["offsets"]
    assert between[tp]["offset"] == 4
    assert between[tp]["timestamp"] == base + 4000
    after = java.call("offsets", topic=topic, kind="times", timestamp=base + 60_000)["offsets"]
    assert after[tp] is None


# ------------------------------------------------------------------------------ transactions


def _txn_producer(java: JavaDriver, name: str = "txn", **settings: str) -> str:
    txn_id = unique("txn")
    java.call("producer-open", name=name, producer={"transactional.id": txn_id, **settings})
    java.call("txn", name=name, action="init")
    return txn_id


def _read(java: JavaDriver, topic: str, isolation: str) -> Reply:
    return java.call(
        "consume",
        topic=topic,
        from_="beginning",
        until_end=True,
        consumer={"isolation.level": isolation},
    )


def test_committed_transaction_is_visible_to_read_committed_only_after_commit(java):
    topic = create_topic(java)
    _txn_producer(java)
    java.call("txn", name="txn", action="begin")
    java.call("produce", producer="txn", topic=topic, count=10)
    assert _read(java, topic, "read_committed").values() == []
    assert _read(java, topic, "read_uncommitted").values() == [f"v{i}" for i in range(10)]
    java.call("txn", name="txn", action="commit")
    assert _read(java, topic, "read_committed").values() == [f"v{i}" for i in range(10)]


def test_aborted_transaction_is_hidden_from_read_committed(java):
    topic = create_topic(java)
    _txn_producer(java)
    java.call("txn", name="txn", action="begin")
    java.call("produce", producer="txn", topic=topic, count=10, value_prefix="aborted")
    java.call("txn", name="txn", action="abort")
    java.call("txn", name="txn", action="begin")
    java.call("produce", producer="txn", topic=topic, count=5, value_prefix="kept")
    java.call("txn", name="txn", action="commit")
    committed = _read(java, topic, "read_committed")
    assert committed.values() == [f"kept{i}" for i in range(5)]
    uncommitted = _read(java, topic, "read_uncommitted")
    assert uncommitted.values() == [f"aborted{i}" for i in range(10)] + [
        f"kept{i}" for i in range(5)
    ]


def test_read_committed_skips_aborted_records_interleaved_with_plain_ones(java):
    topic = create_topic(java)
    _txn_producer(java, **{"compression.type": "lz4", "linger.ms": "10"})
    java.call("txn", name="txn", action="begin")
    java.call("produce", producer="txn", topic=topic, count=4, value_prefix="aborted")
    java.call("produce", topic=topic, count=3, value_prefix="plain")
    java.call("produce", producer="txn", topic=topic, count=4, value_prefix="aborted-late")
    java.call("txn", name="txn", action="abort")
    java.call("produce", topic=topic, count=2, value_prefix="after")
    got = _read(java, topic, "read_committed")
    assert got.values() == ["plain0", "plain1", "plain2", "after0", "after1"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consume_transform_produce_commits_offsets_with_the_transaction(java, protocol):
    source = create_topic(java, prefix="in")
    sink = create_topic(java, prefix="out")
    group = unique("group")
    java.call("produce", topic=source, count=20)
    java.call(
        "consumer-open",
        name="c",
        group=group,
        consumer={"isolation.level": "read_committed", "group.protocol": protocol},
    )
    java.call("subscribe", name="c", topics=source)
    polled = java.call("poll", name="c", until_end=True)
    assert len(polled.records) == 20
    _txn_producer(java)
    java.call("txn", name="txn", action="begin")
    java.call("produce", producer="txn", topic=sink, count=20, value_prefix="out")
    sent = java.call("txn", name="txn", action="send-offsets", consumer="c")["sentOffsets"]
    assert sent == {f"{source}:0": {"offset": 20, "metadata": "", "leaderEpoch": None}}
    java.call("txn", name="txn", action="commit")
    offsets = java.call("list-group-offsets", group=group)["offsets"]
    assert offsets[f"{source}:0"]["offset"] == 20
    assert _read(java, sink, "read_committed").values() == [f"out{i}" for i in range(20)]


def test_offsets_sent_in_an_aborted_transaction_are_not_committed(java):
    source = create_topic(java, prefix="in")
    sink = create_topic(java, prefix="out")
    group = unique("group")
    java.call("produce", topic=source, count=5)
    _txn_producer(java)
    java.call("txn", name="txn", action="begin")
    java.call("produce", producer="txn", topic=sink, count=5)
    java.call("txn", name="txn", action="send-offsets", group=group, offsets=f"{source}:0:5")
    java.call("txn", name="txn", action="abort")
    offsets = java.call("list-group-offsets", group=group)["offsets"]
    assert offsets.get(f"{source}:0") is None
    assert _read(java, sink, "read_committed").values() == []


def test_list_and_describe_an_ongoing_transaction(java):
    topic = create_topic(java, partitions=2)
    txn_id = _txn_producer(java)
    java.call("txn", name="txn", action="begin")
    java.call("produce", producer="txn", topic=topic, count=4, key_prefix="k")
    listed = {t["transactionalId"]: t for t in java.call("list-transactions")["transactions"]}
    assert listed[txn_id]["state"] == "ONGOING"
    described = java.call("describe-transactions", ids=txn_id)["transactions"][txn_id]
    assert described["state"] == "ONGOING"
    assert described["producerId"] == listed[txn_id]["producerId"]
    assert described["partitions"] == [f"{topic}:0", f"{topic}:1"]
    java.call("txn", name="txn", action="commit")
    after = java.call("describe-transactions", ids=txn_id)["transactions"][txn_id]
    assert after["state"] == "COMPLETE_COMMIT"
    assert after["partitions"] == []


def test_transactional_producer_is_fenced_by_a_newer_instance(java):
    topic = create_topic(java)
    txn_id = _txn_producer(java, "old")
    java.call("producer-open", name="new", producer={"transactional.id": txn_id})
    java.call("txn", name="new", action="init")
    java.call("txn", name="old", action="begin")
    failure = java.fails("produce", producer="old", topic=topic, count=1)
    assert failure.error in {"ProducerFencedException", "InvalidProducerEpochException"}


# ------------------------------------------------------------------------------ admin


def test_create_topics_reports_partitions_and_configs(java):
    topic = unique("t")
    created = java.call(
        "create-topics",
        topics=topic,
        partitions=3,
        config={"retention.ms": "3600000", "cleanup.policy": "compact"},
    )["created"][topic]
    assert created["partitions"] == 3
    assert created["rf"] == 1
    assert created["configs"]["retention.ms"] == "3600000"
    assert created["configs"]["cleanup.policy"] == "compact"


def test_create_existing_topic_fails_with_topic_exists(java):
    topic = create_topic(java)
    failure = java.fails("create-topics", topics=topic)
    assert failure.error == "TopicExistsException"


def test_describe_features_shows_metadata_version_finalized(java):
    features = java.call("describe-features")
    assert features["finalized"]["metadata.version"] == [29, 29]
    assert features["supported"]["metadata.version"] == [29, 29]
    assert features["epoch"] >= 0


def test_kafka_clients_4_describe_features_sees_every_supported_feature_and_transaction_v2(
    java4_classpath: str, java_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A new cluster finalizes `transaction.version` 2, so a kafka-clients 4.x producer
    speaks the transactions of KIP-890 part 2 (compat_tests/test_transactions_v2.py)."""
    log = tmp_path_factory.mktemp("java4-features") / "driver.stderr.log"
    with JavaDriver(java4_classpath, java_broker.bootstrap, log) as java:
        features = java.call("describe-features")
    assert features["finalized"] == {
        "eligible.leader.replicas.version": [1, 1],
        "group.version": [1, 1],
        "metadata.version": [29, 29],
        "share.version": [1, 1],
        "streams.version": [1, 1],
        "transaction.version": [2, 2],
    }
    assert features["supported"]["transaction.version"] == [0, 2]
    assert features["supported"]["group.version"] == [0, 1]
    assert features["supported"]["share.version"] == [0, 1]


def test_describe_topics_shows_leaders_replicas_and_topic_id(java):
    topic = unique("t")
    created = java.call("create-topics", topics=topic, partitions=2)["created"][topic]
    (node,) = java.call("describe-cluster")["nodes"]
    described = java.call("describe-topics", topics=topic)["topics"][topic]
    assert described["topicId"] == created["topicId"]
    assert described["internal"] is False
    shown = ("partition", "leader", "replicas", "isr")
    assert [{k: p[k] for k in shown} for p in described["partitions"]] == [
        {"partition": p, "leader": node["id"], "replicas": [node["id"]], "isr": [node["id"]]}
        for p in range(2)
    ]
    # Eligible leader replicas (KIP-966): none while the ISR is whole.
    assert all(not p.get("elr") for p in described["partitions"])


def test_describe_topics_by_topic_id(java):
    topic = unique("t")
    created = java.call("create-topics", topics=topic, partitions=2)["created"][topic]
    described = java.call("describe-topics", ids=created["topicId"])["topics"]
    assert list(described) == [topic]
    assert [p["partition"] for p in described[topic]["partitions"]] == [0, 1]


def test_create_topics_validate_only_creates_nothing(java):
    topic = unique("t")
    checked = java.call("create-topics", topics=topic, partitions=4, validate_only=True)
    assert checked["created"][topic]["partitions"] == 4
    assert topic not in java.call("list-topics")["topics"]


def test_create_topic_with_more_replicas_than_brokers_fails(java):
    failure = java.fails("create-topics", topics=unique("t"), rf=3)
    assert failure.error == "InvalidReplicationFactorException"


def test_create_topic_with_invalid_config_value_fails(java):
    failure = java.fails("create-topics", topics=unique("t"), config={"retention.ms": "soon"})
    assert failure.error == "InvalidConfigurationException"


def test_describe_unknown_topic_fails_with_unknown_topic(java):
    failure = java.fails("describe-topics", topics=unique("missing"))
    assert failure.error == "UnknownTopicOrPartitionException"


def test_list_topics_includes_new_topic_and_hides_internal_ones(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=1)
    java.call("alter-group-offsets", group=unique("group"), offsets=f"{topic}:0:1")
    listed = java.call("list-topics")["topics"]
    assert topic in listed
    assert "__consumer_offsets" not in listed
    assert "__consumer_offsets" in java.call("list-topics", internal=True)["topics"]


def test_describe_configs_marks_topic_overrides_and_defaults(java):
    topic = create_topic(java, **{"retention.ms": "7200000"})
    configs = java.call("describe-configs", topic=topic)["configs"]
    assert configs["retention.ms"]["value"] == "7200000"
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["retention.ms"]["default"] is False
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["source"] != "DYNAMIC_TOPIC_CONFIG"


def test_describe_configs_of_unknown_topic_fails(java):
    failure = java.fails("describe-configs", topic=unique("missing"))
    assert failure.error == "UnknownTopicOrPartitionException"


def test_describe_broker_configs(java):
    (node,) = java.call("describe-cluster")["nodes"]
    configs = java.call("describe-configs", broker=node["id"])["configs"]
    assert configs["num.partitions"]["value"] == "1"
    assert "log.retention.hours" in configs or "log.retention.ms" in configs


def test_incremental_alter_configs_sets_and_deletes(java):
    topic = create_topic(java)
    java.call(
        "alter-configs", topic=topic, set={"retention.ms": "1234567", "max.message.bytes": "2000"}
    )
    configs = java.call("describe-configs", topic=topic)["configs"]
    assert configs["retention.ms"]["value"] == "1234567"
    assert configs["max.message.bytes"]["value"] == "2000"
    java.call("alter-configs", topic=topic, delete="retention.ms")
    configs = java.call("describe-configs", topic=topic)["configs"]
    assert configs["retention.ms"]["value"] == "604800000"
    assert configs["retention.ms"]["source"] != "DYNAMIC_TOPIC_CONFIG"
    assert configs["max.message.bytes"]["value"] == "2000"


def test_create_partitions_grows_topic_and_new_partition_takes_writes(java):
    topic = create_topic(java)
    java.call("create-partitions", topic=topic, total=3)
    described = java.call("describe-topics", topics=topic)["topics"][topic]
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    sent = java.call("produce", topic=topic, count=4, partition=2)["sent"]
    assert [(p, o) for p, o, _ in sent] == [(2, i) for i in range(4)]


def test_delete_records_moves_the_log_start(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=10)
    assert java.call("delete-records", topic=topic, before=6)["lowWatermark"] == 6
    assert java.call("offsets", topic=topic, kind="beginning")["offsets"] == {f"{topic}:0": 6}
    got = java.call("consume", topic=topic, from_="beginning", until_end=True)
    assert offsets_of(got) == [6, 7, 8, 9]


def test_delete_records_beyond_the_high_watermark_fails(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=3)
    failure = java.fails("delete-records", topic=topic, before=10)
    assert failure.error == "OffsetOutOfRangeException"


def test_list_offsets_earliest_latest_max_timestamp_and_by_timestamp(java):
    topic = create_topic(java)
    base = 1_700_000_000_000
    # Out-of-order timestamps: the maximum sits at offset 2, not at the end.
    for delta in [0, 5000, 9000, 3000]:
        java.call("produce", topic=topic, count=1, timestamp_base=base + delta)
    tp = f"{topic}:0"

    def spec(s: str) -> dict[str, Any]:
        return java.call("list-offsets", topic=topic, spec=s)["offsets"][tp]

    assert spec("earliest")["offset"] == 0
    assert spec("latest")["offset"] == 4
    maximum = spec("max-timestamp")
    assert (maximum["offset"], maximum["timestamp"]) == (2, base + 9000)
    by_time = spec(f"timestamp:{base + 4000}")
    assert (by_time["offset"], by_time["timestamp"]) == (1, base + 5000)
    assert spec(f"timestamp:{base + 10_000}")["offset"] == -1


def test_list_offsets_latest_under_read_committed_stops_at_open_transaction(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=3)
    _txn_producer(java)
    java.call("txn", name="txn", action="begin")
    java.call("produce", producer="txn", topic=topic, count=4)
    tp = f"{topic}:0"
    committed = java.call("list-offsets", topic=topic, spec="latest", isolation="read_committed")
    uncommitted = java.call("list-offsets", topic=topic, spec="latest")
    assert committed["offsets"][tp]["offset"] == 3
    assert uncommitted["offsets"][tp]["offset"] == 7


def test_describe_cluster_names_this_broker(java, java_broker):
    cluster = java.call("describe-cluster")
    (node,) = cluster["nodes"]
    assert (node["host"], node["port"]) == (java_broker.host, java_broker.port)
    assert cluster["clusterId"]
    assert cluster["controller"] is not None


def test_describe_acls_fails_as_security_disabled(java):
    assert java.fails("describe-acls").error == "SecurityDisabledException"


def test_preferred_leader_election_is_not_needed(java):
    topic = create_topic(java, partitions=2)
    outcomes = java.call("elect-leaders", topic=topic, partitions="0,1")["partitions"]
    assert outcomes == {"0": "ElectionNotNeededException", "1": "ElectionNotNeededException"}


def test_no_client_quotas_are_described(java):
    assert java.call("describe-quotas")["count"] == 0


def test_no_partition_reassignments_are_listed(java):
    assert java.call("list-reassignments")["count"] == 0


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_list_and_describe_consumer_groups_with_a_live_member(java, protocol):
    topic = create_topic(java, partitions=2)
    group = unique("group")
    java.call(
        "consumer-open",
        name="c",
        group=group,
        consumer={"group.protocol": protocol, "client.id": "java-member"},
    )
    java.call("subscribe", name="c", topics=topic)
    java.call("poll", name="c", until_end=True)
    listed = {g["groupId"]: g for g in java.call("list-groups")["groups"]}
    assert listed[group]["simple"] is False
    assert listed[group]["state"] == "STABLE"
    assert listed[group]["type"] == protocol.upper()
    described = java.call("describe-groups", groups=group)["groups"][group]
    assert described["state"] == "STABLE"
    assert described["type"] == protocol.upper()
    (member,) = described["members"]
    assert member["clientId"] == "java-member"
    assert member["assignment"] == [f"{topic}:0", f"{topic}:1"]


def test_list_consumer_group_offsets_after_commit(java):
    topic = create_topic(java, partitions=2)
    group = unique("group")
    java.call("produce", topic=topic, count=6, partition=0)
    java.call("produce", topic=topic, count=2, partition=1)
    java.call("consume", topic=topic, mode="subscribe", group=group, until_end=True, commit=True)
    offsets = java.call("list-group-offsets", group=group)["offsets"]
    assert {tp: o["offset"] for tp, o in offsets.items()} == {
        f"{topic}:0": 6,
        f"{topic}:1": 2,
    }


def test_alter_consumer_group_offsets_resets_where_the_group_resumes(java):
    topic = create_topic(java)
    group = unique("group")
    java.call("produce", topic=topic, count=10)
    java.call("alter-group-offsets", group=group, offsets=f"{topic}:0:7")
    offsets = java.call("list-group-offsets", group=group)["offsets"]
    assert offsets[f"{topic}:0"]["offset"] == 7
    got = java.call("consume", topic=topic, mode="subscribe", group=group, until_end=True)
    assert offsets_of(got) == [7, 8, 9]


def test_describe_unknown_group_answers_dead(java):
    group = unique("nobody")
    described = java.call("describe-groups", groups=group)["groups"][group]
    assert described["state"] == "DEAD"
    assert described["members"] == []


def test_delete_consumer_group(java):
    topic = create_topic(java)
    group = unique("group")
    java.call("produce", topic=topic, count=2)
    java.call("alter-group-offsets", group=group, offsets=f"{topic}:0:2")
    assert group in {g["groupId"] for g in java.call("list-groups")["groups"]}
    java.call("delete-groups", groups=group)
    assert group not in {g["groupId"] for g in java.call("list-groups")["groups"]}
    assert java.call("list-group-offsets", group=group)["offsets"] == {}


def test_delete_committed_offsets_of_an_empty_group(java):
    topic = create_topic(java, partitions=2)
    group = unique("group")
    java.call("alter-group-offsets", group=group, offsets=f"{topic}:0:0,{topic}:1:0")
    java.call("delete-group-offsets", group=group, topic=topic, partitions="1")
    offsets = java.call("list-group-offsets", group=group)["offsets"]
    assert list(offsets) == [f"{topic}:0"]


def test_describe_log_dirs_lists_partition_replicas_and_sizes(java):
    topic = create_topic(java)
    java.call("produce", topic=topic, count=10, value_pad=100)
    (node,) = java.call("describe-cluster")["nodes"]
    dirs = java.call("describe-log-dirs", brokers=node["id"])["logDirs"]
    (log_dir,) = dirs.values()
    assert log_dir["error"] is None
    replica = log_dir["replicas"][f"{topic}:0"]
    assert replica["size"] > 1000
    assert replica["offsetLag"] == 0


def test_delete_topic_by_topic_id(java):
    topic = unique("t")
    created = java.call("create-topics", topics=topic)["created"][topic]
    java.call("delete-topics", ids=created["topicId"])
    eventually(
        lambda: topic not in java.call("list-topics")["topics"],
        timeout=10,
        what=f"{topic} unlisted after its deletion",
    )


def test_delete_topics_removes_topic(java):
    topic = create_topic(java)
    java.call("delete-topics", topics=topic)
    eventually(
        lambda: topic not in java.call("list-topics")["topics"],
        timeout=10,
        what=f"{topic} unlisted after its deletion",
    )
    assert java.fails("describe-topics", topics=topic).error == "UnknownTopicOrPartitionException"
