"""A Fetch answer's body is what kio reads back as the same response, in every version,
whichever encoder writes it: the C writer (kbroker/protocol/_responsewrite.c) where it is
built, or its Python reference. Record sets that are file regions stay parts of their own,
in place, for sendfile."""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from kbroker.protocol import fetch_response
from kbroker.protocol.client_frames import decode_response
from kbroker.protocol.encoded import EncodedBody
from kbroker.protocol.fetch_response import (
    FetchedPartition,
    FetchedTopic,
    NodeEndpoint,
    encode_fetch_response,
)

FETCH = 1
VERSIONS = range(19)


@dataclass
class Region:
    """A file region as the connection sends it: only its length is read here."""

    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)

    def read(self) -> bytes:
        return self.data


@pytest.fixture(autouse=True, params=["c", "python"])
def writer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test runs through encode_fetch_response with each encoder behind it."""
    if request.param == "python":
        monkeypatch.setattr(fetch_response, "encode_fetch", fetch_response.encode_fetch_py)
    elif fetch_response.encode_fetch is fetch_response.encode_fetch_py:
        pytest.fail("kbroker.protocol._responsewrite is not built (make .venv/.installed)")
    yield request.param


def read_back(version: int, body: EncodedBody) -> Any:
    """kio's FetchResponse of the body, each region replaced by its bytes (kio reads v4
    on; v0-3, which Kafka 4 dropped, are read by `read_old`)."""
    data = b"".join(part if isinstance(part, bytes) else part.read() for part in body.parts)
    assert len(data) == body.size
    if version < 4:
        return read_old(version, data)
    flexible = version >= 12
    frame = struct.pack(">i", 42) + (b"\x00" if flexible else b"") + data
    correlation, response = decode_response(FETCH, version, frame)
    assert correlation == 42
    return response


def read_old(version: int, data: bytes) -> Any:
    """Fetch v0-3's answer: [throttle_time_ms (v1+)] [topic [partition error high_watermark
    records]], as kio's entities name the fields."""
    pos = 0

    def take(fmt: str) -> Any:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return value

    throttle_ms = take(">i") if version >= 1 else 0
    topics = []
    for _ in range(take(">i")):
        name = data[pos + 2 : pos + 2 + take(">h")].decode()
        pos += len(name.encode())
        partitions = []
        for _ in range(take(">i")):
            index, _error, high_watermark, size = take(">i"), take(">h"), take(">q"), take(">i")
            partitions.append(
                SimpleNamespace(
                    partition_index=index,
                    high_watermark=high_watermark,
                    records=data[pos : pos + size],
                )
            )
            pos += size
        topics.append(SimpleNamespace(topic=name, partitions=tuple(partitions)))
    assert pos == len(data)
    return SimpleNamespace(
        throttle_time=datetime.timedelta(milliseconds=throttle_ms), responses=tuple(topics)
    )


