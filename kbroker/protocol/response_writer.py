"""A handler's answer written straight from its description to the bytes of a version.

Answers not written by hand (produce_response, fetch_response, group_answers and the
like) are dicts and lists (protocol.responses). kio's way to bytes is to build its frozen
dataclass of the version (`entity_build.build`, a call and a coercion per field) and
have its writer walk that (a call and a BytesIO write per value): some 6 µs an entity.
A Metadata answer for a topic of 50 partitions cost 720-1,370 µs that way, nine tenths
of it writing, and the ApiVersions answer every connection asks for first 450-930 µs.

Here each entity class is compiled once into one function, made from source as
dataclasses makes its methods (`entity_source` shows it): a run of fixed-width fields
is one struct.pack, strings and integer and entity arrays are written inline, the rarer
kinds (tagged fields, uuids, datetimes, nullable structs) call small steps or kio's own
writer. The bytes are kio's: tests/test_response_writer.py holds both to the same bytes
for every version of every answer served, on random descriptions. Keys of the API's
other versions are dropped as `build` drops them. What the function cannot write (a key
of no version, a value out of range) raises GiveUp, and `messages.encode_response` then
writes the answer the kio way, which succeeds or raises as it always did.

PREWRITTEN: an item of an entity array may be the bytes `write_within` gave for that
entity before (Metadata keeps its topics so, handlers/topic_answers.py); they are copied
as they are. Only this writer takes them: kio's way cannot, so a caller that hands them
in writes the answer itself and falls back on descriptions at GiveUp.
"""

from __future__ import annotations

import datetime
import functools
import io
import struct
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import get_field_tag, is_optional
from kio.serial._serialize import get_field_writer

from kbroker.protocol.entity_build import Shape, build_field, coerce, field_plan, shape_of
from kbroker.protocol.varint import uvarint

Out = list[Any]
"""The pieces of an answer, bytes-like, joined once at the end."""
Step = Callable[[Mapping[str, Any], Out], None]


class GiveUp(Exception):
    """Not a shape the compiled steps write: the caller writes the answer kio's way."""


def write(cls: type, data: Mapping[str, Any]) -> bytes:
    """The bytes kio writes for `build(cls, data)`, or GiveUp."""
    return write_within(cls, cls, data)


def write_within(answer: type, cls: type, data: Mapping[str, Any]) -> bytes:
    """The bytes of `cls`, an entity of the answer class `answer` (itself, or one it
    holds), as writing the answer writes them: what a PREWRITTEN item is; or GiveUp."""
    for _ in range(2):
        out: Out = []
        try:
            entity_steps(cls)(data, out)
            return b"".join(out)
        except _OtherKeys:
            # Keys of other versions, or of none: which, the fields of every version
            # of the API say (gathered once, as `build` gathers them).
            if answer in _REGISTERED:
                raise GiveUp from None
            _register(answer, shape_of(answer))
            _REGISTERED.add(answer)
        except GiveUp:
            raise
        except Exception as exc:  # a value the steps cannot write; kio decides what it means
            raise GiveUp from exc
    raise GiveUp


class _OtherKeys(GiveUp):
    """A description with keys its entity lacks, not (yet) known as another version's."""


# The keys each entity class takes, its own and those of the same entity in the API's
# other versions (which `build` drops); empty for a class met at places that differ.
_KNOWN: dict[type, frozenset[str]] = {}
_REGISTERED: set[type] = set()


def _register(cls: type, shape: Shape) -> None:
    names = frozenset(shape)
    _KNOWN[cls] = names if _KNOWN.get(cls, names) == names else frozenset()
    for name, _, nested, _, _ in field_plan(cls):
        if nested is not None:
            _register(nested, shape.get(name) or {})


