"""Guarding kio against lengths that lie: the walk every request takes before kio reads it.

kio reserves room for an array's declared element count before reading any element
(Rust's Vec::with_capacity), and a compact array's count is a varint of up to 35 bits:
one hostile length makes the allocation fail, and Rust then aborts the whole process.
So every request is walked once before kio sees it, with Kafka's own rule for arrays:
no more elements than the bytes left could hold. The walk reads lengths and skips all
else; each entity's walk is written out as one generated Python function (`_compiled`;
the closures it was generated from still walk tagged fields and are the tests'
reference), and arrays of fixed-size elements are skipped in a single step.

The same walk caps the elements of one request in total. Kafka's rule alone lets a
100 MB request of 6-byte partitions declare 16 million of them, which kio and then
the handler would turn into as many Python objects, stalling the event loop for
minutes; no client sends more than a small fraction of the cap.
"""

from __future__ import annotations

import functools
import struct
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.static.protocol import Entity

from kbroker.protocol.errors import MalformedRequest
from kbroker.protocol.varint import read_uvarint, uvarint

MAX_REQUEST_ELEMENTS = 1_000_000

Edit = tuple[int, int, bytes]
"""Bytes [start, end) of the request to replace with these, before kio reads it."""


@dataclass(slots=True)
class WalkState:
    """What one walk of a request carries along: how many array elements it may still
    hold, and the edits that take out the tagged fields kio does not know (see
    `_skip_tagged`)."""

    elements_left: int
    edits: list[Edit] = field(default_factory=list)


Skip = Callable[[bytes | memoryview, int, int, WalkState], int]
"""(buffer, position, end, walk state) -> position after the field."""

_FIXED_SIZES: dict[str, int] = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class _Walk:
    """How to step over one field: the step, its smallest size, its size if fixed, and
    what it is (`shape`, from which `_compiled` writes the same walk as straight code)."""

    skip: Skip
    min_size: int
    fixed_size: int | None = None
    shape: tuple[Any, ...] = ()


def _null_in(name: str) -> MalformedRequest:
    # Kafka's generated readers: "non-nullable field X was serialized as null".
    return MalformedRequest(f"non-nullable field {name} was serialized as null")


def _length_walk(name: str, flexible: bool, width: struct.Struct, nullable: bool) -> Skip:
    """Step over a string/bytes: a compact (varint + 1) or int16/int32 length, then the
    data; a null (length 0 compact, negative otherwise) only where the schema allows."""

    def skip_compact(buf: bytes | memoryview, pos: int, end: int, state: WalkState) -> int:
        size = buf[pos]
        if size >= 0x80:
            size, pos = read_uvarint(buf, pos)
            pos -= 1
        if size == 0:
            if not nullable:
                raise _null_in(name)
            return pos + 1
        return pos + size

    def skip_sized(buf: bytes | memoryview, pos: int, end: int, state: WalkState) -> int:
        (size,) = width.unpack_from(buf, pos)
        pos += width.size
        if size < 0:
            if not nullable:
                raise _null_in(name)
            return pos
        return pos + size

    return skip_compact if flexible else skip_sized


def _fixed(size: int) -> _Walk:
    return _Walk(lambda buf, pos, end, state: pos + size, size, size, ("fixed", size))


def _primitive(kafka_type: str, flexible: bool, name: str = "", nullable: bool = True) -> _Walk:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _fixed(size)
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"no length rule for kafka type {kafka_type!r}")
    width = _I16 if kafka_type == "string" else _I32
    return _Walk(
        _length_walk(name, flexible, width, nullable),
        1 if flexible else width.size,
        shape=("length", flexible, width.size, nullable, name),
    )


def _array(element: _Walk, flexible: bool, name: str = "", nullable: bool = True) -> _Walk:
    per_element = max(element.min_size, 1)
    element_size = element.fixed_size
    skip_element = element.skip

    def skip(buf: bytes | memoryview, pos: int, end: int, state: WalkState) -> int:
        if flexible:
            count, pos = read_uvarint(buf, pos)
            count -= 1
        else:
            (count,) = _I32.unpack_from(buf, pos)
            pos += 4
        if count <= 0:
            if count < 0 and not nullable:
                raise _null_in(name)
            return pos
        if count * per_element > end - pos:
            raise MalformedRequest(
                f"array of {count} elements in the {end - pos} bytes left of the request"
            )
        state.elements_left -= count
        if state.elements_left < 0:
            raise _too_many_elements()
        if element_size is not None:
            return pos + count * element_size
        for _ in range(count):
            pos = skip_element(buf, pos, end, state)
        return pos

    shape = ("array", flexible, nullable, name, per_element, element)
    return _Walk(skip, 4 if not flexible else 1, shape=shape)


