"""The three schema types (AVRO, JSON, PROTOBUF): parsing, identity and compatibility.

Each type parses a schema text (with the texts its references name) into a
`ParsedSchema`, which gives the text the registry stores, a normalized text for
`normalize=true`, and the reasons, if any, that a reader of this schema could not read
data written with another (`read_problems`). Compatibility levels are built on that one
relation (see `kbroker.schemas.compatibility`).

Avro uses the `avro` package's parser and Avro's reader/writer compatibility checker;
Protobuf accepts `.proto` text (parsed by `proto-schema-parser`) or a base64
FileDescriptorProto (what Confluent's clients send), and JSON Schema is parsed with the
standard library: their compatibility rules are kbroker's, after Confluent's.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kbroker.schemas.errors import RegistryError, invalid_schema

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (AVRO, JSON, PROTOBUF)


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema a schema refers to: its name in the referring text, where it lives, and
    its text and type once resolved."""

    name: str
    subject: str
    version: int
    text: str = ""
    schema_type: str = AVRO


class ParsedSchema(Protocol):
    schema_type: str

    def canonical(self) -> str:
        """The text the registry stores and compares for identity."""
        ...

    def normalized(self) -> str:
        """The text stored with normalize=true."""
        ...

    def read_problems(self, writer: ParsedSchema) -> list[str]:
        """Why this schema, as a reader, cannot read data written with `writer`."""
        ...


def parse(schema_type: str, text: str, references: Sequence[Reference] = ()) -> ParsedSchema:
    """Parse a schema of a type; RegistryError 42201 (or 422 for an unknown type) if not."""
    if not isinstance(text, str):
        raise invalid_schema("Invalid schema: the schema must be a string")
    if schema_type == AVRO:
        return _parse_avro(text, references)
    if schema_type == JSON:
        return _parse_json(text, references)
    if schema_type == PROTOBUF:
        from kbroker.schemas.protobuf import parse_protobuf

        return parse_protobuf(text, references)
    raise RegistryError(422, 42201, f"Invalid schema type {schema_type!r}")


# -- Avro ---------------------------------------------------------------------------------


class AvroSchema:
    schema_type = AVRO

    def __init__(self, schema: Any, names: Any, referenced: dict[str, Any] | None = None) -> None:
        self.schema = schema
        self.names = names
        # The named types the references define (full name -> schema): written by name in
        # the stored text, not inlined, as Confluent's registry stores them, so that a
        # schema referring to this one and to its references defines each type once.
        self._referenced = referenced or {}
        self._canonical: str | None = None
        self._normalized: str | None = None

    def _json(self) -> Any:
        import avro.schema

        known = avro.schema.Names()
        known.names = dict(self._referenced)
        return self.schema.to_json(known)

    def canonical(self) -> str:
        if self._canonical is None:
            self._canonical = json.dumps(self._json(), separators=(",", ":"))
        return self._canonical

    def normalized(self) -> str:
        # Avro's parsing canonical form drops doc/defaults/aliases, which Confluent's
        # normalization keeps; keep them, with a stable field order.
        if self._normalized is None:
            self._normalized = json.dumps(_ordered(self._json()), separators=(",", ":"))
        return self._normalized

    def read_problems(self, writer: ParsedSchema) -> list[str]:
        from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

        if not isinstance(writer, AvroSchema):
            return [f"the other schema is {writer.schema_type}, not AVRO"]
        result = ReaderWriterCompatibilityChecker().get_compatibility(self.schema, writer.schema)
        if result.compatibility == SchemaCompatibilityType.compatible:
            return []
        types = sorted(t.name.upper() for t in result.incompatibilities)
        return [
            f"{{errorType:'{', '.join(types) or 'INCOMPATIBLE'}', "
            f"description:'The reader schema cannot read data written with the writer schema: "
            f"{', '.join(sorted(map(str, result.messages)))}', "
            f"additionalInfo:'{', '.join(sorted(map(str, result.locations)))}'}}"
        ]


_AVRO_KEY_ORDER = ("type", "name", "namespace", "doc", "aliases", "fields", "symbols")


def _ordered(value: Any) -> Any:
    if isinstance(value, dict):
        keys = sorted(
            value, key=lambda k: (_AVRO_KEY_ORDER.index(k) if k in _AVRO_KEY_ORDER else 99, k)
        )
        return {k: _ordered(value[k]) for k in keys}
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return value