# What one fixed-width field packs as; `struct` refuses values out of its range.
_FIXED = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float64": "d",
    "bool": "?",
    "error_code": "h",
    "timedelta_i32": "i",
    "timedelta_i64": "q",
}
_INTEGERS = {kind: code for kind, code in _FIXED.items() if kind[0] in "iu"}
_ERROR_CODES = frozenset(code.value for code in ErrorCode)
_ZERO_UUID = bytes(16)
_NULL_COMPACT = b"\x00"
_NULL_INT16 = struct.pack(">h", -1)
_NULL_INT32 = struct.pack(">i", -1)
_NOT_NULL = b"\x01"
_NULL_ENTITY = b"\xff"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_NO_TAGS = b"\x00"
# Milliseconds an int stands for exactly after kio's trip through a timedelta's float
# seconds; beyond this the value takes that trip (GiveUp).
_EXACT_MS = 10**15


@functools.cache
def entity_steps(cls: type) -> Step:
    """The writer of one kio entity class from a description of it: a function made
    from source, as dataclasses makes its methods, so that an entity costs one call
    (an answer's partitions and API entries are hundreds of entities)."""
    source, namespace = entity_source(cls)
    exec(compile(source, f"<answer of {cls.__qualname__}>", "exec"), namespace)  # noqa: S102
    return typing.cast(Step, namespace["write_entity"])


def entity_source(cls: type) -> tuple[str, dict[str, Any]]:
    """The source of `entity_steps(cls)` and the names it reads."""
    flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]  # every kio entity has it
    plan = {entry[0]: entry for entry in field_plan(cls)}
    namespace: dict[str, Any] = {
        "cls": cls,
        "names": frozenset(f.name for f in fields(cls)),
        "known": _KNOWN,
        "nothing": frozenset(),
        "OtherKeys": _OtherKeys,
        "GiveUp": GiveUp,
        "CODES": _ERROR_CODES,
        "ms": _milliseconds,
        "uvarint": uvarint,
        "SMALL": tuple(uvarint(n) for n in range(128)),
        "pack": struct.pack,
        "I16": _I16.pack,
        "I32": _I32.pack,
        "kio_entity": _kio_entity,
    }
    lines = [
        "def write_entity(data, out):",
        "    if not names.issuperset(data) and not known.get(cls, nothing).issuperset(data):",
        "        raise OtherKeys",
        "    get = data.get",
        "    append = out.append",
    ]
    run: list[tuple[int, str, str]] = []  # fixed-width fields waiting to be packed at once
    tagged = []

    def pack_run() -> None:
        if not run:
            return
        namespace[f"p{run[0][0]}"] = struct.Struct(">" + "".join(_FIXED[k] for _, _, k in run)).pack
        for i, name, _ in run:
            lines.append(f"    v{i} = get({name!r}, d{i})")
        for i, _, kind in run:
            if kind == "error_code":
                lines.append(f"    if v{i} not in CODES: raise GiveUp")
            elif kind.startswith("timedelta"):
                lines.append(f"    v{i} = ms(v{i})")
        lines.append(f"    append(p{run[0][0]}({', '.join(f'v{i}' for i, _, _ in run)}))")
        run.clear()

    for i, f in enumerate(fields(cls)):
        name, kafka_type, nested, is_array, default = plan[f.name]
        namespace[f"d{i}"] = default
        tag = get_field_tag(f)
        if tag is not None:
            tagged.append((tag, f, plan[f.name]))
            continue
        optional = is_optional(f)
        if nested is None and not is_array and not optional and kafka_type in _FIXED:
            run.append((i, name, kafka_type))
            continue
        pack_run()
        if nested is not None and is_array:
            namespace[f"n{i}"] = nested
            namespace[f"w{i}"] = entity_steps(nested)
            lines += _array_source(i, name, flexible)
            lines += [
                f"        for item in v{i}:",
                f"            if isinstance(item, n{i}):",
                f"                kio_entity(n{i}, item, out)",
                "            elif type(item) is bytes:",  # written before: PREWRITTEN
                "                append(item)",
                "            else:",
                f"                w{i}(item, out)",
            ]
        elif is_array and kafka_type in _INTEGERS:
            lines += _array_source(i, name, flexible)
            # The short arrays (replica lists) by a Struct of their length, made once.
            code = _INTEGERS[kafka_type]
            namespace[f"a{i}"] = tuple(struct.Struct(f">{n}{code}").pack for n in range(16))
            lines.append(
                f"        if n: append(a{i}[n](*v{i}) if n < 16 else pack('>%d{code}' % n, *v{i}))"
            )
        elif nested is None and not is_array and kafka_type in ("string", "bytes", "records"):
            lines += _string_source(i, name, kafka_type, flexible, optional)
        else:
            if nested is not None:
                step = _entity_step(name, default, nested, entity_steps(nested), optional)
            elif is_array:
                item = _leaf(kafka_type, flexible, nullable=False, field=f)
                step = _array_step(name, default, kafka_type, item, flexible)
            else:
                step = _value_step(name, default, _leaf(kafka_type, flexible, optional, f))
            namespace[f"s{i}"] = step
            lines.append(f"    s{i}(data, out)")
    pack_run()
    if flexible and tagged:
        namespace["tags"] = _tags_step(sorted(tagged, key=lambda t: t[0]))
        lines.append("    tags(data, out)")
    elif flexible:
        lines.append(f"    append({_NO_TAGS!r})")
    return "\n".join(lines) + "\n", namespace


