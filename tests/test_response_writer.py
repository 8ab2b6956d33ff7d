"""An answer written by protocol.response_writer is byte for byte what kio writes for the
same description built into its dataclass, for every version of every API served; what
the compiled steps do not write falls back to kio, which then succeeds or refuses as
before."""

from __future__ import annotations

import datetime
import random
import uuid
from dataclasses import fields
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial._introspect import get_field_tag, is_optional

from kbroker.handlers.registry import APIS
from kbroker.protocol import legacy_messages, messages, response_writer
from kbroker.protocol.entity_build import UnknownFieldError, build, field_plan

CODES = [code.value for code in ErrorCode]
METADATA, API_VERSIONS, LIST_GROUPS = 3, 18, 16


def served_answers() -> list[tuple[int, int]]:
    """(API key, version) of every answer the broker writes through kio's schemas."""
    served = []
    for api in sorted(APIS.values(), key=lambda a: a.key):
        for version in range(api.min_version, api.max_version + 1):
            legacy = legacy_messages.LEGACY.get((api.key, version))
            if legacy is not None and legacy[1] is not None:
                continue  # written by legacy_messages
            if version not in messages.known_versions(api.key):
                continue
            served.append((api.key, version))
    return served


def primitive(kafka_type: str | None, rng: random.Random) -> Any:
    match kafka_type:
        case "int8":
            return rng.randint(-(2**7), 2**7 - 1)
        case "int16":
            return rng.randint(-(2**15), 2**15 - 1)
        case "int32":
            return rng.choice([-1, 0, rng.randint(-(2**31), 2**31 - 1)])
        case "int64":
            return rng.choice([-1, 0, rng.randint(-(2**63), 2**63 - 1)])
        case "uint8":
            return rng.randint(0, 2**8 - 1)
        case "uint16":
            return rng.randint(0, 2**16 - 1)
        case "uint32":
            return rng.randint(0, 2**32 - 1)
        case "uint64":
            return rng.randint(0, 2**64 - 1)
        case "float64":
            return rng.uniform(-1e9, 1e9)
        case "bool":
            return rng.random() < 0.5
        case "error_code":
            return rng.choice([0, *rng.sample(CODES, 2), ErrorCode.not_coordinator])
        case "timedelta_i32":
            ms = rng.randint(-1, 2**31 - 1)
            return ms if rng.random() < 0.7 else datetime.timedelta(milliseconds=ms)
        case "timedelta_i64":
            ms = rng.randint(-1, 2**40)
            return ms if rng.random() < 0.7 else datetime.timedelta(milliseconds=ms)
        case "datetime_i64":
            return rng.randint(0, 2**41)
        case "string":
            return "".join(rng.choice("abz-._éü€0") for _ in range(rng.randint(0, 12)))
        case "bytes" | "records":
            return rng.randbytes(rng.randint(0, 20))
        case "uuid":
            return uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.8 else None
    raise AssertionError(f"no values for {kafka_type}")


