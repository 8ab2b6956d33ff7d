"""Garbage and hostile requests thrown at a real broker over raw sockets.

The rule under test (DESIGN.md, "Bad input"): every malformed or hostile request gets
Kafka's error code, or a closed connection with a clear log line; never a crash, a
hang, or harm to data already stored. The module's broker first takes known records
from confluent-kafka; the last test reads every one of them back after all the rest.

Requests are built as kio entities (valid structure, hostile values) or as raw bytes
(invalid structure). Everything is bounded: socket timeouts, fixed counts, loopback.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import random
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from compat_tests.broker_process import BrokerProcess, api_versions_round_trip
from compat_tests.confluent_helpers import (
    consume_from_beginning,
    create_topic,
    produce_all,
    unique_topic,
)
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection, fetch_fields, produce_fields
from kbroker.protocol import messages
from kbroker.protocol.batch import CRC_OFFSET, MAGIC_OFFSET, Record, encode_batch

pytestmark = pytest.mark.timeout(120)

SOCKET_TIMEOUT_S = 10.0
LOG_WAIT_S = 5.0
DEFAULT_MAX_REQUEST = 104857600  # socket.request.max.bytes
DEFAULT_MAX_MESSAGE = 1048588  # message.max.bytes

API_VERSIONS, PRODUCE, FETCH, LIST_OFFSETS, METADATA, CREATE_TOPICS = 18, 0, 1, 2, 3, 19
JOIN_GROUP, SYNC_GROUP = 11, 14

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100


# -- a raw Kafka client ------------------------------------------------------------------


# How long the broker's log was when each open raw connection was made: the lines about
# a connection are looked for after that, since its local port may be one an earlier
# connection of the module had, and that one's lines name the same address.
_LOG_AT_OPEN: dict[int, int] = {}


@contextmanager
def raw(broker: BrokerProcess) -> Iterator[BrokerConnection]:
    log_at_open = len(broker.log_text())
    with BrokerConnection(broker.host, broker.port, SOCKET_TIMEOUT_S, "bad-input") as conn:
        _LOG_AT_OPEN[id(conn)] = log_at_open
        try:
            yield conn
        finally:
            del _LOG_AT_OPEN[id(conn)]


def request(api_key: int, version: int, **fields: Any) -> Any:
    """A kio request entity from plain values; fields left out take their defaults."""
    return messages.build(load_request_schema(api_key, version), fields)


def wait_for_log(
    broker: BrokerProcess, text: str, timeout: float = LOG_WAIT_S, since: int = 0
) -> str:
    """The first line containing `text` from character `since` of the log on."""

    def found() -> str | None:
        lines = broker.log_text()[since:].splitlines()
        return next((line for line in lines if text in line), None)

    try:
        return eventually(found, timeout=timeout, what=f"a log line containing {text!r}")
    except AssertionError as missed:
        raise AssertionError(f"{missed}\n{broker.log_tail(40)}") from None


def assert_closed_with_log(broker: BrokerProcess, conn: BrokerConnection, reason: str) -> None:
    assert conn.closed_by_broker(), "the broker kept the connection open"
    line = closing_line(broker, conn)
    assert reason in line, line


def closing_line(broker: BrokerProcess, conn: BrokerConnection) -> str:
    """The broker's log line closing this raw connection."""
    since = _LOG_AT_OPEN.get(id(conn), 0)
    return wait_for_log(broker, f"closing connection from {conn.local}: ", since=since)


def assert_serving(broker: BrokerProcess) -> None:
    assert broker.running(), "broker process exited\n" + broker.log_tail(60)
    api_versions_round_trip(broker.host, broker.port, timeout=SOCKET_TIMEOUT_S)


# -- the module's broker and its known records ---------------------------------------------


@dataclass
class Seeded:
    broker: BrokerProcess
    topic: str
    records: list[dict[str, Any]]
    topic_id: uuid.UUID


@pytest.fixture(scope="module")
def seeded(shared_broker: BrokerProcess) -> Seeded:
    topic = unique_topic("bad-input")
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    records = [
        {
            "key": f"key-{i}".encode(),
            "value": f"value-{i}-".encode() * (1 + i % 9),
            "partition": i % 2,
        }
        for i in range(400)
    ]
    produce_all(shared_broker.bootstrap, topic, records)
    with raw(shared_broker) as conn:
        meta = conn.ask(request(METADATA, 12, topics=[{"name": topic}]))
    (described,) = meta.topics
    return Seeded(shared_broker, topic, records, described.topic_id)


