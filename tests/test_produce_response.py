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
    encode_produce_response_fields,
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


_SHAPES = [
    # (topic name, topic id, partitions, throttle): the usual answer first, then its
    # neighbours that the cached skeleton must not serve wrongly.
    ("orders", TOPIC_ID, [ProducedPartition(3, 0, 41, 1_700_000_000_000, 5)], 0),
    ("orders", TOPIC_ID, [ProducedPartition(0, 0, 0)], 0),
    ("orders", TOPIC_ID, [ProducedPartition(2**31 - 1, 0, 2**62, -1, 2**40)], 0),
    ("o" * 300, uuid.UUID(int=1), [ProducedPartition(7, 0, 12, -1, 0)], 0),
    ("", uuid.UUID(int=0), [ProducedPartition(1, 0, 5)], 0),
    ("orders", TOPIC_ID, [ProducedPartition(3, 0, 41)], 250),
    ("orders", TOPIC_ID, [ProducedPartition(3, 6)], 0),
    ("orders", TOPIC_ID, [ProducedPartition(3, 0, 41, error_message="odd")], 0),
    ("orders", TOPIC_ID, [ProducedPartition(3, 6, current_leader=(2, 9))], 0),
    ("orders", TOPIC_ID, [ProducedPartition(3, 0, 41), ProducedPartition(4, 0, 42)], 0),
]


@pytest.mark.parametrize("version", range(14))
def test_the_usual_answer_is_encoded_as_the_general_encoder_encodes_it(version: int) -> None:
    for _ in range(2):  # once building the skeleton, once from it
        for name, topic_id, partitions, throttle in _SHAPES:
            topics = [ProducedTopic(name, topic_id, partitions)]
            general = encode_produce_response_fields(version, topics, throttle)
            assert encode_produce_response(version, topics, throttle) == general, (name, partitions)
    two = [ProducedTopic("a", uuid.UUID(int=5), [ProducedPartition(0, 0, 1)])] * 2
    assert encode_produce_response(version, two) == encode_produce_response_fields(version, two)