def describe(cls: type, rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A random valid description of `cls`: some fields left out, some at their
    default, nullable ones null now and then."""
    data: dict[str, Any] = {}
    by_name = {f.name: f for f in fields(cls)}
    for name, kafka_type, nested, is_array, default in field_plan(cls):
        f = by_name[name]
        nullable = is_optional(f) and get_field_tag(f) is None
        # A datetime's and a required struct's defaults are no values kio can write: a
        # handler always names those.
        must_name = kafka_type == "datetime_i64" or (
            nested is not None and not is_array and not nullable and get_field_tag(f) is None
        )
        roll = rng.random()
        if roll < 0.15 and not must_name:
            continue
        if roll < 0.25 and not must_name:
            data[name] = default
            continue
        if nullable and roll < 0.32:
            data[name] = None
            continue
        if is_array:
            count = rng.randint(0, 3 if depth < 2 else 1)
            if nested is not None:
                data[name] = [describe(nested, rng, depth + 1) for _ in range(count)]
            else:
                data[name] = [primitive(kafka_type, rng) for _ in range(count)]
        elif nested is not None:
            data[name] = describe(nested, rng, depth + 1)
        else:
            data[name] = primitive(kafka_type, rng)
    return data


def kio_bytes(cls: type, data: dict[str, Any]) -> bytes:
    return messages.encode(build(cls, data))


@pytest.mark.parametrize(("api_key", "version"), served_answers())
def test_every_served_answer_is_written_as_kio_writes_it(api_key: int, version: int) -> None:
    cls = messages.response_type(api_key, messages.wire_version(api_key, version))
    rng = random.Random(api_key * 100 + version)
    for _ in range(40):
        data = describe(cls, rng)
        assert response_writer.write(cls, data) == kio_bytes(cls, data), data


def test_every_served_answer_was_checked() -> None:
    served = served_answers()
    assert len(served) > 250
    assert {METADATA, API_VERSIONS, LIST_GROUPS} <= {key for key, _ in served}


def test_fields_of_other_versions_are_dropped_as_kio_drops_them() -> None:
    # group_state arrived in ListGroups v4; v3's answer leaves it out. ApiVersions v0
    # has no throttle time, which the handler names for every version.
    groups = [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable"}]
    for api_key, version, data in (
        (LIST_GROUPS, 3, {"error_code": 0, "groups": groups}),
        (API_VERSIONS, 0, {"error_code": 0, "api_keys": [], "throttle_time": 0}),
    ):
        cls = messages.response_type(api_key, version)
        assert response_writer.write(cls, data) == kio_bytes(cls, data)


def test_a_key_of_no_version_is_still_refused() -> None:
    with pytest.raises(UnknownFieldError, match="eror_code"):
        messages.encode_response(LIST_GROUPS, 4, {"eror_code": 0, "groups": []})


@pytest.mark.parametrize(
    "bad",
    [
        {"error_code": 2**15},  # out of int16's range
        {"error_code": 9999},  # no such error code
        {"groups": [{"group_id": None}]},  # null in a string that cannot be null
        {"groups": None, "error_code": "0"},
    ],
)
def test_a_value_the_version_cannot_carry_is_refused_as_kio_refuses_it(bad: dict) -> None:
    data = {"error_code": 0, "groups": [], **bad}
    cls = messages.response_type(LIST_GROUPS, 4)
    with pytest.raises(Exception) as by_kio:
        kio_bytes(cls, data)
    with pytest.raises(Exception) as written:
        messages.encode_response(LIST_GROUPS, 4, data)
    assert type(written.value) is type(by_kio.value)


def test_a_built_entity_inside_a_description_is_written_by_kio() -> None:
    cls = messages.response_type(LIST_GROUPS, 4)
    built = build(cls, {"error_code": 0, "groups": [{"group_id": "g", "protocol_type": "c"}]})
    data = {"error_code": 0, "groups": [built.groups[0], {"group_id": "h"}]}
    assert response_writer.write(cls, data) == kio_bytes(cls, data)


def test_the_compiled_writer_reads_as_source() -> None:
    source, names = response_writer.entity_source(messages.response_type(LIST_GROUPS, 4))
    assert source.startswith("def write_entity(data, out):")
    assert "get('groups', " in source
    assert all(f"d{i}" in names for i in range(3))


def test_tagged_fields_are_written_only_when_not_at_their_default() -> None:
    # ApiVersions v3: supported_features, finalized_features_epoch and finalized_features
    # are tagged; the epoch's default is -1.
    cls = messages.response_type(API_VERSIONS, 3)
    plain = {"error_code": 0, "api_keys": [], "throttle_time": 0}
    tagged = {**plain, "finalized_features_epoch": 7, "supported_features": []}
    at_default = {**plain, "finalized_features_epoch": -1, "finalized_features": []}
    for data in (plain, tagged, at_default):
        assert response_writer.write(cls, data) == kio_bytes(cls, data)
    assert response_writer.write(cls, plain) == response_writer.write(cls, at_default)
    assert response_writer.write(cls, tagged) != response_writer.write(cls, plain)
