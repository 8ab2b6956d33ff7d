"""The ShareFetch answer encoded with file regions is byte for byte what kio encodes
from the same fields, and its records are sent from the segment file, not copied."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kbroker.protocol import messages
from kbroker.protocol.fetch_response import NodeEndpoint
from kbroker.protocol.share_fetch_response import (
    ShareFetchedTopic,
    SharePartitionData,
    encode_share_fetch_response,
)
from kbroker.storage.file_slice import FileSlice, SegmentFile

TOPIC = uuid.UUID("0b7d1b8e-58c0-4a8c-9a39-1f4cbd1f7e11")


def _kio(version: int, records: bytes, node_endpoints: list[dict]) -> bytes:
    return messages.encode(
        messages.build_response(
            78,
            version,
            {
                "throttle_time": 0,
                "error_code": 0,
                "error_message": None,
                "acquisition_lock_timeout": 30000,
                "responses": [
                    {
                        "topic_id": TOPIC,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "error_code": 0,
                                "acknowledge_error_code": 121,
                                "acknowledge_error_message": "offset 3 is not acquired",
                                "current_leader": {"leader_id": 1, "leader_epoch": 4},
                                "records": records,
                                "acquired_records": [
                                    {"first_offset": 5, "last_offset": 9, "delivery_count": 1},
                                    {"first_offset": 10, "last_offset": 10, "delivery_count": 3},
                                ],
                            },
                            {
                                "partition_index": 2,
                                "error_code": 6,
                                "acknowledge_error_code": 0,
                                "current_leader": {"leader_id": -1, "leader_epoch": -1},
                                "records": b"",
                                "acquired_records": [],
                            },
                        ],
                    }
                ],
                "node_endpoints": node_endpoints,
            },
        )
    )


def _ours(records: object, nodes: list[NodeEndpoint]) -> list[object]:
    body = encode_share_fetch_response(
        [
            ShareFetchedTopic(
                TOPIC,
                [
                    SharePartitionData(
                        0,
                        0,
                        None,
                        121,
                        "offset 3 is not acquired",
                        (1, 4),
                        records,
                        [(5, 9, 1), (10, 10, 3)],
                    ),
                    SharePartitionData(2, 6, None, 0, None, (-1, -1), b"", []),
                ],
            )
        ],
        acquisition_lock_timeout_ms=30000,
        node_endpoints=nodes,
    )
    assert body.size == sum(len(p) if isinstance(p, bytes) else p.length for p in body.parts)
    return body.parts


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_answer_with_bytes_matches_kio(version: int) -> None:
    records = bytes(range(200))
    (encoded,) = _ours(records, [])
    assert encoded == _kio(version, records, [])


def test_share_fetch_answer_with_node_endpoints_matches_kio() -> None:
    nodes = [NodeEndpoint(1, "127.0.0.1", 9092, None), NodeEndpoint(2, "b", 9093, "r1")]
    (encoded,) = _ours(b"abc", nodes)
    as_dicts = [
        {"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None},
        {"node_id": 2, "host": "b", "port": 9093, "rack": "r1"},
    ]
    assert encoded == _kio(2, b"abc", as_dicts)


def test_share_fetch_records_stay_a_file_region_narrowed_to_the_batches_sent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"H" * 10 + bytes(range(100)) + b"T" * 10)
    whole = FileSlice(SegmentFile(path), 0, 120)
    region = whole.narrow(10, 100)
    whole.release()
    head, sent, tail = _ours(region, [])
    assert sent is region
    assert head + region.read() + tail == _kio(2, bytes(range(100)), [])
    region.release()
