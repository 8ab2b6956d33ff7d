"""A producer that sends batches whose records lie cannot make a partition unreadable.

Each poisoned batch (valid header and CRC; records that do not inflate, parse, count or
time right) is produced over a raw connection between good records from
confluent-kafka. It gets Kafka's error code (with record_errors where Kafka fills them),
the partition's log end does not move, and at the end a stock consumer reads exactly
the good records, in order, without error.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

import pytest

from compat_tests.broker_process import BrokerProcess
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_topic,
    watermarks,
)
from compat_tests.poisoned_batches import (
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    keyless,
    long_ago,
    old_poisoned,
    poisoned,
)
from kbroker.admin.client import BrokerConnection, produce_fields
from kbroker.protocol.batch import encode_batch

pytestmark = pytest.mark.timeout(120)

PRODUCE = 0
NOW = int(time.time() * 1000)
CASES = poisoned(NOW)
OLD_CASES = old_poisoned(NOW)


@dataclass
class Topics:
    broker: BrokerProcess
    plain: str
    compacted: str
    strict: str  # message.timestamp.before.max.ms = 1 day
    good: dict[str, int]  # topic -> good records produced so far


@pytest.fixture(scope="module")
def topics(shared_broker: BrokerProcess) -> Topics:
    plain, compacted, strict = (unique_topic(p) for p in ("poison", "poison-compact", "poison-ts"))
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, plain)
    create_topic(bootstrap, compacted, config={"cleanup.policy": "compact"})
    create_topic(bootstrap, strict, config={"message.timestamp.before.max.ms": "86400000"})
    t = Topics(shared_broker, plain, compacted, strict, {plain: 0, compacted: 0, strict: 0})
    for topic in (plain, compacted, strict):
        produce_good(t, topic)
    return t


def produce_good(t: Topics, topic: str, n: int = 2) -> None:
    start = t.good[topic]
    produce_all(
        t.broker.bootstrap,
        topic,
        [
            {"key": f"k{start + i}".encode(), "value": f"good-{start + i}".encode()}
            for i in range(n)
        ],
    )
    t.good[topic] += n


def produce_raw(t: Topics, topic: str, records: bytes) -> Any:
    """Produce v9 (acks=all) of one partition's records; the partition's answer."""
    with BrokerConnection(t.broker.host, t.broker.port, 10.0, "poisoner") as conn:
        answer = conn.request(PRODUCE, 9, **produce_fields(topic, records))
    (p,) = answer.responses[0].partition_responses
    return p


def refused_without_append(t: Topics, topic: str, records: bytes, code: int) -> Any:
    before = watermarks(t.broker.bootstrap, topic)
    answer = produce_raw(t, topic, records)
    assert answer.error_code == code, answer
    assert answer.error_message, "Kafka says why"
    assert watermarks(t.broker.bootstrap, topic) == before
    produce_good(t, topic)  # the partition keeps taking good records after it
    return answer


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_poisoned_batch_gets_kafkas_code_and_nothing_is_appended(topics: Topics, name: str) -> None:
    records, code = CASES[name]
    refused_without_append(topics, topics.plain, records, code)


def test_keyless_record_to_a_compacted_topic_is_invalid_record_naming_it(topics: Topics) -> None:
    answer = refused_without_append(topics, topics.compacted, keyless(NOW), INVALID_RECORD)
    assert [e.batch_index for e in answer.record_errors] == [1]


def test_timestamp_before_the_topics_limit_is_invalid_timestamp(topics: Topics) -> None:
    answer = refused_without_append(topics, topics.strict, long_ago(NOW), INVALID_TIMESTAMP)
    assert [e.batch_index for e in answer.record_errors] == [0]


def test_a_consumer_reads_every_good_record_and_nothing_else(topics: Topics) -> None:
    for topic in (topics.plain, topics.compacted, topics.strict):
        got = consume_from_beginning(topics.broker.bootstrap, topic, topics.good[topic])
        assert [r.value for r in got] == [f"good-{i}".encode() for i in range(topics.good[topic])]
        assert [r.offset for r in got] == list(range(topics.good[topic]))
        assert watermarks(topics.broker.bootstrap, topic)[1] == topics.good[topic]


def produce_v2_raw(t: Topics, topic: str, records: bytes) -> tuple[int, int]:
    """Produce v2 (message format v0/v1, acks=all) of one partition's records: the
    partition's (error code, base offset)."""
    name = topic.encode()
    body = struct.pack(">hii", -1, 10000, 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">iii", 1, 0, len(records)) + records
    with BrokerConnection(t.broker.host, t.broker.port, 10.0, "old-poisoner") as conn:
        answer = conn.receive_raw(conn.send_raw(PRODUCE, 2, body))
    pos = 4 + 2 + len(name) + 4  # topic count, name, partition count
    _index, error, base_offset = struct.unpack_from(">ihq", answer, pos)
    return error, base_offset


@pytest.mark.parametrize("name", list(OLD_CASES), ids=list(OLD_CASES))
def test_poisoned_old_format_message_set_gets_kafkas_code_and_nothing_is_appended(
    topics: Topics, name: str
) -> None:
    records, code = OLD_CASES[name]
    before = watermarks(topics.broker.bootstrap, topics.plain)
    assert produce_v2_raw(topics, topics.plain, records)[0] == code
    assert watermarks(topics.broker.bootstrap, topics.plain) == before
    produce_good(topics, topics.plain)


def test_a_producer_id_this_node_never_handed_out_is_appended(topics: Topics) -> None:
    """Not poison: ids come in blocks each node's coordinator reserves through the
    controller, and a leader may take an id's first batch before it has applied that
    block. Kafka checks the sequence (0 for a new id), not where the id came from."""
    topic = unique_topic("foreign-id")
    create_topic(topics.broker.bootstrap, topic)
    batch = bytes(encode_batch([b"v"], NOW, producer_id=2**40, producer_epoch=0, base_sequence=0))
    assert produce_raw(topics, topic, batch).error_code == 0
    assert produce_raw(topics, topic, batch).error_code == 0  # the retry: a duplicate
    assert watermarks(topics.broker.bootstrap, topic) == (0, 1)