def _skip_tagged(
    tagged: dict[int, Skip], buf: bytes | memoryview, pos: int, end: int, state: WalkState
) -> int:
    """Step over a tagged-field section, checking each known tag's value.

    Kafka ignores a tag its version of the schema does not define (a newer client's
    field), where kio refuses the whole request; so each unknown tagged field becomes an
    edit that cuts it out, and the section's count an edit that no longer counts it.
    A known tagged field that holds such a cut (a struct in a tagged field) gets its
    size rewritten too. A size running past the request stays malformed.
    """
    section = pos
    count, pos = read_uvarint(buf, pos)
    counted = pos
    unknown = 0
    for _ in range(count):
        starts = pos
        tag, pos = read_uvarint(buf, pos)
        sized = pos
        size, pos = read_uvarint(buf, pos)
        if pos + size > end:
            raise MalformedRequest("tagged fields run past the end of the request")
        skip = tagged.get(tag)
        if skip is None:
            state.edits.append((starts, pos + size, b""))
            unknown += 1
        else:
            inner = len(state.edits)
            if skip(buf, pos, end, state) != pos + size:
                raise MalformedRequest(f"tagged field {tag} does not fill its {size} bytes")
            cut = sum(stop - start - len(put) for start, stop, put in state.edits[inner:])
            if cut:
                state.edits.append((sized, pos, uvarint(size - cut)))
        pos += size
    if unknown:
        state.edits.append((section, counted, uvarint(count - unknown)))
    return pos


def edited(frame: bytes | memoryview, edits: list[Edit]) -> bytes:
    """The frame with each edit's bytes replaced (edits never overlap)."""
    parts: list[bytes | memoryview] = []
    pos = 0
    for start, stop, put in sorted(edits):
        parts += (frame[pos:start], put)
        pos = stop
    parts.append(frame[pos:])
    return b"".join(parts)


def is_nullable(hint: Any) -> bool:
    """`X | None`: the schema lets the field (or array) be null."""
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(hint)
    )


@functools.cache
def entity_walk(cls: type[Entity], nullable: bool) -> _Walk:
    flexible = bool(cls.__flexible__)
    walks: list[_Walk] = []
    tagged: dict[int, Skip] = {}
    for f in fields(cls):
        kind = classify_field(f)
        name = f"{cls.__name__}.{f.name}"
        is_array = isinstance(kind, EntityTupleField | PrimitiveTupleField)
        if isinstance(kind, EntityField | EntityTupleField):
            walk = entity_walk(kind.type_, isinstance(kind, EntityField) and is_optional(f))
        else:
            element_type = typing.get_args(f.type)[0] if is_array else f.type
            walk = _primitive(f.metadata["kafka_type"], flexible, name, is_nullable(element_type))
        if is_array:
            walk = _array(walk, flexible, name, is_nullable(f.type))
        tag = get_field_tag(f)
        if tag is not None:
            tagged[int(tag)] = walk.skip
        elif walk.fixed_size is not None and walks and walks[-1].fixed_size is not None:
            walks[-1] = _fixed(walks[-1].fixed_size + walk.fixed_size)
        else:
            walks.append(walk)
    if not flexible and not nullable and all(w.fixed_size is not None for w in walks):
        return _fixed(sum(w.fixed_size or 0 for w in walks))
    steps = tuple(w.skip for w in walks)

    def skip(buf: bytes | memoryview, pos: int, end: int, state: WalkState) -> int:
        if nullable:
            if buf[pos] == 0xFF:  # int8 -1 is null; kio reads any other marker as present
                return pos + 1
            pos += 1
        for step in steps:
            pos = step(buf, pos, end, state)
        if not flexible:
            return pos
        if buf[pos] == 0:  # no tagged fields, the common case
            return pos + 1
        return _skip_tagged(tagged, buf, pos, end, state)

    shape = ("entity", flexible, nullable, tuple(walks), tagged)
    if nullable:
        return _Walk(skip, 1, shape=shape)
    return _Walk(skip, sum(w.min_size for w in walks) + (1 if flexible else 0), shape=shape)


@functools.cache
def request_skip(api_key: int, version: int) -> Skip:
    return _compiled(entity_walk(load_request_schema(api_key, version), False))


def _too_many_elements() -> MalformedRequest:
    return MalformedRequest(f"more than {MAX_REQUEST_ELEMENTS} array elements in one request")


def _compiled(walk: _Walk) -> Skip:
    """The walk of a request as one generated function per entity, each field's step
    written out in line: the same reads, checks and errors as the closures' (which the
    tagged fields still take, and tests/test_fuzz_requests.py compares with), at a
    third of their cost (every request not decoded by hand is walked once)."""
    code = _WalkCode()
    top = code.function(walk)
    namespace: dict[str, Any] = dict(code.env)
    exec(compile("\n".join(code.lines), f"<request walk {top}>", "exec"), namespace)  # noqa: S102
    return typing.cast(Skip, namespace[top])


