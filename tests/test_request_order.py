"""A connection's requests take effect in the order they were sent, as on Kafka, whose
network layer hands a connection's next request over only when the last is answered:
a request pipelined behind one whose handler has work left to do sees that work done."""

from __future__ import annotations

from pathlib import Path

from inprocess import RawClient, run_broker

from kbroker.broker import Broker
from kbroker.protocol.one_shot import list_offsets_fields

DELETE_RECORDS = 21
LIST_OFFSETS = 2
CREATE_TOPICS = 19
METADATA = 3
EARLIEST = -2


def test_a_list_offsets_behind_a_delete_records_sees_the_new_log_start(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(port)
        await client.create_topic("trimmed", {})
        for _ in range(3):
            assert (await client.produce("trimmed", b"x")).error_code == 0
        for cut in (1, 2, 3):
            deleted, listed = await client.pipeline(
                (
                    DELETE_RECORDS,
                    2,
                    {
                        "topics": [
                            {
                                "name": "trimmed",
                                "partitions": [{"partition_index": 0, "offset": cut}],
                            }
                        ],
                        "timeout": 1000,
                    },
                ),
                (LIST_OFFSETS, 7, list_offsets_fields("trimmed", EARLIEST)),
            )
            assert deleted.topics[0].partitions[0].low_watermark == cut
            assert listed.topics[0].partitions[0].offset == cut
        client.close()

    run_broker(tmp_path, check)


def test_a_metadata_request_behind_create_topics_finds_the_topic(tmp_path: Path) -> None:
    async def check(broker: Broker, port: int) -> None:
        client = await RawClient.connect(port)
        topic = {
            "name": "made",
            "num_partitions": 2,
            "replication_factor": 1,
            "assignments": [],
            "configs": [],
        }
        created, described = await client.pipeline(
            (CREATE_TOPICS, 7, {"topics": [topic], "timeout": 10000, "validate_only": False}),
            (
                METADATA,
                12,
                {
                    "topics": [{"name": "made", "topic_id": None}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            ),
        )
        assert created.topics[0].error_code == 0
        assert described.topics[0].error_code == 0
        assert len(described.topics[0].partitions) == 2
        client.close()

    run_broker(tmp_path, check)


def test_only_requests_that_brokers_alone_send_leave_the_order() -> None:
    """WriteTxnMarkers, the share-group state RPCs and AddPartitionsToTxn from v4 (the
    version partition leaders send) come from brokers that overlap independent requests
    on one link; every API a client sends keeps its connection's order."""
    import kbroker.handlers  # noqa: F401  (registers every handler)
    from kbroker.handlers.registry import APIS

    unordered = {
        key: api.unordered_from for key, api in APIS.items() if api.unordered_from is not None
    }
    assert unordered == {24: 4, 27: 0, 83: 0, 84: 0, 85: 0, 86: 0, 87: 0}
    assert APIS[24].ordered(3) and not APIS[24].ordered(4)
