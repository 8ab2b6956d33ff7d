"""Protobuf schemas: `.proto` text (proto2/proto3, parsed by `proto-schema-parser`) or a
base64 serialized FileDescriptorProto (what Confluent's clients register), read into one
model of messages and fields, with Confluent's compatibility rules for Protobuf."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbroker.schemas.errors import invalid_schema
from kbroker.schemas.formats import PROTOBUF, ParsedSchema, Reference, decode_base64_descriptor

SCALARS = {
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
}  # fmt: skip
# Scalar kinds whose encodings read as each other (Confluent's FIELD_SCALAR_KIND_CHANGED
# groups).
_WIRE_GROUPS = (
    {"int32", "uint32", "int64", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
    {"float"},
    {"double"},
)


@dataclass(slots=True)
class ProtoField:
    name: str
    type: str  # a scalar kind, or the full name of a message or enum
    label: str  # optional, repeated, required
    oneof: str | None = None


@dataclass(slots=True)
class ProtoModel:
    syntax: str = "proto2"
    package: str = ""
    messages: dict[str, dict[int, ProtoField]] = field(default_factory=dict)
    enums: set[str] = field(default_factory=set)
    imports: list[str] = field(default_factory=list)


class ProtobufSchema:
    schema_type = PROTOBUF

    def __init__(self, text: str, model: ProtoModel, normalized_text: str) -> None:
        self.text = text
        self.model = model
        self._normalized = normalized_text

    def canonical(self) -> str:
        return self.text

    def normalized(self) -> str:
        return self._normalized

    def read_problems(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, ProtobufSchema):
            return [f"the other schema is {writer.schema_type}, not PROTOBUF"]
        return _problems(self.model, writer.model)


def _kind(t: str) -> str:
    return "scalar" if t in SCALARS else "named"


def _group(t: str) -> int:
    for i, group in enumerate(_WIRE_GROUPS):
        if t in group:
            return i
    return -1


def _problems(reader: ProtoModel, writer: ProtoModel) -> list[str]:
    out: list[str] = []

    def problem(kind: str, where: str, what: str) -> None:
        out.append(f"{{errorType:'{kind}', description:'{where}: {what}'}}")

    if reader.package != writer.package:
        problem("PACKAGE_CHANGED", "#/", f"package {writer.package!r} became {reader.package!r}")
    for name, wfields in writer.messages.items():
        rfields = reader.messages.get(name)
        if rfields is None:
            problem("MESSAGE_REMOVED", f"#/{name}", "message removed")
            continue
        wmoved: dict[str, list[int]] = {}
        for number, wf in wfields.items():
            rf = rfields.get(number)
            where = f"#/{name}/{number}"
            if rf is None:
                if wf.label == "required":
                    problem("REQUIRED_FIELD_REMOVED", where, f"required field {wf.name} removed")
                if wf.oneof is not None:
                    problem("ONEOF_FIELD_REMOVED", where, f"field {wf.name} of a oneof removed")
                continue
            if _kind(rf.type) != _kind(wf.type):
                problem("FIELD_KIND_CHANGED", where, f"{wf.type} became {rf.type}")
            elif _kind(rf.type) == "scalar":
                if _group(rf.type) != _group(wf.type):
                    problem("FIELD_SCALAR_KIND_CHANGED", where, f"{wf.type} became {rf.type}")
            elif rf.type.rsplit(".", 1)[-1] != wf.type.rsplit(".", 1)[-1]:
                problem("FIELD_NAMED_TYPE_CHANGED", where, f"{wf.type} became {rf.type}")
            if (rf.label == "repeated") != (wf.label == "repeated"):
                problem("FIELD_KIND_CHANGED", where, f"{wf.label} became {rf.label}")
            if (rf.label == "required") != (wf.label == "required"):
                problem("REQUIRED_FIELD_CHANGED", where, f"{wf.label} became {rf.label}")
            if rf.oneof is not None and wf.oneof is None:
                wmoved.setdefault(rf.oneof, []).append(number)
            if rf.oneof is None and wf.oneof is not None:
                problem("ONEOF_FIELD_REMOVED", where, f"field {wf.name} left its oneof")
        for number, rf in rfields.items():
            if number not in wfields and rf.label == "required":
                problem("REQUIRED_FIELD_ADDED", f"#/{name}/{number}", f"required {rf.name} added")
        for oneof, numbers in wmoved.items():
            if len(numbers) > 1 or any(
                f.oneof == oneof for n, f in wfields.items() if n not in numbers
            ):
                problem("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"#/{name}", f"fields moved into {oneof}")
    return out


def parse_protobuf(text: str, references: Sequence[Reference] = ()) -> ProtobufSchema:
    """A `.proto` text, or a base64 serialized FileDescriptorProto (what Confluent's
    clients register), which is stored as the `.proto` text it describes."""
    data = decode_base64_descriptor(text)
    if data is not None and not text.lstrip().startswith(("syntax", "package", "message")):
        from kbroker.schemas.protobuf_descriptor import text_from_descriptor

        text = text_from_descriptor(data)
    model, normalized = _from_text(text)
    known = {ref.name for ref in references}
    for imported in model.imports:
        if imported not in known and not imported.startswith(("google/protobuf/", "confluent/")):
            raise invalid_schema(
                f"Invalid schema: import {imported!r} is not among the schema's references"
            )
    return ProtobufSchema(text, model, normalized)


def serialized(text: str) -> str:
    """The base64 serialized FileDescriptorProto of a stored `.proto` text
    (`format=serialized`)."""
    import base64

    from kbroker.schemas.protobuf_descriptor import descriptor_from_text

    return base64.standard_b64encode(descriptor_from_text(text)).decode("ascii")


class _StrictError(Exception):
    pass


def _strict(recognizer: Any) -> None:
    from antlr4.error.ErrorListener import ErrorListener

    class Raise(ErrorListener):
        def syntaxError(
            self, recognizer: Any, symbol: Any, line: int, column: int, msg: str, e: Any
        ) -> None:  # noqa: N802
            raise _StrictError(f"line {line}:{column} {msg}")

    recognizer.removeErrorListeners()
    recognizer.addErrorListener(Raise())


def parse_tree(text: str) -> Any:
    """proto-schema-parser's tree of a `.proto` text; 42201 on any syntax error."""
    from proto_schema_parser.parser import Parser

    try:
        return Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    except _StrictError as exc:
        raise invalid_schema(f"Invalid schema: {exc}") from None
    except (RecursionError, ValueError, AttributeError, TypeError) as exc:
        raise invalid_schema(f"Invalid schema: {exc}") from None


