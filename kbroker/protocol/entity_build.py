"""Building kio's entity of one version from a handler's version-agnostic description.

Handlers describe a message as plain dicts and lists (the TypedDicts of
protocol.responses); `build` turns that into the kio dataclass of the version at hand,
dropping fields the version does not have and filling the ones left out with their
defaults. `field_plan` and `coerce` are the same rules field by field, for
protocol.response_writer, which writes the bytes of an answer without the dataclass.
"""

from __future__ import annotations

import datetime
import functools
import types
import typing
import uuid
from collections.abc import Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

_UTC = datetime.UTC


def known_versions(api_key: int) -> range:
    """Versions of an API that kio has schemas for."""
    versions = sorted(schema_name_map[api_key_map[api_key]])
    return range(versions[0], versions[-1] + 1)


@functools.cache
def field_plan(cls: type) -> tuple[tuple[str, str | None, Any, bool, Any], ...]:
    """For each field: (name, kafka_type, nested entity type or None, is_array, default)."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in fields(cls):
        hint = hints[f.name]
        nested, is_array = nested_entity(hint)
        plan.append(
            (f.name, f.metadata.get("kafka_type"), nested, is_array, field_default(f, hint))
        )
    return tuple(plan)


def _without_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return options[0] if len(options) == 1 else hint
    return hint


def nested_entity(hint: Any) -> tuple[type | None, bool]:
    """The entity type a field holds (itself or as array items), for nullable ones too."""
    hint = _without_none(hint)
    is_array = typing.get_origin(hint) is tuple
    inner = _without_none(typing.get_args(hint)[0]) if is_array else hint
    if isinstance(inner, type) and is_dataclass(inner):
        return inner, is_array
    return None, is_array


def field_default(f: Field, hint: Any) -> Any:
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


def coerce(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(value)
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        return None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)
    if kafka_type == "uuid" and isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    return value


class UnknownFieldError(ValueError):
    """A message described with a key no version of its schema has: a misspelling,
    which would otherwise silently leave the real field at its default."""


Shape = dict[str, "Shape | None"]
"""The field names of an entity in any version, with the shape of each nested entity."""


def _merge_shape(shape: Shape, cls: type) -> None:
    for name, _kafka_type, nested, _is_array, _default in field_plan(cls):
        if nested is None:
            shape.setdefault(name, None)
            continue
        child = shape.get(name)
        if child is None:
            child = shape[name] = {}
        _merge_shape(child, nested)


@functools.cache
def _api_shape(api_key: int, kind: EntityType) -> Shape:
    """Every field of an API's request or response in any version kio knows."""
    load = load_request_schema if kind is EntityType.request else load_response_schema
    shape: Shape = {}
    for version in known_versions(api_key):
        _merge_shape(shape, load(api_key, version))
    return shape


@functools.cache
def shape_of(cls: type) -> Shape:
    kind = getattr(cls, "__type__", None)
    if kind in (EntityType.request, EntityType.response):
        return _api_shape(int(cls.__api_key__), kind)  # type: ignore[attr-defined]
    shape: Shape = {}
    _merge_shape(shape, cls)
    return shape


class _OtherVersionField(Exception):
    """A description holds a key this version lacks: telling a field of another version
    (dropped) from a misspelling (refused) needs the fields of every version."""


# Entities whose descriptions named a key of another version: built with every
# version's fields from then on, without trying this version's alone first.
_SHAPE_NEEDED: set[type] = set()


def build(cls: type, data: Mapping[str, Any], shape: Shape | None = None) -> Any:
    """Instantiate kio entity `cls` from `data`.

    Keys of fields this version lacks but another version of the message has are
    dropped, so one description serves every version; a key no version has raises
    UnknownFieldError. Fields left out take their defaults.

    The fields of every version (which imports each version's schema module, tens of ms
    per API) are gathered only once a description of `cls` names a key this version
    lacks: answers to clients of the newest version usually name none.
    """
    if shape is None:
        if cls not in _SHAPE_NEEDED:
            try:
                return _build(cls, data, None)
            except _OtherVersionField:
                _SHAPE_NEEDED.add(cls)
        shape = shape_of(cls)
    return _build(cls, data, shape)


def _build(cls: type, data: Mapping[str, Any], shape: Shape | None) -> Any:
    """`build` with the fields of every version in `shape`, or with None to accept only
    this version's fields (raising _OtherVersionField for any other key)."""
    kwargs = {}
    used = 0
    for name, kafka_type, nested, is_array, default in field_plan(cls):
        if name not in data:
            kwargs[name] = default
            continue
        used += 1
        inner = None if shape is None else shape.get(name) or {}
        kwargs[name] = _field_value(kafka_type, nested, is_array, data[name], inner)
    if used != len(data):
        if shape is None:
            raise _OtherVersionField
        unknown = sorted(key for key in data if key not in shape)
        if unknown:
            raise UnknownFieldError(
                f"{cls.__qualname__} has no field {', '.join(unknown)} in any version"
            )
    return cls(**kwargs)


def build_field(kafka_type: str | None, nested: Any, is_array: bool, value: Any) -> Any:
    """One field's value as `build` makes it (a `field_plan` entry's types), nested
    entities with this version's fields only (_OtherVersionField otherwise)."""
    return _field_value(kafka_type, nested, is_array, value, None)


def _field_value(
    kafka_type: str | None, nested: Any, is_array: bool, value: Any, inner: Shape | None
) -> Any:
    if nested is not None and value is not None:
        if is_array:
            return tuple(v if isinstance(v, nested) else _build(nested, v, inner) for v in value)
        if not isinstance(value, nested):
            return _build(nested, value, inner)
        return value
    if is_array and value is not None:
        return tuple(coerce(kafka_type, v) for v in value)
    return coerce(kafka_type, value)
