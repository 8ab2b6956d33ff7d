"""spark_examples.avro_registry end to end: confluent-kafka's AvroSerializer writes
records of two schema versions through kbroker's registry, and Spark decodes them with
`from_avro` and the schemas it fetches from the registry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from compat_tests.broker_process import free_port, running_broker
from compat_tests.confluent_helpers import create_topic, unique_topic
from compat_tests.schema_registry_helpers import wait_serving
from compat_tests.spark_support import TEST_SPARK_CONF
from spark_examples import avro_registry, connector

pytestmark = pytest.mark.timeout(240)

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "qty", "type": "int", "default": 1}]}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    port = free_port()
    overrides = {"schema.registry.listeners": f"http://127.0.0.1:{port}"}
    with running_broker(tmp_path_factory.mktemp("spark-avro"), overrides) as node:
        node.registry_url = f"http://127.0.0.1:{port}"
        wait_serving(node.registry_url, node=node)
        yield node


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    missing = connector.missing_for_local_run()
    if missing:
        pytest.skip(f"Spark tests need Java, PySpark and the Kafka connector jars: {missing}")
    if avro_registry.avro_jar() is None:
        pytest.skip("spark-avro is not cached (scripts/install-test-tools.sh fetches it)")
    session = avro_registry.session(
        "test-avro-registry", shuffle_partitions=2, allow_maven=False, extra=TEST_SPARK_CONF
    )
    session.sparkContext.setLogLevel("FATAL")
    try:
        yield session
    finally:
        session.stop()


def test_spark_decodes_registry_avro_of_two_versions(broker, spark, tmp_path):
    topic = unique_topic("avro-orders")
    create_topic(broker.bootstrap, topic, partitions=2)
    client = SchemaRegistryClient({"url": broker.registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    first = AvroSerializer(client, json.dumps(V1))
    second = AvroSerializer(client, json.dumps(V2))
    for i in range(10):
        producer.produce(topic, first({"id": i, "item": f"old-{i}"}, ctx), partition=i % 2)
    for i in range(10, 20):
        value = second({"id": i, "item": f"new-{i}", "qty": i}, ctx)
        producer.produce(topic, value, partition=i % 2)
    producer.produce(topic, b"not framed", partition=0)  # skipped: no magic byte
    assert producer.flush(20) == 0

    table = avro_registry.decode(spark, broker.bootstrap, broker.registry_url, topic)
    rows = sorted(table.collect(), key=lambda r: r.id)
    assert [r.id for r in rows] == list(range(20))
    assert [r.item for r in rows[:2]] == ["old-0", "old-1"]
    assert all(r.qty is None for r in rows[:10])
    assert [r.qty for r in rows[10:]] == list(range(10, 20))
    assert len({r.schema_id for r in rows}) == 2

    output = tmp_path / "decoded"
    table.write.mode("overwrite").parquet(str(output))
    assert spark.read.parquet(str(output)).count() == 20
