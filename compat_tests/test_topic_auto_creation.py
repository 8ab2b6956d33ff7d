"""Topics created by a Metadata request (auto.create.topics.enable), as Kafka 4 creates
them: the request hands the creation to the controller and is answered
UNKNOWN_TOPIC_OR_PARTITION (retriable) at once; the topic is there for the client's next
Metadata. Driven with raw requests on one node, and with Sarama, which retries."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.broker_process import BrokerProcess, running_broker
from compat_tests.confluent_helpers import create_topic
from compat_tests.waiting import eventually
from kbroker.admin.client import BrokerConnection

METADATA = 3
DELETE_TOPICS = 20
UNKNOWN_TOPIC_OR_PARTITION = 3
PARTITIONS = 3


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"num.partitions": str(PARTITIONS), "auto.create.topics.enable": "true"}
    with running_broker(tmp_path_factory.mktemp("auto-create"), overrides) as started:
        yield started


def metadata(node: BrokerProcess, name: str, create: bool) -> Any:
    with BrokerConnection(node.host, node.port, 10.0, "auto-create-probe") as conn:
        answer = conn.request(
            METADATA,
            12,
            topics=[{"name": name, "topic_id": None}],
            allow_auto_topic_creation=create,
        )
    return answer.topics[0]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_topic_asked_for_is_answered_unknown_then_created_with_the_defaults(
    node: BrokerProcess,
) -> None:
    name = unique("auto")
    first = metadata(node, name, create=True)
    assert first.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert list(first.partitions) == []
    created = eventually(
        lambda: metadata(node, name, create=False).partitions,
        timeout=10,
        what=f"{name} created",
    )
    assert sorted(p.partition_index for p in created) == list(range(PARTITIONS))


def test_a_deleted_topic_is_not_described_by_the_request_that_creates_it_again(
    node: BrokerProcess,
) -> None:
    """kafka-go's TestConn deletes a topic and reads its partitions with auto-creation on:
    Kafka answers UNKNOWN_TOPIC_OR_PARTITION (and creates the topic anew), not a topic a
    moment after its deletion."""
    name = unique("deleted")
    create_topic(node.bootstrap, name)
    first_id = eventually(
        lambda: metadata(node, name, create=False).topic_id, timeout=10, what=f"{name} created"
    )
    with BrokerConnection(node.host, node.port, 10.0, "auto-create-admin") as conn:
        gone = conn.request(
            DELETE_TOPICS, 6, topics=[{"name": name, "topic_id": None}], timeout=15000
        )
        assert gone.responses[0].error_code == 0
    again = metadata(node, name, create=True)
    assert again.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert list(again.partitions) == []

    def created_anew() -> Any:
        topic = metadata(node, name, create=False)
        return topic if topic.partitions and topic.topic_id != first_id else None

    recreated = eventually(created_anew, timeout=10, what=f"{name} created anew")
    assert len(recreated.partitions) == PARTITIONS


def test_a_refused_creation_is_answered_unknown_and_logged_once(tmp_path: Path) -> None:
    overrides = {"default.replication.factor": "3"}  # one node cannot hold three replicas
    with running_broker(tmp_path / "refusing", overrides) as refusing:
        name = unique("refused")
        for _ in range(5):
            assert metadata(refusing, name, create=True).error_code == (UNKNOWN_TOPIC_OR_PARTITION)
        line = f"topic {name!r} not auto-created: INVALID_REPLICATION_FACTOR"
        eventually(lambda: line in refusing.log_text(), timeout=10, what="the refusal logged")
        assert refusing.log_text().count(line) == 1
        assert metadata(refusing, name, create=False).error_code == UNKNOWN_TOPIC_OR_PARTITION
