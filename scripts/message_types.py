"""Writes the typed edges of the handlers, from kio's schemas and the handler registry:

- kbroker/protocol/requests.py: per API the broker serves, one read-only Protocol over
  the request fields of every served version (nested entities too), and the Kafka
  default of each field some served version lacks, which decoding gives the classes of
  those versions (protocol.messages.request_class), so a handler reads every field of
  every version without probing;
- kbroker/protocol/response_types.py (read through protocol.responses): per API, one TypedDict over the response fields of
  every version kio knows (as messages.build merges them), nested entities too, which a
  handler's answer is declared as and mypy checks key by key.

Run after changing a handler's version range or kio (tests/test_message_types.py fails
until both files match): `PYTHONPATH=. .venv/bin/python scripts/message_types.py`.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from kbroker import handlers  # noqa: F401  (registers every API handler)
from kbroker.handlers.registry import APIS
from kbroker.protocol.entity_build import field_default, known_versions, nested_entity
from kbroker.protocol.legacy_messages import CARRIED, LEGACY
from kbroker.protocol.request_walk import is_nullable

ROOT = Path(__file__).resolve().parent.parent / "kbroker" / "protocol"
REQUESTS = ROOT / "requests.py"
RESPONSE_TYPES = ROOT / "response_types.py"
PRODUCE = 0  # its requests are decoded by hand: kbroker.protocol.produce_request

# What a handler reads from a decoded request field (kio's value), by Kafka type.
READ_TYPES = {
    "bool": "bool",
    "string": "str",
    "bytes": "bytes",
    "records": "bytes",
    "uuid": "uuid.UUID",
    "error_code": "ErrorCode",
    "timedelta_i32": "datetime.timedelta",
    "timedelta_i64": "datetime.timedelta",
    "datetime_i64": "datetime.datetime",
    "float64": "float",
}
# What a handler may write into a response field (messages.build coerces the rest).
WRITE_TYPES = {
    **READ_TYPES,
    "error_code": "int",  # an ErrorCode is an int
    "timedelta_i32": "datetime.timedelta | int",
    "timedelta_i64": "datetime.timedelta | int",
    "datetime_i64": "datetime.datetime | int",
}


@dataclass
class FieldInfo:
    types: list[str] = field(default_factory=list)
    nullable: bool = False
    versions: set[int] = field(default_factory=set)
    default: object = None  # the newest version's default (requests only)


@dataclass
class EntityInfo:
    """The merged fields of one entity (by its path in the message) over versions."""

    name: str  # kio's class name in the newest version having it
    api: str  # the message's class name
    fields: dict[str, FieldInfo] = field(default_factory=dict)
    versions: set[int] = field(default_factory=set)


def _walk(
    entities: dict[tuple[str, ...], EntityInfo],
    cls: type,
    path: tuple[str, ...],
    api: str,
    version: int,
    render: Callable[[str], str],
) -> None:
    info = entities.setdefault(path, EntityInfo(cls.__name__, api))
    info.name = cls.__name__
    info.versions.add(version)
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        hint = hints[f.name]
        nested, is_array = nested_entity(hint)
        kafka_type = f.metadata.get("kafka_type")
        slot = info.fields.setdefault(f.name, FieldInfo())
        slot.versions.add(version)
        if nested is not None:
            child = (*path, f.name)
            _walk(entities, nested, child, api, version, render)
            rendered = "@" + "/".join(child)  # resolved to the entity's name later
            nullable = is_nullable(hint) and not is_array
        else:
            assert kafka_type is not None, (cls, f.name)
            rendered = render(kafka_type)
            inner = typing.get_args(hint)[0] if is_array else hint
            nullable = is_nullable(inner)
        if is_array:
            rendered = f"[]{rendered}"
            nullable = nullable or is_nullable(hint)
        if rendered not in slot.types:
            slot.types.append(rendered)
        slot.nullable = slot.nullable or nullable
        slot.default = field_default(f, hint)


_LEGACY_TYPES = {"i8": "int", "i16": "int", "i32": "int", "i64": "int", "bool": "bool"}


def _legacy_fields(
    entities: dict[tuple[str, ...], EntityInfo], layout: tuple, path: tuple[str, ...], version: int
) -> None:
    """Fields of a version kio has no schema for (protocol.legacy_messages) that no kio
    version has: ListOffsets v0's old_style_offsets."""
    info = entities[path]
    info.versions.add(version)
    for entry in layout:
        name, kind = entry[2] if entry[0] in ("since", "until") else entry
        slot = info.fields.setdefault(name, FieldInfo())
        slot.versions.add(version)
        array = isinstance(kind, tuple) and kind[0] in ("array", "narray")
        inner = kind[1] if array else kind
        if isinstance(inner, tuple):  # a struct: kio has it (legacy layouts add no structs)
            _legacy_fields(entities, inner, (*path, name), version)
            continue
        rendered = {"string": "str", "nstring": "str"}.get(inner) or _LEGACY_TYPES[inner]
        if array:
            rendered = f"[]{rendered}"
        if not slot.types:
            slot.types.append(rendered)
        slot.nullable = slot.nullable or inner == "nstring" or (array and kind[0] == "narray")


