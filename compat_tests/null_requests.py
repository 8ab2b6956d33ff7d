"""Valid requests with one string, bytes or array field nulled or its length mutated.

For every request schema kio has, `variants(key, version)` starts from a request whose
every array holds one element and every string one character, and yields one encoding
per (field, mutation): the field serialized as null, or its length overrunning the
request. Kafka fails a request with a null in a field its schema declares non-nullable;
a nullable field set to null is an ordinary request. The fuzz tests decode these, the
bad-input compat test sends them to a broker.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
)

from kbroker.protocol import messages
from kbroker.protocol.varint import uvarint

MARK = "\u2603nul\u2603"  # unique in any request this module builds
MARK_BYTES = MARK.encode()


@dataclass(frozen=True)
class Variant:
    path: str  # Entity.field[.Entity.field...]
    mutation: str  # "null" or "overrun"
    nullable: bool  # whether the schema allows null here
    data: bytes


def _nullable(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(hint)
    )


def _full(cls: type, data: dict[str, Any] | None = None) -> Any:
    """An instance with one element in every array and "x" in every string."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(kind, EntityTupleField):
            kwargs[f.name] = [_full(kind.type_)]
        elif isinstance(kind, EntityField):
            kwargs[f.name] = _full(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            kwargs[f.name] = [_sample(kafka_type)]
        elif kafka_type in ("string", "bytes", "records"):
            kwargs[f.name] = _sample(kafka_type)
    return messages.build(cls, kwargs)


def _sample(kafka_type: str | None) -> Any:
    if kafka_type == "string":
        return "x"
    if kafka_type in ("bytes", "records"):
        return b"x"
    if kafka_type == "uuid":
        return None
    return 0


def _paths(entity: Any, prefix: str = "") -> Iterator[tuple[str, list[tuple[Any, str]], Any]]:
    """(path, [(parent entity, field name) chain], field) for every string/bytes/array."""
    for f in dataclasses.fields(entity):
        if get_field_tag(f) is not None:
            continue  # a tagged field's size prefix would no longer match: not mutated here
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        path = f"{prefix}{type(entity).__name__}.{f.name}"
        if isinstance(kind, EntityTupleField | PrimitiveTupleField) or kafka_type in (
            "string",
            "bytes",
            "records",
        ):
            yield path, [(entity, f.name)], f
        value = getattr(entity, f.name)
        children = value if isinstance(kind, EntityTupleField) else [value]
        if isinstance(kind, EntityField | EntityTupleField):
            for child in children:
                if child is None:
                    continue
                for sub, chain, leaf in _paths(child, path + "/"):
                    yield sub, [(entity, f.name), *chain], leaf


def _replace(chain: list[tuple[Any, str]], value: Any) -> Any:
    parent, name = chain[0]
    if len(chain) == 1:
        return dataclasses.replace(parent, **{name: value})
    current = getattr(parent, name)
    if isinstance(current, tuple):
        inner = _replace(chain[1:], value)
        return dataclasses.replace(parent, **{name: (inner, *current[1:])})
    return dataclasses.replace(parent, **{name: _replace(chain[1:], value)})


def _marked(kafka_type: str | None) -> Any:
    return MARK if kafka_type == "string" else MARK_BYTES


def _length_prefix(flexible: bool, kafka_type: str | None, size: int) -> bytes:
    if flexible:
        return uvarint(size + 1)
    return struct.pack(">h" if kafka_type == "string" else ">i", size)


def variants(key: int, version: int) -> Iterator[Variant]:
    cls = load_request_schema(key, version)
    flexible = bool(cls.__flexible__)
    base = _full(cls)
    for path, chain, f in _paths(base):
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            yield Variant(path, "null", _nullable(f.type), messages.encode(_replace(chain, None)))
            continue
        marked = messages.encode(_replace(chain, _marked(kafka_type)))
        encoded_mark = _length_prefix(flexible, kafka_type, len(MARK_BYTES)) + MARK_BYTES
        if marked.count(encoded_mark) != 1:
            continue  # a fixed-size neighbour happened to look the same: skip, rare
        null = b"\x00" if flexible else _length_prefix(False, kafka_type, -1)
        yield Variant(path, "null", _nullable(f.type), marked.replace(encoded_mark, null))
        overrun = _length_prefix(flexible, kafka_type, 30_000) + MARK_BYTES
        yield Variant(path, "overrun", _nullable(f.type), marked.replace(encoded_mark, overrun))
