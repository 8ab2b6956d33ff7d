"""The registry's state from `_schemas` records as Confluent Schema Registry writes them,
so a topic copied from a Confluent deployment reads as is; and the compatibility
levels over the three schema types."""

from __future__ import annotations

import json

import pytest

from kbroker.schemas.compatibility import check
from kbroker.schemas.errors import RegistryError
from kbroker.schemas.formats import parse
from kbroker.schemas.store import RegistryState, config_key, mode_key

AVRO = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'

# Records as Confluent's KafkaStore writes them (Jackson, NON_EMPTY, its property order).
CONFLUENT_RECORDS: list[tuple[bytes, bytes | None]] = [
    (b'{"keytype":"NOOP","magic":0}', None),
    (b'{"keytype":"CONFIG","magic":0}', b'{"compatibilityLevel":"FULL"}'),
    (
        b'{"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}',
        json.dumps(
            {"subject": "orders-value", "version": 1, "id": 1, "schema": AVRO, "deleted": False}
        ).encode(),
    ),
    (
        b'{"keytype":"SCHEMA","subject":"proto-value","version":1,"magic":1}',
        json.dumps(
            {
                "subject": "proto-value",
                "version": 1,
                "id": 2,
                "schemaType": "PROTOBUF",
                "schema": 'syntax = "proto3";\nmessage P { string s = 1; }\n',
                "deleted": False,
            }
        ).encode(),
    ),
    (b'{"keytype":"CONFIG","subject":"proto-value","magic":0}', b'{"compatibilityLevel":"NONE"}'),
    (b'{"keytype":"MODE","subject":"proto-value","magic":0}', b'{"mode":"READONLY"}'),
    (
        b'{"keytype":"SCHEMA","subject":"old-value","version":1,"magic":0}',
        json.dumps({"subject": "old-value", "version": 1, "id": 7, "schema": AVRO}).encode(),
    ),
    (
        b'{"keytype":"DELETE_SUBJECT","subject":"old-value","magic":0}',
        b'{"subject":"old-value","version":1}',
    ),
    (b'{"keytype":"SOMETHING_NEW","magic":0}', b"{}"),
    (b"not json", b"{}"),
]


def test_confluent_records_read_as_is():
    state = RegistryState()
    for key, value in CONFLUENT_RECORDS:
        state.apply(key, value)
    assert state.compatibility(None) == "FULL"
    assert state.compatibility("proto-value") == "NONE"
    assert state.compatibility("orders-value") == "FULL"
    assert state.mode("proto-value") == "READONLY"
    assert state.mode("orders-value") == "READWRITE"
    assert state.subject_names() == ["orders-value", "proto-value"]
    assert state.subject_names(deleted=True) == ["old-value", "orders-value", "proto-value"]
    assert state.by_id[2].schema_type == "PROTOBUF"
    assert state.max_id == 7
    # tombstones: the permanent delete of a version and of a subject's config
    state.apply(b'{"keytype":"SCHEMA","subject":"old-value","version":1,"magic":0}', None)
    assert 7 not in state.by_id and "old-value" not in state.subject_names(deleted=True)
    assert state.max_id == 7  # an id once given stays given
    state.apply(b'{"keytype":"CONFIG","subject":"proto-value","magic":0}', None)
    assert state.compatibility("proto-value") == "FULL"


def test_written_keys_are_confluents():
    assert config_key(None) == b'{"keytype":"CONFIG","magic":0}'
    assert mode_key("s") == b'{"keytype":"MODE","subject":"s","magic":0}'


def test_unparsable_schemas_are_refused_with_42201():
    for schema_type, text in (
        ("AVRO", "{"),
        ("AVRO", '{"type":"record","name":"R","fields":[{"name":"a","type":"nope"}]}'),
        ("JSON", '{"type": 12}'),
        ("PROTOBUF", "message {"),
        ("PROTOBUF", 'syntax = "proto3"; import "missing.proto"; message M { int32 a = 1; }'),
    ):
        with pytest.raises(RegistryError) as caught:
            parse(schema_type, text)
        assert caught.value.code == 42201, (schema_type, text)


def test_transitive_levels_check_every_version():
    v1 = parse("AVRO", '{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}')
    v2 = parse("AVRO", '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}')
    v3 = parse(
        "AVRO",
        '{"type":"record","name":"R","fields":[{"name":"a","type":"int"},'
        '{"name":"b","type":"int","default":0}]}',
    )
    for level in ("BACKWARD", "FORWARD", "FULL"):
        assert check(v3, [v1, v2], level) == []
        assert check(v3, [v1, v2], f"{level}_TRANSITIVE") != []
    assert check(v2, [v1], "NONE") == []