def _collect(
    load: Callable[[int, int], type],
    versions: Callable[[int], range],
    render: Callable[[str], str],
    keys: list[int],
) -> dict[int, dict[tuple[str, ...], EntityInfo]]:
    out: dict[int, dict[tuple[str, ...], EntityInfo]] = {}
    for key in keys:
        entities: dict[tuple[str, ...], EntityInfo] = {}
        for version in versions(key):
            cls = load(key, version)
            _walk(entities, cls, (), cls.__name__, version, render)
        if load is load_request_schema:
            for (api_key, version), carried in sorted(CARRIED.items()):
                for path, names in carried.items() if api_key == key else ():
                    for name, (_kafka_type, default) in names.items():
                        slot = entities[path].fields.setdefault(name, FieldInfo())
                        slot.versions.add(version)
                        slot.types = slot.types or ["int"]
                        slot.default = default
        if load is load_response_schema:
            for (api_key, version), (_request, layout, _fix) in sorted(LEGACY.items()):
                if api_key == key and layout is not None and version not in versions(key):
                    _legacy_fields(entities, layout, (), version)
        out[key] = entities
    return out


def _names(apis: dict[int, dict[tuple[str, ...], EntityInfo]]) -> dict[tuple[int, str], str]:
    """A unique Python name per (API key, kio class name); entities of one API sharing a
    class name (one struct used at two places) share one type. Names used by one API only
    stay kio's; others get the API's name in front."""
    users: dict[str, set[int]] = {}
    for key, entities in apis.items():
        for info in entities.values():
            users.setdefault(info.name, set()).add(key)
    names: dict[tuple[int, str], str] = {}
    for key, entities in apis.items():
        for path, info in entities.items():
            name = info.name
            if path and len(users[name]) > 1:
                prefix = info.api.removesuffix("Request").removesuffix("Response")
                name = name if name.startswith(prefix) else prefix + name
            names[(key, info.name)] = name
    taken: dict[str, tuple[int, str]] = {}
    for ident, name in names.items():
        assert taken.setdefault(name, ident) == ident, f"two entities named {name}"
    return names


def _merged(
    entities: dict[tuple[str, ...], EntityInfo],
) -> dict[str, tuple[EntityInfo, dict[str, FieldInfo], set[int]]]:
    """Per kio class name: its info, fields merged over every path it is used at, and
    the versions of the message that have it."""
    out: dict[str, tuple[EntityInfo, dict[str, FieldInfo], set[int]]] = {}
    for info in entities.values():
        _first, merged, versions = out.setdefault(info.name, (info, {}, set()))
        versions |= info.versions
        for name, slot in info.fields.items():
            into = merged.setdefault(name, FieldInfo())
            into.types += [t for t in slot.types if t not in into.types]
            into.nullable = into.nullable or slot.nullable
            into.versions |= slot.versions
            into.default = slot.default
    return out


