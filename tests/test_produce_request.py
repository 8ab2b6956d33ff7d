"""The hand-written Produce decoder agrees with kio and refuses lengths that lie.

Each test runs the C walk the broker uses and the Python one it follows; on any bytes,
whole, cut or flipped, both give the same request or the same refusal.
"""

from __future__ import annotations

import io
import random
import struct
import uuid
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer

from kbroker.protocol import _requestread, produce_request
from kbroker.protocol.header import MalformedRequest
from kbroker.protocol.messages import build
from kbroker.protocol.produce_request import ProduceRequest, decode_produce_request_py

TOPIC_ID = uuid.uuid4()

Decode = Callable[..., ProduceRequest]
DECODERS = [
    pytest.param(_requestread.decode_produce, id="c"),
    pytest.param(decode_produce_request_py, id="python"),
]


def _encoded(version: int, records: bytes | None = b"batch-bytes") -> bytes:
    cls = load_request_schema(0, version)
    body = {
        "transactional_id": "txn",
        "acks": -1,
        "timeout": 1500,
        "topic_data": [
            {
                "name": "orders",
                "topic_id": TOPIC_ID,
                "partition_data": [{"index": 3, "records": records}, {"index": 4, "records": None}],
            }
        ],
    }
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, body))
    return buf.getvalue()


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("decode", DECODERS)
def test_decodes_what_kio_encodes(decode: Decode, version: int) -> None:
    request = decode(version, b"hdr" + _encoded(version), 3, 1_000_000)
    assert (request.transactional_id, request.acks, request.timeout_ms) == ("txn", -1, 1500)
    topic = request.topic_data[0]
    if version >= 13:
        assert topic.topic_id == TOPIC_ID
    else:
        assert topic.name == "orders"
    first, second = topic.partition_data
    assert (first.index, bytes(first.records)) == (3, b"batch-bytes")
    assert (second.index, second.records) == (4, None)


@pytest.mark.parametrize("size", [127, 128, 300, 16383, 16384, 70000])
@pytest.mark.parametrize("decode", DECODERS)
def test_records_whose_length_takes_several_varint_bytes_are_decoded_whole(
    decode: Decode, size: int
) -> None:
    records = bytes(range(256)) * (size // 256) + bytes(size % 256)
    request = decode(9, b"hdr" + _encoded(9, records), 3, 1_000_000)
    first, second = request.topic_data[0].partition_data
    assert bytes(first.records) == records
    assert (second.index, second.records) == (4, None)


@pytest.mark.parametrize("decode", DECODERS)
def test_legacy_versions_have_no_transactional_id(decode: Decode) -> None:
    body = struct.pack(">hi", 1, 100) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 2) + b"ab"
    request = decode(2, body, 0, 1_000_000)
    assert request.transactional_id is None and request.acks == 1
    assert bytes(request.topic_data[0].partition_data[0].records) == b"ab"


@pytest.mark.parametrize("version", [3, 9])
@pytest.mark.parametrize("decode", DECODERS)
def test_truncated_request_is_malformed(decode: Decode, version: int) -> None:
    data = _encoded(version)
    for cut in range(len(data) - 1):
        with pytest.raises(MalformedRequest):
            decode(version, data[:cut], 0, 1_000_000)


@pytest.mark.parametrize("decode", DECODERS)
def test_array_count_beyond_the_remaining_bytes_is_refused_before_allocating(
    decode: Decode,
) -> None:
    body = struct.pack(">hhi", -1, 1, 100) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(MalformedRequest, match="array of"):
        decode(3, body, 0, 1_000_000)


@pytest.mark.parametrize("decode", DECODERS)
def test_records_length_beyond_the_frame_is_refused(decode: Decode) -> None:
    body = struct.pack(">hhi", -1, 1, 100) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 1_000_000) + b"x"
    with pytest.raises(MalformedRequest):
        decode(3, body, 0, 1_000_000)


def test_producing_to_an_internal_topic_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from inprocess import RawClient, run_broker

    from kbroker.protocol.batch import encode_batch

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("__consumer_offsets", 1, 1, {})
        client = await RawClient.connect(port)
        batch = bytes(encode_batch([(b"k", b"v")], base_timestamp=1000))
        response = await client.call(
            0,
            9,
            {
                "acks": -1,
                "timeout": 1000,
                "topic_data": [
                    {
                        "name": "__consumer_offsets",
                        "partition_data": [{"index": 0, "records": batch}],
                    }
                ],
            },
        )
        client.close()
        assert response.responses[0].partition_responses[0].error_code == 17
        assert broker.replicas.get("__consumer_offsets", 0).log.log_end_offset == 0

    run_broker(tmp_path, check)


def test_the_broker_decodes_produce_in_c() -> None:
    assert produce_request._decode is _requestread.decode_produce


@pytest.mark.parametrize("decode", DECODERS)
def test_a_request_of_more_elements_than_the_budget_is_refused(decode: Decode) -> None:
    partition = struct.pack(">i", 0) + struct.pack(">i", -1)
    body = struct.pack(">hhi", -1, 1, 100) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 5) + partition * 5
    assert len(decode(3, body, 0, 6).topic_data[0].partition_data) == 5
    with pytest.raises(MalformedRequest, match="more than 5 array elements"):
        decode(3, body, 0, 5)


def _outcome(decode: Decode, version: int, data: bytes) -> object:
    try:
        return decode(version, data, 0, 50)
    except (MalformedRequest, UnicodeDecodeError) as exc:
        return type(exc), str(exc)


@settings(max_examples=300)
@given(st.integers(0, 13), st.binary(max_size=120))
def test_c_and_python_agree_on_random_bytes(version: int, data: bytes) -> None:
    assert _outcome(_requestread.decode_produce, version, data) == _outcome(
        decode_produce_request_py, version, data
    )


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
def test_c_and_python_agree_on_cut_and_flipped_requests(version: int) -> None:
    """Every cut of a valid request, and thousands of it with bytes changed: both
    decoders give the same request, or refuse it with the same message."""
    rng = random.Random(version)
    whole = _encoded(version, b"x" * 40)
    cases = [whole[:cut] for cut in range(len(whole) + 1)]
    for _ in range(3000):
        data = bytearray(whole)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.choice(
                (0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256))
            )
        cases.append(bytes(data))
    for data in cases:
        c, python = (
            _outcome(d, version, data)
            for d in (_requestread.decode_produce, decode_produce_request_py)
        )
        assert c == python, data.hex()
