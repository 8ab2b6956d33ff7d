"""Kafka message bodies through kio: decoding requests, building and encoding responses.

Handlers describe a response as plain dicts and lists, version-agnostic, typed by
the TypedDicts of protocol.responses; `encode_response` writes that as the version the
client asked for, dropping fields the version does not have and filling the ones the
handler left out with their defaults (protocol.response_writer, or kio's dataclass from
protocol.entity_build's `build`). One handler thereby serves every version of its API. A
request is read through the Protocols of protocol.requests, every field of every version
at hand (`request_class`).
"""

from __future__ import annotations

import datetime
import functools
import io
import uuid
from collections.abc import Mapping
from dataclasses import field, fields, make_dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from kbroker.protocol import legacy_messages, request_walk, requests, response_writer
from kbroker.protocol.entity_build import (
    UnknownFieldError,
    build,
    field_plan,
    known_versions,
)
from kbroker.protocol.fetch_request_decode import FIRST_FLEXIBLE as FETCH_FIRST_FLEXIBLE
from kbroker.protocol.fetch_request_decode import FIRST_VERSION as FETCH_FIRST_DECODED
from kbroker.protocol.fetch_request_decode import decode_fetch_request
from kbroker.protocol.produce_request import FIRST_FLEXIBLE as PRODUCE_FIRST_FLEXIBLE
from kbroker.protocol.produce_request import decode_produce_request

API_NAMES: dict[int, str] = dict(api_key_map)
_UTC = datetime.UTC
# Kafka's Uuid.ZERO_UUID, "no topic id". kio reads it off the wire as None; a handler
# passes it on as this value, which names no topic, so lookups find none.
ZERO_UUID = uuid.UUID(int=0)


_ONE_MS = datetime.timedelta(milliseconds=1)


def duration_ms(value: datetime.timedelta | int) -> int:
    """A duration field in milliseconds: kio reads most of them as timedelta, some as int."""
    if isinstance(value, datetime.timedelta):
        return int(value / _ONE_MS)
    return int(value)


PRODUCE, FETCH = 0, 1
# Produce v0-2 predate Kafka 4's floor and are served as Kafka 3.9 served them, their
# message formats v0/v1 up-converted (legacy_records.py). kio has no schema for them;
# produce_request.py decodes every Produce version by hand. Fetch v4 and above is
# decoded by hand too (fetch_request_decode.py), v0-3 through legacy_messages.
LEGACY_PRODUCE_VERSIONS = range(0, 3)


CREATE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN = 38, 39
EXPIRE_DELEGATION_TOKEN, DESCRIBE_DELEGATION_TOKEN = 40, 41
# Versions Kafka 4 dropped (KIP-896) whose bytes are another version's, in request and
# response: Kafka's message JSON says "version 1 is the same as version 0" (v1 only
# changed when a throttled answer is sent). They are read and written with kio's
# schema of that version.
SAME_AS: dict[tuple[int, int], int] = {
    (CREATE_DELEGATION_TOKEN, 0): 1,
    (RENEW_DELEGATION_TOKEN, 0): 1,
    (EXPIRE_DELEGATION_TOKEN, 0): 1,
    (DESCRIBE_DELEGATION_TOKEN, 0): 1,
}


def wire_version(api_key: int, version: int) -> int:
    """The version whose schema carries this one's bytes (itself, or its SAME_AS)."""
    return SAME_AS.get((api_key, version), version)


@functools.cache
def is_flexible(api_key: int, version: int) -> bool:
    """Whether this API version uses compact encodings and tagged fields (header v2/v1)."""
    if api_key == PRODUCE:
        # Known without kio's schema, whose import (~10 ms) the first Produce would pay:
        # Produce is decoded and answered by hand (produce_request.py).
        return version >= PRODUCE_FIRST_FLEXIBLE
    if api_key == FETCH:  # decoded by hand too (fetch_request_decode.py)
        return version >= FETCH_FIRST_FLEXIBLE
    if (api_key, version) in legacy_messages.LEGACY:
        return False
    return bool(load_request_schema(api_key, wire_version(api_key, version)).__flexible__)


@functools.cache
def request_class(api_key: int, version: int) -> type:
    """kio's request class of this version, given the Kafka default of each field that
    another served version has and this one lacks (requests.ABSENT), as a class
    attribute: a handler reads every field of `requests.<Api>Request` in any version,
    at no cost per request."""
    cls = load_request_schema(api_key, version)
    absent = requests.ABSENT.get(api_key)
    if absent:
        _give_defaults(cls, (), absent)
    return cls