def high_watermark(seeded: Seeded, partition: int) -> int:
    with raw(seeded.broker) as conn:
        answer = conn.ask(
            request(
                LIST_OFFSETS,
                7,
                replica_id=-1,
                topics=[
                    {
                        "name": seeded.topic,
                        "partitions": [
                            {
                                "partition_index": partition,
                                "current_leader_epoch": -1,
                                "timestamp": -1,
                            }
                        ],
                    }
                ],
            )
        )
    (p,) = answer.topics[0].partitions
    assert p.error_code == NONE
    return p.offset


def produce_request(
    topic: str, partition: int, records: bytes | None, acks: int = 1, version: int = 9
) -> Any:
    return request(
        PRODUCE, version, **produce_fields(topic, records, partition=partition, acks=acks)
    )


def produce_error(seeded: Seeded, records: bytes | None, partition: int = 0) -> int:
    """Produce `records` to the seeded topic; return the partition's error code."""
    with raw(seeded.broker) as conn:
        answer = conn.ask(produce_request(seeded.topic, partition, records))
        (p,) = answer.responses[0].partition_responses
        return int(p.error_code)


def fetch_request(
    topic: str | None,
    partition: int,
    offset: int,
    version: int = 12,
    topic_id: uuid.UUID | None = None,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int = 1 << 20,
) -> Any:
    fields = fetch_fields(
        topic,
        partition=partition,
        offset=offset,
        max_wait=0,
        min_bytes=0,
        max_bytes=max_bytes,
        partition_max_bytes=partition_max_bytes,
        topic_id=topic_id,
    )
    return request(FETCH, version, **fields)


def fetched_partition(seeded: Seeded, entity: Any) -> Any:
    with raw(seeded.broker) as conn:
        answer = conn.ask(entity)
    (p,) = answer.responses[0].partitions
    return p


def a_batch(count: int = 3, value: bytes = b"hostile-but-valid") -> bytearray:
    return encode_batch([value] * count, int(time.time() * 1000))


# -- framing garbage ------------------------------------------------------------------------


def test_random_streams_leave_the_broker_serving(seeded: Seeded) -> None:
    rng = random.Random(0xBAD)
    for _ in range(30):
        with raw(seeded.broker) as conn:
            conn.send(rng.randbytes(rng.randint(1, 3000)))
            if conn.closed_by_broker(timeout=0.3):
                closing_line(seeded.broker, conn)
    assert_serving(seeded.broker)


def test_random_bodies_in_valid_frames_are_answered_or_closed_with_a_log_line(
    seeded: Seeded,
) -> None:
    rng = random.Random(0xF00D)
    keys = sorted(seeded.broker.api_versions)
    for _ in range(60):
        key = rng.choice(keys)
        low, high = seeded.broker.api_versions[key]
        version = rng.randint(low, high)
        with raw(seeded.broker) as conn:
            body = rng.randbytes(rng.randint(0, 200))
            conn.send(conn.request_bytes(key, version, body, 77))
            if conn.closed_by_broker(timeout=2.0):
                closing_line(seeded.broker, conn)
    assert_serving(seeded.broker)


def test_size_prefix_of_2_31_minus_1_closes_before_any_body_arrives(seeded: Seeded) -> None:
    with raw(seeded.broker) as conn:
        conn.send(struct.pack(">i", 2**31 - 1))
        assert_closed_with_log(seeded.broker, conn, "bad frame: frame size 2147483647")
    assert_serving(seeded.broker)


def test_negative_size_prefix_closes(seeded: Seeded) -> None:
    with raw(seeded.broker) as conn:
        conn.send(struct.pack(">i", -1) + b"\x00" * 16)
        assert_closed_with_log(seeded.broker, conn, "bad frame: frame size -1")
    assert_serving(seeded.broker)


def test_size_prefix_above_socket_request_max_bytes_closes(seeded: Seeded) -> None:
    with raw(seeded.broker) as conn:
        conn.send(struct.pack(">i", DEFAULT_MAX_REQUEST + 1))
        assert_closed_with_log(seeded.broker, conn, "socket.request.max.bytes")
    assert_serving(seeded.broker)