class _WalkCode:
    """Python source for `_compiled`: `lines` of its functions, `env` what they use."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "read_uvarint": read_uvarint,
            "MalformedRequest": MalformedRequest,
            "_null_in": _null_in,
            "_too_many_elements": _too_many_elements,
            "_skip_tagged": _skip_tagged,
            "_I16": _I16,
            "_I32": _I32,
        }
        self._names: dict[int, str] = {}

    def _name(self, value: Any, prefix: str) -> str:
        name = f"{prefix}{len(self.env)}"
        self.env[name] = value
        return name

    def function(self, walk: _Walk) -> str:
        """The name of a generated function stepping over `walk` (an entity's, or any
        other field's as a function of its own)."""
        known = self._names.get(id(walk))
        if known is not None:
            return known
        name = self._names[id(walk)] = f"_walk{len(self._names)}"
        body: list[str] = []
        kind = walk.shape[0] if walk.shape else None
        if kind == "entity":
            _, flexible, nullable, steps, tagged = walk.shape
            if nullable:
                body += ["if buf[pos] == 0xFF:", "    return pos + 1", "pos += 1"]
            for step in steps:
                body += self.step(step)
            if flexible:
                tags = self._name(tagged, "_tags")
                body += [
                    "if buf[pos] == 0:",
                    "    pos += 1",
                    "else:",
                    f"    pos = _skip_tagged({tags}, buf, pos, end, state)",
                ]
        else:
            body += self.step(walk)
        self.lines.append(f"def {name}(buf, pos, end, state):")
        self.lines += ["    " + line for line in body]
        self.lines.append("    return pos")
        return name

    def step(self, walk: _Walk) -> list[str]:
        """Lines that move `pos` over one field."""
        kind = walk.shape[0] if walk.shape else None
        if kind == "fixed":
            return [f"pos += {walk.shape[1]}"]
        if kind == "length":
            _, flexible, width, nullable, name = walk.shape
            null = f"    raise _null_in({self._name(name, '_n')})" if not nullable else ""
            if flexible:
                return [
                    "size = buf[pos]",
                    "if size >= 0x80:",
                    "    size, pos = read_uvarint(buf, pos)",
                    "    pos -= 1",
                    "if size == 0:",
                    null or "    pos += 1",
                    "else:",
                    "    pos += size",
                ]
            unpack = "_I16" if width == 2 else "_I32"
            return [
                f"(size,) = {unpack}.unpack_from(buf, pos)",
                f"pos += {width}",
                "if size < 0:",
                null or "    pass",
                "else:",
                "    pos += size",
            ]
        if kind == "array":
            return self._array(walk)
        if kind == "entity":
            return [f"pos = {self.function(walk)}(buf, pos, end, state)"]
        return [f"pos = {self._name(walk.skip, '_skip')}(buf, pos, end, state)"]

    def _array(self, walk: _Walk) -> list[str]:
        _, flexible, nullable, name, per_element, element = walk.shape
        lines = (
            ["count, pos = read_uvarint(buf, pos)", "count -= 1"]
            if flexible
            else ["(count,) = _I32.unpack_from(buf, pos)", "pos += 4"]
        )
        lines += ["if count <= 0:"]
        if nullable:
            lines += ["    pass"]
        else:
            lines += ["    if count < 0:", f"        raise _null_in({self._name(name, '_n')})"]
        lines += [
            "else:",
            f"    if count * {per_element} > end - pos:",
            "        raise MalformedRequest(",
            '            f"array of {count} elements in the {end - pos} bytes left of the request"',
            "        )",
            "    state.elements_left -= count",
            "    if state.elements_left < 0:",
            "        raise _too_many_elements()",
        ]
        if element.fixed_size is not None:
            lines += [f"    pos += count * {element.fixed_size}"]
        elif element.shape and element.shape[0] == "length":
            lines += ["    for _ in range(count):"]
            lines += ["        " + line for line in self.step(element)]
        else:
            lines += [
                "    for _ in range(count):",
                f"        pos = {self.function(element)}(buf, pos, end, state)",
            ]
        return lines


def check_lengths(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> list[Edit]:
    """Reject a request body whose array counts exceed what its bytes could hold, or
    that holds a null where its schema declares a field non-nullable (kio would hand the
    handler a None where it expects a list or a string; Kafka fails such a request).

    Also refuses more than MAX_REQUEST_ELEMENTS array elements in all. Raises
    MalformedRequest. A body that passes may still be malformed in other ways, which
    kio then reports without harm. Returns the edits that take out tagged fields of
    tags the schema does not define, which Kafka ignores (none, nearly always).
    """
    state = WalkState(MAX_REQUEST_ELEMENTS)
    try:
        request_skip(api_key, version)(frame, offset, len(frame), state)
    except (struct.error, IndexError):
        raise MalformedRequest("request body ends inside a field") from None
    return state.edits