def _type(
    key: int,
    slot: FieldInfo,
    entities: dict[tuple[str, ...], EntityInfo],
    names: dict[tuple[int, str], str],
    array: str,
    extra_none: bool = False,
) -> str:
    parts = []
    for rendered in slot.types:
        is_array = rendered.startswith("[]")
        rendered = rendered.removeprefix("[]")
        if rendered.startswith("@"):
            path = tuple(rendered[1:].split("/"))
            rendered = names[(key, entities[path].name)]
        if is_array:
            rendered = f"{array}[{rendered}, ...]" if array == "tuple" else f"{array}[{rendered}]"
        parts += [p for p in rendered.split(" | ") if p not in parts]
    if slot.nullable or extra_none:
        parts.append("None")
    return " | ".join(parts)


def _literal(value: object) -> str:
    """Python source for a field's default, checked to mean the same value."""
    if isinstance(value, datetime.timedelta):
        ms = value // datetime.timedelta(milliseconds=1)
        return f"datetime.timedelta(milliseconds={ms})"
    if isinstance(value, ErrorCode):
        return str(int(value))
    if is_dataclass(value) and not isinstance(value, type):
        # A struct's default: its fields' defaults, read like the struct's attributes.
        inner = ", ".join(f"{f.name}={_literal(getattr(value, f.name))}" for f in fields(value))
        return f"SimpleNamespace({inner})"
    if isinstance(value, uuid.UUID):
        return f"uuid.UUID({str(value)!r})"
    if isinstance(value, bool | int | str | bytes | float | tuple) or value is None:
        assert value == eval(repr(value)), value  # noqa: S307  (a literal we just wrote)
        return repr(int(value) if type(value) is not bool and isinstance(value, int) else value)
    raise TypeError(f"no literal for default {value!r}")


# -- requests.py ---------------------------------------------------------------------------

REQUESTS_HEADER = '''"""The request body a handler receives: per API, a read-only Protocol over the fields
of every version the broker serves, nested entities too.

A field some served version lacks reads as its Kafka default: decoding gives the kio
class of that version the value as a class attribute (ABSENT below, applied by
protocol.messages.request_class), so a handler reads `request.rebalance_timeout` of a
JoinGroup v0 as -1 ms, as Kafka's generated request classes do, and never probes with
getattr. Where the versions differ in meaning, the handler asks ctx.version.

The Protocols exist for type checking only. At run time each name is the union of kio's
request classes over the served versions (SERVED below), built from kio on first access
(typing.get_type_hints on a handler, a test): importing every request schema module
would cost seconds at each broker start.

Generated by scripts/message_types.py from kio's schemas and the handler registry; do
not edit.
"""

from __future__ import annotations

import datetime
import functools
import operator
import uuid
from types import SimpleNamespace
from typing import TYPE_CHECKING

'''

REQUESTS_RUNTIME = """

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        try:
            api_key, low, high = SERVED[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        from kio.index import load_request_schema

        classes = [load_request_schema(api_key, v) for v in range(low, high + 1)]
        alias = functools.reduce(operator.or_, classes)
        globals()[name] = alias
        return alias
"""


def _served_range(key: int) -> range:
    api = APIS[key]
    # Older versions (protocol.legacy_messages) are decoded into the oldest kio class.
    return range(max(api.min_version, known_versions(key).start), api.max_version + 1)


