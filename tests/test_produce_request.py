"""The hand-written Produce decoder agrees with kio and refuses lengths that lie."""

from __future__ import annotations

import io
import struct
import uuid

import pytest
from kio.index import load_request_schema
from kio.serial import entity_writer

from kbroker.protocol.header import MalformedRequest
from kbroker.protocol.messages import build
from kbroker.protocol.produce_request import decode_produce_request

TOPIC_ID = uuid.uuid4()


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
def test_decodes_what_kio_encodes(version: int) -> None:
    request = decode_produce_request(version, b"hdr" + _encoded(version), 3)
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
def test_records_whose_length_takes_several_varint_bytes_are_decoded_whole(size: int) -> None:
    records = bytes(range(256)) * (size // 256) + bytes(size % 256)
    request = decode_produce_request(9, b"hdr" + _encoded(9, records), 3)
    first, second = request.topic_data[0].partition_data
    assert bytes(first.records) == records
    assert (second.index, second.records) == (4, None)


def test_legacy_versions_have_no_transactional_id() -> None:
    body = struct.pack(">hi", 1, 100) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 2) + b"ab"
    request = decode_produce_request(2, body, 0)
    assert request.transactional_id is None and request.acks == 1
    assert bytes(request.topic_data[0].partition_data[0].records) == b"ab"


@pytest.mark.parametrize("version", [3, 9])
def test_truncated_request_is_malformed(version: int) -> None:
    data = _encoded(version)
    for cut in range(len(data) - 1):
        with pytest.raises(MalformedRequest):
            decode_produce_request(version, data[:cut], 0)


def test_array_count_beyond_the_remaining_bytes_is_refused_before_allocating() -> None:
    body = struct.pack(">hhi", -1, 1, 100) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(MalformedRequest, match="array of"):
        decode_produce_request(3, body, 0)


def test_records_length_beyond_the_frame_is_refused() -> None:
    body = struct.pack(">hhi", -1, 1, 100) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 1_000_000) + b"x"
    with pytest.raises(MalformedRequest):
        decode_produce_request(3, body, 0)


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
