"""pytest fixtures giving a test a real Kafka broker (registered as the `kbroker` plugin
through the pytest11 entry point, so installing kbroker is enough):

    def test_orders(kafka_broker):
        topic = kafka_broker.create_topic(partitions=3)
        Producer({"bootstrap.servers": kafka_broker.bootstrap}).produce(topic, b"x")
        ...
        assert [r.value for r in kafka_broker.read(topic)] == [b"x"]

- `kafka_broker`: one node for the whole test session, started the first time a test
  asks for it; topics made by `create_topic()` without a name are unique per call.
- `kafka_cluster`: three nodes (each a voter and a broker) for the session, likewise.

Both are `kbroker.testing.KafkaServer`s: `bootstrap`, `create_topic`, `produce`, `read`,
`nodes`. Data goes under pytest's temporary directory. Nothing starts unless a test asks,
and the plugin imports no more than the standard library at collection. A project's own
fixture of the same name wins (conftest fixtures override plugin ones); `-p no:kbroker`
turns the plugin off.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kbroker.testing import KafkaServer
from kbroker.testing import kafka_broker as _broker
from kbroker.testing import kafka_cluster as _cluster


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    """A single kbroker node shared by the session's tests."""
    with _broker(tmp_path_factory.mktemp("kbroker")) as server:
        yield server


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    """A three-node kbroker cluster shared by the session's tests."""
    with _cluster(3, tmp_path_factory.mktemp("kbroker-cluster")) as server:
        yield server