def test_unknown_api_key_closes(seeded: Seeded) -> None:
    with raw(seeded.broker) as conn:
        conn.send(conn.request_bytes(9999, 0, b"", 1))
        assert_closed_with_log(seeded.broker, conn, "unknown API key 9999")
    assert_serving(seeded.broker)


def test_produce_v99_closes(seeded: Seeded) -> None:
    with raw(seeded.broker) as conn:
        conn.send(conn.request_bytes(PRODUCE, 99, b"\x00" * 20, 1))
        assert_closed_with_log(seeded.broker, conn, "unsupported version 99 of API 0")
    assert_serving(seeded.broker)


def test_api_versions_v99_gets_a_v0_unsupported_version_answer_with_the_api_list(
    seeded: Seeded,
) -> None:
    with raw(seeded.broker) as conn:
        conn.send(conn.request_bytes(API_VERSIONS, 99, b"\x07whatever", 4242))
        answer = conn.read_frame()
        correlation, error, count = struct.unpack_from(">ihi", answer)
        assert (correlation, error) == (4242, UNSUPPORTED_VERSION)
        listed = {
            struct.unpack_from(">hhh", answer, 10 + 6 * i)[0]: struct.unpack_from(
                ">hhh", answer, 10 + 6 * i
            )[1:]
            for i in range(count)
        }
        assert listed == seeded.broker.api_versions
        # The client may now retry with a version both sides speak, on the same connection.
        fine = conn.ask(
            request(API_VERSIONS, 3, client_software_name="x", client_software_version="1")
        )
        assert fine.error_code == NONE


