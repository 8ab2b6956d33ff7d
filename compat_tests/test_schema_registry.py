"""kbroker's schema registry on one node: confluent-kafka's SchemaRegistryClient and its
Avro, JSON and Protobuf serializers round-trip records through the broker, schema
evolution under every compatibility level and schema type, the REST API's answers, and
bad input answered with Confluent's error codes while the registry keeps serving."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from compat_tests.broker_process import FAST_GROUP_SETTINGS, free_port, running_broker
from compat_tests.confluent_helpers import create_topic, unique_topic
from compat_tests.schema_registry_helpers import (
    avro_record,
    call,
    protobuf_message_class,
    wait_serving,
)
from kbroker.schemas.formats import Reference, parse

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Any:
    port = free_port()
    overrides = {
        **FAST_GROUP_SETTINGS,
        "schema.registry.listeners": f"http://127.0.0.1:{port}",
        "schema.registry.request.timeout.ms": "1500",
    }
    with running_broker(tmp_path_factory.mktemp("registry"), overrides) as node:
        url = f"http://127.0.0.1:{port}"
        wait_serving(url, node=node)
        node.registry_url = url  # type: ignore[attr-defined]
        yield node


def _round_trip(node: Any, serializer: Any, deserializer: Any, values: list[Any]) -> list[Any]:
    topic = unique_topic("sr")
    create_topic(node.bootstrap, topic)
    producer = Producer({"bootstrap.servers": node.bootstrap})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for value in values:
        producer.produce(topic, serializer(value, ctx))
    assert producer.flush(20) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            raw = msg.value()
            assert raw[0] == 0  # Confluent's framing: magic byte 0, then the schema id
            out.append(deserializer(raw, ctx))
    finally:
        consumer.close()
    return out


AVRO_V1 = avro_record("Order", [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}])
AVRO_V2 = avro_record(
    "Order",
    [
        {"name": "id", "type": "int"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int", "default": 1},
    ],
)


def test_avro_serializer_auto_registers_and_round_trips(registry):
    client = SchemaRegistryClient({"url": registry.registry_url})
    serializer = AvroSerializer(client, AVRO_V1)
    deserializer = AvroDeserializer(client)
    values = [{"id": i, "item": f"thing-{i}"} for i in range(5)]
    assert _round_trip(registry, serializer, deserializer, values) == values
    subjects = client.get_subjects()
    assert any(s.startswith("sr-") and s.endswith("-value") for s in subjects)


def test_avro_use_latest_version_serializes_with_the_registered_latest(registry):
    topic_values: list[Any] = []
    client = SchemaRegistryClient({"url": registry.registry_url})
    topic = unique_topic("latest")
    subject = f"{topic}-value"
    from confluent_kafka.schema_registry import Schema

    client.register_schema(subject, Schema(AVRO_V1, "AVRO"))
    second = client.register_schema(subject, Schema(AVRO_V2, "AVRO"))
    serializer = AvroSerializer(
        client, AVRO_V2, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = serializer({"id": 1, "item": "x", "qty": 3}, ctx)
    assert int.from_bytes(data[1:5], "big") == second
    topic_values.append(AvroDeserializer(client)(data, ctx))
    assert topic_values == [{"id": 1, "item": "x", "qty": 3}]
    latest = client.get_latest_version(subject)
    assert latest.version == 2 and latest.schema_id == second


JSON_V1 = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Reading",
        "type": "object",
        "properties": {"sensor": {"type": "string"}, "value": {"type": "number"}},
        "required": ["sensor", "value"],
    }
)


def test_json_serializer_round_trips(registry):
    client = SchemaRegistryClient({"url": registry.registry_url})
    serializer = JSONSerializer(JSON_V1, client)
    deserializer = JSONDeserializer(JSON_V1, schema_registry_client=client)
    values = [{"sensor": f"s{i}", "value": i * 1.5} for i in range(5)]
    assert _round_trip(registry, serializer, deserializer, values) == values
    with pytest.raises(Exception, match="required"):
        serializer({"sensor": "no value"}, SerializationContext("x", MessageField.VALUE))


def test_json_use_latest_version(registry):
    client = SchemaRegistryClient({"url": registry.registry_url})
    topic = unique_topic("jlatest")
    from confluent_kafka.schema_registry import Schema

    schema_id = client.register_schema(f"{topic}-value", Schema(JSON_V1, "JSON"))
    serializer = JSONSerializer(
        JSON_V1, client, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = serializer({"sensor": "a", "value": 2}, ctx)
    assert int.from_bytes(data[1:5], "big") == schema_id
    assert JSONDeserializer(None, schema_registry_client=client)(data, ctx) == {
        "sensor": "a",
        "value": 2,
    }


def _reading_class() -> Any:
    from google.protobuf import descriptor_pb2

    t = descriptor_pb2.FieldDescriptorProto
    return protobuf_message_class(
        "kbroker.test", "Reading", [("sensor", 1, t.TYPE_STRING), ("value", 2, t.TYPE_DOUBLE)]
    )


def test_protobuf_serializer_round_trips_and_uses_latest(registry):
    client = SchemaRegistryClient({"url": registry.registry_url})
    reading = _reading_class()
    serializer = ProtobufSerializer(reading, client, {"use.deprecated.format": False})
    # With the registry, the deserializer fetches the writer's schema as a descriptor.
    deserializer = ProtobufDeserializer(
        reading, {"use.deprecated.format": False}, schema_registry_client=client
    )
    values = [reading(sensor=f"s{i}", value=i / 2) for i in range(5)]
    out = _round_trip(registry, serializer, deserializer, values)
    assert [(m.sensor, m.value) for m in out] == [(m.sensor, m.value) for m in values]
    # A second serializer that only looks the registered schema up.
    topic = unique_topic("plat")
    ProtobufSerializer(reading, client, {"use.deprecated.format": False})(
        values[0], SerializationContext(topic, MessageField.VALUE)
    )
    latest = ProtobufSerializer(
        reading,
        client,
        {
            "use.deprecated.format": False,
            "auto.register.schemas": False,
            "use.latest.version": True,
        },
    )
    data = latest(values[1], SerializationContext(topic, MessageField.VALUE))
    registered = client.get_latest_version(f"{topic}-value")
    assert int.from_bytes(data[1:5], "big") == registered.schema_id
    assert registered.schema.schema_type == "PROTOBUF"
    # Stored as .proto text (what Java clients read), as Confluent's registry stores it.
    stored = call(registry.registry_url, "GET", f"/subjects/{topic}-value/versions/latest")[1]
    assert "message Reading" in stored["schema"]


def test_protobuf_text_registered_over_rest_serves_python_clients(registry):
    """A schema registered as .proto text (as Java clients and the CLI do) is served to
    Python's serializer and deserializer as a descriptor."""
    url = registry.registry_url
    topic = unique_topic("ptext")
    text = (
        'syntax = "proto3";\npackage kbroker.test;\n'
        "message Reading {\n  string sensor = 1;\n  double value = 2;\n}\n"
    )
    status, body = call(
        url, "POST", f"/subjects/{topic}-value/versions", {"schema": text, "schemaType": "PROTOBUF"}
    )
    assert status == 200, body
    client = SchemaRegistryClient({"url": url})
    reading = _reading_class()
    serializer = ProtobufSerializer(
        reading,
        client,
        {
            "use.deprecated.format": False,
            "auto.register.schemas": False,
            "use.latest.version": True,
        },
    )
    deserializer = ProtobufDeserializer(
        reading, {"use.deprecated.format": False}, schema_registry_client=client
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = serializer(reading(sensor="t", value=2.5), ctx)
    assert int.from_bytes(data[1:5], "big") == body["id"]
    decoded = deserializer(data, ctx)
    assert (decoded.sensor, decoded.value) == ("t", 2.5)


# -- evolution ----------------------------------------------------------------------------


def _avro(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": avro_record("Thing", fields)}


def _json(props: dict[str, Any]) -> dict[str, Any]:
    return {"schemaType": "JSON", "schema": json.dumps({"type": "object", "properties": props})}


def _proto(fields: str) -> dict[str, Any]:
    return {
        "schemaType": "PROTOBUF",
        "schema": f'syntax = "proto3";\npackage kbroker.evolution;\nmessage Thing {{\n{fields}\n}}\n',
    }


A_STRING = {
    "AVRO": _avro([{"name": "a", "type": "string"}]),
    "JSON": _json({"a": {"type": "string"}}),
    "PROTOBUF": _proto("  string a = 1;"),
}
A_INT = {
    "AVRO": _avro([{"name": "a", "type": "int"}]),
    "JSON": _json({"a": {"type": "integer"}}),
    "PROTOBUF": _proto("  int32 a = 1;"),
}


def _compatible_change(schema_type: str, level: str, a_type: str) -> dict[str, Any]:
    """A change of the schema whose field a has `a_type` that `level` accepts."""
    if schema_type == "AVRO":
        avro_type = "string" if a_type == "string" else "int"
        return _avro(
            [{"name": "a", "type": avro_type}, {"name": "b", "type": "long", "default": 0}]
        )
    if schema_type == "PROTOBUF":
        proto_type = "string" if a_type == "string" else "int32"
        return _proto(f"  {proto_type} a = 1;\n  int64 b = 2;")
    base = level.removesuffix("_TRANSITIVE")
    if base == "BACKWARD":  # the new schema reads more: widened
        return _json({"a": {"type": [a_type, "null"]}})
    if base == "FORWARD":  # the old schema reads what the new writes: narrowed
        key = "maxLength" if a_type == "string" else "maximum"
        return _json({"a": {"type": a_type, key: 5}})
    return _json({"a": {"type": a_type, "description": "same values, documented"}})


LEVELS = [
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
]


@pytest.mark.parametrize("schema_type", ["AVRO", "JSON", "PROTOBUF"])
@pytest.mark.parametrize("level", LEVELS)
def test_evolution_under_every_level_and_type(registry, schema_type, level):
    url = registry.registry_url
    subject = unique_topic(f"evo-{schema_type}-{level}".lower())
    assert call(url, "PUT", f"/config/{subject}", {"compatibility": level}) == (
        200,
        {"compatibility": level},
    )
    status, first = call(url, "POST", f"/subjects/{subject}/versions", A_STRING[schema_type])
    assert status == 200, first
    compatible = _compatible_change(schema_type, level, "string")
    status, second = call(url, "POST", f"/subjects/{subject}/versions", compatible)
    assert status == 200, second
    assert second["id"] != first["id"]
    status, third = call(url, "POST", f"/subjects/{subject}/versions", A_INT[schema_type])
    if level == "NONE":
        assert status == 200, third
    else:
        assert status == 409, third
        assert third["error_code"] == 409
        assert "incompatible" in third["message"]
        versions = call(url, "GET", f"/subjects/{subject}/versions")[1]
        assert versions == [1, 2]
    # verbose compatibility check says why
    status, verdict = call(
        url,
        "POST",
        f"/compatibility/subjects/{subject}/versions/latest?verbose=true",
        A_INT[schema_type],
    )
    assert status == 200
    assert verdict["is_compatible"] == (level == "NONE")
    if level != "NONE":
        assert verdict["messages"]


@pytest.mark.parametrize("schema_type", ["AVRO", "JSON", "PROTOBUF"])
@pytest.mark.parametrize("level", ["BACKWARD", "FORWARD", "FULL"])
def test_transitive_levels_check_every_version(registry, schema_type, level):
    """v1 has a string a, v2 (registered under NONE) an integer a; v3, compatible with
    v2 alone, is accepted under the plain level and refused under the transitive one."""
    url = registry.registry_url
    for transitive in (False, True):
        subject = unique_topic(f"trans-{schema_type}-{level}-{transitive}".lower())
        call(url, "PUT", f"/config/{subject}", {"compatibility": "NONE"})
        assert call(url, "POST", f"/subjects/{subject}/versions", A_STRING[schema_type])[0] == 200
        assert call(url, "POST", f"/subjects/{subject}/versions", A_INT[schema_type])[0] == 200
        chosen = f"{level}_TRANSITIVE" if transitive else level
        call(url, "PUT", f"/config/{subject}", {"compatibility": chosen})
        v3 = _compatible_change(schema_type, chosen, "integer")
        status, body = call(url, "POST", f"/subjects/{subject}/versions", v3)
        if transitive:
            assert (status, body["error_code"]) == (409, 409), body
        else:
            assert status == 200, body


# -- the REST API -------------------------------------------------------------------------


def test_versions_lookup_ids_and_soft_then_permanent_delete(registry):
    url = registry.registry_url
    subject = unique_topic("api")
    body = {"schema": avro_record("ApiOrder", [{"name": "id", "type": "int"}])}
    sid = call(url, "POST", f"/subjects/{subject}/versions", body)[1]["id"]
    assert call(url, "POST", f"/subjects/{subject}/versions", body)[1]["id"] == sid  # idempotent
    # The same schema under another subject has the same id.
    other = unique_topic("api-other")
    assert call(url, "POST", f"/subjects/{other}/versions", body)[1]["id"] == sid
    status, found = call(url, "POST", f"/subjects/{subject}", body)
    assert status == 200 and found["id"] == sid and found["version"] == 1
    status, latest = call(url, "GET", f"/subjects/{subject}/versions/latest")
    assert latest["subject"] == subject and latest["id"] == sid
    assert json.loads(latest["schema"]) == json.loads(parse("AVRO", body["schema"]).canonical())
    raw = call(url, "GET", f"/subjects/{subject}/versions/1/schema")[1]
    assert raw["name"] == "ApiOrder"
    assert call(url, "GET", f"/schemas/ids/{sid}")[1]["schema"] == latest["schema"]
    assert sorted(call(url, "GET", f"/schemas/ids/{sid}/subjects")[1]) == sorted([subject, other])
    assert {"subject": subject, "version": 1} in call(url, "GET", f"/schemas/ids/{sid}/versions")[1]
    assert sorted(call(url, "GET", "/schemas/types")[1]) == ["AVRO", "JSON", "PROTOBUF"]
    # permanent delete first needs a soft delete
    assert call(url, "DELETE", f"/subjects/{subject}?permanent=true")[1]["error_code"] == 40405
    assert call(url, "DELETE", f"/subjects/{subject}") == (200, [1])
    assert call(url, "GET", f"/subjects/{subject}/versions")[1]["error_code"] == 40401
    assert subject in call(url, "GET", "/subjects?deleted=true")[1]
    assert subject not in call(url, "GET", "/subjects")[1]
    assert call(url, "DELETE", f"/subjects/{subject}")[1]["error_code"] == 40404
    assert call(url, "POST", f"/subjects/{subject}?deleted=true", body)[1]["id"] == sid
    assert call(url, "DELETE", f"/subjects/{subject}?permanent=true") == (200, [1])
    assert subject not in call(url, "GET", "/subjects?deleted=true")[1]
    # the id lives on under the other subject
    assert call(url, "GET", f"/schemas/ids/{sid}")[0] == 200
    # versions: soft then permanent
    v2 = {
        "schema": avro_record(
            "ApiOrder", [{"name": "id", "type": "int"}, {"name": "n", "type": "int", "default": 0}]
        )
    }
    call(url, "POST", f"/subjects/{other}/versions", v2)
    assert (
        call(url, "DELETE", f"/subjects/{other}/versions/2/?permanent=true".replace("/?", "?"))[1][
            "error_code"
        ]
        == 40407
    )
    assert call(url, "DELETE", f"/subjects/{other}/versions/2") == (200, 2)
    assert call(url, "GET", f"/subjects/{other}/versions/2")[1]["error_code"] == 40402
    assert call(url, "GET", f"/subjects/{other}/versions/2?deleted=true")[0] == 200
    assert call(url, "DELETE", f"/subjects/{other}/versions/2?permanent=true") == (200, 2)
    # a new registration never reuses an id
    status, fresh = call(
        url,
        "POST",
        f"/subjects/{unique_topic('api-new')}/versions",
        {"schema": avro_record("Fresh", [{"name": "z", "type": "int"}])},
    )
    assert fresh["id"] > sid + 1


def test_config_and_mode(registry):
    url = registry.registry_url
    subject = unique_topic("cfg")
    assert call(url, "GET", "/config")[1] == {"compatibilityLevel": "BACKWARD"}
    assert call(url, "GET", f"/config/{subject}")[1]["error_code"] == 40408
    assert call(url, "GET", f"/config/{subject}?defaultToGlobal=true")[1] == {
        "compatibilityLevel": "BACKWARD"
    }
    assert call(url, "PUT", f"/config/{subject}", {"compatibility": "FULL"})[1] == {
        "compatibility": "FULL"
    }
    assert call(url, "GET", f"/config/{subject}")[1] == {"compatibilityLevel": "FULL"}
    assert (
        call(url, "PUT", f"/config/{subject}", {"compatibility": "SIDEWAYS"})[1]["error_code"]
        == 42203
    )
    assert call(url, "DELETE", f"/config/{subject}")[1] == {"compatibilityLevel": "FULL"}
    assert call(url, "GET", f"/config/{subject}")[1]["error_code"] == 40408
    # mode: READONLY refuses registrations, IMPORT takes explicit ids
    assert call(url, "GET", "/mode")[1] == {"mode": "READWRITE"}
    assert call(url, "PUT", f"/mode/{subject}", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    status, refused = call(url, "POST", f"/subjects/{subject}/versions", {"schema": AVRO_V1})
    assert (status, refused["error_code"]) == (422, 42205)
    assert call(url, "PUT", f"/mode/{subject}", {"mode": "IMPORT"})[1] == {"mode": "IMPORT"}
    schema = {"schema": avro_record("Imported", [{"name": "q", "type": "int"}])}
    assert call(url, "POST", f"/subjects/{subject}/versions", schema)[1]["error_code"] == 42205
    imported = {**schema, "id": 90000, "version": 7}
    assert call(url, "POST", f"/subjects/{subject}/versions", imported) == (200, {"id": 90000})
    assert call(url, "GET", f"/subjects/{subject}/versions/7")[1]["id"] == 90000
    assert call(url, "GET", "/schemas/ids/90000")[0] == 200
    assert call(url, "PUT", "/mode", {"mode": "SIDEWAYS"})[1]["error_code"] == 42204
    call(url, "DELETE", f"/mode/{subject}")
    assert call(url, "GET", f"/mode/{subject}")[1]["error_code"] == 40409


def test_references_and_normalize(registry):
    url = registry.registry_url
    base = unique_topic("ref-base")
    address = avro_record("Address", [{"name": "street", "type": "string"}])
    call(url, "POST", f"/subjects/{base}/versions", {"schema": address})
    user = json.dumps(
        {"type": "record", "name": "User", "fields": [{"name": "home", "type": "Address"}]}
    )
    subject = unique_topic("ref-user")
    ref = [{"name": "Address", "subject": base, "version": 1}]
    status, body = call(
        url, "POST", f"/subjects/{subject}/versions", {"schema": user, "references": ref}
    )
    assert status == 200, body
    got = call(url, "GET", f"/subjects/{subject}/versions/1")[1]
    assert got["references"] == ref
    assert call(url, "GET", f"/subjects/{base}/versions/1/referencedby")[1] == [body["id"]]
    status, refused = call(url, "DELETE", f"/subjects/{base}")
    assert (status, refused["error_code"]) == (422, 42206)
    missing = [{"name": "Address", "subject": "no-such-subject", "version": 1}]
    status, bad = call(
        url, "POST", f"/subjects/{subject}/versions", {"schema": user, "references": missing}
    )
    assert (status, bad["error_code"]) == (422, 42201)
    # normalize=true: the same schema spelt differently is one version
    norm = unique_topic("norm")
    a = '{"type":"record","name":"N","fields":[{"name":"x","type":"int"}]}'
    b = '{"fields":[{"type":"int","name":"x"}],  "name":"N","type":"record"}'
    first = call(url, "POST", f"/subjects/{norm}/versions?normalize=true", {"schema": a})[1]
    second = call(url, "POST", f"/subjects/{norm}/versions?normalize=true", {"schema": b})[1]
    assert first == second
    assert call(url, "GET", f"/subjects/{norm}/versions")[1] == [1]


def test_a_schema_refers_to_a_schema_that_itself_refers_to_another(registry):
    """C -> B -> A, as confluent-kafka's test_avro_reference registers them: B is stored
    with A by name, not inlined, so C, resolving A and B, defines A once."""
    url = registry.registry_url
    subjects = {n: unique_topic(f"nested-{n.lower()}") for n in "ABC"}

    def record(name: str, fields: list[dict[str, str]]) -> str:
        return json.dumps({"type": "record", "name": name, "namespace": "ns", "fields": fields})

    a = record("A", [{"name": "x", "type": "int"}])
    b = record("B", [{"name": "a", "type": "ns.A"}])
    c = record("C", [{"name": "b", "type": "ns.B"}, {"name": "also", "type": "ns.A"}])
    ref_a = {"name": "ns.A", "subject": subjects["A"], "version": 1}
    ref_b = {"name": "ns.B", "subject": subjects["B"], "version": 1}
    for name, schema, refs in (("A", a, []), ("B", b, [ref_a]), ("C", c, [ref_b, ref_a])):
        status, body = call(
            url,
            "POST",
            f"/subjects/{subjects[name]}/versions",
            {"schema": schema, "references": refs},
        )
        assert status == 200, (name, body)
    stored_b = call(url, "GET", f"/subjects/{subjects['B']}/versions/1/schema")[1]
    assert stored_b["fields"] == [{"name": "a", "type": "ns.A"}]


def test_a_protobuf_file_of_imports_alone_registers_to_be_referenced(registry):
    """A .proto with `import public` and no type of its own is valid (protoc compiles
    it); confluent-kafka's test_protobuf_reference_registration registers one."""
    url = registry.registry_url
    inner, outer = unique_topic("proto-inner"), unique_topic("proto-public")
    message = 'syntax = "proto3";\npackage test;\nmessage Inner { int32 x = 1; }\n'
    status, body = call(
        url, "POST", f"/subjects/{inner}/versions", {"schema": message, "schemaType": "PROTOBUF"}
    )
    assert status == 200, body
    public = 'syntax = "proto3";\npackage test;\nimport public "inner.proto";\n'
    refs = [{"name": "inner.proto", "subject": inner, "version": 1}]
    status, body = call(
        url,
        "POST",
        f"/subjects/{outer}/versions",
        {"schema": public, "schemaType": "PROTOBUF", "references": refs},
    )
    assert status == 200, body


# -- bad input ----------------------------------------------------------------------------


def _raw_exchange(port: int, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(data)
        if not read:
            return b""
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def test_bad_input_gets_confluent_errors_and_the_registry_keeps_serving(registry):
    url = registry.registry_url
    port = int(url.rsplit(":", 1)[1])
    subject = unique_topic("bad")
    versions = f"/subjects/{subject}/versions"
    assert call(url, "POST", versions, b"{not json")[0] == 400
    status, body = call(url, "POST", versions, {"schema": '{"type": "record", "name": '})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = call(url, "POST", versions, {"schema": '{"type": "nonsense"}'})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = call(url, "POST", versions, {"schema": "message {", "schemaType": "PROTOBUF"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = call(url, "POST", versions, {"schema": "[1, 2", "schemaType": "JSON"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = call(url, "POST", versions, {"schema": "{}", "schemaType": "XML"})
    assert (status, body["error_code"]) == (422, 42201)
    assert call(url, "GET", f"{versions}/zero")[1]["error_code"] == 42202
    assert call(url, "GET", "/schemas/ids/999999")[1]["error_code"] == 40403
    # a 10 MB body: 413 and the connection closed before the body is read
    head = (
        f"POST {versions} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {10 << 20}\r\n\r\n"
    ).encode()
    answer = _raw_exchange(port, head + b"x" * 65536)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # a client that never finishes its request head, or its body, is disconnected
    # (schema.registry.request.timeout.ms), and meanwhile everyone else is served
    for partial in (
        b"GET /subjects HTTP/1.1\r\nHost: x\r\n",
        b"POST /subjects/x/versions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{",
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
            slow.sendall(partial)
            assert call(url, "GET", "/subjects")[0] == 200
            began = time.monotonic()
            assert slow.recv(100) == b""  # closed by the registry, with no answer
            assert time.monotonic() - began < 10
    # garbage request line
    assert _raw_exchange(port, b"\x00\x01garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    # nothing of the above reached _schemas: every stored schema parses, with the
    # schemas it refers to
    for name in call(url, "GET", "/subjects?deleted=true")[1]:
        for version in call(url, "GET", f"/subjects/{name}/versions?deleted=true")[1]:
            stored = call(url, "GET", f"/subjects/{name}/versions/{version}?deleted=true")[1]
            parse(stored.get("schemaType", "AVRO"), stored["schema"], _references(url, stored))
    assert subject not in call(url, "GET", "/subjects?deleted=true")[1]
    assert call(url, "POST", versions, {"schema": AVRO_V1})[0] == 200


def _references(url: str, stored: dict[str, Any]) -> list[Reference]:
    """The schemas `stored` refers to, those they refer to first, each once."""
    found: dict[tuple[str, int], Reference] = {}

    def visit(schema: dict[str, Any]) -> None:
        for ref in schema.get("references") or []:
            key = (ref["subject"], ref["version"])
            if key in found:
                continue
            path = f"/subjects/{ref['subject']}/versions/{ref['version']}?deleted=true"
            target = call(url, "GET", path)[1]
            visit(target)
            kind = target.get("schemaType", "AVRO")
            found[key] = Reference(ref["name"], *key, target["schema"], kind)

    visit(stored)
    return list(found.values())


# -- broker-side validation ---------------------------------------------------------------


def _produce_raw(node: Any, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> Any:
    """The broker's own answer to one Produce of one batch (gzip: validation inflates it)."""
    from kbroker.admin.client import BrokerConnection, produce_fields
    from kbroker.protocol.batch import encode_batch
    from kbroker.protocol.compression import GZIP, compress

    batch = encode_batch(
        records, int(time.time() * 1000), compression=GZIP, compress=lambda d: compress(GZIP, d)
    )
    with BrokerConnection(node.host, node.port, 10.0, "validation-test") as conn:
        answer = conn.request(0, 9, **produce_fields(topic, bytes(batch), acks=-1))
    return answer.responses[0].partition_responses[0]


def test_schema_validation_refuses_batches_without_registered_ids(registry):
    from compat_tests.confluent_helpers import watermarks

    url = registry.registry_url
    on, off, keys = unique_topic("valid-on"), unique_topic("valid-off"), unique_topic("valid-key")
    create_topic(registry.bootstrap, on, config={"confluent.value.schema.validation": "true"})
    create_topic(registry.bootstrap, off)
    create_topic(
        registry.bootstrap,
        keys,
        config={
            "confluent.key.schema.validation": "true",
            "confluent.key.subject.name.strategy": "RecordNameStrategy",
        },
    )
    schema = {"schema": avro_record("Validated", [{"name": "n", "type": "int"}])}
    good_id = call(url, "POST", f"/subjects/{on}-value/versions", schema)[1]["id"]
    other_id = call(
        url,
        "POST",
        f"/subjects/{unique_topic('elsewhere')}-value/versions",
        {"schema": avro_record("Elsewhere", [{"name": "m", "type": "int"}])},
    )[1]["id"]
    framed = b"\x00" + good_id.to_bytes(4, "big") + b"\x02"
    records = [
        (None, framed),
        (None, b"\x00" + other_id.to_bytes(4, "big") + b"\x02"),  # another subject's id
        (None, framed),
        (None, b"plain text"),  # no magic byte
        (None, None),  # a tombstone has no schema id either
        (None, framed),
    ]
    refused = _produce_raw(registry, on, records)
    assert refused.error_code == 87  # INVALID_RECORD
    assert [e.batch_index for e in refused.record_errors] == [1, 3, 4]
    assert "schema" in refused.error_message
    assert watermarks(registry.bootstrap, on) == (0, 0)  # nothing of the batch stored
    # validation off: the same batch is stored
    stored = _produce_raw(registry, off, records)
    assert stored.error_code == 0
    assert watermarks(registry.bootstrap, off) == (0, len(records))
    # only registered ids: accepted
    accepted = _produce_raw(registry, on, [(None, framed)] * 3)
    assert accepted.error_code == 0
    assert watermarks(registry.bootstrap, on) == (0, 3)
    # keys under RecordNameStrategy: the subject is the record's name
    assert _produce_raw(registry, keys, [(framed, b"v")]).error_code == 87
    named = {"schema": avro_record("KeyRecord", [{"name": "k", "type": "string"}])}
    key_id = call(url, "POST", "/subjects/KeyRecord/versions", named)[1]["id"]
    key = b"\x00" + key_id.to_bytes(4, "big") + b"\x02k"
    assert _produce_raw(registry, keys, [(key, b"anything")]).error_code == 0


def test_a_serializers_records_pass_validation(registry):
    """confluent-kafka's AvroSerializer registers and produces; the topic validates."""
    topic = unique_topic("valid-serde")
    create_topic(registry.bootstrap, topic, config={"confluent.value.schema.validation": "true"})
    client = SchemaRegistryClient({"url": registry.registry_url})
    values = [{"id": i, "item": "x"} for i in range(3)]
    assert (
        _round_trip_topic(
            registry, topic, AvroSerializer(client, AVRO_V1), AvroDeserializer(client), values
        )
        == values
    )


def _round_trip_topic(
    node: Any, topic: str, serializer: Any, deserializer: Any, values: list[Any]
) -> list[Any]:
    producer = Producer({"bootstrap.servers": node.bootstrap})
    ctx = SerializationContext(topic, MessageField.VALUE)
    failures: list[Any] = []
    for value in values:
        producer.produce(
            topic, serializer(value, ctx), on_delivery=lambda err, _m: err and failures.append(err)
        )
    assert producer.flush(20) == 0
    assert not failures, failures
    consumer = Consumer(
        {"bootstrap.servers": node.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(deserializer(msg.value(), ctx))
    finally:
        consumer.close()
    return out


# -- kbroker schemas ----------------------------------------------------------------------


def _cli(registry: Any, *words: str) -> tuple[int, str, str]:
    import subprocess

    from compat_tests.broker_process import broker_environment, kbroker_command

    done = subprocess.run(
        [*kbroker_command(), "schemas", *words, "--registry", registry.registry_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=broker_environment(),
    )
    return done.returncode, done.stdout, done.stderr


def test_schemas_cli(registry, tmp_path):
    subject = unique_topic("cli")
    v1 = tmp_path / "v1.avsc"
    v1.write_text(avro_record("Cli", [{"name": "a", "type": "int"}]))
    v2 = tmp_path / "v2.avsc"
    v2.write_text(avro_record("Cli", [{"name": "a", "type": "int"}, {"name": "b", "type": "int"}]))
    proto = tmp_path / "p.proto"
    proto.write_text('syntax = "proto3";\nmessage P { string s = 1; }\n')
    code, out, _ = _cli(registry, "register", subject, str(v1))
    assert code == 0
    schema_id = int(out)
    code, out, _ = _cli(registry, "list", "--prefix", "cli-")
    assert code == 0 and subject in out.split()
    code, out, _ = _cli(registry, "get", subject)
    assert json.loads(out)["id"] == schema_id
    code, out, _ = _cli(registry, "get", "--id", str(schema_id), "--schema-only")
    assert json.loads(out)["name"] == "Cli"
    code, out, _ = _cli(registry, "check", subject, str(v2))
    assert (code, out.splitlines()[0]) == (1, "incompatible")  # b has no default
    code, out, _ = _cli(registry, "config", subject, "--set", "forward")
    assert (code, out.strip()) == (0, "FORWARD")
    assert _cli(registry, "check", subject, str(v2))[:2] == (0, "compatible\n")
    assert _cli(registry, "register", subject, str(v2))[0] == 0
    code, out, _ = _cli(registry, "register", f"{subject}-proto", str(proto))
    assert code == 0 and int(out) > schema_id
    assert _cli(registry, "mode", subject)[1].strip() == "READWRITE"
    assert _cli(registry, "mode", subject, "--set", "READONLY")[1].strip() == "READONLY"
    code, _, err = _cli(registry, "register", subject, str(v1))
    assert code == 1 and "42205" in err and len(err.strip().splitlines()) == 1
    _cli(registry, "mode", subject, "--set", "READWRITE")
    assert _cli(registry, "delete", subject)[1].split() == ["1", "2"]
    assert _cli(registry, "delete", subject, "--permanent")[0] == 0
    code, _, err = _cli(registry, "get", subject)
    assert code == 1 and "40401" in err
    code, _, err = _cli(registry, "register", subject, str(tmp_path / "missing.avsc"))
    assert code == 1 and "cannot read" in err and "Traceback" not in err