# A compact length (size n + 1) in generated source; the one-byte ones from a table.
_COMPACT_N = "SMALL[n + 1] if n < 127 else uvarint(n + 1)"


def _array_source(i: int, name: str, flexible: bool) -> list[str]:
    """Lines that write an array's length (null: kio writes None as a null array whatever
    the schema says) and leave its items, a sequence, in v{i}, the writing of which the
    caller appends under `else:`."""
    null = _NULL_COMPACT if flexible else _NULL_INT32
    length = _COMPACT_N if flexible else "I32(n)"
    return [
        f"    v{i} = get({name!r}, d{i})",
        f"    if v{i} is None:",
        f"        append({null!r})",
        "    else:",
        f"        if type(v{i}) is not list and type(v{i}) is not tuple:",
        f"            v{i} = tuple(v{i})",
        f"        n = len(v{i})",
        f"        append({length})",
    ]


def _string_source(i: int, name: str, kafka_type: str, flexible: bool, nullable: bool) -> list[str]:
    """Lines that write a string or bytes field as kio's writer of its kind does."""
    if flexible:
        null, length = _NULL_COMPACT, _COMPACT_N
        encode = [f"        if isinstance(v{i}, str):", f"            v{i} = v{i}.encode()"]
    elif kafka_type == "string":
        null, length = _NULL_INT16, "I16(n)"
        encode = [f"        v{i} = v{i}.encode()"]
    else:
        null, length = _NULL_INT32, "I32(n)"
        encode = []
    return [
        f"    v{i} = get({name!r}, d{i})",
        f"    if v{i} is None:",
        f"        append({null!r})" if nullable else "        raise GiveUp",
        "    else:",
        *encode,
        f"        n = len(v{i})",
        f"        append({length})",
        f"        append(v{i})",
    ]


def _milliseconds(value: Any) -> int:
    """kio's value for a duration: an int of milliseconds or a timedelta."""
    if type(value) is int and -_EXACT_MS < value < _EXACT_MS:
        return value
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    raise GiveUp


Leaf = Callable[[Any, Out], None]


def _leaf(kafka_type: str | None, flexible: bool, nullable: bool, field: Any) -> Leaf:
    """How one value of a primitive type is written (an array's item, or a field)."""
    if kafka_type in ("string", "bytes", "records"):
        return _string_leaf(kafka_type, flexible, nullable)
    if kafka_type == "uuid":
        return _uuid
    if kafka_type in _FIXED and not nullable:
        packer = struct.Struct(">" + _FIXED[kafka_type]).pack
        if kafka_type == "error_code":

            def code(value: Any, out: Out) -> None:
                if value not in _ERROR_CODES:
                    raise GiveUp
                out.append(packer(value))

            return code
        if kafka_type.startswith("timedelta"):
            return lambda value, out: out.append(packer(_milliseconds(value)))
        return lambda value, out: out.append(packer(value))
    # Anything else (datetimes): kio's own writer, after the coercion `build` makes.
    writer = get_field_writer(field, flexible, is_request_header=False, is_tag=False)

    def kio_leaf(value: Any, out: Out) -> None:
        buffer = io.BytesIO()
        writer(buffer, coerce(kafka_type, value))
        out.append(buffer.getvalue())

    return kio_leaf


def _string_leaf(kafka_type: str, flexible: bool, nullable: bool) -> Leaf:
    """A string's or bytes' writer as kio's of its kind: a compact length (size + 1,
    str or bytes taken), else an int16 length and a str, or an int32 length and bytes."""
    text = kafka_type == "string"
    null = _NULL_COMPACT if flexible else _NULL_INT16 if text else _NULL_INT32

    def string(value: Any, out: Out) -> None:
        if value is None:
            if not nullable:
                raise GiveUp
            out.append(null)
            return
        if flexible:
            if isinstance(value, str):
                value = value.encode()
            out.append(uvarint(len(value) + 1))
        elif text:
            value = value.encode()
            out.append(_I16.pack(len(value)))
        else:
            out.append(_I32.pack(len(value)))
        out.append(value)

    return string


def _uuid(value: Any, out: Out) -> None:
    if value is None:
        out.append(_ZERO_UUID)
    elif type(value) is uuid.UUID:
        out.append(value.bytes)
    else:
        out.append(uuid.UUID(bytes=value).bytes)  # bytes of 16 or a ValueError


def _value_step(name: str, default: Any, leaf: Leaf) -> Step:
    return lambda data, out: leaf(data.get(name, default), out)


def _array_length(items: Any, flexible: bool, out: Out) -> Any:
    """Write an array's length (null: kio writes None as a null array whatever the
    schema says); the items, as a sequence, or None."""
    if items is None:
        out.append(_NULL_COMPACT if flexible else _NULL_INT32)
        return None
    if type(items) is not list and type(items) is not tuple:
        items = tuple(items)
    out.append(uvarint(len(items) + 1) if flexible else _I32.pack(len(items)))
    return items


def _array_step(
    name: str, default: Any, kafka_type: str | None, item: Leaf, flexible: bool
) -> Step:
    code = _INTEGERS.get(kafka_type or "")
    if code is not None:
        # Plain integers (replica lists, partition lists): the whole array in one pack.
        def integers(data: Mapping[str, Any], out: Out) -> None:
            items = _array_length(data.get(name, default), flexible, out)
            if items:
                out.append(struct.pack(f">{len(items)}{code}", *items))

        return integers

    def values(data: Mapping[str, Any], out: Out) -> None:
        items = _array_length(data.get(name, default), flexible, out)
        if items:
            for value in items:
                item(value, out)

    return values


def _kio_entity(nested: type, value: Any, out: Out) -> None:
    """An entity handed over already built: kio writes it."""
    buffer = io.BytesIO()
    entity_writer(nested)(buffer, value)
    out.append(buffer.getvalue())


def _entities_step(name: str, default: Any, nested: type, inner: Step, flexible: bool) -> Step:
    def entities(data: Mapping[str, Any], out: Out) -> None:
        items = _array_length(data.get(name, default), flexible, out)
        if items:
            for item in items:
                if isinstance(item, nested):
                    _kio_entity(nested, item, out)
                else:
                    inner(item, out)

    return entities


def _entity_step(name: str, default: Any, nested: type, inner: Step, nullable: bool) -> Step:
    def entity(data: Mapping[str, Any], out: Out) -> None:
        value = data.get(name, default)
        if value is None:
            if not nullable:
                raise GiveUp
            out.append(_NULL_ENTITY)
            return
        if nullable:
            out.append(_NOT_NULL)
        if isinstance(value, nested):
            _kio_entity(nested, value, out)
        else:
            inner(value, out)

    return entity


@dataclass(frozen=True, slots=True)
class _Tagged:
    """One tagged field: how its value is compared with its default and written."""

    tag: bytes
    name: str
    kafka_type: str | None
    nested: type | None
    is_array: bool
    default: Any  # the value a description that leaves the field out gives it
    own_default: Any  # the schema's default, or MISSING
    implicit_default: Any  # kio's default where the schema has none
    absent_skipped: bool  # left out, the field is at its default and not written
    leaf: Leaf | None  # a primitive value's writer
    items: Step | None  # an array's writer
    kio_writer: Any  # a struct's: kio's, on the value `build` makes

    def at_default(self, value: Any) -> bool:
        own = self.own_default
        return value == own or (own is MISSING and value == self.implicit_default)


def _tags_step(tagged: list[tuple[int, Any, tuple[Any, ...]]]) -> Step:
    """The tagged-field section: the count, then each field that differs from its
    default as tag, size and value, in tag order (kio's rule for what is left out).
    A tagged field is never null on the wire (kio writes its value as not nullable)."""
    if not tagged:
        return lambda data, out: out.append(_NO_TAGS)
    compiled = []
    for tag, f, (name, kafka_type, nested, is_array, default) in tagged:
        implicit = get_tagged_field_default(f)
        leaf = items = kio_writer = None
        if nested is not None and not is_array:
            kio_writer = get_field_writer(f, True, is_request_header=False, is_tag=True)
        elif nested is not None:
            items = _entities_step(name, (), nested, entity_steps(nested), True)
        elif is_array:
            items = _array_step(name, (), kafka_type, _leaf(kafka_type, True, False, f), True)
        else:
            leaf = _leaf(kafka_type, True, False, f)
        # Left out of the description, the field takes the plan's default, which kio
        # skips when it is the field's default; one whose plan default kio would write
        # (none in kio's schemas today) is written from it like any other value.
        absent_skipped = default == f.default or (f.default is MISSING and default == implicit)
        compiled.append(
            _Tagged(
                uvarint(tag),
                name,
                kafka_type,
                nested,
                is_array,
                default,
                f.default,
                implicit,
                absent_skipped,
                leaf,
                items,
                kio_writer,
            )
        )

    def tags(data: Mapping[str, Any], out: Out) -> None:
        written: Out = []
        count = 0
        for field in compiled:
            if field.name in data:
                value = data[field.name]
            elif field.absent_skipped:
                continue
            else:
                value = field.default
            encoded = _tagged_value(field, value)
            if encoded is None:
                continue
            written.append(field.tag)
            written.append(uvarint(len(encoded)))
            written.append(encoded)
            count += 1
        out.append(uvarint(count))
        out.extend(written)

    return tags


def _tagged_value(field: _Tagged, value: Any) -> bytes | None:
    """A tagged field's bytes, or None when it is at its default and left out."""
    value_out: Out = []
    if field.kio_writer is not None:
        try:
            value = build_field(field.kafka_type, field.nested, False, value)
        except Exception as exc:
            raise GiveUp from exc
        if field.at_default(value):
            return None
        buffer = io.BytesIO()
        field.kio_writer(buffer, value)
        return buffer.getvalue()
    if field.items is not None:
        value = None if value is None else tuple(value)
        if field.at_default(value):
            return None
        field.items({field.name: value}, value_out)
    else:
        value = coerce(field.kafka_type, value)
        if field.at_default(value):
            return None
        assert field.leaf is not None
        field.leaf(value, value_out)
    return b"".join(value_out)