def test_truncated_body_closes(seeded: Seeded) -> None:
    whole = messages.encode(produce_request(seeded.topic, 0, bytes(a_batch())))
    with raw(seeded.broker) as conn:
        conn.send(conn.request_bytes(PRODUCE, 9, whole[: len(whole) // 2], 3))
        assert_closed_with_log(seeded.broker, conn, "malformed produce v9 request (correlation 3)")
    assert_serving(seeded.broker)


def test_array_count_of_35_bits_closes_without_harming_the_broker(seeded: Seeded) -> None:
    # A Fetch v12 whose topics count is ~24.7e9: kio alone would abort the process.
    body = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1) + bytes.fromhex("a8c881905c")
    with raw(seeded.broker) as conn:
        conn.send(conn.request_bytes(FETCH, 12, body + b"\x00" * 32, 5))
        assert_closed_with_log(seeded.broker, conn, "array of 24729642023 elements")
    assert_serving(seeded.broker)


def test_frame_cut_off_then_socket_closed_leaves_the_broker_serving(seeded: Seeded) -> None:
    for cut in (1, 3, 4, 10, 40):
        with raw(seeded.broker) as conn:
            whole = conn.request_bytes(METADATA, 12, b"\x01\x00\x00\x00", 1)
            conn.send(whole[:cut])
    assert_serving(seeded.broker)


def test_thousands_of_tiny_requests_are_answered_in_order(seeded: Seeded) -> None:
    count = 3000
    with raw(seeded.broker) as conn:
        stream = b"".join(conn.request_bytes(API_VERSIONS, 0, b"", i) for i in range(count))
        answers: list[int] = []

        def read_all() -> None:
            for _ in range(count):
                answers.append(struct.unpack_from(">i", conn.read_frame())[0])

        reader = threading.Thread(target=read_all, daemon=True)
        reader.start()
        conn.send(stream)
        reader.join(timeout=60)
        assert answers == list(range(count))


def test_thousands_of_empty_frames_close_at_the_first(seeded: Seeded) -> None:
    with raw(seeded.broker) as conn:
        conn.send(struct.pack(">i", 0) * 5000)
        assert_closed_with_log(seeded.broker, conn, "shorter than a header")
    assert_serving(seeded.broker)


def test_slowloris_does_not_hold_up_other_clients(seeded: Seeded) -> None:
    with raw(seeded.broker) as slow:
        data = slow.request_bytes(API_VERSIONS, 0, b"", 99)
        stop = threading.Event()

        def drip() -> None:
            for i in range(len(data)):
                if stop.is_set():
                    return
                slow.send(data[i : i + 1])
                time.sleep(0.1)  # a slow client, on purpose: a byte every 100 ms

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        try:
            worst = 0.0
            while dripper.is_alive():
                began = time.monotonic()
                assert_serving(seeded.broker)
                worst = max(worst, time.monotonic() - began)
                time.sleep(0.05)  # pacing: a normal client's request every 50 ms
            assert worst < 1.0, f"a normal client waited {worst:.2f}s behind a slow one"
        finally:
            stop.set()
            dripper.join(timeout=10)
        (correlation,) = struct.unpack_from(">i", slow.read_frame())
        assert correlation == 99


# -- corrupt record batches in valid Produce requests -------------------------------------------


def garbage(size: int) -> bytes:
    """Random bytes, but not claiming to be transactional: Kafka refuses those earlier."""
    data = bytearray(random.Random(7).randbytes(size))
    data[22] &= ~0x30  # attributes (int16 at 21): transactional and control bits off
    return bytes(data)


def corrupt(batch: bytearray, position: int, value: bytes) -> bytes:
    batch[position : position + len(value)] = value
    return bytes(batch)


@pytest.mark.parametrize(
    ("name", "records", "code"),
    [
        ("garbage", garbage(300), CORRUPT_MESSAGE),
        ("bad crc", corrupt(a_batch(), CRC_OFFSET, b"\xde\xad\xbe\xef"), CORRUPT_MESSAGE),
        ("bad crc in payload", corrupt(a_batch(), 70, b"\xff"), CORRUPT_MESSAGE),
        ("magic 7", corrupt(a_batch(), MAGIC_OFFSET, b"\x07"), CORRUPT_MESSAGE),
        ("magic -1", corrupt(a_batch(), MAGIC_OFFSET, b"\xff"), CORRUPT_MESSAGE),
        ("length below the header", corrupt(a_batch(), 8, struct.pack(">i", 10)), CORRUPT_MESSAGE),
        ("length 2^31-1", corrupt(a_batch(), 8, struct.pack(">i", 2**31 - 1)), "lie"),
        ("length negative", corrupt(a_batch(), 8, struct.pack(">i", -5)), CORRUPT_MESSAGE),
        ("truncated", bytes(a_batch())[:-7], None),
        ("header only", bytes(a_batch())[:61], None),
        ("valid then garbage", bytes(a_batch()) + b"\x00" * 20, None),
        (
            "valid then bad crc",
            bytes(a_batch()) + corrupt(a_batch(), CRC_OFFSET, b"\0\0\0\0"),
            None,
        ),
        ("magic 1", corrupt(a_batch(), MAGIC_OFFSET, b"\x01"), None),
        ("empty", b"", None),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_corrupt_batch_is_refused_and_nothing_is_appended(
    seeded: Seeded, name: str, records: bytes, code: int | str | None
) -> None:
    before = high_watermark(seeded, 0)
    error = produce_error(seeded, records)
    if code == "lie":
        # Kafka finds no whole batch (INVALID_RECORD); refusing the declared size is as good.
        assert error in (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE), (name, error)
    elif code is not None:
        assert error == code, name
    else:
        # Kafka answers these CORRUPT_MESSAGE or INVALID_RECORD depending on where its
        # batch iterator stops; either way the whole request is refused.
        assert error in (CORRUPT_MESSAGE, INVALID_RECORD), (name, error)
    assert high_watermark(seeded, 0) == before
    assert_serving(seeded.broker)


def test_null_records_are_refused(seeded: Seeded) -> None:
    before = high_watermark(seeded, 1)
    assert produce_error(seeded, None, partition=1) != NONE
    assert high_watermark(seeded, 1) == before


def test_batch_above_max_message_bytes_is_message_too_large(seeded: Seeded) -> None:
    before = high_watermark(seeded, 1)
    big = encode_batch([b"x" * (DEFAULT_MAX_MESSAGE + 100)], int(time.time() * 1000))
    assert produce_error(seeded, bytes(big), partition=1) == MESSAGE_TOO_LARGE
    assert high_watermark(seeded, 1) == before


def test_corrupt_batch_with_acks_0_closes_the_connection(seeded: Seeded) -> None:
    before = high_watermark(seeded, 0)
    bad = corrupt(a_batch(), CRC_OFFSET, b"\0\0\0\0")
    with raw(seeded.broker) as conn:
        entity = produce_request(seeded.topic, 0, bad, acks=0)
        conn.send(conn.request_bytes(PRODUCE, 9, messages.encode(entity), 1))
        assert_closed_with_log(seeded.broker, conn, "acks=0")
    assert high_watermark(seeded, 0) == before


def last_stable_offset(broker: BrokerProcess, topic: str, partition: int) -> int:
    """ListOffsets latest under read_committed: where such consumers stop."""
    with raw(broker) as conn:
        answer = conn.ask(
            request(
                LIST_OFFSETS,
                7,
                replica_id=-1,
                isolation_level=1,
                topics=[
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": partition,
                                "current_leader_epoch": -1,
                                "timestamp": -1,
                            }
                        ],
                    }
                ],
            )
        )
    return answer.topics[0].partitions[0].offset


def test_client_control_batch_is_invalid_record(seeded: Seeded) -> None:
    # A forged COMMIT marker (control key: version 0, type 1).
    marker = encode_batch(
        [Record(b"\x00\x00\x00\x01", b"\x00" * 6)],
        int(time.time() * 1000),
        producer_id=5,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    before = high_watermark(seeded, 1)
    assert produce_error(seeded, bytes(marker), partition=1) == INVALID_RECORD
    assert high_watermark(seeded, 1) == before


@pytest.mark.parametrize("transactional_id", [None, "never-initialised"])
def test_transactional_batch_outside_any_transaction_is_refused(
    broker_factory: Any, transactional_id: str | None
) -> None:
    """Appended, it would hold the last stable offset below it for good (a hanging
    transaction): read_committed consumers would stall. Kafka refuses it before any
    append (no transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED; else
    transaction verification, KIP-890)."""
    broker = broker_factory.start()  # its own: a hung partition must not stall the others
    topic = unique_topic("bad-input-txn")
    create_topic(broker.bootstrap, topic)
    batch = encode_batch(
        [b"in no transaction"],
        int(time.time() * 1000),
        producer_id=4242,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    entity = request(
        PRODUCE,
        9,
        transactional_id=transactional_id,
        acks=-1,
        timeout=10000,
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}],
    )
    with raw(broker) as conn:
        answer = conn.ask(entity)
    error = answer.responses[0].partition_responses[0].error_code
    assert error in (
        INVALID_RECORD,
        INVALID_TXN_STATE,
        INVALID_PRODUCER_ID_MAPPING,
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    )
    assert last_stable_offset(broker, topic, 0) == 0


# -- hostile values in well-formed requests ----------------------------------------------------


def test_acks_5_is_invalid_required_acks(seeded: Seeded) -> None:
    before = high_watermark(seeded, 0)
    with raw(seeded.broker) as conn:
        answer = conn.ask(produce_request(seeded.topic, 0, bytes(a_batch()), acks=5))
    assert answer.responses[0].partition_responses[0].error_code == INVALID_REQUIRED_ACKS
    assert high_watermark(seeded, 0) == before


@pytest.mark.parametrize("partition", [-1, 2, 2**31 - 1])
def test_produce_to_a_partition_that_does_not_exist(seeded: Seeded, partition: int) -> None:
    assert produce_error(seeded, bytes(a_batch()), partition) == UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize(
    "topic", ["never-created", "x" * 10_000, "bad name!", "", "..", "é" * 100], ids=str.__len__
)
def test_produce_to_a_topic_that_does_not_exist(seeded: Seeded, topic: str) -> None:
    with raw(seeded.broker) as conn:
        answer = conn.ask(produce_request(topic, 0, bytes(a_batch())))
    assert answer.responses[0].partition_responses[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert_serving(seeded.broker)


def test_produce_v13_to_an_unknown_topic_id(seeded: Seeded) -> None:
    entity = request(
        PRODUCE,
        13,
        acks=1,
        timeout=10000,
        topic_data=[
            {
                "topic_id": uuid.uuid4(),
                "partition_data": [{"index": 0, "records": bytes(a_batch())}],
            }
        ],
    )
    with raw(seeded.broker) as conn:
        answer = conn.ask(entity)
    assert answer.responses[0].partition_responses[0].error_code == UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("offset", [-1, -(2**63), 10**12])
def test_fetch_outside_the_log_is_offset_out_of_range(seeded: Seeded, offset: int) -> None:
    p = fetched_partition(seeded, fetch_request(seeded.topic, 0, offset))
    assert p.error_code == OFFSET_OUT_OF_RANGE
    assert not p.records


@pytest.mark.parametrize("partition", [-1, 2, 2**31 - 1])
def test_fetch_from_a_partition_that_does_not_exist(seeded: Seeded, partition: int) -> None:
    p = fetched_partition(seeded, fetch_request(seeded.topic, partition, 0))
    assert p.error_code == UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("topic", ["never-created", "x" * 10_000, "bad name!", ""], ids=str.__len__)
def test_fetch_from_a_topic_that_does_not_exist(seeded: Seeded, topic: str) -> None:
    p = fetched_partition(seeded, fetch_request(topic, 0, 0))
    assert p.error_code == UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_v13_from_an_unknown_topic_id(seeded: Seeded) -> None:
    p = fetched_partition(seeded, fetch_request(None, 0, 0, version=13, topic_id=uuid.uuid4()))
    assert p.error_code == UNKNOWN_TOPIC_ID


def test_fetch_with_the_largest_max_bytes_returns_data(seeded: Seeded) -> None:
    entity = fetch_request(seeded.topic, 0, 0, max_bytes=2**31 - 1, partition_max_bytes=2**31 - 1)
    p = fetched_partition(seeded, entity)
    assert p.error_code == NONE
    assert p.records


@pytest.mark.parametrize("max_bytes", [-1, -(2**31), 0])
def test_fetch_with_non_positive_partition_max_bytes_is_answered(
    seeded: Seeded, max_bytes: int
) -> None:
    p = fetched_partition(seeded, fetch_request(seeded.topic, 0, 0, partition_max_bytes=max_bytes))
    assert p.partition_index == 0
    assert_serving(seeded.broker)


@pytest.mark.parametrize("partition", [-1, 2])
def test_list_offsets_of_a_partition_that_does_not_exist(seeded: Seeded, partition: int) -> None:
    entity = request(
        LIST_OFFSETS,
        7,
        replica_id=-1,
        topics=[
            {
                "name": seeded.topic,
                "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}
                ],
            }
        ],
    )
    with raw(seeded.broker) as conn:
        answer = conn.ask(entity)
    assert answer.topics[0].partitions[0].error_code == UNKNOWN_TOPIC_OR_PARTITION


def test_list_offsets_of_a_partition_named_twice_is_invalid_request(seeded: Seeded) -> None:
    part = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
    entity = request(
        LIST_OFFSETS, 7, replica_id=-1, topics=[{"name": seeded.topic, "partitions": [part, part]}]
    )
    with raw(seeded.broker) as conn:
        answer = conn.ask(entity)
    assert [p.error_code for p in answer.topics[0].partitions] == [INVALID_REQUEST] * 2


INVALID_NAMES = ["bad name!", "x" * 10_000, "x" * 250, ".", "..", "tab\there", ""]


def metadata_error(seeded: Seeded, name: str, auto_create: bool) -> int:
    with raw(seeded.broker) as conn:
        answer = conn.ask(
            request(METADATA, 12, topics=[{"name": name}], allow_auto_topic_creation=auto_create)
        )
    (topic,) = answer.topics
    assert not topic.partitions
    return int(topic.error_code)


@pytest.mark.parametrize("name", INVALID_NAMES, ids=repr)
def test_metadata_auto_creation_of_an_invalid_name_is_invalid_topic(
    seeded: Seeded, name: str
) -> None:
    assert metadata_error(seeded, name, auto_create=True) == INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("name", INVALID_NAMES, ids=repr)
def test_metadata_without_auto_creation_of_an_invalid_name_is_invalid_topic(
    seeded: Seeded, name: str
) -> None:
    assert metadata_error(seeded, name, auto_create=False) == INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_topic_without_a_name_below_v12_is_invalid_request(
    broker_factory: Any, version: int
) -> None:
    # Its own broker: the failure logs a traceback the module's broker must not show.
    with raw(broker_factory.start()) as conn:
        answer = conn.ask(request(METADATA, version, topics=[{"name": None, "topic_id": None}]))
    assert [t.error_code for t in answer.topics] == [INVALID_REQUEST]


def create_topics(seeded: Seeded, *topics: dict[str, Any]) -> dict[str, int]:
    """CreateTopics v7 over a raw socket: {name: error code} (no client-side checks)."""
    full = [{"num_partitions": 1, "replication_factor": 1, **t} for t in topics]
    with raw(seeded.broker) as conn:
        answer = conn.ask(request(CREATE_TOPICS, 7, topics=full, timeout=10000))
    return {t.name: int(t.error_code) for t in answer.topics}


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"name": "bad name!"}, INVALID_TOPIC_EXCEPTION),
        ({"name": "x" * 300}, INVALID_TOPIC_EXCEPTION),
        ({"name": ""}, INVALID_TOPIC_EXCEPTION),
        ({"name": "..", "num_partitions": 1}, INVALID_TOPIC_EXCEPTION),
        ({"name": "bad-input-minus-5", "num_partitions": -5}, INVALID_PARTITIONS),
        ({"name": "bad-input-zero-partitions", "num_partitions": 0}, INVALID_PARTITIONS),
        ({"name": "bad-input-2-31-partitions", "num_partitions": 2**31 - 1}, INVALID_PARTITIONS),
        ({"name": "bad-input-rf-0", "replication_factor": 0}, INVALID_REPLICATION_FACTOR),
        ({"name": "bad-input-rf-3", "replication_factor": 3}, INVALID_REPLICATION_FACTOR),
        (
            {
                "name": "bad-input-bad-config",
                "configs": [{"name": "retention.ms", "value": "soon"}],
            },
            INVALID_CONFIG,
        ),
        (
            {
                "name": "bad-input-unknown-config",
                "configs": [{"name": "no.such.config", "value": "1"}],
            },
            INVALID_CONFIG,
        ),
    ],
    ids=[
        "invalid chars",
        "300 chars",
        "empty name",
        "dot dot",
        "-5 partitions",
        "0 partitions",
        "2^31-1 partitions",
        "rf 0",
        "rf 3 of 1 broker",
        "bad config value",
        "unknown config",
    ],
)
def test_create_topics_with_hostile_values(
    seeded: Seeded, fields: dict[str, Any], code: int
) -> None:
    assert create_topics(seeded, fields) == {fields["name"]: code}
    assert_serving(seeded.broker)


