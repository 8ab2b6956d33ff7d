"""The directly encoded ConsumerGroupHeartbeat and OffsetCommit answers are the bytes
kio writes for the same answers (the path a request quota still takes)."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from kbroker.protocol.group_answers import encode_heartbeat_answer, encode_offset_commit_answer
from kbroker.protocol.messages import encode_response

CONSUMER_GROUP_HEARTBEAT = 68
OFFSET_COMMIT = 8
A, B = uuid.UUID(int=0xFEDC << 100), uuid.UUID(int=0x0123 << 64)

HEARTBEATS = [
    (ErrorCode.none, None, "member-1", 7, 5000, None),
    (
        ErrorCode.none,
        None,
        "mémber-ü" * 20,
        2**31 - 1,
        0,
        {A: frozenset({3, 1, 2}), B: frozenset()},
    ),
    (ErrorCode.fenced_member_epoch, "The member epoch is fenced.", None, -1, 0, None),
    (ErrorCode.unknown_member_id, "x" * 200, "", 0, 45000, {}),
    (ErrorCode.none, None, "m", 3, 5000, {B: frozenset(range(200))}),
]


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("answer", HEARTBEATS)
def test_a_heartbeat_answer_is_what_kio_writes(version: int, answer: tuple) -> None:
    error, message, member_id, epoch, interval, assignment = answer
    theirs = encode_response(
        CONSUMER_GROUP_HEARTBEAT,
        version,
        {
            "throttle_time": 0,
            "error_code": error,
            "error_message": message,
            "member_id": member_id,
            "member_epoch": epoch,
            "heartbeat_interval": interval,
            "assignment": None
            if assignment is None
            else {
                "topic_partitions": [
                    {"topic_id": t, "partitions": sorted(p)}
                    for t, p in sorted(assignment.items(), key=lambda kv: str(kv[0]))
                ]
            },
        },
    )
    assert encode_heartbeat_answer(error, message, member_id, epoch, interval, assignment) == theirs


COMMITS = [
    [("orders", A, [(0, ErrorCode.none)])],
    [
        ("ördérs" * 30, None, [(i, ErrorCode.none) for i in range(150)]),
        ("b", B, [(1, ErrorCode.unknown_topic_or_partition), (-1, ErrorCode.none)]),
        ("c", A, []),
    ],
    [],
]


@pytest.mark.parametrize("version", [8, 9, 10])
@pytest.mark.parametrize("topics", COMMITS)
def test_an_offset_commit_answer_is_what_kio_writes(version: int, topics: list) -> None:
    theirs = encode_response(
        OFFSET_COMMIT,
        version,
        {
            "throttle_time": 0,
            "topics": [
                {
                    "name": name,
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": i, "error_code": e} for i, e in parts],
                }
                for name, topic_id, parts in topics
            ],
        },
    )
    assert encode_offset_commit_answer(version, topics) == theirs


@pytest.mark.parametrize("version", range(0, 8))
def test_older_offset_commit_versions_are_left_to_kio(version: int) -> None:
    assert encode_offset_commit_answer(version, [("orders", None, [(0, 0)])]) is None