def _parse_avro(text: str, references: Sequence[Reference]) -> AvroSchema:
    import avro.errors
    import avro.schema

    names = avro.schema.Names()
    try:
        for ref in references:
            if ref.schema_type != AVRO:
                raise invalid_schema(f"Invalid schema: reference {ref.name!r} is not AVRO")
            avro.schema.make_avsc_object(json.loads(ref.text), names)
        referenced = dict(names.names)
        data = json.loads(text)
        schema = avro.schema.make_avsc_object(data, names)
    except RegistryError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, avro.errors.AvroException) as exc:
        raise invalid_schema(f"Invalid schema {text[:200]!r}: {exc}") from None
    except RecursionError:
        raise invalid_schema("Invalid schema: nested too deeply") from None
    return AvroSchema(schema, names, referenced)


# -- JSON Schema --------------------------------------------------------------------------


class JsonSchema:
    schema_type = JSON

    def __init__(self, text: str, value: Any, refs: dict[str, Any]) -> None:
        self.text = text
        self.value = value
        self.refs = refs

    def canonical(self) -> str:
        return self.text

    def normalized(self) -> str:
        return json.dumps(self.value, separators=(",", ":"), sort_keys=True)

    def read_problems(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return [f"the other schema is {writer.schema_type}, not JSON"]
        problems: list[str] = []
        _json_reads(self.value, writer.value, "#", problems, 0)
        return problems


def _parse_json(text: str, references: Sequence[Reference]) -> JsonSchema:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise invalid_schema(f"Invalid schema {text[:200]!r}: {exc}") from None
    if not isinstance(value, dict | bool):
        raise invalid_schema(
            f"Invalid schema {text[:200]!r}: a JSON schema is an object or a boolean"
        )
    try:
        from jsonschema.validators import validator_for

        validator_for(value).check_schema(value)
    except ImportError:
        pass
    except Exception as exc:  # jsonschema's SchemaError and what its checks raise
        raise invalid_schema(f"Invalid schema {text[:200]!r}: {str(exc).splitlines()[0]}") from None
    refs: dict[str, Any] = {}
    for ref in references:
        try:
            refs[ref.name] = json.loads(ref.text)
        except ValueError:
            raise invalid_schema(f"Invalid schema: reference {ref.name!r} is not JSON") from None
    return JsonSchema(text, value, refs)


_NUMERIC = {"integer", "number"}


def _types(schema: Any) -> set[str] | None:
    if schema is True or schema == {}:
        return None  # anything
    if schema is False:
        return set()
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    if t is None:
        if "properties" in schema:
            return {"object"}
        if "items" in schema:
            return {"array"}
        return None
    types = {t} if isinstance(t, str) else set(t)
    return types


def _open(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return schema is not False
    extra = schema.get("additionalProperties", True)
    return extra is not False


def _json_reads(reader: Any, writer: Any, path: str, problems: list[str], depth: int) -> None:
    """Can every document valid under `writer` be read by `reader` (Confluent's rules, a
    subset: types, properties and content models, required, enums, ranges, items)?"""
    if depth > 64:
        return
    if reader is True or reader == {}:
        return
    if reader is False:
        if writer is not False:
            problems.append(f"{{errorType:'TYPE_NARROWED', description:'{path} accepts nothing'}}")
        return
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        if writer is True and isinstance(reader, dict) and reader:
            problems.append(f"{{errorType:'TYPE_NARROWED', description:'{path} narrowed'}}")
        return
    rtypes, wtypes = _types(reader), _types(writer)
    if rtypes is not None:
        if wtypes is None:
            problems.append(
                f"{{errorType:'TYPE_NARROWED', description:'{path} narrowed from any type'}}"
            )
            return
        widened = set(rtypes) | ({"integer"} if "number" in rtypes else set())
        missing = wtypes - widened
        if missing:
            problems.append(
                f"{{errorType:'TYPE_CHANGED', description:'{path} type {sorted(wtypes)} "
                f"changed to {sorted(rtypes)}'}}"
            )
            return
    if "enum" in reader:
        wenum = writer.get("enum")
        if wenum is None or any(v not in reader["enum"] for v in wenum):
            problems.append(
                f"{{errorType:'ENUM_ARRAY_NARROWED', description:'{path} enum narrowed'}}"
            )
    if "const" in reader and writer.get("const") != reader["const"]:
        problems.append(f"{{errorType:'CONST_CHANGED', description:'{path} const changed'}}")
    for key, narrower in (
        ("maxLength", "MAX_LENGTH"),
        ("maximum", "MAXIMUM"),
        ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM"),
        ("maxItems", "MAX_ITEMS"),
        ("maxProperties", "MAX_PROPERTIES"),
    ):
        if key in reader and (key not in writer or _num(writer[key]) > _num(reader[key])):
            problems.append(
                f"{{errorType:'{narrower}_DECREASED', description:'{path} {key} decreased'}}"
            )
    for key, narrower in (
        ("minLength", "MIN_LENGTH"),
        ("minimum", "MINIMUM"),
        ("exclusiveMinimum", "EXCLUSIVE_MINIMUM"),
        ("minItems", "MIN_ITEMS"),
        ("minProperties", "MIN_PROPERTIES"),
    ):
        if key in reader and (key not in writer or _num(writer[key]) < _num(reader[key])):
            problems.append(
                f"{{errorType:'{narrower}_INCREASED', description:'{path} {key} increased'}}"
            )
    if "pattern" in reader and writer.get("pattern") != reader["pattern"]:
        problems.append(f"{{errorType:'PATTERN_CHANGED', description:'{path} pattern changed'}}")
    # objects
    rprops = reader.get("properties") or {}
    wprops = writer.get("properties") or {}
    if isinstance(rprops, dict) and isinstance(wprops, dict):
        for name, rprop in rprops.items():
            where = f"{path}/properties/{name}"
            if name in wprops:
                _json_reads(rprop, wprops[name], where, problems, depth + 1)
            elif _open(writer):
                extra = (
                    writer.get("additionalProperties", True) if isinstance(writer, dict) else True
                )
                if extra is True or extra == {}:
                    if rprop not in (True, {}):
                        problems.append(
                            f"{{errorType:'PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL', "
                            f"description:'{where} added to an open content model'}}"
                        )
                else:
                    _json_reads(rprop, extra, where, problems, depth + 1)
        rextra = reader.get("additionalProperties", True)
        for name, wprop in wprops.items():
            if name in rprops:
                continue
            where = f"{path}/properties/{name}"
            if rextra is False:
                problems.append(
                    f"{{errorType:'PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL', "
                    f"description:'{where} removed from a closed content model'}}"
                )
            elif isinstance(rextra, dict) and rextra:
                _json_reads(rextra, wprop, where, problems, depth + 1)
        if rextra is False and _open(writer):
            problems.append(
                f"{{errorType:'ADDITIONAL_PROPERTIES_REMOVED', "
                f"description:'{path} no longer allows additional properties'}}"
            )
    rreq = set(reader.get("required") or ())
    wreq = set(writer.get("required") or ())
    for name in sorted(rreq - wreq):
        problems.append(
            f"{{errorType:'REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL', "
            f"description:'{path}/properties/{name} is required'}}"
        )
    # arrays
    ritems, witems = reader.get("items"), writer.get("items")
    if isinstance(ritems, dict) and ritems:
        if isinstance(witems, dict):
            _json_reads(ritems, witems, f"{path}/items", problems, depth + 1)
        elif witems is None or witems is True:
            problems.append(f"{{errorType:'ITEMS_NARROWED', description:'{path}/items narrowed'}}")
    # combinations: each writer alternative must be readable by some reader alternative
    for key in ("oneOf", "anyOf"):
        ralts = reader.get(key)
        walts = writer.get(key)
        if isinstance(ralts, list):
            for i, walt in enumerate(walts if isinstance(walts, list) else [writer]):
                if not any(_json_compatible(ralt, walt, depth) for ralt in ralts):
                    problems.append(
                        f"{{errorType:'COMBINED_TYPE_SUBSCHEMAS_CHANGED', "
                        f"description:'{path}/{key}/{i} has no readable alternative'}}"
                    )


def _json_compatible(reader: Any, writer: Any, depth: int) -> bool:
    found: list[str] = []
    _json_reads(reader, writer, "#", found, depth + 1)
    return not found


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def decode_base64_descriptor(text: str) -> bytes | None:
    """The bytes of a base64 text (a serialized FileDescriptorProto), None if not base64."""
    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped):
        return None
    try:
        return base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        return None
