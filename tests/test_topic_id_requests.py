"""Produce v13 and Fetch v13+ name topics by id (KIP-516), as Kafka 4.x serves them:
raw requests against an in-process broker write by id and read back by id, and an id
that is no topic's is UNKNOWN_TOPIC_ID."""

from __future__ import annotations

import uuid
from pathlib import Path

from inprocess import RawClient, run_broker

from kbroker.admin.client import fetch_fields
from kbroker.protocol.batch import decode_records, encode_batch, read_header

PRODUCE = 0
FETCH = 1
UNKNOWN_TOPIC_ID = 100
T0 = 1_700_000_000_000


def _produce_by_id(topic_id: uuid.UUID, partition: int, records: bytes) -> dict[str, object]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 5000,
        "topic_data": [
            {"topic_id": topic_id, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def _values(records: bytes) -> list[bytes | None]:
    out: list[bytes | None] = []
    pos = 0
    while pos + 61 <= len(records):
        header = read_header(records, pos)
        out.extend(r.value for r in decode_records(records, pos))
        pos += header.total_size
    return out


def test_produce_v13_and_fetch_v13_by_topic_id(tmp_path: Path) -> None:
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("by-id", 2, 1, {})
        topic_id = broker.controller.state.topics["by-id"].topic_id
        client = await RawClient.connect(port)
        try:
            batch = bytes(encode_batch([b"a", b"b"], T0))
            answer = await client.call(PRODUCE, 13, _produce_by_id(topic_id, 1, batch))
            topic = answer.responses[0]
            assert topic.topic_id == topic_id
            partition = topic.partition_responses[0]
            assert (partition.index, partition.error_code, partition.base_offset) == (1, 0, 0)

            unknown = await client.call(PRODUCE, 13, _produce_by_id(uuid.uuid4(), 0, batch))
            assert unknown.responses[0].partition_responses[0].error_code == UNKNOWN_TOPIC_ID

            for version in (13, 17):
                fetched = await client.call(
                    FETCH,
                    version,
                    fetch_fields(None, topic_id=topic_id, partition=1, max_wait=0, min_bytes=0),
                )
                read = fetched.responses[0]
                assert read.topic_id == topic_id
                assert read.partitions[0].error_code == 0
                assert _values(bytes(read.partitions[0].records)) == [b"a", b"b"]
        finally:
            client.close()

    run_broker(tmp_path, check)


METADATA = 3
INVALID_REQUEST = 42


def test_metadata_v10_and_v11_refuse_topic_ids_and_null_names_as_kafka_does(
    tmp_path: Path,
) -> None:
    """Metadata v10 and v11 carry a topic id and a nullable name for each topic, but Kafka
    looks topics up by name only before v12 and refuses a request naming an id or no
    name (InvalidRequestException): every topic answers INVALID_REQUEST, a null name
    shown as "" (those answers cannot carry null). A v12 request looks the id up."""

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("known", 1, 1, {})
        topic_id = broker.controller.state.topics["known"].topic_id
        client = await RawClient.connect(port)
        try:
            for version in (10, 11):
                for topics in (
                    [{"topic_id": uuid.uuid4(), "name": "other"}, {"name": "known"}],
                    [{"topic_id": None, "name": None}, {"name": "known"}],
                ):
                    answer = await client.call(
                        METADATA, version, {"topics": topics, "allow_auto_topic_creation": False}
                    )
                    assert [(t.name, t.error_code) for t in answer.topics] == [
                        (topics[0]["name"] or "", INVALID_REQUEST),
                        ("known", INVALID_REQUEST),
                    ]
            by_id = await client.call(
                METADATA,
                12,
                {
                    "topics": [{"topic_id": topic_id, "name": None}],
                    "allow_auto_topic_creation": False,
                },
            )
            assert [(t.name, t.error_code) for t in by_id.topics] == [("known", 0)]
        finally:
            client.close()

    run_broker(tmp_path, check)