# -- every API, random well-formed values ---------------------------------------------------

_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    "string": st.sampled_from(["", "bad-input", "x" * 300, "bad name!"]) | st.text(max_size=10),
    "bytes": st.binary(max_size=20),
    "records": st.none() | st.binary(max_size=80),
    "uuid": st.none() | st.uuids(),
    "timedelta_i32": st.integers(-(2**31), 2**31 - 1).map(
        lambda ms: datetime.timedelta(milliseconds=ms)
    ),
    "timedelta_i64": st.integers(-(2**40), 2**40).map(
        lambda ms: datetime.timedelta(milliseconds=ms)
    ),
}


@functools.cache
def entities(cls: type) -> st.SearchStrategy[Any]:
    """Any instance of a kio request entity: valid structure, hostile values."""
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if isinstance(kind, EntityField | EntityTupleField):
            inner = st.deferred(lambda t=kind.type_: entities(t))
        else:
            inner = _PRIMITIVES[f.metadata["kafka_type"]]
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            inner = st.lists(inner, max_size=3).map(tuple)
        if is_optional(f):
            inner = st.none() | inner
        kwargs[f.name] = inner
    return st.builds(cls, **kwargs)


# Requests a broker may rightly hold until a timeout the client chose.
MAY_PARK = {FETCH, JOIN_GROUP, SYNC_GROUP}


