"""The hand-written Produce response encoder writes what kio writes for the same answer."""

from __future__ import annotations

import io
import uuid

import pytest
from kio.index import load_response_schema
from kio.serial import entity_writer

from kbroker.protocol.messages import build
from kbroker.protocol.produce_response import (
    ProducedPartition,
    ProducedTopic,
    encode_produce_response,
)

TOPIC_ID = uuid.uuid4()


def _kio(version: int, partitions: list[dict[str, object]]) -> bytes:
    cls = load_response_schema(0, version)
    body = {
        "responses": [{"name": "orders", "topic_id": TOPIC_ID, "partition_responses": partitions}],
        "throttle_time": 7,
    }
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, body))
    return buf.getvalue()


def _ours(version: int, partitions: list[ProducedPartition]) -> bytes:
    return encode_produce_response(version, [ProducedTopic("orders", TOPIC_ID, partitions)], 7)


@pytest.mark.parametrize("version", range(3, 14))
def test_a_successful_partition_is_encoded_as_kio_encodes_it(version: int) -> None:
    ours = _ours(version, [ProducedPartition(3, 0, 41, 1_700_000_000_000, 5)])
    theirs = _kio(
        version,
        [
            {
                "index": 3,
                "error_code": 0,
                "base_offset": 41,
                "log_append_time": 1_700_000_000_000,
                "log_start_offset": 5,
            }
        ],
    )
    assert ours == theirs


@pytest.mark.parametrize("version", range(3, 14))
def test_a_failed_partition_with_record_errors_is_encoded_as_kio_encodes_it(version: int) -> None:
    failed = ProducedPartition(
        4, 87, error_message="bad record", record_errors=((2, "no key"), (5, None))
    )
    ours = _ours(version, [failed, ProducedPartition(5, 0, 9)])
    theirs = _kio(
        version,
        [
            {
                "index": 4,
                "error_code": 87,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
                "record_errors": [
                    {"batch_index": 2, "batch_index_error_message": "no key"},
                    {"batch_index": 5, "batch_index_error_message": None},
                ],
                "error_message": "bad record",
            },
            {"index": 5, "error_code": 0, "base_offset": 9, "log_append_time": -1},
        ],
    )
    assert ours == theirs