@functools.cache
def request_class_carrying(api_key: int, version: int) -> type:
    """The class an old version's request is read into: kio's oldest class, or a
    subclass of it (and of its entities on the way) with the fields kio lacks that
    `legacy_messages.CARRIED` names for this version."""
    cls = request_class(api_key, known_versions(api_key).start)
    carried = legacy_messages.CARRIED.get((api_key, version))
    return _carrying(cls, (), carried) if carried else cls


def _carrying(
    cls: type, path: tuple[str, ...], carried: dict[tuple[str, ...], dict[str, tuple[str, int]]]
) -> type:
    if not any(p[: len(path)] == path for p in carried):
        return cls
    new_fields: list[tuple[str, Any, Any]] = []
    for name, _kafka_type, nested, is_array, _default in field_plan(cls):
        if nested is None:
            continue
        sub = _carrying(nested, (*path, name), carried)
        if sub is not nested:
            f = next(f for f in fields(cls) if f.name == name)
            hint = tuple[sub, ...] if is_array else sub  # type: ignore[valid-type]
            new_fields.append((name, hint, field(metadata=f.metadata)))
    for name, (kafka_type, _default) in carried.get(path, {}).items():
        new_fields.append((name, int, field(metadata={"kafka_type": kafka_type})))
    return make_dataclass(
        cls.__name__, new_fields, bases=(cls,), frozen=True, slots=True, kw_only=True
    )


def _give_defaults(
    cls: type, path: tuple[str, ...], absent: dict[tuple[str, ...], dict[str, Any]]
) -> None:
    own = {f.name for f in fields(cls)}
    for name, value in absent.get(path, {}).items():
        if name not in own:
            setattr(cls, name, value)
    for name, _kafka_type, nested, _is_array, _default in field_plan(cls):
        if nested is not None:
            _give_defaults(nested, (*path, name), absent)


@functools.cache
def request_reader(api_key: int, version: int) -> Any:
    return entity_reader(request_class(api_key, version))


@functools.cache
def response_type(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


def decode_request(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> Any:
    """Decode a request body; raises on malformed bytes (the caller closes the connection).

    Bytes after the body are ignored, as Kafka's own request parser ignores them:
    librdkafka sends Metadata v9+ asking for all topics with a 4-byte null count where a
    1-byte varint belongs (librdkafka issue 5049), and Kafka serves it regardless.
    """
    if api_key == PRODUCE:
        return decode_produce_request(version, frame, offset, request_walk.MAX_REQUEST_ELEMENTS)
    if api_key == FETCH and version >= FETCH_FIRST_DECODED:
        return decode_fetch_request(version, frame, offset, request_walk.MAX_REQUEST_ELEMENTS)
    legacy = legacy_messages.LEGACY.get((api_key, version))
    if legacy is not None:
        layout, _response, fix = legacy
        data = fix(
            legacy_messages.read(layout, version, frame, offset, request_walk.MAX_REQUEST_ELEMENTS)
        )
        return build(request_class_carrying(api_key, version), data)
    version = wire_version(api_key, version)
    if isinstance(frame, memoryview) and not frame.readonly:
        frame = frame.toreadonly()  # kio's native reader takes read-only buffers only
    edits = request_walk.check_lengths(api_key, version, frame, offset)
    if edits:
        frame = request_walk.edited(frame, edits)
    value, _size = request_reader(api_key, version)(frame, offset)
    return value


def encode(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


# -- building version-specific entities from plain data ---------------------------------


def build_response(api_key: int, version: int, data: Mapping[str, Any]) -> Any:
    return build(response_type(api_key, version), data)


def encode_response(api_key: int, version: int, data: Mapping[str, Any]) -> bytes:
    """A handler's version-agnostic answer as the body of this version."""
    legacy = legacy_messages.LEGACY.get((api_key, version))
    if legacy is not None and legacy[1] is not None:
        return legacy_messages.write(legacy[1], version, data)
    cls = response_type(api_key, wire_version(api_key, version))
    try:
        return response_writer.write(cls, data)
    except response_writer.GiveUp:
        return encode(build(cls, data))


__all__ = [
    "API_NAMES",
    "EntityType",
    "UnknownFieldError",
    "build",
    "build_response",
    "decode_request",
    "encode",
    "encode_response",
    "is_flexible",
    "known_versions",
    "request_class",
]
