"""The Kafka 4.3 harness itself: a single node and a 3-node quorum format, start on free
loopback ports, answer Metadata, and stop on SIGTERM; Kafka's tools run in one JVM."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from compat_tests.kafka_reference import (
    KAFKA_VERSION,
    KafkaReference,
    ToolRunner,
    kafka_unavailable,
)

pytestmark = pytest.mark.skipif(kafka_unavailable() is not None, reason=str(kafka_unavailable()))


def _broker_ids(bootstrap: str) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return sorted(admin.list_topics(timeout=20).brokers)


def test_single_node_serves_tools_and_stops(tmp_path: Path) -> None:
    kafka = KafkaReference(tmp_path, size=1)
    try:
        seconds = kafka.start()
        node = kafka.nodes[0]
        assert 0 < node.ready_seconds <= seconds
        assert _broker_ids(kafka.bootstrap) == [1]
        tools = ToolRunner(tmp_path / "tools")
        try:
            version = tools.run("org.apache.kafka.tools.TopicCommand", "--version").check()
            assert version.out.strip().startswith(KAFKA_VERSION)
            created = tools.run(
                "org.apache.kafka.tools.TopicCommand",
                "--bootstrap-server",
                kafka.bootstrap,
                "--create",
                "--topic",
                "harness",
                "--partitions",
                "2",
            ).check()
            assert "Created topic harness." in created.out
            refused = tools.run(
                "org.apache.kafka.tools.TopicCommand",
                "--bootstrap-server",
                kafka.bootstrap,
                "--create",
                "--topic",
                "harness",
            )
            assert refused.code == 1 and "already exists" in refused.out + refused.err
        finally:
            tools.close()
        assert node.stop() in (0, 143)  # Kafka's shutdown hook runs, then the JVM exits
        assert not node.running()
    finally:
        kafka.kill_all()


def test_three_node_quorum(tmp_path: Path) -> None:
    kafka = KafkaReference(tmp_path, size=3)
    try:
        kafka.start()
        assert _broker_ids(kafka.bootstrap) == [1, 2, 3]
        tools = ToolRunner(tmp_path / "tools")
        try:
            status = tools.run(
                "org.apache.kafka.tools.MetadataQuorumCommand",
                "--bootstrap-server",
                kafka.bootstrap,
                "describe",
                "--status",
            ).check()
        finally:
            tools.close()
        assert "CurrentVoters:" in status.out
        for node in kafka.nodes:
            assert f'"id": {node.node_id}' in status.out
    finally:
        kafka.kill_all()
