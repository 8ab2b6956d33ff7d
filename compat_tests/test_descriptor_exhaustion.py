"""A broker short of file descriptors says so instead of looking healthy.

The broker runs with RLIMIT_NOFILE lowered to 400. A topic of 600 partitions cannot
have every log open (each holds a descriptor, and the broker keeps a reserve for
connections and its metadata journal): CreateTopics answers KAFKA_STORAGE_ERROR, the
partitions without a log are not offered by Metadata and refuse produces with
KAFKA_STORAGE_ERROR, one log line says why, and the partitions the broker does have
(an earlier topic, and the new topic's opened ones) keep serving.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compat_tests.broker_process import BrokerProcess, produce_one_error, topic_metadata
from compat_tests.confluent_helpers import consume_from_beginning, create_topic, produce_all
from kbroker.admin.client import BrokerConnection

pytestmark = pytest.mark.timeout(180)

CREATE_TOPICS = 19
KAFKA_STORAGE_ERROR = 56
DESCRIPTORS = 400

_LIMITED = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1]))); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


class LimitedBroker(BrokerProcess):
    """A broker process whose descriptor limit is lowered before it starts."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", _LIMITED, str(DESCRIPTORS), *super().command()]


def produce_error(broker: BrokerProcess, topic: str, partition: int) -> int:
    return produce_one_error(broker, topic, partition, "limited")


def test_an_over_large_create_fails_honestly_and_the_rest_keeps_serving(tmp_path: Path) -> None:
    broker = LimitedBroker(tmp_path / "broker", {})
    try:
        broker.start()
        create_topic(broker.bootstrap, "before")
        produce_all(broker.bootstrap, "before", [{"value": b"kept"}])
        with BrokerConnection(broker.host, broker.port, 120.0, "creator") as conn:
            answer = conn.request(
                CREATE_TOPICS,
                7,
                topics=[
                    {
                        "name": "wide",
                        "num_partitions": 600,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                timeout=60_000,
                validate_only=False,
            )
        (created,) = answer.topics
        assert created.error_code == KAFKA_STORAGE_ERROR, created
        assert "open files" in created.error_message

        partitions = topic_metadata(broker, "wide", "limited").partitions
        failed = [p for p in partitions if p.error_code == KAFKA_STORAGE_ERROR]
        served = [p for p in partitions if p.error_code == 0]
        assert failed and served and len(failed) + len(served) == 600
        assert all(p.leader_id == -1 and p.offline_replicas == (1,) for p in failed)
        assert produce_error(broker, "wide", failed[0].partition_index) == KAFKA_STORAGE_ERROR
        assert produce_error(broker, "wide", served[0].partition_index) == 0

        produce_all(broker.bootstrap, "before", [{"value": b"after"}])
        got = consume_from_beginning(broker.bootstrap, "before", 2)
        assert [r.value for r in got] == [b"kept", b"after"]
        lines = [line for line in broker.log_text().splitlines() if " ERROR " in line]
        assert len(lines) == 1 and "open files" in lines[0].lower(), lines
    finally:
        broker.kill()
