"""Kafka message bodies through kio: decoding requests, building and encoding responses.

Handlers describe a response as plain dicts and lists, version-agnostic; `build`
turns that into the kio dataclass of the version the client asked for, dropping
fields the version does not have and filling the ones the handler left out with
their defaults. One handler thereby serves every version of its API.
"""

from __future__ import annotations

import datetime
import functools
import io
import typing
import uuid
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

API_NAMES: dict[int, str] = dict(api_key_map)
_UTC = datetime.UTC


def known_versions(api_key: int) -> range:
    """Versions of an API that kio has schemas for."""
    versions = sorted(schema_name_map[API_NAMES[api_key]])
    return range(versions[0], versions[-1] + 1)


PRODUCE = 0
# Produce v0-2 predate Kafka 4's floor but stay advertised: librdkafka decides from the
# advertised Produce range whether compression is available (KAFKA-18659). Their body is
# Produce v3's without the leading transactional id, so they decode as v3 with a null one.
LEGACY_PRODUCE_VERSIONS = range(0, 3)
_NULL_STRING = b"\xff\xff"


@functools.cache
def is_flexible(api_key: int, version: int) -> bool:
    """Whether this API version uses compact encodings and tagged fields (header v2/v1)."""
    if api_key == PRODUCE and version in LEGACY_PRODUCE_VERSIONS:
        return False
    return bool(load_request_schema(api_key, version).__flexible__)


@functools.cache
def request_reader(api_key: int, version: int) -> Any:
    return entity_reader(load_request_schema(api_key, version))


@functools.cache
def response_type(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


def decode_request(api_key: int, version: int, frame: bytes, offset: int) -> Any:
    """Decode a request body; raises on malformed bytes (the caller closes the connection)."""
    if api_key == PRODUCE and version in LEGACY_PRODUCE_VERSIONS:
        return decode_request(PRODUCE, 3, _NULL_STRING + frame[offset:], 0)
    value, size = request_reader(api_key, version)(frame, offset)
    if offset + size != len(frame):
        raise ValueError(f"{len(frame) - offset - size} trailing bytes after the request body")
    return value


def encode(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


# -- building version-specific entities from plain data ---------------------------------


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, str | None, Any, bool, Any], ...]:
    """For each field: (name, kafka_type, nested entity type or None, is_array, default)."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in fields(cls):
        hint = hints[f.name]
        nested, is_array = _nested_entity(hint)
        plan.append((f.name, f.metadata.get("kafka_type"), nested, is_array, _default(f, hint)))
    return tuple(plan)


def _nested_entity(hint: Any) -> tuple[type | None, bool]:
    is_array = typing.get_origin(hint) is tuple
    inner = typing.get_args(hint)[0] if is_array else hint
    if typing.get_origin(inner) in (typing.Union, __import__("types").UnionType):
        options = [a for a in typing.get_args(inner) if a is not type(None)]
        inner = options[0] if len(options) == 1 else inner
    if isinstance(inner, type) and is_dataclass(inner):
        return inner, is_array
    return None, is_array


def _default(f: Field, hint: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    if typing.get_origin(hint) is tuple:
        return ()
    kafka_type = f.metadata.get("kafka_type")
    if type(None) in typing.get_args(hint):
        return None
    return _ZERO.get(kafka_type, 0)


_ZERO: dict[str | None, Any] = {
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "uuid": None,
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "float64": 0.0,
}


def _coerce(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(value)
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        return None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)
    if kafka_type == "uuid" and isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    return value


def build(cls: type, data: dict[str, Any]) -> Any:
    """Instantiate kio entity `cls` from `data`, ignoring keys the version lacks."""
    kwargs = {}
    for name, kafka_type, nested, is_array, default in _plan(cls):
        if name not in data:
            kwargs[name] = default
            continue
        value = data[name]
        if nested is not None and value is not None:
            if is_array:
                value = tuple(v if isinstance(v, nested) else build(nested, v) for v in value)
            elif not isinstance(value, nested):
                value = build(nested, value)
        elif is_array and value is not None:
            value = tuple(_coerce(kafka_type, v) for v in value)
        else:
            value = _coerce(kafka_type, value)
        kwargs[name] = value
    return cls(**kwargs)


def build_response(api_key: int, version: int, data: dict[str, Any]) -> Any:
    return build(response_type(api_key, version), data)


__all__ = [
    "API_NAMES",
    "EntityType",
    "build",
    "build_response",
    "decode_request",
    "encode",
    "is_flexible",
    "known_versions",
]