def tame(entity: Any) -> Any:
    """Keep a random Fetch from waiting up to 24 days; every other value stays hostile.

    Metadata v10-11 topics without a name are tested on their own (a known failure).
    """
    key, version = int(entity.__api_key__), int(entity.__version__)
    if key == FETCH:
        return dataclasses.replace(entity, max_wait=datetime.timedelta(milliseconds=50))
    if key == METADATA and version in (10, 11) and entity.topics:
        named = tuple(t for t in entity.topics if t.name is not None)
        return dataclasses.replace(entity, topics=named)
    return entity


def served_versions(broker: BrokerProcess) -> list[tuple[int, int]]:
    return [
        (key, version)
        for key, (low, high) in sorted(broker.api_versions.items())
        for version in range(low, high + 1)
        if key in messages.API_NAMES and version in messages.known_versions(key)
    ]


def fuzz_version(broker: BrokerProcess, key: int, version: int) -> list[str]:
    """A few random well-formed requests of one API version, each on its own connection.

    Returns what went wrong: a request neither answered nor refused, or refused by a
    handler failure ("internal error") rather than a deliberate close.
    """
    name = f"{messages.API_NAMES[key]} v{version}"
    problems: list[str] = []

    @settings(
        max_examples=4,
        derandomize=True,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(entities(load_request_schema(key, version)))
    def one(entity: Any) -> None:
        entity = tame(entity)
        with raw(broker) as conn:
            conn.send(conn.request_bytes(key, version, messages.encode(entity), 7))
            if key == PRODUCE and entity.acks == 0:
                # No answer by design; a probe after it must be answered, or the
                # connection closed (Kafka's way of reporting a failed acks=0 write).
                conn.send(conn.request_bytes(API_VERSIONS, 0, b"", 8))
            conn.sock.settimeout(5.0)
            try:
                answer = conn.read_frame()
            except TimeoutError:
                if key not in MAY_PARK:
                    problems.append(f"{name} neither answered nor closed: {entity!r}")
                return
            except ConnectionError:
                line = closing_line(broker, conn)
                if "internal error" in line:
                    problems.append(f"{name} failed in its handler: {entity!r}")
                return
            (correlation,) = struct.unpack_from(">i", answer)
            if correlation not in (7, 8):
                problems.append(f"{name} answered correlation {correlation}")

    one()
    return problems


def test_random_values_in_every_served_request_are_answered_or_refused(seeded: Seeded) -> None:
    problems: list[str] = []
    for key, version in served_versions(seeded.broker):
        problems += fuzz_version(seeded.broker, key, version)
    assert_serving(seeded.broker)
    assert not problems, "\n".join(problems)


# -- after all of it ---------------------------------------------------------------------


def test_every_record_reads_back_intact_and_clients_still_work(seeded: Seeded) -> None:
    broker = seeded.broker
    assert_serving(broker)
    got = consume_from_beginning(broker.bootstrap, seeded.topic, len(seeded.records), (0, 1))
    by_partition: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {0: [], 1: []}
    for r in got:
        by_partition[r.partition].append((r.offset, r.key, r.value))
    for partition in (0, 1):
        sent = [(r["key"], r["value"]) for r in seeded.records if r["partition"] == partition]
        seen = sorted(by_partition[partition])
        assert [offset for offset, _, _ in seen] == list(range(len(sent)))
        assert [(k, v) for _, k, v in seen] == sent
    # A normal client still produces and consumes on a fresh topic.
    fresh = unique_topic("bad-input-after")
    create_topic(broker.bootstrap, fresh)
    values = [f"after-{i}".encode() for i in range(50)]
    produce_all(broker.bootstrap, fresh, ({"value": v, "partition": 0} for v in values))
    assert [r.value for r in consume_from_beginning(broker.bootstrap, fresh, 50)] == values


def test_the_broker_logged_no_tracebacks(seeded: Seeded) -> None:
    assert_serving(seeded.broker)
    assert "Traceback" not in seeded.broker.log_text(), seeded.broker.log_tail(80)


def test_idle_connection_is_closed_after_connections_max_idle_ms(broker_factory: Any) -> None:
    broker = broker_factory.start(connections_max_idle_ms=500)
    with raw(broker) as idle, raw(broker) as busy:
        began = time.monotonic()
        while time.monotonic() - began < 1.5:
            busy.ask(request(API_VERSIONS, 0))
            time.sleep(0.1)  # the input: the idle limit passes while the busy one asks
        assert_closed_with_log(broker, idle, "connections.max.idle.ms")
        assert busy.ask(request(API_VERSIONS, 0)).error_code == NONE
