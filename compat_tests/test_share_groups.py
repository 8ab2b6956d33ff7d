"""Share groups (KIP-932) driven by confluent-kafka's ShareConsumer (librdkafka's share
consumer): records split between consumers, redelivery after a lock times out, the
dead-letter topic, and acknowledgements surviving kill -9 of the broker."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from compat_tests.broker_process import (
    api_versions_round_trip,
    free_port,
    kbroker_command,
    running_broker,
)
from compat_tests.confluent_helpers import (
    admin_client,
    create_topic,
    make_producer,
    produce_all,
    read_until_quiet,
    unique_group,
    unique_topic,
    watermarks,
)
from compat_tests.metrics_scrape import scrape
from compat_tests.metrics_scrape import value as sample
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection

pytestmark = pytest.mark.timeout(180)

SHARE_APIS = {76, 77, 78, 79, 90, 91, 92}
DLQ_GROUP_ENABLE = "errors.deadletterqueue.group.enable"  # a topic's opt-in (KIP-1191)
LOCK_MS = 2000
# Short locks and sessions so redelivery is quick; the minimums are lowered to allow them.
SHORT_LOCKS = {
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
}
# Each test makes its own groups on the shared broker.
BROKER = dict(SHORT_LOCKS)


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory):  # type: ignore[no-untyped-def]
    http = {"http.listeners": f"http://127.0.0.1:{free_port()}"}  # for /metrics
    with running_broker(tmp_path_factory.mktemp("share-broker"), {**BROKER, **http}) as node:
        yield node


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    resource = ConfigResource(
        "GROUP",
        group,
        incremental_configs=[
            ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ],
    )
    admin = admin_client(bootstrap)  # kept alive until the answer comes
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=15)


def share_consumer(bootstrap: str, group: str, topic: str, **conf: str) -> ShareConsumer:
    settings = {"bootstrap.servers": bootstrap, "group.id": group}
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    consumer = ShareConsumer(settings)
    consumer.subscribe([topic])
    return consumer


def new_queue(
    bootstrap: str,
    count: int,
    partitions: int = 1,
    batch_records: int = 10_000,
    **group_configs: str,
) -> tuple[str, str]:
    """A topic holding `count` records (values "0".."count-1", spread over `partitions`,
    in producer batches of at most `batch_records`) and a share group reading it from
    the earliest offset."""
    topic, group = unique_topic("share"), unique_group("share")
    create_topic(bootstrap, topic, partitions=partitions)
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest", **group_configs)
    if count:
        produce_all(
            bootstrap,
            topic,
            ({"value": str(i).encode(), "partition": i % partitions} for i in range(count)),
            batch_num_messages=batch_records,
        )
    return topic, group


def test_share_apis_are_advertised_only_while_share_groups_are_enabled(
    share_broker, broker_factory
):  # type: ignore[no-untyped-def]
    assert set(api_versions_round_trip(share_broker.host, share_broker.port)) >= SHARE_APIS
    disabled = broker_factory.start(group_share_enable="false")
    assert not SHARE_APIS & set(api_versions_round_trip(disabled.host, disabled.port))


def test_three_share_consumers_split_ten_thousand_records_none_twice(share_broker):  # type: ignore[no-untyped-def]
    total = 10_000
    # Batches of 100 records: a batch is acquired whole (Kafka's batch-optimized mode), so
    # the three take turns batch by batch.
    topic, group = new_queue(share_broker.bootstrap, total, batch_records=100)
    consumers = [share_consumer(share_broker.bootstrap, group, topic) for _ in range(3)]
    seen: Counter[int] = Counter()
    per_consumer = [0, 0, 0]
    deadline = time.monotonic() + 90
    try:
        while sum(seen.values()) < total and time.monotonic() < deadline:
            for i, consumer in enumerate(consumers):
                for message in consumer.poll(0.2):  # implicit mode: accepted at the next poll
                    assert message.error() is None, message.error()
                    seen[int(message.value())] += 1
                    per_consumer[i] += 1
        for consumer in consumers:
            consumer.commit_sync(10)
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(seen) == list(range(total))
    assert [v for v, n in seen.items() if n > 1] == []
    assert all(n > 0 for n in per_consumer), per_consumer


DYING_CONSUMER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import ShareConsumer
    bootstrap, group, topic = sys.argv[1:4]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    while True:
        got = [m.offset() for m in c.poll(1.0) if m.error() is None]
        if got:
            print(" ".join(map(str, got)), flush=True)
            time.sleep(3600)  # holds its records until killed
    """
)