def render_requests() -> str:
    keys = [key for key in sorted(APIS) if key != PRODUCE]
    apis = _collect(load_request_schema, _served_range, lambda t: READ_TYPES.get(t, "int"), keys)
    names = _names(apis)
    served: list[str] = []
    absent: list[str] = []
    classes: list[str] = []
    for key in keys:
        entities = apis[key]
        versions = _served_range(key)
        top = entities[()]
        served.append(f'    "{top.name}": ({key}, {versions.start}, {versions.stop - 1}),')
        paths: list[str] = []
        for path, info in entities.items():
            missing = {
                name: slot.default
                for name, slot in info.fields.items()
                if slot.versions != info.versions
            }
            if missing:
                body = ", ".join(f'"{n}": {_literal(d)}' for n, d in missing.items())
                paths.append(f"        {path!r}: {{{body}}},")
        if paths:
            absent.append(f"    {key}: {{\n" + "\n".join(paths) + "\n    },")
        for info, merged, versions_of in _merged(entities).values():
            name = names[(key, info.name)]
            lines = [f"    class {name}(Protocol):"]
            for field_name, slot in merged.items():
                partial = slot.versions != versions_of
                extra_none = partial and slot.default is None
                rendered = _type(key, slot, entities, names, "tuple", extra_none)
                lines += ["        @property", f"        def {field_name}(self) -> {rendered}: ..."]
            if not merged:
                lines.append("        pass")
            classes.append("\n".join(lines))
    return (
        REQUESTS_HEADER
        + "# Per name: (API key, lowest version kio has a class for, highest version served).\n"
        + "SERVED: dict[str, tuple[int, int, int]] = {\n"
        + "\n".join(served)
        + "\n}\n\n"
        + "# Per API key and entity (its path of field names from the request): the Kafka\n"
        + "# default of each field that some served version lacks.\n"
        + "ABSENT: dict[int, dict[tuple[str, ...], dict[str, object]]] = {\n"
        + "\n".join(absent)
        + "\n}\n\nif TYPE_CHECKING:\n    from typing import Protocol\n\n"
        + "    from kio.schema.errors import ErrorCode\n\n"
        + "\n\n".join(classes)
        + "\n"
        + REQUESTS_RUNTIME
    )


# -- responses.py --------------------------------------------------------------------------

RESPONSES_HEADER = '''"""The answer a handler describes: per API, a TypedDict over the response fields of
every version kio knows and every older version protocol.legacy_messages writes, nested
entities too. Handlers name them through protocol.responses, which imports this module
only when a type is asked for at run time.

messages.build turns it into the kio class of the version the client asked for,
dropping the fields that version lacks and giving every field the handler left out
its default (so every key is optional); mypy checks each key and value a handler
writes. Values are what build accepts: an int for an error code, a timedelta or
milliseconds for a duration, any sequence for an array.

Generated by scripts/message_types.py from kio's schemas; do not edit.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import TypedDict

'''


def render_response_types() -> str:
    keys = sorted(APIS)
    apis = _collect(load_response_schema, known_versions, lambda t: WRITE_TYPES.get(t, "int"), keys)
    names = _names(apis)
    classes: list[str] = []
    tops: list[str] = []
    for key in keys:
        entities = apis[key]
        tops.append(names[(key, entities[()].name)])
        # Nested types first, so each class names only classes above it.
        for info, merged, _versions in reversed(list(_merged(entities).values())):
            name = names[(key, info.name)]
            lines = [f"class {name}(TypedDict, total=False):"]
            for field_name, slot in merged.items():
                lines.append(f"    {field_name}: {_type(key, slot, entities, names, 'Sequence')}")
            if not merged:
                lines.append("    pass")
            classes.append("\n".join(lines))
    union = "\n".join(f"    | {name}" for name in tops)
    return (
        RESPONSES_HEADER
        + "\n\n".join(classes)
        + "\n\n\n# Any API's answer.\nResponse = (\n"
        + union.replace("    | ", "    ", 1)
        + "\n)\n"
    )


def _format(path: Path) -> None:
    ruff = [sys.executable, "-m", "ruff"]
    subprocess.run(
        [*ruff, "check", "--fix", "--quiet", "--select", "I,F401", str(path)], check=True
    )
    subprocess.run([*ruff, "format", "--quiet", str(path)], check=True)


if __name__ == "__main__":
    for target, render in ((REQUESTS, render_requests), (RESPONSE_TYPES, render_response_types)):
        target.write_text(render())
        _format(target)
        sys.stdout.write(f"wrote {target}\n")
