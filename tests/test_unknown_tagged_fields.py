"""A tagged field of a tag the request's schema does not define is skipped, as Kafka does.

Flexible versions let a newer client add tagged fields an older broker does not know;
Kafka's generated readers step over them (their size is in the framing) and answer the
request. kio refuses them, so kbroker's request walk cuts them out first, at the top
level, inside nested structs, and inside a known tagged field holding a struct. A
tagged-field section whose sizes run past the request stays a malformed request.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import pytest
from inprocess import run_broker
from test_header import uvarint

from kbroker.broker import Broker
from kbroker.protocol import messages
from kbroker.protocol.client_frames import decode_response, request_frame
from kbroker.protocol.header import MalformedRequest

METADATA, FETCH, CREATE_TOPICS = 3, 1, 19


def tagged(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-field section holding these (tag, value bytes)."""
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in fields)


def compact(text: str) -> bytes:
    return uvarint(len(text) + 1) + text.encode()


def metadata_v12(topic: str, topic_tags: bytes = b"\0", top_tags: bytes = b"\0") -> bytes:
    """Metadata v12 asking for one topic by name, with the given tagged sections."""
    entry = bytes(16) + compact(topic) + topic_tags  # null topic id, name, its tags
    return uvarint(2) + entry + b"\0\0" + top_tags  # 1 topic, two booleans, top tags


def create_topics_v7(topic: str, topic_tags: bytes = b"\0", top_tags: bytes = b"\0") -> bytes:
    """CreateTopics v7 of one 2-partition topic, with the given tagged sections."""
    entry = compact(topic) + struct.pack(">ih", 2, 1) + uvarint(1) + uvarint(1) + topic_tags
    return uvarint(2) + entry + struct.pack(">i?", 30000, False) + top_tags


def decoded(api_key: int, version: int, body: bytes) -> Any:
    return messages.decode_request(api_key, version, body, 0)


def test_an_unknown_top_level_tag_is_skipped() -> None:
    plain = decoded(METADATA, 12, metadata_v12("t"))
    extra = decoded(METADATA, 12, metadata_v12("t", top_tags=tagged((7, b"\xab\xcd"))))
    assert extra == plain


def test_an_unknown_tag_in_a_nested_struct_is_skipped() -> None:
    plain = decoded(METADATA, 12, metadata_v12("t"))
    body = metadata_v12("t", topic_tags=tagged((9, b"\xee")), top_tags=tagged((200, b"")))
    assert decoded(METADATA, 12, body) == plain


def test_known_tags_beside_unknown_ones_keep_their_values() -> None:
    # Fetch v15: ClusterId (tag 0) and ReplicaState (tag 1, a struct with tags of its
    # own, here holding unknown tag 3), then unknown tag 9 at the top level.
    head = struct.pack(">iiibii", 500, 1, 1000, 0, 0, -1) + uvarint(1) + uvarint(1) + compact("")
    replica = struct.pack(">iq", 7, 9) + tagged((3, b"\xab\xcd"))
    body = head + tagged((0, compact("c")), (1, replica), (9, b"\x01"))
    request = decoded(FETCH, 15, body)
    assert request.cluster_id == "c"
    state = request.replica_state
    assert (state.replica_id, state.replica_epoch) == (7, 9)


def test_a_tagged_field_running_past_the_request_is_malformed() -> None:
    body = metadata_v12("t", top_tags=uvarint(1) + uvarint(7) + uvarint(9) + b"\xab")
    with pytest.raises(MalformedRequest, match="past the end"):
        decoded(METADATA, 12, body)


def test_a_nested_tagged_field_running_past_the_request_is_malformed() -> None:
    body = metadata_v12("t", topic_tags=uvarint(1) + uvarint(9) + uvarint(100) + b"\xee")
    with pytest.raises(MalformedRequest):
        decoded(METADATA, 12, body)


async def _send(port: int, api_key: int, version: int, body: bytes) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_frame(api_key, version, 1, "newer-client", body))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        correlation, response = decode_response(api_key, version, await reader.readexactly(size))
    finally:
        writer.close()
    assert correlation == 1
    return response


def test_a_broker_answers_requests_carrying_unknown_tags(tmp_path: Path) -> None:
    unknown_top, unknown_nested = tagged((7, b"\xab\xcd")), tagged((9, b"\xee"))

    async def check(broker: Broker, port: int) -> None:
        created = await _send(
            port, CREATE_TOPICS, 7, create_topics_v7("newer", unknown_nested, unknown_top)
        )
        assert [(t.name, t.error_code, t.num_partitions) for t in created.topics] == [
            ("newer", 0, 2)
        ]
        answer = await _send(port, METADATA, 12, metadata_v12("newer", unknown_nested, unknown_top))
        [topic] = answer.topics
        assert (topic.name, topic.error_code) == ("newer", 0)
        assert sorted(p.partition_index for p in topic.partitions) == [0, 1]
        assert [b.node_id for b in answer.brokers] == [broker.node_id]

    run_broker(tmp_path, check)
