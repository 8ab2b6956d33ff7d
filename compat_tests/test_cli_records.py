"""`kbroker produce` and `kbroker consume` against a real broker, as a console user runs them.

Most commands run in this process (`kbroker.cli.main`, output captured); the ones about
pipes and signals run the installed command. confluent-kafka checks what landed.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from compat_tests.broker_process import BrokerProcess, kbroker_command, running_broker
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_topic,
    watermarks,
)
from kbroker.cli import main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("cli-records"), {"num.partitions": "1"}) as node:
        yield node


@pytest.fixture
def kb(broker: BrokerProcess, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch):
    """Run `kbroker ARGS --bootstrap <broker>`; returns (exit code, stdout, stderr)."""

    def run(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main([*args, "--bootstrap", broker.bootstrap])
        captured = capsysbinary.readouterr()
        return code, captured.out.decode(), captured.err.decode()

    return run


def test_produce_batches_thousands_of_lines_in_order(kb, broker):
    topic = unique_topic("cli-rec")
    lines = [f"record-{i}" for i in range(20_000)]
    code, _, err = kb("produce", topic, stdin="\n".join(lines).encode())
    assert code == 0, err
    assert "Produced 20000 records" in err
    assert watermarks(broker.bootstrap, topic) == (0, 20_000)
    code, out, err = kb("consume", topic, "--from", "beginning", "-e")
    assert code == 0, err
    assert out.splitlines() == lines
    assert "Processed a total of 20000 messages" in err


def test_produce_creates_a_missing_topic_when_the_broker_allows(kb, broker):
    topic = unique_topic("cli-auto")
    code, _, err = kb("produce", topic, stdin=b"hello\n")
    assert code == 0, err
    assert [r.value for r in consume_from_beginning(broker.bootstrap, topic, 1)] == [b"hello"]


def test_produce_with_acks_0_reports_what_it_sent_and_exits_0(kb, broker):
    topic = unique_topic("cli-acks0")
    create_topic(broker.bootstrap, topic, partitions=1)
    began = time.monotonic()
    code, out, err = kb("produce", topic, "--acks", "0", "-o", "json", stdin=b"a\nb\nc\n")
    assert code == 0, err
    assert time.monotonic() - began < 5
    doc = json.loads(out)
    assert (doc["acks"], doc["produced"], doc["error"]) == (0, 3, None)
    assert [r.value for r in consume_from_beginning(broker.bootstrap, topic, 3)] == [
        b"a",
        b"b",
        b"c",
    ]


def test_produce_sends_headers_compressed_to_the_partition_asked(kb, broker):
    topic = unique_topic("cli-hdr")
    create_topic(broker.bootstrap, topic, partitions=3)
    code, out, err = kb(
        "produce", topic, "-p", "2", "-H", "source=cli", "-H", "n=1", "-z", "zstd", "-K", ":",
        "-o", "json", stdin=b"k1:v1\nk2:v2\n",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["partitions"] == [
        {"partition": 2, "records": 2, "first_offset": 0, "last_offset": 1}
    ]
    got = consume_from_beginning(broker.bootstrap, topic, 2, partitions=[2])
    assert [(r.key, r.value) for r in got] == [(b"k1", b"v1"), (b"k2", b"v2")]
    assert got[0].headers == [("source", b"cli"), ("n", b"1")]


def test_consume_json_is_one_object_a_line_and_format_fills_kcats_placeholders(kb, broker):
    topic = unique_topic("cli-fmt")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_all(
        broker.bootstrap,
        topic,
        [
            {"key": b"k0", "value": b"v0", "headers": [("h", b"x")], "timestamp": 1000},
            {"key": None, "value": b"v1", "timestamp": 2000},
            {"key": b"k2", "value": b"v2", "timestamp": 3000},
        ],
    )
    code, out, _ = kb("consume", topic, "--from", "beginning", "-e", "-o", "json")
    assert code == 0
    docs = [json.loads(line) for line in out.splitlines()]
    assert [(d["offset"], d["key"], d["value"]) for d in docs] == [
        (0, "k0", "v0"),
        (1, None, "v1"),
        (2, "k2", "v2"),
    ]
    assert docs[0]["headers"] == {"h": "x"} and docs[2]["timestamp"] == 3000
    code, out, _ = kb(
        "consume", topic, "--from", "-2", "-e", "-f", "%t/%p@%o %k=%s %T [%h] %K %S\\n"
    )
    assert out.splitlines() == [f"{topic}/0@1 =v1 2000 [] -1 2", f"{topic}/0@2 k2=v2 3000 [] 2 2"]
    code, out, _ = kb("consume", topic, "--from", "@2000", "-e", "--print-key")
    assert out.splitlines() == ["\tv1", "k2\tv2"]
    code, out, _ = kb("consume", topic, "--from", "1", "-c", "1")
    assert out.splitlines() == ["v1"]


def test_consume_read_committed_leaves_out_aborted_records(kb, broker):
    from confluent_kafka import Producer

    topic = unique_topic("cli-txn")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)
    code, out, _ = kb(
        "consume", topic, "--from", "beginning", "-e", "--isolation-level", "read_committed"
    )
    assert out.splitlines() == ["committed"]
    code, out, _ = kb("consume", topic, "--from", "beginning", "-e")
    assert out.splitlines() == ["aborted", "committed"]


def test_consume_into_a_closed_pipe_ends_quietly(broker):
    topic = unique_topic("cli-pipe")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_all(broker.bootstrap, topic, [{"value": b"x" * 100} for _ in range(50_000)])
    shell = subprocess.run(
        ["bash", "-o", "pipefail", "-c",
         " ".join([*kbroker_command(), "consume", topic, "--from", "beginning", "-e",
                   "--bootstrap", broker.bootstrap]) + " | head -1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout == "x" * 100 + "\n"
    assert "Traceback" not in shell.stderr and "Error" not in shell.stderr


def _ctrl_c_at_its_default() -> None:
    """The command as a terminal starts it. A process started in the background by a
    shell without job control (CI's runner, `make test &`) inherits SIGINT ignored, and
    Python then leaves it ignored, as a background command should: Ctrl-C is not meant
    for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_produce_reports_the_records_acknowledged(broker):
    topic = unique_topic("cli-int")
    create_topic(broker.bootstrap, topic, partitions=1)
    proc = subprocess.Popen(
        [*kbroker_command(), "produce", topic, "--bootstrap", broker.bootstrap],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_at_its_default,
    )
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write("".join(f"line-{i}\n" for i in range(7)))
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while watermarks(broker.bootstrap, topic)[1] < 7 and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 130
    assert err.strip().splitlines() == [f"Interrupted: 7 records acknowledged by {topic}."]
    assert watermarks(broker.bootstrap, topic) == (0, 7)


def test_serve_with_an_unknown_log_level_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run(
        [*kbroker_command(), "serve", "--log-level", "LOUD",
         "--override", f"log.dirs={tmp_path}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "kbroker serve: unknown log level 'LOUD' (one of TRACE, DEBUG, INFO, WARN, WARNING, "
        "ERROR, FATAL, CRITICAL)"
    ]


def test_consume_in_a_group_commits_what_it_printed_and_the_next_run_goes_on(kb, broker):
    from confluent_kafka import Consumer, TopicPartition

    topic, group = unique_topic("cli-grp"), unique_topic("cli-group")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_all(broker.bootstrap, topic, [{"value": b"%d" % i, "partition": i % 2}
                                          for i in range(10)])  # fmt: skip
    code, first, err = kb("consume", topic, "--group", group, "--from", "beginning", "-c", "3")
    assert code == 0, err
    assert len(first.splitlines()) == 3
    # The group's committed offsets come first; --from is for partitions without one.
    code, rest, err = kb("consume", topic, "--group", group, "--from", "beginning", "-e")
    assert code == 0, err
    assert sorted(first.splitlines() + rest.splitlines(), key=int) == [str(i) for i in range(10)]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == [5, 5]
    code, out, _ = kb("consume", topic, "--group", group, "-e")
    assert (code, out) == (0, "")
