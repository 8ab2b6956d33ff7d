"""Metadata's topic entries are written once and copied into later answers while the
TopicInfo and the brokers' view they show stay (handlers/topic_answers.py): the copies
are the bytes a description gives, and any change of a partition or of a broker's
liveness or offline replicas is in the next answer."""

from __future__ import annotations

import uuid
from pathlib import Path

from inprocess import RawClient, run_broker

from kbroker.controller.state import BrokerInfo, PartitionInfo, TopicInfo
from kbroker.handlers.metadata import describe_topic
from kbroker.handlers.topic_answers import (
    TopicAnswers,
    WrittenTopic,
    answer_type,
    brokers_view,
    write_answer,
)
from kbroker.protocol import messages

METADATA = 3
TOPIC_ID = uuid.UUID(int=7)


def _topic(leader: int = 1, isr: tuple[int, ...] = (1, 2, 3)) -> TopicInfo:
    return TopicInfo(
        "orders",
        TOPIC_ID,
        tuple(PartitionInfo(p, leader, (1, 2, 3), isr, leader_epoch=4) for p in range(6)),
    )


BROKERS = {n: BrokerInfo(n, "127.0.0.1", 9090 + n) for n in (1, 2, 3)}


def _entry(answers: TopicAnswers, topic: TopicInfo, brokers: dict[int, BrokerInfo], version: int):
    entry = answers.entry(
        topic, version, brokers_view(brokers), lambda: describe_topic(topic, brokers)
    )
    assert isinstance(entry, WrittenTopic)
    return entry


def test_an_entry_is_kept_while_its_topic_info_and_the_brokers_view_stay() -> None:
    answers = TopicAnswers()
    topic = _topic()
    first = _entry(answers, topic, BROKERS, 12)
    assert _entry(answers, topic, dict(BROKERS), 12) is first

    moved = _entry(answers, _topic(leader=2, isr=(2, 3)), BROKERS, 12)
    assert moved is not first
    assert {p["leader_id"] for p in moved.description["partitions"]} == {2}

    fenced = {**BROKERS, 3: BrokerInfo(3, "127.0.0.1", 9093, fenced=True)}
    seen_fenced = _entry(answers, topic, fenced, 12)
    assert seen_fenced is not first
    assert {tuple(p["offline_replicas"]) for p in seen_fenced.description["partitions"]} == {(3,)}

    offline = {
        **BROKERS,
        2: BrokerInfo(2, "127.0.0.1", 9092, offline_replicas=frozenset({(TOPIC_ID, 0)})),
    }
    seen_offline = _entry(answers, topic, offline, 12)
    assert seen_offline.description["partitions"][0]["offline_replicas"] == [2]
    assert seen_offline.description["partitions"][1]["offline_replicas"] == []


def test_past_its_limit_the_store_starts_again() -> None:
    answers = TopicAnswers(limit=3)
    for n in range(5):
        topic = TopicInfo(f"t{n}", uuid.UUID(int=n), ())
        _entry(answers, topic, BROKERS, 12)
    assert len(answers) == 2
    answers.hold(10_000)  # four versions of every topic of a large cluster
    assert answers.limit == 40_000


def test_an_answer_with_written_entries_is_kios_answer_in_every_version() -> None:
    answers = TopicAnswers()
    missing = {"error_code": 3, "name": "gone", "topic_id": None, "partitions": []}
    for version in range(0, 14):
        entry = _entry(answers, _topic(), BROKERS, version)
        answer = {
            "throttle_time": 0,
            "brokers": [{"node_id": 1, "host": "h", "port": 1, "rack": None}],
            "cluster_id": "c",
            "controller_id": 1,
            "topics": [entry.description, missing],
        }
        written = write_answer(version, answer, [entry, missing])
        assert written is not None
        assert written == messages.encode(messages.build(answer_type(version), answer))
        assert entry.written in written


def test_a_broker_answers_each_change_of_a_topic_at_once(tmp_path: Path) -> None:
    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("grows", 2, 1, {})
        client = await RawClient.connect(port)

        async def partitions(version: int) -> list[tuple[int, int]]:
            answer = await client.call(
                METADATA,
                version,
                {
                    "topics": [{"name": "grows", "topic_id": None}],
                    "allow_auto_topic_creation": False,
                },
            )
            (topic,) = answer.topics
            return sorted((p.partition_index, p.leader_id) for p in topic.partitions)

        try:
            for version in (1, 9, 12):
                assert await partitions(version) == [(0, 1), (1, 1)]
                assert await partitions(version) == [(0, 1), (1, 1)]
            await broker.controller.create_partitions("grows", 4)
            for version in (1, 9, 12):
                assert await partitions(version) == [(0, 1), (1, 1), (2, 1), (3, 1)]
        finally:
            client.close()

    run_broker(tmp_path, check)