def _from_text(text: str) -> tuple[ProtoModel, str]:
    from proto_schema_parser import ast
    from proto_schema_parser.generator import Generator

    tree = parse_tree(text)
    model = ProtoModel(syntax=tree.syntax or "proto2")
    for element in tree.file_elements:
        if isinstance(element, ast.Package):
            model.package = element.name
        elif isinstance(element, ast.Import):
            model.imports.append(element.name)
    # A file of imports alone (`import public "a.proto";`) is a valid schema, registered
    # to be referenced, as Confluent's registry registers it.
    declared: set[str] = set()
    pending: list[tuple[str, Any]] = []

    def collect(elements: Iterable[Any], prefix: str) -> None:
        for e in elements:
            if isinstance(e, ast.Message):
                full = f"{prefix}.{e.name}" if prefix else e.name
                declared.add(full)
                pending.append((full, e))
                collect(e.elements, full)
            elif isinstance(e, ast.Enum):
                full = f"{prefix}.{e.name}" if prefix else e.name
                declared.add(full)
                model.enums.add(full)

    collect(tree.file_elements, model.package)

    def resolve(name: str, scope: str) -> str:
        if name in SCALARS:
            return name
        if name.startswith("."):
            return name[1:]
        parts = scope.split(".") if scope else []
        while True:
            candidate = ".".join([*parts, name])
            if candidate in declared:
                return candidate
            if not parts:
                return name  # from an import: compared by its last component
            parts.pop()

    for full, message in pending:
        fields: dict[int, ProtoField] = {}

        def add(
            elements: Iterable[Any],
            oneof: str | None,
            full: str = full,
            fields: dict[int, ProtoField] = fields,
        ) -> None:
            for e in elements:
                if isinstance(e, ast.Field):
                    card = e.cardinality.value.lower() if e.cardinality else "optional"
                    if e.number in fields:
                        raise invalid_schema(
                            f"Invalid schema: field number {e.number} used twice in {full}"
                        )
                    fields[e.number] = ProtoField(e.name, resolve(e.type, full), card, oneof)
                elif isinstance(e, ast.MapField):
                    fields[e.number] = ProtoField(
                        e.name, f"map<{e.key_type},{e.value_type}>", "repeated", oneof
                    )
                elif isinstance(e, ast.OneOf):
                    add(e.elements, e.name)

        add(message.elements, None)
        model.messages[full] = fields
    try:
        normalized = Generator().generate(tree)
    except Exception:
        normalized = text
    return model, normalized