def one_partition(records: object = b"") -> FetchedPartition:
    return FetchedPartition(
        3,
        0,
        high_watermark=120,
        last_stable_offset=110,
        log_start_offset=7,
        aborted_transactions=[(9001, 100), (9002, 105)],
        preferred_read_replica=2,
        records=records,  # type: ignore[arg-type]
        current_leader=(1, 17),
        diverging_epoch=(16, 99),
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_every_field_a_version_carries_reads_back(version: int) -> None:
    topic_id = uuid.uuid4()
    topics = [FetchedTopic("orders", topic_id, [one_partition(b"RECORDS")])]
    body = encode_fetch_response(
        version,
        topics,
        error_code=0,
        session_id=77 if version >= 7 else 0,
        throttle_time_ms=250,
        node_endpoints=[NodeEndpoint(1, "broker-1", 9092, "rack-a")],
    )
    response = read_back(version, body)
    if version >= 1:
        assert response.throttle_time.total_seconds() == 0.25
    if version >= 7:
        assert response.session_id == 77
    (topic,) = response.responses
    if version >= 13:
        assert topic.topic_id == topic_id
    else:
        assert topic.topic == "orders"
    (p,) = topic.partitions
    assert (p.partition_index, p.high_watermark, p.records) == (3, 120, b"RECORDS")
    if version >= 4:
        assert p.last_stable_offset == 110
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [
            (9001, 100),
            (9002, 105),
        ]
    if version >= 5:
        assert p.log_start_offset == 7
    if version >= 11:
        assert p.preferred_read_replica == 2
    if version >= 12:
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (1, 17)
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (16, 99)
    if version >= 16:
        (node,) = response.node_endpoints
        assert (node.node_id, node.host, node.port, node.rack) == (1, "broker-1", 9092, "rack-a")


@pytest.mark.parametrize("version", [4, 11, 12, 18])
def test_a_file_region_is_a_part_of_its_own_between_the_structure_bytes(version: int) -> None:
    first, second = Region(b"A" * 300), Region(b"B" * 40)
    topics = [
        FetchedTopic("t", uuid.uuid4(), [one_partition(first), one_partition(None)]),
        FetchedTopic("u", uuid.uuid4(), [one_partition(second)]),
    ]
    body = encode_fetch_response(version, topics)
    regions = [part for part in body.parts if not isinstance(part, bytes)]
    assert regions == [first, second] and regions[0] is first
    assert all(part for part in body.parts if isinstance(part, bytes))  # no empty parts
    assert isinstance(body.parts[0], bytes)
    # A flexible answer ends with tag sections; an older one with its last records.
    assert isinstance(body.parts[-1], bytes) == (version >= 12)
    response = read_back(version, body)
    records = [p.records for t in response.responses for p in t.partitions]
    assert records == [b"A" * 300, b"", b"B" * 40]


@pytest.mark.parametrize("version", [4, 12])
def test_a_region_of_no_bytes_adds_no_part(version: int) -> None:
    body = encode_fetch_response(version, [FetchedTopic("t", None, [one_partition(Region(b""))])])
    assert all(isinstance(part, bytes) for part in body.parts)


@pytest.mark.parametrize("version", [0, 3, 11, 12, 16])
def test_an_empty_answer_and_a_request_level_error(version: int) -> None:
    body = encode_fetch_response(version, [], error_code=70, session_id=5)
    response = read_back(version, body)
    assert response.responses == ()
    if version >= 7:
        assert response.error_code == 70


def test_no_aborted_list_is_null_and_an_empty_one_is_empty() -> None:
    for aborted, expected in ((None, None), ([], ())):
        p = one_partition()
        p.aborted_transactions = aborted
        for version in (4, 12):
            response = read_back(
                version, encode_fetch_response(version, [FetchedTopic("t", None, [p])])
            )
            assert response.responses[0].partitions[0].aborted_transactions == expected


def test_a_missing_topic_id_is_the_zero_uuid() -> None:
    body = encode_fetch_response(13, [FetchedTopic("t", None, [one_partition()])])
    zero = uuid.UUID(int=0).bytes
    assert b"".join(body.parts)[11:27] == zero  # after throttle, error, session, count
    assert read_back(13, body).responses[0].topic_id is None  # as kio reads the zero UUID


@pytest.mark.parametrize(
    "change",
    [
        {"partition": 2**31},
        {"error_code": 2**15},
        {"high_watermark": 2**63},
        {"current_leader": (2**31, 0)},
        {"aborted_transactions": [(-(2**63) - 1, 0)]},
    ],
)
def test_a_value_its_field_cannot_hold_is_refused_not_truncated(change: dict[str, object]) -> None:
    p = one_partition()
    for name, value in change.items():
        setattr(p, name, value)
    with pytest.raises((OverflowError, struct.error)):
        encode_fetch_response(12, [FetchedTopic("t", None, [p])])


def test_a_topic_name_too_long_for_an_int16_length_is_refused() -> None:
    with pytest.raises((OverflowError, struct.error)):
        encode_fetch_response(4, [FetchedTopic("t" * 40000, None, [one_partition()])])