def test_records_of_a_consumer_killed_while_holding_them_are_redelivered_after_the_lock(  # type: ignore[no-untyped-def]
    share_broker,
):
    # The dead member's session (60 s) outlives the test: only its 2 s record locks
    # running out can give its records back.
    topic, group = new_queue(share_broker.bootstrap, 20, share_session_timeout_ms="60000")
    dying = subprocess.Popen(
        [sys.executable, "-c", DYING_CONSUMER, share_broker.bootstrap, group, topic],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert dying.stdout is not None
        held = [int(o) for o in dying.stdout.readline().split()]
        assert held
    finally:
        dying.send_signal(signal.SIGKILL)
        dying.wait(10)
    killed_at = time.monotonic()
    survivor = share_consumer(share_broker.bootstrap, group, topic)
    received: dict[int, float] = {}  # offset -> seconds after the kill
    try:
        while len(received) < 20 and time.monotonic() - killed_at < 30:
            for message in survivor.poll(0.5):
                assert message.error() is None
                received.setdefault(message.offset(), time.monotonic() - killed_at)
    finally:
        survivor.close()
    assert sorted(received) == list(range(20))  # held ones included, while its session lives


def test_a_record_released_five_times_lands_in_the_dead_letter_topic_once(share_broker):  # type: ignore[no-untyped-def]
    # KIP-1191: the topic opts in and its name has the broker's prefix ("dlq." by default);
    # the group asks for the record itself to be copied too.
    dlq = "dlq." + unique_topic("share")
    create_topic(share_broker.bootstrap, dlq, partitions=1, config={DLQ_GROUP_ENABLE: "true"})
    topic, group = new_queue(
        share_broker.bootstrap,
        3,
        errors_deadletterqueue_topic_name=dlq,
        errors_deadletterqueue_copy_record_enable="true",
    )
    consumer = share_consumer(
        share_broker.bootstrap, group, topic, share_acknowledgement_mode="explicit"
    )
    deliveries: Counter[int] = Counter()
    deadline = time.monotonic() + 40
    try:
        while time.monotonic() < deadline and (deliveries[1] < 5 or sum(deliveries.values()) < 7):
            for message in consumer.poll(0.5):
                deliveries[message.offset()] += 1
                poisoned = message.offset() == 1
                consumer.acknowledge(
                    message, AcknowledgeType.RELEASE if poisoned else AcknowledgeType.ACCEPT
                )
            consumer.commit_sync(10)
        for _ in range(4):  # no sixth delivery of the archived record
            for message in consumer.poll(0.5):
                deliveries[message.offset()] += 1
                consumer.acknowledge(message)
    finally:
        consumer.close()
    assert deliveries == {0: 1, 1: 5, 2: 1}
    copies = read_until_quiet(share_broker.bootstrap, dlq, first_wait=20, quiet=1.0)
    assert len(copies) == 1
    headers = {k: v.decode() for k, v in copies[0].headers()}
    assert copies[0].value() == b"1"
    assert headers["__dlq.errors.topic"] == topic
    assert headers["__dlq.errors.partition"] == "0"
    assert headers["__dlq.errors.offset"] == "1"
    assert headers["__dlq.errors.delivery.count"] == "5"
    assert headers["__dlq.errors.group.id"] == group
    assert headers["__dlq.errors.reason"] == "delivery count limit reached"


def test_a_topic_that_did_not_opt_in_gets_no_dead_letters(share_broker):  # type: ignore[no-untyped-def]
    dlq = "dlq." + unique_topic("share")
    create_topic(
        share_broker.bootstrap, dlq, partitions=1
    )  # no errors.deadletterqueue.group.enable
    topic, group = new_queue(share_broker.bootstrap, 1, errors_deadletterqueue_topic_name=dlq)
    consumer = share_consumer(
        share_broker.bootstrap, group, topic, share_acknowledgement_mode="explicit"
    )
    rejected = False
    try:
        deadline = time.monotonic() + 20
        while not rejected and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                consumer.acknowledge(message, AcknowledgeType.REJECT)
                rejected = True
        assert all(error is None for error in consumer.commit_sync(10).values())
    finally:
        consumer.close()
    reason = f"DLQ is not enabled on configured DLQ topic for share group: {group}, topic: {dlq}"
    eventually(lambda: reason in share_broker.log_text(), timeout=10, what="the reason logged")
    assert watermarks(share_broker.bootstrap, dlq) == (0, 0)


def test_kill_minus_nine_loses_no_acknowledgement_and_redelivers_none(broker_factory):  # type: ignore[no-untyped-def]
    broker = broker_factory.start_with(BROKER)
    total = 3000
    topic, group = new_queue(broker.bootstrap, total)
    acknowledged: set[int] = set()
    consumer = share_consumer(broker.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    deadline = time.monotonic() + 40
    while len(acknowledged) < total // 3 and time.monotonic() < deadline:
        batch = []
        for message in consumer.poll(0.5):
            consumer.acknowledge(message)
            batch.append(message.offset())
        if batch:
            results = consumer.commit_sync(10)
            if all(error is None for error in results.values()):
                acknowledged.update(batch)
    broker.kill()
    del consumer  # its client dies with the broker's connections; never closed cleanly
    broker.start()
    after: Counter[int] = Counter()
    survivor = share_consumer(broker.bootstrap, group, topic)
    deadline = time.monotonic() + 60
    try:
        while len(acknowledged) + len(after) < total and time.monotonic() < deadline:
            for message in survivor.poll(0.5):
                assert message.error() is None
                after[message.offset()] += 1
    finally:
        survivor.close()
    assert acknowledged, "nothing was acknowledged before the kill"
    assert acknowledged.isdisjoint(after), sorted(acknowledged & set(after))[:10]
    assert acknowledged | set(after) == set(range(total))


def test_groups_cli_lists_and_describes_a_share_group_with_members_and_lag(share_broker):  # type: ignore[no-untyped-def]
    topic, group = new_queue(share_broker.bootstrap, 50)
    consumer = share_consumer(
        share_broker.bootstrap, group, topic, share_acknowledgement_mode="explicit"
    )
    try:
        acked = 0
        deadline = time.monotonic() + 20
        while acked < 10 and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                consumer.acknowledge(
                    message, AcknowledgeType.ACCEPT if acked < 10 else AcknowledgeType.RELEASE
                )
                acked += 1
            consumer.commit_sync(10)
        listed = groups_cli(share_broker, "list")
        described = groups_cli(share_broker, "describe", group)
    finally:
        consumer.close()
    assert listed.returncode == 0, listed.stderr
    assert [group, "share", "Stable"] in [line.split()[:3] for line in listed.stdout.splitlines()]
    assert described.returncode == 0, described.stderr
    assert f"Group {group} (share), state Stable" in described.stdout
    assert "1 members" in described.stdout
    lag_rows = [line.split() for line in described.stdout.splitlines() if line.startswith(topic)]
    assert [row[:4] for row in lag_rows] == [[topic, "0", "10", "50"]]
    assert lag_rows[0][4] == "40"


def test_an_empty_share_group_is_deleted_and_no_longer_listed(share_broker):  # type: ignore[no-untyped-def]
    topic, group = new_queue(share_broker.bootstrap, 5)
    consumer = share_consumer(share_broker.bootstrap, group, topic)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not consumer.poll(0.5):
        pass
    consumer.close()
    assert group in listed_groups(share_broker)
    admin = admin_client(share_broker.bootstrap)
    for future in admin.delete_consumer_groups([group], request_timeout=10).values():
        future.result()
    assert group not in listed_groups(share_broker)


def listed_groups(broker) -> list[str]:  # type: ignore[no-untyped-def]
    listed = groups_cli(broker, "list")
    assert listed.returncode == 0, listed.stderr
    return [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]


def groups_cli(broker, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        [*kbroker_command(), "groups", *args, "--bootstrap", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_read_committed_share_group_never_delivers_aborted_records(share_broker):  # type: ignore[no-untyped-def]
    topic, group = new_queue(share_broker.bootstrap, 0, share_isolation_level="read_committed")
    producer = make_producer(share_broker.bootstrap, transactional_id=unique_group("tx"))
    producer.init_transactions(15)
    for outcome, values in (("commit", "abc"), ("abort", "xyz"), ("commit", "de")):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value.encode())
        producer.flush(15)  # written before the outcome, so aborted records are in the log
        if outcome == "commit":
            producer.commit_transaction(15)
        else:
            producer.abort_transaction(15)
    consumer = share_consumer(share_broker.bootstrap, group, topic)
    received: list[str] = []
    deadline = time.monotonic() + 20
    try:
        while len(received) < 5 and time.monotonic() < deadline:
            received += [m.value().decode() for m in consumer.poll(0.5) if m.error() is None]
        for _ in range(3):
            received += [m.value().decode() for m in consumer.poll(0.3) if m.error() is None]
    finally:
        consumer.close()
    assert received == list("abcde")


JAVA_JARS = Path(
    os.environ.get(
        "KBROKER_KAFKA4_JARS", Path.home() / ".cache" / "kbroker-test-tools" / "kafka-java-4"
    )
)
SHARE_CONSUMER_CLASS = "org/apache/kafka/clients/consumer/KafkaShareConsumer.class"


def _java_share_consumer_missing() -> str | None:
    """Why the Java KafkaShareConsumer cannot be tested here, or None.

    scripts/install-test-tools.sh fetches a Kafka 4.x clients jar for this test apart
    from the 3.9.1 one Spark uses: 3.9's early-access KafkaShareConsumer speaks version 0
    of the share APIs, which Kafka 4 brokers (and kbroker) do not serve. Only a JDK or
    a download that is missing leaves nothing to test with."""
    jar = JAVA_JARS / "kafka-clients.jar"
    if shutil.which("javac") is None:
        return "no JDK (javac) to compile the share driver with"
    if not jar.is_file():
        return f"no {jar}: scripts/install-test-tools.sh could not download it"
    with zipfile.ZipFile(jar) as archive:
        if SHARE_CONSUMER_CLASS not in archive.namelist():
            return f"{jar} has no KafkaShareConsumer"
        properties = archive.read("kafka/kafka-version.properties").decode()
    version = dict(line.split("=", 1) for line in properties.splitlines() if "=" in line)
    major = version.get("version", "0").split(".")[0]
    if not major.isdigit() or int(major) < 4:
        return (
            f"{jar} is kafka-clients {version.get('version')}, whose early-access "
            "KafkaShareConsumer speaks share API v0; Kafka 4.x clients are needed"
        )
    return None


@pytest.mark.skipif(
    _java_share_consumer_missing() is not None, reason=str(_java_share_consumer_missing())
)
def test_java_share_consumer_reads_and_acknowledges_every_record_once(share_broker, tmp_path):  # type: ignore[no-untyped-def]
    topic, group = new_queue(share_broker.bootstrap, 500)
    classpath = os.pathsep.join(str(j) for j in sorted(JAVA_JARS.glob("*.jar")))
    source = Path(__file__).with_name("java_share") / "ShareDriver.java"
    subprocess.run(["javac", "-cp", classpath, "-d", str(tmp_path), str(source)], check=True)
    run = subprocess.run(
        [
            "java",
            "-cp",
            os.pathsep.join([str(tmp_path), classpath]),
            "ShareDriver",
            share_broker.bootstrap,
            group,
            topic,
            "500",
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr
    assert "DUPLICATE" not in run.stdout
    assert "SEEN 500" in run.stdout
    # Its acknowledgements reached the broker: the share-partition starts past them all.
    with _wire(share_broker) as conn:
        assert _start_offsets(conn, group) == {(topic, 0): 500}


def test_a_dead_letter_is_written_once_across_a_kill_minus_nine(broker_factory):  # type: ignore[no-untyped-def]
    # The broker creates the missing topic (KIP-1191's auto-create, off by default).
    broker = broker_factory.start_with(
        {**BROKER, "errors.deadletterqueue.auto.create.topics.enable": "true"}
    )
    dlq = "dlq." + unique_topic("share")
    topic, group = new_queue(
        broker.bootstrap, 1, errors_deadletterqueue_topic_name=dlq, share_delivery_count_limit="2"
    )
    consumer = share_consumer(broker.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    rejected = False
    deadline = time.monotonic() + 20
    while not rejected and time.monotonic() < deadline:
        for message in consumer.poll(0.5):
            consumer.acknowledge(message, AcknowledgeType.REJECT)
            rejected = True
    assert all(error is None for error in consumer.commit_sync(10).values())
    broker.kill()  # right after the rejection was acknowledged: the copy may be pending
    del consumer
    broker.start()
    copies = read_until_quiet(broker.bootstrap, dlq, first_wait=20, quiet=1.5)
    assert len(copies) == 1
    assert dict(copies[0].headers())["__dlq.errors.reason"] == b"rejected"
    assert copies[0].value() is None  # errors.deadletterqueue.copy.record.enable is off


def _wire(broker):  # type: ignore[no-untyped-def]
    return BrokerConnection(broker.host, broker.port, 10.0, "share-wire").negotiate()


def _heartbeat(conn, group: str, member: str, epoch: int, topics: list[str] | None):  # type: ignore[no-untyped-def]
    return conn.request(
        76,
        1,
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        rack_id=None,
        subscribed_topic_names=topics,
    )


def _share_fetch(conn, group: str, member: str, epoch: int, topic_id, acks=(), max_wait=500):  # type: ignore[no-untyped-def]
    partition = {"partition_index": 0, "acknowledgement_batches": list(acks)}
    return conn.request(
        78,
        1,
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait=max_wait,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=5,
        batch_size=5,
        topics=[{"topic_id": topic_id, "partitions": [partition]}],
        forgotten_topics_data=[],
    )


def _ack(conn, group: str, member: str, epoch: int, topic_id, *batches):  # type: ignore[no-untyped-def]
    response = conn.request(
        79,
        1,
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        topics=[
            {
                "topic_id": topic_id,
                "partitions": [{"partition_index": 0, "acknowledgement_batches": list(batches)}],
            }
        ],
    )
    return int(response.responses[0].partitions[0].error_code)


def test_bad_acknowledgements_and_stale_epochs_get_kafkas_error_codes(share_broker):  # type: ignore[no-untyped-def]
    topic, group = new_queue(share_broker.bootstrap, 20)
    with _wire(share_broker) as a, _wire(share_broker) as b:
        joined = _heartbeat(a, group, "member-a", 0, [topic])
        assert int(joined.error_code) == 0
        topic_id = joined.assignment.topic_partitions[0].topic_id
        assert int(_heartbeat(b, group, "member-b", 0, [topic]).error_code) == 0
        fetched = _share_fetch(a, group, "member-a", 0, topic_id)
        acquired = fetched.responses[0].partitions[0].acquired_records
        # max_records 5 is a soft limit: the 20-record batch is acquired whole, as Kafka's
        # batch-optimized acquisition does.
        assert [(r.first_offset, r.last_offset) for r in acquired] == [(0, 19)]
        assert int(_share_fetch(b, group, "member-b", 0, topic_id).error_code) == 0
        accept = {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}
        # b acknowledges what a holds: INVALID_RECORD_STATE, and a still holds it.
        assert _ack(b, group, "member-b", 1, topic_id, accept) == 121
        overlapping = [accept, {"first_offset": 1, "last_offset": 2, "acknowledge_types": [1]}]
        assert _ack(a, group, "member-a", 1, topic_id, *overlapping) == 42  # INVALID_REQUEST
        assert _ack(a, group, "member-a", 2, topic_id, accept) == 0
        # A session epoch out of sequence, and a session never opened.
        assert int(_share_fetch(a, group, "member-a", 9, topic_id).error_code) == 123
        assert int(_share_fetch(a, group, "nobody", 4, topic_id).error_code) == 122
        # A member epoch older than the one before the current: FENCED_MEMBER_EPOCH. (Others
        # joining move the group epoch on; a's own epoch moves only with its heartbeats.)
        _heartbeat(b, group, "member-c", 0, [topic])
        moved = _heartbeat(a, group, "member-a", 1, None)
        assert (int(moved.error_code), int(moved.member_epoch)) == (0, 3)
        _heartbeat(b, group, "member-d", 0, [topic])
        assert int(_heartbeat(a, group, "member-a", 3, None).member_epoch) == 4
        assert int(_heartbeat(a, group, "member-a", 1, None).error_code) == 110


def test_acknowledging_records_of_a_topic_deleted_since_is_unknown_topic_id(share_broker):  # type: ignore[no-untyped-def]
    """librdkafka's test 0181: records acquired, the topic deleted, then acknowledged:
    the partition answers UNKNOWN_TOPIC_ID, not a share-state error."""
    topic, group = new_queue(share_broker.bootstrap, 5)
    with _wire(share_broker) as conn:
        joined = _heartbeat(conn, group, "member-a", 0, [topic])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        fetched = _share_fetch(conn, group, "member-a", 0, topic_id)
        assert fetched.responses[0].partitions[0].acquired_records
        admin = admin_client(share_broker.bootstrap)
        admin.delete_topics([topic])[topic].result(15)
        accept = {"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}
        assert _ack(conn, group, "member-a", 1, topic_id, accept) == 100  # UNKNOWN_TOPIC_ID


def test_final_acknowledgements_sent_after_the_leave_heartbeat_are_applied(share_broker):  # type: ignore[no-untyped-def]
    """librdkafka's close sends the leave heartbeat and the final ShareAcknowledge
    (epoch -1) at once, on two connections; the leave arriving first must not release
    the records those acknowledgements accept (Kafka's leave does not touch them)."""
    topic, group = new_queue(share_broker.bootstrap, 20)
    with _wire(share_broker) as conn:
        joined = _heartbeat(conn, group, "closing", 0, [topic])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        acquired = _share_fetch(conn, group, "closing", 0, topic_id).responses[0].partitions[0]
        assert [(r.first_offset, r.last_offset) for r in acquired.acquired_records] == [(0, 19)]
        assert int(_heartbeat(conn, group, "closing", -1, None).error_code) == 0
        accept = {"first_offset": 0, "last_offset": 19, "acknowledge_types": [1]}
        assert _ack(conn, group, "closing", -1, topic_id, accept) == 0
        assert _start_offsets(conn, group) == {(topic, 0): 20}


def test_records_acknowledged_then_closed_on_are_never_handed_back(share_broker):  # type: ignore[no-untyped-def]
    """A ShareConsumer acknowledges what it polled and closes: close() sends those
    acknowledgements with its leave heartbeat, and whichever the broker sees first,
    nothing is left to redeliver. Several rounds, as the two requests race."""
    with _wire(share_broker) as conn:
        for _ in range(5):
            topic, group = new_queue(share_broker.bootstrap, 50)
            consumer = share_consumer(
                share_broker.bootstrap, group, topic, share_acknowledgement_mode="explicit"
            )
            try:
                got = []
                deadline = time.monotonic() + 15
                while not got and time.monotonic() < deadline:
                    got = [m for m in consumer.poll(1.0) if m.error() is None]
                for message in got:
                    consumer.acknowledge(message)
            finally:
                consumer.close()  # returns once the broker answered its acknowledgements
            assert len(got) == 50
            assert _start_offsets(conn, group) == {(topic, 0): 50}


def test_a_consumer_closing_in_implicit_mode_hands_back_only_its_last_polls_records(  # type: ignore[no-untyped-def]
    share_broker,
):
    """As on Kafka: implicit acceptance happens at the next poll or commit. close() sends
    no acknowledgement for the last poll's records (librdkafka and kafka-clients both end
    with an empty ShareAcknowledge at epoch -1), so those are delivered again; records
    accepted by a later poll or a commit before close are not."""
    topic, group = new_queue(share_broker.bootstrap, 30, batch_records=10)
    first = share_consumer(share_broker.bootstrap, group, topic, max_poll_records="10")
    try:
        polled: list[list[int]] = []
        deadline = time.monotonic() + 20
        while len(polled) < 2 and time.monotonic() < deadline:
            got = [m.offset() for m in first.poll(1.0) if m.error() is None]
            if got:
                polled.append(got)
        first.commit_sync()  # accepts the second poll's records too
        third: list[int] = []
        while not third and time.monotonic() < deadline:
            third = [m.offset() for m in first.poll(1.0) if m.error() is None]
    finally:
        first.close()
    assert len(polled) == 2 and third, (polled, third)
    second = share_consumer(share_broker.bootstrap, group, topic)
    try:
        again: list[int] = []
        deadline = time.monotonic() + 10
        while not set(third) <= set(again) and time.monotonic() < deadline:
            again += [m.offset() for m in second.poll(1.0) if m.error() is None]
    finally:
        second.close()
    assert set(third) <= set(again), (third, again)
    assert not set(again) & {o for got in polled for o in got}


def test_a_parked_share_fetch_outlasts_acknowledgements_that_free_nothing_for_it(share_broker):  # type: ignore[no-untyped-def]
    """As Kafka's delayed share fetch: b's fetch, finding everything acquired by a, waits
    on through a's acknowledgement (which gives b nothing) and answers when a releases
    records, with those records."""
    topic, group = new_queue(share_broker.bootstrap, 20)
    # Neither a's locks nor the members may run out mid-test on a loaded machine: only
    # the acknowledgements decide what b gets.
    set_group_configs(
        share_broker.bootstrap,
        group,
        share_record_lock_duration_ms="30000",
        share_session_timeout_ms="30000",
    )
    with _wire(share_broker) as a, _wire(share_broker) as b, ThreadPoolExecutor(1) as pool:
        joined = _heartbeat(a, group, "member-a", 0, [topic])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        _heartbeat(b, group, "member-b", 0, [topic])
        held = _share_fetch(a, group, "member-a", 0, topic_id).responses[0].partitions[0]
        assert [(r.first_offset, r.last_offset) for r in held.acquired_records] == [(0, 19)]
        opened = _share_fetch(b, group, "member-b", 0, topic_id, max_wait=0)
        assert not opened.responses[0].partitions[0].acquired_records
        http = share_broker.overrides["http.listeners"].removeprefix("http://")
        before = sample(scrape(http), "kbroker_parked_requests")
        parked = pool.submit(_share_fetch, b, group, "member-b", 1, topic_id, (), 10_000)
        eventually(
            lambda: sample(scrape(http), "kbroker_parked_requests") > before,
            timeout=10,
            what="b's fetch to park",
        )
        accept = {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}
        assert _ack(a, group, "member-a", 1, topic_id, accept) == 0
        time.sleep(0.3)  # absence: an answer the acknowledgement caused comes at once
        assert not parked.done()
        release = {"first_offset": 2, "last_offset": 19, "acknowledge_types": [2]}
        assert _ack(a, group, "member-a", 2, topic_id, release) == 0
        got = parked.result(5).responses[0].partitions[0].acquired_records
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(2, 19, 2)]


def _start_offsets(conn, group: str) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    response = conn.request(90, 1, groups=[{"group_id": group, "topics": None}])
    found = response.groups[0]
    assert int(found.error_code) == 0
    return {
        (t.topic_name, int(p.partition_index)): int(p.start_offset)
        for t in found.topics
        for p in t.partitions
    }


def test_share_group_start_offsets_are_altered_and_deleted_only_while_empty(share_broker):  # type: ignore[no-untyped-def]
    topic, group = new_queue(share_broker.bootstrap, 20)
    alter = {
        "group_id": group,
        "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 15}]}
        ],
    }
    with _wire(share_broker) as conn:
        assert int(_heartbeat(conn, group, "member-a", 0, [topic]).error_code) == 0
        assert int(conn.request(91, 0, **alter).error_code) == 68  # NON_EMPTY_GROUP
        assert int(_heartbeat(conn, group, "member-a", -1, None).error_code) == 0
        response = conn.request(91, 0, **alter)
        assert int(response.error_code) == 0
        assert int(response.responses[0].partitions[0].error_code) == 0
        assert _start_offsets(conn, group) == {(topic, 0): 15}
    consumer = share_consumer(share_broker.bootstrap, group, topic)
    offsets: list[int] = []
    deadline = time.monotonic() + 20
    try:
        while len(offsets) < 5 and time.monotonic() < deadline:
            offsets += [m.offset() for m in consumer.poll(0.5) if m.error() is None]
    finally:
        consumer.close()
    assert sorted(offsets) == [15, 16, 17, 18, 19]
    with _wire(share_broker) as conn:
        deleted = conn.request(92, 0, group_id=group, topics=[{"topic_name": topic}])
        assert int(deleted.error_code) == 0
        assert int(deleted.responses[0].error_code) == 0
        assert _start_offsets(conn, group) == {}


def test_two_share_consumers_read_a_three_partition_topic_once(share_broker):  # type: ignore[no-untyped-def]
    total = 900
    topic, group = new_queue(share_broker.bootstrap, total, partitions=3)
    consumers = [share_consumer(share_broker.bootstrap, group, topic) for _ in range(2)]
    seen: Counter[int] = Counter()
    deadline = time.monotonic() + 40
    try:
        while sum(seen.values()) < total and time.monotonic() < deadline:
            for consumer in consumers:
                for message in consumer.poll(0.2):
                    assert message.error() is None, message.error()
                    assert int(message.value()) % 3 == message.partition()
                    seen[int(message.value())] += 1
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(seen) == list(range(total))
    assert max(seen.values()) == 1


def test_in_flight_records_and_lag_of_a_share_partition_are_on_metrics(share_broker):  # type: ignore[no-untyped-def]
    topic, group = new_queue(share_broker.bootstrap, 30)
    consumer = share_consumer(
        share_broker.bootstrap, group, topic, share_acknowledgement_mode="explicit"
    )
    held: list[int] = []
    deadline = time.monotonic() + 20
    try:
        while not held and time.monotonic() < deadline:
            held = [m.offset() for m in consumer.poll(0.5) if m.error() is None]
        url = share_broker.overrides["http.listeners"] + "/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        consumer.close()
    labels = f'group="{group}",partition="0",topic="{topic}"'
    gauges = dict(line.rsplit(" ", 1) for line in text.splitlines() if labels in line)
    # The client may have acquired more than its first poll handed out, never more than all.
    in_flight = float(gauges[f"kbroker_share_partition_in_flight_records{{{labels}}}"])
    assert len(held) <= in_flight <= 30
    assert float(gauges[f"kbroker_share_partition_lag{{{labels}}}"]) == 30


def test_share_fetch_v2_record_limit_mode_and_renewals(share_broker):  # type: ignore[no-untyped-def]
    topic, group = new_queue(share_broker.bootstrap, 20)

    def fetch(conn, epoch: int, renew: bool = False, acks=()):  # type: ignore[no-untyped-def]
        partition = {"partition_index": 0, "acknowledgement_batches": list(acks)}
        response = conn.request(
            78,
            2,
            group_id=group,
            member_id="member-v2",
            share_session_epoch=epoch,
            max_wait=100,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=5,
            batch_size=5,
            share_acquire_mode=1,
            is_renew_ack=renew,
            topics=[{"topic_id": topic_id, "partitions": [partition]}],
            forgotten_topics_data=[],
        )
        assert int(response.error_code) == 0
        part = response.responses[0].partitions[0]
        return [(r.first_offset, r.last_offset) for r in part.acquired_records], part

    with _wire(share_broker) as conn:
        joined = _heartbeat(conn, group, "member-v2", 0, [topic])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        acquired, _ = fetch(conn, 0)
        assert acquired == [(0, 4)]  # record-limit: max_records exactly, batch or not
        renew = {"first_offset": 0, "last_offset": 4, "acknowledge_types": [4]}
        acquired, part = fetch(conn, 1, renew=True, acks=[renew])
        assert acquired == [] and int(part.acknowledge_error_code) == 0
        acquired, _ = fetch(conn, 2)
        assert acquired == [(5, 9)]


def test_renew_acknowledgements_keep_the_acquisition_lock_past_its_duration(share_broker):  # type: ignore[no-untyped-def]
    # KIP-1222: RENEW (type 4) by ShareAcknowledge v2 or a ShareFetch v2 renewal restarts
    # the acquisition lock; while the holder renews, another member gets nothing, and
    # once it stops, the records come back after the lock.
    topic, group = new_queue(share_broker.bootstrap, 5, share_session_timeout_ms="60000")
    renew = {"first_offset": 0, "last_offset": 4, "acknowledge_types": [4]}

    def fetch(conn, member: str, epoch: int, acks=()):  # type: ignore[no-untyped-def]
        partition = {"partition_index": 0, "acknowledgement_batches": list(acks)}
        response = conn.request(
            78,
            2,
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            max_wait=50,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=5,
            batch_size=5,
            share_acquire_mode=0,
            is_renew_ack=bool(acks),
            topics=[{"topic_id": topic_id, "partitions": [partition]}],
            forgotten_topics_data=[],
        )
        assert int(response.error_code) == 0
        (part,) = response.responses[0].partitions if response.responses else (None,)
        if part is None:
            return []
        assert int(part.acknowledge_error_code) == 0
        return [(r.first_offset, r.last_offset) for r in part.acquired_records]

    def acknowledge(conn, member: str, epoch: int) -> None:  # type: ignore[no-untyped-def]
        response = conn.request(
            79,
            2,
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            is_renew_ack=True,
            topics=[
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": [renew]}],
                }
            ],
        )
        assert int(response.error_code) == 0
        assert int(response.responses[0].partitions[0].error_code) == 0

    with _wire(share_broker) as holder, _wire(share_broker) as other:
        joined = _heartbeat(holder, group, "holder", 0, [topic])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        _heartbeat(other, group, "other", 0, [topic])
        assert fetch(holder, "holder", 0) == [(0, 4)]
        holder_epoch, other_epoch = 1, 0
        started = time.monotonic()
        while time.monotonic() - started < 3 * LOCK_MS / 1000:
            if holder_epoch % 2:
                acknowledge(holder, "holder", holder_epoch)
            else:
                assert fetch(holder, "holder", holder_epoch, [renew]) == []
            holder_epoch += 1
            assert fetch(other, "other", other_epoch) == []  # still locked by the holder
            other_epoch += 1
            time.sleep(LOCK_MS / 4000)  # renew well within each lock

        def handed_over():  # type: ignore[no-untyped-def]
            nonlocal other_epoch
            got = fetch(other, "other", other_epoch)
            other_epoch += 1
            return got or None

        assert eventually(handed_over, timeout=15, what="records after the lock") == [(0, 4)]


def test_renew_acknowledgements_are_refused_when_the_group_disables_them(share_broker):  # type: ignore[no-untyped-def]
    # KIP-1240: share.renew.acknowledge.enable=false, set by IncrementalAlterConfigs and
    # described with its source, refuses RENEW by ShareAcknowledge v2 and by ShareFetch v2
    # with INVALID_RECORD_STATE, as Kafka; the records stay acquired by their holder.
    topic, group = new_queue(share_broker.bootstrap, 5, share_renew_acknowledge_enable="false")
    renew = {"first_offset": 0, "last_offset": 4, "acknowledge_types": [4]}
    admin = admin_client(share_broker.bootstrap)
    (described,) = admin.describe_configs([ConfigResource("GROUP", group)]).values()
    entry = described.result(timeout=15)["share.renew.acknowledge.enable"]
    assert (entry.value, entry.source) == ("false", ConfigSource.GROUP_CONFIG.value)
    bad = ConfigResource(
        "GROUP",
        group,
        incremental_configs=[
            ConfigEntry(
                "share.delivery.count.limit", "99", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    (future,) = admin.incremental_alter_configs([bad]).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=15)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "group.share.max.delivery.count.limit" in refused.value.args[0].str()

    def fetch(conn, epoch: int, acks=()):  # type: ignore[no-untyped-def]
        partition = {"partition_index": 0, "acknowledgement_batches": list(acks)}
        response = conn.request(
            78,
            2,
            group_id=group,
            member_id="holder",
            share_session_epoch=epoch,
            max_wait=50,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=5,
            batch_size=5,
            share_acquire_mode=0,
            is_renew_ack=bool(acks),
            topics=[{"topic_id": topic_id, "partitions": [partition]}],
            forgotten_topics_data=[],
        )
        assert int(response.error_code) == 0
        return response.responses[0].partitions[0] if response.responses else None

    with _wire(share_broker) as holder:
        joined = _heartbeat(holder, group, "holder", 0, [topic])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        first = fetch(holder, 0)
        assert first is not None
        assert [(r.first_offset, r.last_offset) for r in first.acquired_records] == [(0, 4)]
        acked = holder.request(
            79,
            2,
            group_id=group,
            member_id="holder",
            share_session_epoch=1,
            is_renew_ack=True,
            topics=[
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": [renew]}],
                }
            ],
        )
        assert int(acked.error_code) == 0
        assert int(acked.responses[0].partitions[0].error_code) == 121  # INVALID_RECORD_STATE
        part = fetch(holder, 2, [renew])
        assert part is not None
        assert int(part.acknowledge_error_code) == 121  # INVALID_RECORD_STATE
        # refused, not applied: the records are still the holder's to accept
        accepted = holder.request(
            79,
            2,
            group_id=group,
            member_id="holder",
            share_session_epoch=3,
            is_renew_ack=False,
            topics=[
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "acknowledgement_batches": [
                                {"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}
                            ],
                        }
                    ],
                }
            ],
        )
        assert int(accepted.responses[0].partitions[0].error_code) == 0


def _described_once_loaded(broker, group: str):  # type: ignore[no-untyped-def]
    """ShareGroupDescribe of one group, asked again while the broker, just started,
    is still loading the group's offsets partition (NOT_COORDINATOR)."""
    with _wire(broker) as conn:

        def loaded():  # type: ignore[no-untyped-def]
            described = conn.request(77, 1, group_ids=[group], include_authorized_operations=False)
            return described.groups[0] if int(described.groups[0].error_code) != 16 else None

        return eventually(loaded, timeout=15, what=f"{group} loaded", interval=0.2)


def _listed_share_groups(broker) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The groups ListGroups names with the type filter "share", with their states."""
    with _wire(broker) as conn:
        listed = conn.request(16, 5, states_filter=[], types_filter=["share"])
        return {g.group_id: g.group_state for g in listed.groups}


def test_an_empty_share_group_survives_a_restart_and_its_deletion_does_too(broker_factory):  # type: ignore[no-untyped-def]
    broker = broker_factory.start_with(BROKER)
    topic, group = new_queue(broker.bootstrap, 0)
    with _wire(broker) as conn:
        joined = _heartbeat(conn, group, "member-1", 0, [topic])
        assert int(joined.error_code) == 0
        assert int(_heartbeat(conn, group, "member-1", -1, None).error_code) == 0
    broker.stop()
    broker.start()
    described = _described_once_loaded(broker, group)
    assert int(described.error_code) == 0
    assert described.group_state == "Empty"
    assert described.group_epoch == 2  # joined (1), left (2)
    assert _listed_share_groups(broker) == {group: "Empty"}
    with _wire(broker) as conn:
        deleted = conn.request(42, 2, groups_names=[group])
        assert [int(r.error_code) for r in deleted.results] == [0]
    broker.stop()
    broker.start()
    assert int(_described_once_loaded(broker, group).error_code) == 69  # GROUP_ID_NOT_FOUND
    assert _listed_share_groups(broker) == {}


def _described_member(broker, group: str):  # type: ignore[no-untyped-def]
    described = _described_once_loaded(broker, group)
    assert int(described.error_code) == 0
    return described, {m.member_id: int(m.member_epoch) for m in described.members}


def test_a_share_group_member_goes_on_at_its_epoch_after_a_kill_minus_nine(broker_factory):  # type: ignore[no-untyped-def]
    """Members and their epochs are in `__consumer_offsets` (Kafka's share group records):
    after a kill -9 the restarted coordinator knows them, and a member's next heartbeat
    at its epoch is answered without it joining again."""
    broker = broker_factory.start_with({**BROKER, "group.share.session.timeout.ms": "30000"})
    topic, group = new_queue(broker.bootstrap, 0)
    with _wire(broker) as conn:
        assert int(_heartbeat(conn, group, "member-1", 0, [topic]).member_epoch) == 1
        assert int(_heartbeat(conn, group, "member-2", 0, [topic]).member_epoch) == 2
    broker.kill()
    broker.start()
    described, members = _described_member(broker, group)
    assert (described.group_state, described.group_epoch, described.assignment_epoch) == (
        "Stable",
        2,
        2,
    )
    # member-1 has not heartbeated since member-2 joined: it is still at the epoch it was told.
    assert members == {"member-1": 1, "member-2": 2}
    with _wire(broker) as conn:
        again = _heartbeat(conn, group, "member-2", 2, None)
        assert (int(again.error_code), int(again.member_epoch)) == (0, 2)
        assert again.assignment is None  # it has its partitions already
        caught_up = _heartbeat(conn, group, "member-1", 1, None)
        assert (int(caught_up.error_code), int(caught_up.member_epoch)) == (0, 2)


def test_a_member_silent_after_a_restart_expires_and_the_group_epoch_moves_on(broker_factory):  # type: ignore[no-untyped-def]
    """As on Kafka, a loaded member's session starts at the load: one that never
    heartbeats again is removed after the session timeout (6 s here), bumping the epoch."""
    broker = broker_factory.start_with(BROKER)
    topic, group = new_queue(broker.bootstrap, 0)
    with _wire(broker) as conn:
        assert int(_heartbeat(conn, group, "member-1", 0, [topic]).error_code) == 0
    broker.kill()
    broker.start()
    described, members = _described_member(broker, group)
    assert members == {"member-1": 1}

    def emptied():  # type: ignore[no-untyped-def]
        described, members = _described_member(broker, group)
        return (described, members) if described.group_state == "Empty" else None

    described, members = eventually(
        emptied, timeout=20, what="the silent member expired", interval=0.5
    )
    assert (described.group_state, described.group_epoch, members) == ("Empty", 2, {})


def test_read_share_group_state_summary_answers_the_committed_state(share_broker):  # type: ignore[no-untyped-def]
    """ReadShareGroupStateSummary (87), which Kafka's group coordinator sends the share
    coordinator for DescribeShareGroupOffsets: the start offset, the leader epoch and
    (v1) how many offsets at or past the start are done with."""
    topic, group = new_queue(share_broker.bootstrap, 20)
    with _wire(share_broker) as conn:
        joined = _heartbeat(conn, group, "member-a", 0, [topic])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        held = _share_fetch(conn, group, "member-a", 0, topic_id).responses[0].partitions[0]
        assert held.acquired_records[0].first_offset == 0
        assert held.acquired_records[-1].last_offset >= 4
        accept = [
            {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]},
            {"first_offset": 3, "last_offset": 4, "acknowledge_types": [1]},
        ]
        assert _ack(conn, group, "member-a", 1, topic_id, *accept) == 0

        def summary(version: int, partition: int = 0):  # type: ignore[no-untyped-def]
            answer = conn.request(
                87,
                version,
                group_id=group,
                topics=[
                    {
                        "topic_id": topic_id,
                        "partitions": [{"partition": partition, "leader_epoch": 0}],
                    }
                ],
            )
            return answer.results[0].partitions[0]

        def settled():  # type: ignore[no-untyped-def]
            found = summary(1)
            return found if int(found.start_offset) == 2 else None

        found = eventually(settled, timeout=20, what="the share state's start offset at 2")
        assert int(found.error_code) == 0
        assert int(found.delivery_complete_count) == 2  # offsets 3 and 4
        assert int(found.leader_epoch) >= 0
        assert _start_offsets(conn, group) == {(topic, 0): 2}
        assert int(summary(0).start_offset) == 2
        # A share-partition with no state: Kafka's defaults; one that does not exist.
        group = unique_group("no-state")
        none = summary(1)
        assert (int(none.error_code), int(none.start_offset), int(none.leader_epoch)) == (0, -1, 0)
        assert int(none.delivery_complete_count) == -1
        assert int(summary(1, partition=7).error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION
