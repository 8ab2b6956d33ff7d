"""Protobuf schemas between their two spellings: `.proto` text, which the registry stores
(as Confluent's does) and Java clients read, and a serialized FileDescriptorProto,
which Confluent's Python and Go clients register and ask for (`format=serialized`).

Covers what proto2/proto3 message schemas use: package, imports, messages (nested),
enums, scalar, message, enum and map fields, labels, proto3 `optional`, oneofs,
reserved ranges and names. Options other than a field's `packed` and `deprecated`,
services, extensions and groups are left out of the text: they do not change how a
message is encoded or which schemas are compatible.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kbroker.schemas.errors import invalid_schema

_SCALAR_TYPES = {
    "double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6,
    "fixed32": 7, "bool": 8, "string": 9, "bytes": 12, "uint32": 13, "sfixed32": 15,
    "sfixed64": 16, "sint32": 17, "sint64": 18,
}  # fmt: skip
_TYPE_NAMES = {number: name for name, number in _SCALAR_TYPES.items()}
TYPE_MESSAGE, TYPE_ENUM = 11, 14
LABEL_OPTIONAL, LABEL_REQUIRED, LABEL_REPEATED = 1, 2, 3


def _descriptor_pb2() -> Any:
    from google.protobuf import descriptor_pb2

    return descriptor_pb2


# -- text -> descriptor ---------------------------------------------------------------------


def descriptor_from_text(text: str, name: str = "default.proto") -> bytes:
    """The serialized FileDescriptorProto of a `.proto` text (42201 if it does not parse)."""
    from proto_schema_parser import ast

    from kbroker.schemas.protobuf import parse_tree

    tree = parse_tree(text)
    pb = _descriptor_pb2()
    fd = pb.FileDescriptorProto()
    fd.name = name
    syntax = tree.syntax or "proto2"
    if syntax != "proto2":
        fd.syntax = syntax
    package = ""
    for element in tree.file_elements:
        if isinstance(element, ast.Package):
            package = element.name
            fd.package = package
        elif isinstance(element, ast.Import):
            fd.dependency.append(element.name)
            if element.public:
                fd.public_dependency.append(len(fd.dependency) - 1)
            if element.weak:
                fd.weak_dependency.append(len(fd.dependency) - 1)
    messages: set[str] = set()
    enums: set[str] = set()

    def declare(elements: Iterable[Any], prefix: str) -> None:
        for e in elements:
            if isinstance(e, ast.Message):
                full = f"{prefix}.{e.name}" if prefix else e.name
                messages.add(full)
                declare(e.elements, full)
            elif isinstance(e, ast.Enum):
                enums.add(f"{prefix}.{e.name}" if prefix else e.name)

    declare(tree.file_elements, package)

    def resolve(type_name: str, scope: str, field: Any) -> None:
        if type_name in _SCALAR_TYPES:
            field.type = _SCALAR_TYPES[type_name]
            return
        if type_name.startswith("."):
            full = type_name[1:]
            if full in enums:
                field.type = TYPE_ENUM
            elif full in messages:
                field.type = TYPE_MESSAGE
            field.type_name = type_name
            return
        parts = scope.split(".") if scope else []
        while True:
            candidate = ".".join([*parts, type_name])
            if candidate in messages or candidate in enums:
                field.type = TYPE_ENUM if candidate in enums else TYPE_MESSAGE
                field.type_name = "." + candidate
                return
            if not parts:
                break
            parts.pop()
        field.type_name = type_name  # from an import: the pool resolves it (and its kind)

    def enum_into(target: Any, enum: Any) -> None:
        target.name = enum.name
        for value in enum.elements:
            if isinstance(value, ast.EnumValue):
                target.value.add(name=value.name, number=value.number)

    def camel(name: str) -> str:
        return "".join(part[:1].upper() + part[1:] for part in name.split("_"))

    def message_into(target: Any, message: Any, full: str) -> None:
        target.name = message.name

        def add_field(e: Any, oneof_index: int | None) -> None:
            f = target.field.add(name=e.name, number=e.number)
            f.json_name = _json_name(e.name)
            card = e.cardinality.value.lower() if e.cardinality else None
            f.label = {"repeated": LABEL_REPEATED, "required": LABEL_REQUIRED}.get(
                card or "", LABEL_OPTIONAL
            )
            resolve(e.type, full, f)
            if oneof_index is not None:
                f.oneof_index = oneof_index
            elif card == "optional" and syntax == "proto3":
                f.proto3_optional = True
                synthetic.append(f)
            for option in e.options:
                if option.name == "packed" and isinstance(option.value, bool):
                    f.options.packed = option.value
                elif option.name == "deprecated" and isinstance(option.value, bool):
                    f.options.deprecated = option.value

        synthetic: list[Any] = []
        for e in message.elements:
            if isinstance(e, ast.Field):
                add_field(e, None)
            elif isinstance(e, ast.MapField):
                entry = target.nested_type.add(name=camel(e.name) + "Entry")
                entry.options.map_entry = True
                key = entry.field.add(name="key", number=1, label=LABEL_OPTIONAL, json_name="key")
                resolve(e.key_type, full, key)
                value = entry.field.add(
                    name="value", number=2, label=LABEL_OPTIONAL, json_name="value"
                )
                resolve(e.value_type, full, value)
                f = target.field.add(
                    name=e.name, number=e.number, label=LABEL_REPEATED, type=TYPE_MESSAGE
                )
                f.json_name = _json_name(e.name)
                f.type_name = f".{full}.{entry.name}"
            elif isinstance(e, ast.OneOf):
                index = len(target.oneof_decl)
                target.oneof_decl.add(name=e.name)
                for member in e.elements:
                    if isinstance(member, ast.Field):
                        add_field(member, index)
            elif isinstance(e, ast.Message):
                message_into(target.nested_type.add(), e, f"{full}.{e.name}")
            elif isinstance(e, ast.Enum):
                enum_into(target.enum_type.add(), e)
            elif isinstance(e, ast.Reserved):
                for text_range in e.ranges:
                    start, _, end = str(text_range).partition(" to ")
                    try:
                        first = int(start)
                        last = (2**29 - 1) if end.strip() == "max" else int(end or start)
                    except ValueError:
                        continue
                    target.reserved_range.add(start=first, end=last + 1)
                target.reserved_name.extend(n.strip('"') for n in e.names)
        for f in synthetic:  # proto3 optional: a oneof of its own, after the real ones
            f.oneof_index = len(target.oneof_decl)
            target.oneof_decl.add(name=f"_{f.name}")

    for element in tree.file_elements:
        if isinstance(element, ast.Message):
            full = f"{package}.{element.name}" if package else element.name
            message_into(fd.message_type.add(), element, full)
        elif isinstance(element, ast.Enum):
            enum_into(fd.enum_type.add(), element)
    return bytes(fd.SerializeToString())


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# -- descriptor -> text ---------------------------------------------------------------------


def text_from_descriptor(data: bytes) -> str:
    """The `.proto` text of a serialized FileDescriptorProto (42201 if it is not one)."""
    from google.protobuf.message import DecodeError

    pb = _descriptor_pb2()
    fd = pb.FileDescriptorProto()
    try:
        fd.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError):
        raise invalid_schema("Invalid schema: not a serialized FileDescriptorProto") from None
    syntax = fd.syntax or "proto2"
    lines = [f'syntax = "{syntax}";']
    if fd.package:
        lines.append(f"package {fd.package};")
    public = set(fd.public_dependency)
    weak = set(fd.weak_dependency)
    for i, dep in enumerate(fd.dependency):
        kind = "public " if i in public else "weak " if i in weak else ""
        lines.append(f'import {kind}"{dep}";')
    lines.append("")
    for message in fd.message_type:
        lines += _message_text(message, syntax, 0)
    for enum in fd.enum_type:
        lines += _enum_text(enum, 0)
    return "\n".join(lines).rstrip() + "\n"


def _type_text(field: Any) -> str:
    if field.HasField("type") and field.type in _TYPE_NAMES:
        return _TYPE_NAMES[field.type]
    return field.type_name


def _enum_text(enum: Any, depth: int) -> list[str]:
    pad = "  " * depth
    lines = [f"{pad}enum {enum.name} {{"]
    lines += [f"{pad}  {v.name} = {v.number};" for v in enum.value]
    lines.append(f"{pad}}}")
    return lines


def _message_text(message: Any, syntax: str, depth: int) -> list[str]:
    pad = "  " * depth
    lines = [f"{pad}message {message.name} {{"]
    entries = {n.name: n for n in message.nested_type if n.options.map_entry and len(n.field) == 2}
    real_oneofs = {
        f.oneof_index for f in message.field if f.HasField("oneof_index") and not f.proto3_optional
    }
    emitted_oneofs: set[int] = set()

    def field_text(f: Any, inside_oneof: bool) -> str:
        options = []
        if f.options.HasField("packed"):
            options.append(f"packed = {'true' if f.options.packed else 'false'}")
        if f.options.deprecated:
            options.append("deprecated = true")
        suffix = f" [{', '.join(options)}]" if options else ""
        entry = entries.get(f.type_name.rsplit(".", 1)[-1]) if f.type_name else None
        if entry is not None and f.label == LABEL_REPEATED:
            key, value = entry.field
            return f"map<{_type_text(key)}, {_type_text(value)}> {f.name} = {f.number}{suffix};"
        label = ""
        if not inside_oneof:
            if f.label == LABEL_REPEATED:
                label = "repeated "
            elif f.label == LABEL_REQUIRED:
                label = "required "
            elif syntax == "proto2" or f.proto3_optional:
                label = "optional "
        return f"{label}{_type_text(f)} {f.name} = {f.number}{suffix};"

    for f in message.field:
        if f.HasField("oneof_index") and f.oneof_index in real_oneofs:
            index = f.oneof_index
            if index in emitted_oneofs:
                continue
            emitted_oneofs.add(index)
            lines.append(f"{pad}  oneof {message.oneof_decl[index].name} {{")
            for member in message.field:
                if member.HasField("oneof_index") and member.oneof_index == index:
                    lines.append(f"{pad}    {field_text(member, True)}")
            lines.append(f"{pad}  }}")
        else:
            lines.append(f"{pad}  {field_text(f, False)}")
    for r in message.reserved_range:
        end = "max" if r.end - 1 >= 2**29 - 1 else str(r.end - 1)
        lines.append(
            f"{pad}  reserved {r.start}" + ("" if r.end - 1 == r.start else f" to {end}") + ";"
        )
    if message.reserved_name:
        lines.append(f"{pad}  reserved " + ", ".join(f'"{n}"' for n in message.reserved_name) + ";")
    for nested in message.nested_type:
        if nested.name not in entries:
            lines += _message_text(nested, syntax, depth + 1)
    for enum in message.enum_type:
        lines += _enum_text(enum, depth + 1)
    lines.append(f"{pad}}}")
    return lines
