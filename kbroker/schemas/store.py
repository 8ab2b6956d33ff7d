"""The registry's state, rebuilt from the `_schemas` topic's records.

Records are Confluent Schema Registry's: a JSON key naming the record's kind
(`keytype` SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP) and a JSON value,
so a `_schemas` topic copied from a Confluent deployment reads as is. A null value
(tombstone) removes what its key names: a schema version deleted permanently, a
subject's config or mode. Applying a record never fails: one that cannot be read is
logged and skipped, so a foreign or damaged record cannot stop the registry loading.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("kbroker.schemas")

SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP = (
    "SCHEMA",
    "CONFIG",
    "MODE",
    "DELETE_SUBJECT",
    "CLEAR_SUBJECT",
    "NOOP",
)
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")


@dataclass(slots=True)
class SchemaVersion:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str  # AVRO, JSON, PROTOBUF
    references: list[dict[str, Any]]
    deleted: bool = False

    def content_key(self) -> tuple[str, str, str]:
        return content_key(self.schema_type, self.schema, self.references)

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != "AVRO":
            value["schemaType"] = self.schema_type
        if self.references:
            value["references"] = self.references
        value["schema"] = self.schema
        value["deleted"] = self.deleted
        return value


def content_key(
    schema_type: str, schema: str, references: list[dict[str, Any]]
) -> tuple[str, str, str]:
    refs = json.dumps(
        [[r.get("name"), r.get("subject"), r.get("version")] for r in references or ()]
    )
    return (schema_type, schema, refs)


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1})


def _subject_key(keytype: str, subject: str | None) -> bytes:
    # Confluent's keys leave an empty subject (the global config or mode) out.
    if subject:
        return _dump({"keytype": keytype, "subject": subject, "magic": 0})
    return _dump({"keytype": keytype, "magic": 0})


def config_key(subject: str | None) -> bytes:
    return _subject_key(CONFIG, subject)


def mode_key(subject: str | None) -> bytes:
    return _subject_key(MODE, subject)


def delete_subject_key(subject: str) -> bytes:
    return _dump({"keytype": DELETE_SUBJECT, "subject": subject, "magic": 0})


def noop_key() -> bytes:
    return _dump({"keytype": NOOP, "magic": 0})


def encode(value: dict[str, Any]) -> bytes:
    return _dump(value)


@dataclass(slots=True)
class Writer:
    """Who last announced itself as the registry's writer (a NOOP record's value)."""

    node_id: int
    url: str
    epoch: int


@dataclass
class RegistryState:
    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    configs: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    # id -> one version holding it (any subject); content -> id
    by_id: dict[int, SchemaVersion] = field(default_factory=dict)
    holders: dict[int, list[SchemaVersion]] = field(default_factory=dict)  # id -> versions
    ids: dict[tuple[str, str, str], int] = field(default_factory=dict)
    max_id: int = 0
    writer: Writer | None = None
    keys: dict[tuple[str, int], bytes] = field(default_factory=dict)  # stored SCHEMA keys
    changes: int = 0  # records applied: what caches of derived facts compare
    _names: dict[bool, tuple[int, list[str]]] = field(default_factory=dict)

    # -- applying records -----------------------------------------------------------------

    def apply(self, key: bytes, value: bytes | None) -> None:
        self.changes += 1
        self._apply(key, value)

    def _apply(self, key: bytes, value: bytes | None) -> None:
        try:
            k = json.loads(key)
            v = None if value is None else json.loads(value)
            if not isinstance(k, dict):
                raise ValueError("key is not a JSON object")
            kind = k.get("keytype")
            if kind == SCHEMA:
                self._apply_schema(key, k, v)
            elif kind == CONFIG:
                subject = k.get("subject") or None
                if v is None:
                    self.configs.pop(subject, None)
                else:
                    self.configs[subject] = dict(v)
            elif kind == MODE:
                subject = k.get("subject") or None
                if v is None:
                    self.modes.pop(subject, None)
                else:
                    self.modes[subject] = str(v["mode"])
            elif kind == DELETE_SUBJECT:
                if v is not None:
                    for sv in self.subjects.get(v["subject"], {}).values():
                        if sv.version <= int(v["version"]):
                            sv.deleted = True
            elif kind == CLEAR_SUBJECT:
                if v is not None:
                    versions = self.subjects.get(v["subject"], {})
                    upto = int(v.get("version", 2**31 - 1))
                    cleared = [n for n, sv in versions.items() if sv.deleted and n <= upto]
                    for number in cleared:
                        self._drop(versions.pop(number))
                    if not versions:
                        self.subjects.pop(v["subject"], None)
            elif kind == NOOP:
                if isinstance(v, dict):
                    self.max_id = max(self.max_id, int(v.get("max_id", 0)))
                    if "writer" in v:
                        self.writer = Writer(
                            int(v["writer"]), str(v["url"]), int(v.get("epoch", -1))
                        )
            else:
                log.warning("_schemas: skipping a record of unknown keytype %r", kind)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("_schemas: skipping an unreadable record (%s): key %r", exc, key[:200])

    def _apply_schema(self, raw_key: bytes, k: dict[str, Any], v: dict[str, Any] | None) -> None:
        subject, version = str(k["subject"]), int(k["version"])
        versions = self.subjects.setdefault(subject, {})
        old = versions.pop(version, None)
        if old is not None:
            self._drop(old)
        if v is None:
            if not versions:
                del self.subjects[subject]
            self.keys.pop((subject, version), None)
            return
        sv = SchemaVersion(
            subject=subject,
            version=version,
            id=int(v["id"]),
            schema=str(v["schema"]),
            schema_type=str(v.get("schemaType") or "AVRO"),
            references=list(v.get("references") or []),
            deleted=bool(v.get("deleted", False)),
        )
        versions[version] = sv
        self.keys[(subject, version)] = raw_key
        self.max_id = max(self.max_id, sv.id)
        self.holders.setdefault(sv.id, []).append(sv)
        self.by_id.setdefault(sv.id, sv)
        self.ids.setdefault(sv.content_key(), sv.id)

    def _drop(self, sv: SchemaVersion) -> None:
        """Forget one version; an id's content goes with the last version holding it."""
        holders = self.holders.get(sv.id, [])
        if sv in holders:
            holders.remove(sv)
        if holders:
            self.by_id[sv.id] = holders[0]
            return
        self.holders.pop(sv.id, None)
        self.by_id.pop(sv.id, None)
        if self.ids.get(sv.content_key()) == sv.id:
            del self.ids[sv.content_key()]

    # -- reading --------------------------------------------------------------------------

    def versions(self, subject: str, deleted: bool = False) -> list[SchemaVersion]:
        return [
            sv
            for _, sv in sorted(self.subjects.get(subject, {}).items())
            if deleted or not sv.deleted
        ]

    def subject_names(self, deleted: bool = False) -> list[str]:
        cached = self._names.get(deleted)
        if cached is not None and cached[0] == self.changes:
            return list(cached[1])
        names = sorted(
            s
            for s, versions in self.subjects.items()
            if versions and (deleted or any(not v.deleted for v in versions.values()))
        )
        self._names[deleted] = (self.changes, names)
        return list(names)

    def compatibility(self, subject: str | None) -> str:
        for key in (subject, None) if subject is not None else (None,):
            level = self.configs.get(key, {}).get("compatibilityLevel")
            if level:
                return str(level)
        return "BACKWARD"

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, "READWRITE")

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live schemas whose references name this subject version."""
        found = []
        for versions in self.subjects.values():
            for sv in versions.values():
                if sv.deleted:
                    continue
                if any(
                    r.get("subject") == subject and r.get("version") == version
                    for r in sv.references
                ):
                    found.append(sv.id)
        return sorted(set(found))
