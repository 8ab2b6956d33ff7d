"""Confluent Schema Registry's v1 REST API over the registry's state.

`RegistryApi.handle` takes a parsed HTTP request and answers (status, JSON-able body).
Reads are served from this node's state once it has caught up (`Backend.fresh`);
writes run on the registry's writer (`Backend.write`, one at a time) and are forwarded
there from any other node (`Backend.forward`). What Confluent answers, and with which
error code, follows its API reference.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote

from kbroker.schemas import errors as err
from kbroker.schemas.compatibility import LEVELS, check
from kbroker.schemas.errors import RegistryError
from kbroker.schemas.formats import SCHEMA_TYPES, ParsedSchema, Reference, parse
from kbroker.schemas.store import (
    MODES,
    NOOP,
    RegistryState,
    SchemaVersion,
    config_key,
    content_key,
    delete_subject_key,
    encode,
    mode_key,
    noop_key,
    schema_key,
)

KeyValue = tuple[bytes, bytes | None]
MAX_VERSION = 2**31 - 1

READ, WRITE, CONFIGURE = "read", "write", "configure"
PARSE_CACHE_SIZE = 1000


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    principal: str | None = None
    peer: str = "*"  # the client's address, for ACLs naming hosts


@dataclass
class Response:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    raw: bool = False  # body is a str sent as is (the /schema endpoints)


class Backend(Protocol):
    async def fresh(self) -> RegistryState | None:
        """The state, caught up with every write acknowledged before the call; None
        when this node cannot read it (the request is forwarded)."""
        ...

    def is_writer(self) -> bool: ...

    async def write_state(self) -> RegistryState:
        """On the writer: the state with every record of the log applied."""
        ...

    async def write(self, records: list[KeyValue]) -> int:
        """On the writer: append and acknowledge the records; the log end after them."""
        ...

    async def forward(self, request: Request) -> Response: ...

    write_lock: Any  # an asyncio.Lock serializing writes on the writer


class BecameWriter(Exception):
    """Raised by `Backend.forward` when this node became the writer while waiting for
    one: the write runs here instead."""


Authorizer = Callable[[Request, str], Awaitable[bool] | bool]


def _flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "false").lower() == "true"


def _version_number(text: str) -> int | None:
    """A version path segment: None for latest, else the number; 42202 if invalid."""
    if text == "latest" or text == "-1":
        return None
    try:
        number = int(text)
    except ValueError:
        raise err.invalid_version(text) from None
    if not 1 <= number <= MAX_VERSION:
        raise err.invalid_version(text)
    return number


def _json_body(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise err.unprocessable("Request body is empty")
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise err.bad_request(f"Unrecognized JSON: {exc}") from None
    if not isinstance(value, dict):
        raise err.unprocessable("Request body must be a JSON object")
    return value


def schema_view(sv: SchemaVersion, with_subject: bool = True) -> dict[str, Any]:
    view: dict[str, Any] = {}
    if with_subject:
        view["subject"] = sv.subject
        view["version"] = sv.version
    view["id"] = sv.id
    if sv.schema_type != "AVRO":
        view["schemaType"] = sv.schema_type
    if sv.references:
        view["references"] = sv.references
    view["schema"] = sv.schema
    return view


class RegistryApi:
    def __init__(self, backend: Backend, authorize: Authorizer | None = None) -> None:
        self.backend = backend
        self.authorize = authorize
        self._parsed_cache: dict[
            tuple[str, str, tuple[tuple[str, str, str], ...]], ParsedSchema
        ] = {}

    async def handle(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except RegistryError as exc:
            return Response(exc.status, exc.body())

    async def _allowed(self, request: Request, action: str) -> None:
        if self.authorize is None:
            return
        result = self.authorize(request, action)
        if not isinstance(result, bool):
            result = await result
        if not result:
            raise err.forbidden(
                f"User {request.principal or 'ANONYMOUS'} is not authorized to {action} "
                "the schema registry"
            )

    async def _route(self, request: Request) -> Response:
        parts = (
            [unquote(p) for p in request.path.strip("/").split("/")]
            if request.path.strip("/")
            else []
        )
        method = request.method
        n = len(parts)
        writes = (
            method == "POST" and n == 3 and parts[0] == "subjects" and parts[2] == "versions"
        ) or (method == "DELETE" and parts[:1] == ["subjects"])
        configures = method in ("PUT", "DELETE") and parts[:1] in (["config"], ["mode"])
        if writes or configures:
            await self._allowed(request, CONFIGURE if configures else WRITE)
            return await self._write(request, parts)
        await self._allowed(request, READ)
        if method not in ("GET", "POST"):
            raise RegistryError(405, 405, f"HTTP {method} not allowed here")
        state = await self.backend.fresh()
        if state is None:
            return await self.backend.forward(request)
        q = request.query
        if n == 0:
            return Response(200, {})
        head = parts[0]
        if head == "subjects" and method == "GET":
            if n == 1:
                names = state.subject_names(_flag(q, "deleted"))
                prefix = q.get("subjectPrefix", "")
                if prefix and prefix != ":*:":
                    names = [s for s in names if s.startswith(prefix)]
                return Response(200, names)
            subject = parts[1]
            if n == 3 and parts[2] == "versions":
                versions = state.versions(subject, _flag(q, "deleted"))
                if not versions:
                    raise err.subject_not_found(subject)
                return Response(200, [sv.version for sv in versions])
            if n in (4, 5) and parts[2] == "versions":
                sv = self._find_version(state, subject, parts[3], _flag(q, "deleted"))
                if n == 4:
                    return Response(200, _formatted(schema_view(sv), q))
                if parts[4] == "schema":
                    return Response(200, sv.schema, raw=True)
                if parts[4] == "referencedby":
                    return Response(200, state.referenced_by(sv.subject, sv.version))
        if head == "subjects" and method == "POST" and n == 2:
            return Response(200, self._lookup(state, parts[1], request))
        if head == "schemas" and method == "GET":
            if n == 2 and parts[1] == "types":
                return Response(200, list(SCHEMA_TYPES))
            if n >= 3 and parts[1] == "ids":
                return self._by_id(state, parts[2], parts[3:], q)
        if head == "config" and method == "GET" and n in (1, 2):
            if n == 1:
                return Response(200, {"compatibilityLevel": state.compatibility(None)})
            subject = parts[1]
            level = state.configs.get(subject, {}).get("compatibilityLevel")
            if level is None:
                if not _flag(q, "defaultToGlobal"):
                    raise err.subject_compatibility_not_configured(subject)
                level = state.compatibility(None)
            return Response(200, {"compatibilityLevel": level})
        if head == "mode" and method == "GET" and n in (1, 2):
            if n == 1:
                return Response(200, {"mode": state.mode(None)})
            subject = parts[1]
            if subject not in state.modes:
                if not _flag(q, "defaultToGlobal"):
                    raise err.subject_mode_not_configured(subject)
                return Response(200, {"mode": state.mode(None)})
            return Response(200, {"mode": state.modes[subject]})
        if (
            head == "compatibility"
            and method == "POST"
            and n in (4, 5)
            and parts[1] == "subjects"
            and parts[3] == "versions"
        ):
            return Response(200, self._compatibility(state, parts[2], parts[4:], request))
        raise RegistryError(404, 404, "HTTP 404 Not Found")

    # -- reads ----------------------------------------------------------------------------

    @staticmethod
    def _find_version(
        state: RegistryState, subject: str, text: str, deleted: bool
    ) -> SchemaVersion:
        number = _version_number(text)
        versions = state.versions(subject, deleted=True)
        if not versions:
            raise err.subject_not_found(subject)
        if number is None:
            live = [sv for sv in versions if deleted or not sv.deleted]
            if not live:
                raise err.version_not_found(text)
            return live[-1]
        for sv in versions:
            if sv.version == number:
                if sv.deleted and not deleted:
                    raise err.version_not_found(number)
                return sv
        raise err.version_not_found(number)

    def _by_id(
        self, state: RegistryState, id_text: str, rest: list[str], q: dict[str, str]
    ) -> Response:
        try:
            schema_id = int(id_text)
        except ValueError:
            raise err.schema_not_found("Schema not found") from None
        sv = state.by_id.get(schema_id)
        if sv is None:
            raise err.schema_not_found(f"Schema {schema_id} not found")
        holders = state.holders.get(schema_id, [])
        subject = q.get("subject")
        if subject:
            chosen = [v for v in holders if v.subject == subject]
            if chosen:
                sv = chosen[-1]
        if not rest:
            view = schema_view(sv, with_subject=False)
            del view["id"]
            return Response(200, _formatted(view, q))
        if rest == ["schema"]:
            return Response(200, sv.schema, raw=True)
        deleted = _flag(q, "deleted")
        live = [v for v in holders if deleted or not v.deleted]
        if rest == ["subjects"]:
            return Response(200, sorted({v.subject for v in live}))
        if rest == ["versions"]:
            pairs = sorted((v.subject, v.version) for v in live)
            return Response(200, [{"subject": s, "version": n} for s, n in pairs])
        raise RegistryError(404, 404, "HTTP 404 Not Found")

    def _parse_request_schema(
        self, state: RegistryState, body: dict[str, Any], normalize: bool
    ) -> tuple[ParsedSchema, str, list[dict[str, Any]]]:
        text = body.get("schema")
        if not isinstance(text, str) or not text:
            raise err.unprocessable(
                "Empty schema" if text in (None, "") else "The schema must be a string"
            )
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str) or schema_type.upper() not in SCHEMA_TYPES:
            raise err.RegistryError(422, 42201, f"Invalid schema type {schema_type!r}")
        schema_type = schema_type.upper()
        raw_refs = body.get("references") or []
        if not isinstance(raw_refs, list):
            raise err.unprocessable("references must be a list")
        refs: list[Reference] = []
        stored_refs: list[dict[str, Any]] = []
        for raw in raw_refs:
            if not isinstance(raw, dict) or not all(
                k in raw for k in ("name", "subject", "version")
            ):
                raise err.unprocessable("a reference has a name, a subject and a version")
            try:
                target = self._find_version(state, str(raw["subject"]), str(raw["version"]), False)
            except RegistryError:
                raise err.invalid_schema(
                    f"Invalid schema: reference {raw['name']!r} names subject "
                    f"{raw['subject']!r} version {raw['version']}, which does not exist"
                ) from None
            refs.extend(self._closure(state, target))
            refs.append(
                Reference(
                    str(raw["name"]),
                    target.subject,
                    target.version,
                    target.schema,
                    target.schema_type,
                )
            )
            stored_refs.append(
                {"name": str(raw["name"]), "subject": target.subject, "version": target.version}
            )
        parsed = self._parse_cached(schema_type, text, _unique(refs))
        return parsed, (parsed.normalized() if normalize else parsed.canonical()), stored_refs

    def _parse_cached(self, schema_type: str, text: str, refs: list[Reference]) -> ParsedSchema:
        """Parse, remembering the last schemas parsed: a serializer's register-or-lookup
        sends the same text again and again, and parsing costs more than the rest."""
        key = (schema_type, text, tuple((r.name, r.schema_type, r.text) for r in refs))
        found = self._parsed_cache.get(key)
        if found is None:
            found = parse(schema_type, text, refs)
            if len(self._parsed_cache) >= PARSE_CACHE_SIZE:
                self._parsed_cache.pop(next(iter(self._parsed_cache)))
            self._parsed_cache[key] = found
        return found

    def _closure(self, state: RegistryState, sv: SchemaVersion, depth: int = 0) -> list[Reference]:
        """The references of a referenced schema, deepest first (for parsers that need
        every named type defined before use)."""
        if depth > 32:
            raise err.invalid_schema("Invalid schema: references nested too deeply")
        out: list[Reference] = []
        for raw in sv.references:
            target = self._find_version(state, str(raw["subject"]), str(raw["version"]), True)
            out.extend(self._closure(state, target, depth + 1))
            out.append(
                Reference(
                    str(raw["name"]),
                    target.subject,
                    target.version,
                    target.schema,
                    target.schema_type,
                )
            )
        return out

    def _parsed(self, state: RegistryState, sv: SchemaVersion) -> ParsedSchema:
        refs = self._closure(state, sv)
        return self._parse_cached(sv.schema_type, sv.schema, _unique(refs))

    def _lookup(self, state: RegistryState, subject: str, request: Request) -> dict[str, Any]:
        body = _json_body(request.body)
        deleted = _flag(request.query, "deleted")
        if not state.versions(subject, deleted=True):
            raise err.subject_not_found(subject)
        parsed, text, refs = self._parse_request_schema(
            state, body, _flag(request.query, "normalize")
        )
        key = content_key(parsed.schema_type, text, refs)
        for sv in reversed(state.versions(subject, deleted=deleted)):
            if sv.content_key() == key:
                return schema_view(sv)
        if not _flag(request.query, "normalize"):
            norm = content_key(parsed.schema_type, parsed.normalized(), refs)
            for sv in reversed(state.versions(subject, deleted=deleted)):
                if sv.content_key() == norm:
                    return schema_view(sv)
        raise err.schema_not_found("Schema not found")

    def _compatibility(
        self, state: RegistryState, subject: str, rest: list[str], request: Request
    ) -> dict[str, Any]:
        body = _json_body(request.body)
        parsed, _, _ = self._parse_request_schema(state, body, _flag(request.query, "normalize"))
        level = state.compatibility(subject)
        live = state.versions(subject)
        if rest:
            number = _version_number(rest[0])
            if number is None:
                against = live
            else:
                against = [self._find_version(state, subject, rest[0], False)]
                level = (
                    level
                    if not level.endswith("_TRANSITIVE")
                    else level.removesuffix("_TRANSITIVE")
                )
        else:
            against = live
        if rest and not live and _version_number(rest[0]) is None:
            against = []
        problems = check(parsed, [self._parsed(state, sv) for sv in against], level)
        answer: dict[str, Any] = {"is_compatible": not problems}
        if _flag(request.query, "verbose"):
            answer["messages"] = problems
        return answer

    # -- writes ---------------------------------------------------------------------------

    async def _write(self, request: Request, parts: list[str]) -> Response:
        backend = self.backend
        if not backend.is_writer():
            if request.method == "POST" and len(parts) == 3:
                # A schema already registered needs no write: answer it here.
                state = await backend.fresh()
                found = (
                    None
                    if state is None
                    else await self._already_registered(state, parts[1], request)
                )
                if found is not None:
                    return Response(200, found)
            try:
                return await backend.forward(request)
            except BecameWriter:
                pass
        async with backend.write_lock:
            state = await backend.write_state()
            records, answer = self._plan(state, request, parts)
            if not records:
                return Response(200, answer)
            end = await backend.write(records)
            return Response(200, answer, headers={"x-kbroker-offset": str(end)})

    async def _already_registered(
        self, state: RegistryState, subject: str, request: Request
    ) -> dict[str, Any] | None:
        try:
            body = _json_body(request.body)
            if body.get("id") is not None or body.get("version") is not None:
                return None
            parsed, text, refs = self._parse_request_schema(
                state, body, _flag(request.query, "normalize")
            )
        except RegistryError:
            return None  # the writer gives the error
        if state.mode(subject) == "READONLY":
            return None
        key = content_key(parsed.schema_type, text, refs)
        for sv in state.versions(subject):
            if sv.content_key() == key:
                return {"id": sv.id}
        return None

    def _plan(
        self, state: RegistryState, request: Request, parts: list[str]
    ) -> tuple[list[KeyValue], Any]:
        method, n, q = request.method, len(parts), request.query
        head = parts[0] if parts else ""
        if head == "subjects" and method == "POST" and n == 3 and parts[2] == "versions":
            return self._register(state, parts[1], request)
        if head == "subjects" and method == "DELETE" and n == 2:
            return self._delete_subject(state, parts[1], _flag(q, "permanent"))
        if head == "subjects" and method == "DELETE" and n == 4 and parts[2] == "versions":
            return self._delete_version(state, parts[1], parts[3], _flag(q, "permanent"))
        if head == "config" and n in (1, 2):
            subject = parts[1] if n == 2 else None
            if method == "PUT":
                body = _json_body(request.body)
                level = body.get("compatibility", body.get("compatibilityLevel"))
                if not isinstance(level, str) or level.upper() not in LEVELS:
                    raise err.invalid_compatibility_level(level)
                level = level.upper()
                self._check_writable(state, subject)
                value = {"compatibilityLevel": level}
                return [(config_key(subject), encode(value))], {"compatibility": level}
            if method == "DELETE":
                old = state.configs.get(subject, {}).get("compatibilityLevel")
                if subject is not None and old is None:
                    raise err.subject_not_found(subject)
                previous = old or state.compatibility(None)
                records: list[KeyValue] = [(config_key(subject), None)] if old is not None else []
                return records, {"compatibilityLevel": previous}
        if head == "mode" and n in (1, 2):
            subject = parts[1] if n == 2 else None
            if method == "PUT":
                body = _json_body(request.body)
                mode = body.get("mode")
                if not isinstance(mode, str) or mode.upper() not in MODES:
                    raise err.invalid_mode(mode)
                mode = mode.upper()
                if mode == "IMPORT" and not _flag(q, "force"):
                    nonempty = state.versions(subject) if subject else state.subject_names()
                    if nonempty:
                        raise err.operation_not_permitted(
                            "Cannot import since found existing subjects"
                        )
                return [(mode_key(subject), encode({"mode": mode}))], {"mode": mode}
            if method == "DELETE" and subject is not None:
                if subject not in state.modes:
                    raise err.subject_not_found(subject)
                return [(mode_key(subject), None)], {"mode": state.modes[subject]}
        raise RegistryError(
            405 if head in ("config", "mode", "subjects") else 404,
            405,
            f"HTTP {method} not allowed here",
        )

    @staticmethod
    def _check_writable(state: RegistryState, subject: str | None) -> None:
        if state.mode(subject) == "READONLY":
            raise err.operation_not_permitted(
                f"Subject {subject} is in read-only mode"
                if subject
                else "The registry is in read-only mode"
            )

    def _register(
        self, state: RegistryState, subject: str, request: Request
    ) -> tuple[list[KeyValue], Any]:
        body = _json_body(request.body)
        normalize = _flag(request.query, "normalize")
        mode = state.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise err.operation_not_permitted(f"Subject {subject} is in read-only mode")
        wanted_id = body.get("id")
        wanted_version = body.get("version")
        for name, value in (("id", wanted_id), ("version", wanted_version)):
            if value is not None and (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < (0 if name == "version" else 1)
            ):
                raise err.unprocessable(f"{name} must be a positive integer")
        if wanted_id is not None and mode != "IMPORT":
            raise err.operation_not_permitted(
                f"Subject {subject} is not in import mode: a schema id cannot be given"
            )
        if mode == "IMPORT" and wanted_id is None:
            raise err.operation_not_permitted(
                f"Subject {subject} is in import mode: give the schema id"
            )
        parsed, text, refs = self._parse_request_schema(state, body, normalize)
        key = content_key(parsed.schema_type, text, refs)
        every = state.versions(subject, deleted=True)
        live = [sv for sv in every if not sv.deleted]
        if wanted_version in (None, -1):
            for sv in live:
                if sv.content_key() == key and (wanted_id is None or wanted_id == sv.id):
                    return [], {"id": sv.id}
        if mode != "IMPORT":
            problems = check(
                parsed, [self._parsed(state, sv) for sv in live], state.compatibility(subject)
            )
            if problems:
                raise err.incompatible(
                    f"Schema being registered is incompatible with an earlier schema for "
                    f'subject "{subject}", details: [{", ".join(problems)}]'
                )
        if wanted_id is not None:
            holder = state.by_id.get(wanted_id)
            if holder is not None and holder.content_key() != key:
                raise err.id_in_use(
                    f"Overwrite new schema with id {wanted_id} is not permitted: the id holds another schema"
                )
            schema_id = wanted_id
        else:
            existing = state.ids.get(key)
            schema_id = existing if existing is not None else state.max_id + 1
        version = (every[-1].version + 1) if every else 1
        if isinstance(wanted_version, int) and wanted_version > 0:
            if any(sv.version == wanted_version for sv in every):
                raise err.operation_not_permitted(
                    f"Version {wanted_version} of subject {subject} exists"
                )
            version = wanted_version
        sv = SchemaVersion(subject, version, schema_id, text, parsed.schema_type, refs)
        return [(schema_key(subject, version), encode(sv.to_value()))], {"id": schema_id}

    def _delete_subject(
        self, state: RegistryState, subject: str, permanent: bool
    ) -> tuple[list[KeyValue], Any]:
        every = state.versions(subject, deleted=True)
        if not every:
            raise err.subject_not_found(subject)
        self._check_writable(state, subject)
        live = [sv for sv in every if not sv.deleted]
        for sv in every:
            users = [i for i in state.referenced_by(subject, sv.version)]
            if users:
                raise err.reference_exists(
                    f"One or more references exist to the schema {{subject={subject},version={sv.version}}}"
                )
        if not permanent:
            if not live:
                raise err.subject_soft_deleted(subject)
            value = encode({"subject": subject, "version": live[-1].version})
            return [(delete_subject_key(subject), value)], [sv.version for sv in live]
        if live:
            raise err.subject_not_soft_deleted(subject)
        records: list[KeyValue] = [
            (state.keys.get((subject, sv.version)) or schema_key(subject, sv.version), None)
            for sv in every
        ]
        records.append(self._id_floor(state))
        return records, [sv.version for sv in every]

    def _delete_version(
        self, state: RegistryState, subject: str, text: str, permanent: bool
    ) -> tuple[list[KeyValue], Any]:
        sv = self._find_version(state, subject, text, deleted=permanent)
        self._check_writable(state, subject)
        if state.referenced_by(subject, sv.version):
            raise err.reference_exists(
                f"One or more references exist to the schema {{subject={subject},version={sv.version}}}"
            )
        if not permanent:
            if sv.deleted:
                raise err.version_soft_deleted(subject, sv.version)
            gone = SchemaVersion(
                sv.subject, sv.version, sv.id, sv.schema, sv.schema_type, sv.references, True
            )
            return [(schema_key(subject, sv.version), encode(gone.to_value()))], sv.version
        if not sv.deleted:
            raise err.version_not_soft_deleted(subject, sv.version)
        key = state.keys.get((subject, sv.version)) or schema_key(subject, sv.version)
        return [(key, None), self._id_floor(state)], sv.version

    @staticmethod
    def _id_floor(state: RegistryState) -> KeyValue:
        """A NOOP record carrying the highest id given, so ids of schemas deleted
        permanently are never given again, even after compaction."""
        value: dict[str, Any] = {"max_id": state.max_id}
        if state.writer is not None:
            value.update(
                writer=state.writer.node_id, url=state.writer.url, epoch=state.writer.epoch
            )
        assert NOOP
        return (noop_key(), encode(value))


def _formatted(view: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
    """A schema view in the `format` asked: `serialized` gives a Protobuf schema as a
    base64 FileDescriptorProto (what Confluent's Python and Go clients parse)."""
    if query.get("format") == "serialized" and view.get("schemaType") == "PROTOBUF":
        from kbroker.schemas.protobuf import serialized

        # A stored text this build cannot compile is answered as stored.
        with contextlib.suppress(RegistryError):
            view = {**view, "schema": serialized(view["schema"])}
    return view


def _unique(refs: list[Reference]) -> list[Reference]:
    seen: set[str] = set()
    out = []
    for ref in refs:
        if ref.name not in seen:
            seen.add(ref.name)
            out.append(ref)
    return out
