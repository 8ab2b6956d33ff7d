"""Broker-side schema validation (Confluent's `confluent.key.schema.validation` and
`confluent.value.schema.validation` topic configs).

A topic that asks for it has its leader refuse, with INVALID_RECORD naming every
offending record in `record_errors`, a produced batch any of whose keys (values) does
not start with magic byte 0 and the id of a schema registered under the topic's subject
(`confluent.key.subject.name.strategy` / `confluent.value.subject.name.strategy`:
TopicNameStrategy, the default, is `<topic>-key` / `<topic>-value`; RecordNameStrategy
the schema's record name; TopicRecordNameStrategy `<topic>-<record name>`). Nothing of
the request's records for that partition is stored.

Per batch this costs a header read in Python and one C walk over its records with one
set lookup per change of schema id (`_recordwalk.invalid_schema_ids`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container
from dataclasses import dataclass

from kbroker.protocol.batch import COMPRESSION_MASK, CONTROL_MASK, HEADER_SIZE, read_header
from kbroker.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionError,
    decompress,
)
from kbroker.protocol.varint import read_varint_within
from kbroker.schemas.store import RegistryState, SchemaVersion

KEY_VALIDATION = "confluent.key.schema.validation"
VALUE_VALIDATION = "confluent.value.schema.validation"
KEY_STRATEGY = "confluent.key.subject.name.strategy"
VALUE_STRATEGY = "confluent.value.subject.name.strategy"
TOPIC_NAME = "io.confluent.kafka.serializers.subject.TopicNameStrategy"
RECORD_NAME = "io.confluent.kafka.serializers.subject.RecordNameStrategy"
TOPIC_RECORD_NAME = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
STRATEGIES = (TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME)
_MAGIC_V2 = 2
_MAGIC_OFFSET = 16


def strategy_name(value: str) -> str:
    """A strategy's full class name from its full or short name; ValueError if unknown."""
    for strategy in STRATEGIES:
        if value in (strategy, strategy.rsplit(".", 1)[1]):
            return strategy
    raise ValueError(
        "must be TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy "
        "(io.confluent.kafka.serializers.subject.*)"
    )


def invalid_schema_ids_py(
    section: bytes | bytearray | memoryview, count: int, field: int, valid: Container[int]
) -> list[int]:
    """The reference of `_recordwalk.invalid_schema_ids`, same rules, in Python."""
    data = bytes(section)
    end = len(data)
    pos = 0
    bad: list[int] = []

    for i in range(count):
        try:
            length, pos = read_varint_within(data, pos, end, 5)
            if not 0 <= length <= end - pos:
                raise IndexError
            rec_end = pos + length
            pos += 1
            _, pos = read_varint_within(data, pos, rec_end, 10)
            _, pos = read_varint_within(data, pos, rec_end, 5)
            ok = False
            for f in range(field + 1):
                n, pos = read_varint_within(data, pos, rec_end, 5)
                if n < -1 or n > rec_end - pos:
                    raise IndexError
                if f == field and n >= 5 and data[pos] == 0:
                    ok = int.from_bytes(data[pos + 1 : pos + 5], "big") in valid
                pos += max(n, 0)
        except (IndexError, OverflowError):
            bad.append(i)
            break
        if not ok:
            bad.append(i)
        pos = rec_end
    return bad


invalid_schema_ids: Callable[[bytes | bytearray | memoryview, int, int, Container[int]], list[int]]
try:
    from kbroker.protocol._recordwalk import invalid_schema_ids
except ImportError:  # the extension is not built
    invalid_schema_ids = invalid_schema_ids_py


@dataclass(frozen=True, slots=True)
class TopicValidation:
    """The schema ids a topic's keys and values may carry (None: not checked)."""

    keys: frozenset[int] | None
    values: frozenset[int] | None


def record_errors(
    records: bytes | bytearray | memoryview, check: TopicValidation
) -> list[tuple[int, str]]:
    """(record index within its batch, why) for every record the topic refuses."""
    view = memoryview(records)
    errors: list[tuple[int, str]] = []
    pos = 0
    end = len(view)
    while pos + HEADER_SIZE <= end:
        if view[pos + _MAGIC_OFFSET] != _MAGIC_V2:
            return errors  # the log refuses other formats itself
        header = read_header(view, pos)
        size = header.total_size
        if size < HEADER_SIZE or pos + size > end:
            return errors  # a broken batch: the log refuses it and says why
        if not header.attributes & CONTROL_MASK and header.record_count > 0:
            section: bytes | memoryview = view[pos + HEADER_SIZE : pos + size]
            codec = header.attributes & COMPRESSION_MASK
            if codec:
                try:
                    section = decompress(codec, section, DEFAULT_MAX_DECOMPRESSED_BYTES)
                except (CompressionError, ValueError):
                    return errors  # the log's record walk refuses it
            for field, valid, what in ((0, check.keys, "key"), (1, check.values, "value")):
                if valid is None:
                    continue
                for index in invalid_schema_ids(section, header.record_count, field, valid):
                    errors.append(
                        (
                            index,
                            f"Record's {what} does not start with magic byte 0 and the id "
                            "of a schema registered under the topic's subject",
                        )
                    )
        pos += size
    return errors


def record_name(sv: SchemaVersion) -> str | None:
    """The record name RecordNameStrategy uses for a schema: an Avro named type's full
    name, a JSON schema's title, a Protobuf schema's first message."""
    try:
        if sv.schema_type == "AVRO":
            value = json.loads(sv.schema)
            if isinstance(value, dict) and "name" in value:
                name = str(value["name"])
                namespace = value.get("namespace")
                return f"{namespace}.{name}" if namespace and "." not in name else name
            return None
        if sv.schema_type == "JSON":
            value = json.loads(sv.schema)
            return str(value["title"]) if isinstance(value, dict) and "title" in value else None
        from kbroker.schemas.protobuf import parse_protobuf

        model = parse_protobuf(sv.schema).model
        return next(iter(model.messages), None)
    except Exception:
        return None


def valid_ids(state: RegistryState, topic: str, strategy: str, suffix: str) -> frozenset[int]:
    """Ids of live schemas registered under the subject `strategy` names for `topic`."""
    if strategy == TOPIC_NAME:
        return frozenset(sv.id for sv in state.versions(f"{topic}-{suffix}"))
    ids = set()
    for subject in state.subject_names():
        for sv in state.versions(subject):
            name = record_name(sv)
            if name is None:
                continue
            wanted = name if strategy == RECORD_NAME else f"{topic}-{name}"
            if subject == wanted:
                ids.add(sv.id)
    return frozenset(ids)
