"""API versions older than kio's schemas: the ones Kafka 4 dropped (KIP-896) and Kafka
3.9 still served, read and written here from Kafka's message JSON, sans-IO.

A request is read into the kio class of the oldest version kio has, the fields the old
version lacks at their defaults, so a handler sees one shape for every version. A
response is written from the handler's version-agnostic dict, as `messages.build`
would take it; fields the old version lacks are dropped.

A layout is a tuple of fields: (name, type) with type one of the primitive names
below, ("array", element) or ("narray", element) (nullable) with element a primitive
name or a layout, or
("since", version, field) / ("until", version, field) for a field present only from
or up to a version.
"""

from __future__ import annotations

import datetime
import enum
import struct
from collections.abc import Callable, Mapping
from typing import Any

from kbroker.protocol.errors import MalformedRequest

Layout = tuple[Any, ...]

_FIXED: dict[str, struct.Struct] = {
    "i8": struct.Struct(">b"),
    "i16": struct.Struct(">h"),
    "i32": struct.Struct(">i"),
    "i64": struct.Struct(">q"),
}
_I16 = _FIXED["i16"]
_I32 = _FIXED["i32"]


def _fields(layout: Layout, version: int) -> list[tuple[str, Any]]:
    out = []
    for f in layout:
        if f[0] == "since":
            if version >= f[1]:
                out.append(f[2])
        elif f[0] == "until":
            if version <= f[1]:
                out.append(f[2])
        else:
            out.append(f)
    return out


# -- reading ---------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos", "elements_left")

    def __init__(self, buf: bytes | memoryview, pos: int, max_elements: int) -> None:
        self.buf = buf
        self.pos = pos
        self.elements_left = max_elements

    def fixed(self, kind: str) -> int:
        st = _FIXED[kind]
        if self.pos + st.size > len(self.buf):
            raise MalformedRequest(f"request ends inside an {kind}")
        (value,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return int(value)

    def string(self, nullable: bool) -> str | None:
        size = self.fixed("i16")
        if size < 0:
            if not nullable:
                raise MalformedRequest("non-nullable string was serialized as null")
            return None
        end = self.pos + size
        if end > len(self.buf):
            raise MalformedRequest("a string runs past the request")
        value = bytes(self.buf[self.pos : end]).decode()
        self.pos = end
        return value

    def value(self, kind: Any, version: int) -> Any:
        if isinstance(kind, tuple) and kind and kind[0] in ("array", "narray"):
            count = self.fixed("i32")
            if count == -1 and kind[0] == "narray":
                return None
            if count < 0 or count > len(self.buf) - self.pos or count > self.elements_left:
                raise MalformedRequest(f"array of {count} elements cannot fit the request")
            self.elements_left -= count
            return [self.value(kind[1], version) for _ in range(count)]
        if isinstance(kind, tuple):
            return {name: self.value(k, version) for name, k in _fields(kind, version)}
        if kind in _FIXED:
            return self.fixed(kind)
        if kind == "bool":
            return self.fixed("i8") != 0
        if kind == "string":
            return self.string(False)
        if kind == "nstring":
            return self.string(True)
        raise ValueError(f"unknown field type {kind!r}")


def read(layout: Layout, version: int, buf: bytes | memoryview, pos: int, max_elements: int) -> Any:
    """A request body as a dict of its fields (arrays as lists of dicts)."""
    return _Reader(buf, pos, max_elements).value(layout, version)


# -- writing ---------------------------------------------------------------------------


def _int(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, enum.Enum):
        return int(value.value)
    return int(value)


def _write(out: bytearray, kind: Any, value: Any, version: int) -> None:
    if isinstance(kind, tuple) and kind and kind[0] in ("array", "narray"):
        if value is None and kind[0] == "narray":
            out += _I32.pack(-1)
            return
        items = list(value or ())
        out += _I32.pack(len(items))
        for item in items:
            _write(out, kind[1], item, version)
    elif isinstance(kind, tuple):
        for name, k in _fields(kind, version):
            item = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
            _write(out, k, item, version)
    elif kind in _FIXED:
        out += _FIXED[kind].pack(0 if value is None else _int(value))
    elif kind == "bool":
        out += b"\x01" if value else b"\x00"
    elif kind in ("string", "nstring"):
        if value is None:
            out += _I16.pack(-1 if kind == "nstring" else 0)
        else:
            data = str(value).encode()
            out += _I16.pack(len(data)) + data
    else:
        raise ValueError(f"unknown field type {kind!r}")


def write(layout: Layout, version: int, data: Mapping[str, Any]) -> bytes:
    """A response body from a handler's dict; a field it leaves out is 0, "" or empty."""
    out = bytearray()
    _write(out, layout, data, version)
    return bytes(out)


# -- the old versions ------------------------------------------------------------------

FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH = 1, 2, 8, 9
CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH, WRITE_TXN_MARKERS = 19, 20, 23, 27
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_CONFIGS, ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 32, 34, 35


def _array(*fields: Any) -> tuple[Any, ...]:
    return ("array", tuple(fields))


_FETCH_REQUEST: Layout = (
    ("replica_id", "i32"),
    ("max_wait", "i32"),
    ("min_bytes", "i32"),
    ("since", 3, ("max_bytes", "i32")),
    (
        "topics",
        (
            "array",
            (
                ("topic", "string"),
                (
                    "partitions",
                    (
                        "array",
                        (
                            ("partition", "i32"),
                            ("fetch_offset", "i64"),
                            ("partition_max_bytes", "i32"),
                        ),
                    ),
                ),
            ),
        ),
    ),
)

_LIST_OFFSETS_REQUEST: Layout = (
    ("replica_id", "i32"),
    (
        "topics",
        (
            "array",
            (
                ("name", "string"),
                (
                    "partitions",
                    (
                        "array",
                        (
                            ("partition_index", "i32"),
                            ("timestamp", "i64"),
                            # Kafka 3.9 answers at most this many offsets (carried
                            # to the handler: CARRIED below).
                            ("max_num_offsets", "i32"),
                        ),
                    ),
                ),
            ),
        ),
    ),
)
_LIST_OFFSETS_RESPONSE: Layout = (
    (
        "topics",
        (
            "array",
            (
                ("name", "string"),
                (
                    "partitions",
                    (
                        "array",
                        (
                            ("partition_index", "i32"),
                            ("error_code", "i16"),
                            ("old_style_offsets", ("array", "i64")),
                        ),
                    ),
                ),
            ),
        ),
    ),
)

_OFFSET_COMMIT_REQUEST: Layout = (
    ("group_id", "string"),
    ("since", 1, ("generation_id_or_member_epoch", "i32")),
    ("since", 1, ("member_id", "string")),
    (
        "topics",
        (
            "array",
            (
                ("name", "string"),
                (
                    "partitions",
                    (
                        "array",
                        (
                            ("partition_index", "i32"),
                            ("committed_offset", "i64"),
                            ("since", 1, ("commit_timestamp", "i64")),
                            ("committed_metadata", "nstring"),
                        ),
                    ),
                ),
            ),
        ),
    ),
)
_OFFSET_COMMIT_RESPONSE: Layout = (
    (
        "topics",
        (
            "array",
            (
                ("name", "string"),
                ("partitions", ("array", (("partition_index", "i32"), ("error_code", "i16")))),
            ),
        ),
    ),
)

_OFFSET_FETCH_REQUEST: Layout = (
    ("group_id", "string"),
    ("topics", ("array", (("name", "string"), ("partition_indexes", ("array", "i32"))))),
)
_OFFSET_FETCH_RESPONSE: Layout = (
    (
        "topics",
        (
            "array",
            (
                ("name", "string"),
                (
                    "partitions",
                    (
                        "array",
                        (
                            ("partition_index", "i32"),
                            ("committed_offset", "i64"),
                            ("metadata", "nstring"),
                            ("error_code", "i16"),
                        ),
                    ),
                ),
            ),
        ),
    ),
)


def _without(*names: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def drop(data: dict[str, Any]) -> dict[str, Any]:
        for name in names:
            data.pop(name, None)
        return data

    return drop


def _offset_commit(data: dict[str, Any]) -> dict[str, Any]:
    data.setdefault("generation_id_or_member_epoch", -1)
    data.setdefault("member_id", "")
    return data


# (api key, version) -> (request layout, response layout or None when the API's own
# encoder writes the old versions, a fix-up of the request dict before kio's class).
_CREATE_TOPICS_REQUEST: Layout = (
    (
        "topics",
        _array(
            ("name", "string"),
            ("num_partitions", "i32"),
            ("replication_factor", "i16"),
            ("assignments", _array(("partition_index", "i32"), ("broker_ids", ("array", "i32")))),
            ("configs", _array(("name", "string"), ("value", "nstring"))),
        ),
    ),
    ("timeout", "i32"),
    ("since", 1, ("validate_only", "bool")),
)
_CREATE_TOPICS_RESPONSE: Layout = (
    (
        "topics",
        _array(
            ("name", "string"),
            ("error_code", "i16"),
            ("since", 1, ("error_message", "nstring")),
        ),
    ),
)

_DELETE_TOPICS_REQUEST: Layout = (("topic_names", ("array", "string")), ("timeout", "i32"))
_DELETE_TOPICS_RESPONSE: Layout = (
    ("responses", _array(("name", "string"), ("error_code", "i16"))),
)

_OFFSET_FOR_LEADER_EPOCH_REQUEST: Layout = (
    (
        "topics",
        _array(
            ("topic", "string"),
            ("partitions", _array(("partition", "i32"), ("leader_epoch", "i32"))),
        ),
    ),
)
_OFFSET_FOR_LEADER_EPOCH_RESPONSE: Layout = (
    (
        "topics",
        _array(
            ("topic", "string"),
            (
                "partitions",
                _array(
                    ("error_code", "i16"),
                    ("partition", "i32"),
                    ("since", 1, ("leader_epoch", "i32")),
                    ("end_offset", "i64"),
                ),
            ),
        ),
    ),
)

_WRITE_TXN_MARKERS_REQUEST: Layout = (
    (
        "markers",
        _array(
            ("producer_id", "i64"),
            ("producer_epoch", "i16"),
            ("transaction_result", "bool"),
            ("topics", _array(("name", "string"), ("partition_indexes", ("array", "i32")))),
            ("coordinator_epoch", "i32"),
        ),
    ),
)
_WRITE_TXN_MARKERS_RESPONSE: Layout = (
    (
        "markers",
        _array(
            ("producer_id", "i64"),
            (
                "topics",
                _array(
                    ("name", "string"),
                    ("partitions", _array(("partition_index", "i32"), ("error_code", "i16"))),
                ),
            ),
        ),
    ),
)

_DESCRIBE_CONFIGS_REQUEST: Layout = (
    (
        "resources",
        _array(
            ("resource_type", "i8"),
            ("resource_name", "string"),
            ("configuration_keys", ("narray", "string")),
        ),
    ),
)
_DESCRIBE_CONFIGS_RESPONSE: Layout = (
    ("throttle_time", "i32"),
    (
        "results",
        _array(
            ("error_code", "i16"),
            ("error_message", "nstring"),
            ("resource_type", "i8"),
            ("resource_name", "string"),
            (
                "configs",
                _array(
                    ("name", "string"),
                    ("value", "nstring"),
                    ("read_only", "bool"),
                    ("is_default", "bool"),
                    ("is_sensitive", "bool"),
                ),
            ),
        ),
    ),
)

_ALTER_REPLICA_LOG_DIRS_REQUEST: Layout = (
    (
        "dirs",
        _array(
            ("path", "string"),
            ("topics", _array(("name", "string"), ("partitions", ("array", "i32")))),
        ),
    ),
)
_ALTER_REPLICA_LOG_DIRS_RESPONSE: Layout = (
    ("throttle_time", "i32"),
    (
        "results",
        _array(
            ("topic_name", "string"),
            ("partitions", _array(("partition_index", "i32"), ("error_code", "i16"))),
        ),
    ),
)

_DESCRIBE_LOG_DIRS_REQUEST: Layout = (
    ("topics", ("narray", (("topic", "string"), ("partitions", ("array", "i32"))))),
)
_DESCRIBE_LOG_DIRS_RESPONSE: Layout = (
    ("throttle_time", "i32"),
    (
        "results",
        _array(
            ("error_code", "i16"),
            ("log_dir", "string"),
            (
                "topics",
                _array(
                    ("name", "string"),
                    (
                        "partitions",
                        _array(
                            ("partition_index", "i32"),
                            ("partition_size", "i64"),
                            ("offset_lag", "i64"),
                            ("is_future_key", "bool"),
                        ),
                    ),
                ),
            ),
        ),
    ),
)

# The ACL APIs' v0 are v1 without resource pattern types: every pattern is LITERAL
# (kio's v1 default), so a v0 filter matches literal bindings only, as in Kafka 3.9.
_ACL_FILTER: Layout = (
    ("resource_type_filter", "i8"),
    ("resource_name_filter", "nstring"),
    ("principal_filter", "nstring"),
    ("host_filter", "nstring"),
    ("operation", "i8"),
    ("permission_type", "i8"),
)
_DESCRIBE_ACLS_RESPONSE: Layout = (
    ("throttle_time", "i32"),
    ("error_code", "i16"),
    ("error_message", "nstring"),
    (
        "resources",
        _array(
            ("resource_type", "i8"),
            ("resource_name", "string"),
            (
                "acls",
                _array(
                    ("principal", "string"),
                    ("host", "string"),
                    ("operation", "i8"),
                    ("permission_type", "i8"),
                ),
            ),
        ),
    ),
)
_CREATE_ACLS_REQUEST: Layout = (
    (
        "creations",
        _array(
            ("resource_type", "i8"),
            ("resource_name", "string"),
            ("principal", "string"),
            ("host", "string"),
            ("operation", "i8"),
            ("permission_type", "i8"),
        ),
    ),
)
_CREATE_ACLS_RESPONSE: Layout = (
    ("throttle_time", "i32"),
    ("results", _array(("error_code", "i16"), ("error_message", "nstring"))),
)
_DELETE_ACLS_REQUEST: Layout = (("filters", ("array", _ACL_FILTER)),)
_DELETE_ACLS_RESPONSE: Layout = (
    ("throttle_time", "i32"),
    (
        "filter_results",
        _array(
            ("error_code", "i16"),
            ("error_message", "nstring"),
            (
                "matching_acls",
                _array(
                    ("error_code", "i16"),
                    ("error_message", "nstring"),
                    ("resource_type", "i8"),
                    ("resource_name", "string"),
                    ("principal", "string"),
                    ("host", "string"),
                    ("operation", "i8"),
                    ("permission_type", "i8"),
                ),
            ),
        ),
    ),
)


LEGACY: dict[
    tuple[int, int], tuple[Layout, Layout | None, Callable[[dict[str, Any]], dict[str, Any]]]
] = {}
for _v in range(4):
    LEGACY[(FETCH, _v)] = (_FETCH_REQUEST, None, _without())
LEGACY[(LIST_OFFSETS, 0)] = (_LIST_OFFSETS_REQUEST, _LIST_OFFSETS_RESPONSE, _without())
for _v in range(2):
    LEGACY[(OFFSET_COMMIT, _v)] = (_OFFSET_COMMIT_REQUEST, _OFFSET_COMMIT_RESPONSE, _offset_commit)
LEGACY[(OFFSET_FETCH, 0)] = (_OFFSET_FETCH_REQUEST, _OFFSET_FETCH_RESPONSE, _without())
for _v in range(2):
    LEGACY[(CREATE_TOPICS, _v)] = (_CREATE_TOPICS_REQUEST, _CREATE_TOPICS_RESPONSE, _without())
    LEGACY[(OFFSET_FOR_LEADER_EPOCH, _v)] = (
        _OFFSET_FOR_LEADER_EPOCH_REQUEST,
        _OFFSET_FOR_LEADER_EPOCH_RESPONSE,
        _without(),
    )
LEGACY[(DELETE_TOPICS, 0)] = (_DELETE_TOPICS_REQUEST, _DELETE_TOPICS_RESPONSE, _without())
LEGACY[(WRITE_TXN_MARKERS, 0)] = (
    _WRITE_TXN_MARKERS_REQUEST,
    _WRITE_TXN_MARKERS_RESPONSE,
    _without(),
)
# DescribeConfigs v0 answers is_default where v1 answers config_source (the handler
# fills both); the v1 request's include_synonyms is false.
LEGACY[(DESCRIBE_CONFIGS, 0)] = (_DESCRIBE_CONFIGS_REQUEST, _DESCRIBE_CONFIGS_RESPONSE, _without())
LEGACY[(DESCRIBE_ACLS, 0)] = (_ACL_FILTER, _DESCRIBE_ACLS_RESPONSE, _without())
LEGACY[(CREATE_ACLS, 0)] = (_CREATE_ACLS_REQUEST, _CREATE_ACLS_RESPONSE, _without())
LEGACY[(DELETE_ACLS, 0)] = (_DELETE_ACLS_REQUEST, _DELETE_ACLS_RESPONSE, _without())
# AlterReplicaLogDirs and DescribeLogDirs v0 are v1 without throttling on quota breach.
LEGACY[(ALTER_REPLICA_LOG_DIRS, 0)] = (
    _ALTER_REPLICA_LOG_DIRS_REQUEST,
    _ALTER_REPLICA_LOG_DIRS_RESPONSE,
    _without(),
)
LEGACY[(DESCRIBE_LOG_DIRS, 0)] = (
    _DESCRIBE_LOG_DIRS_REQUEST,
    _DESCRIBE_LOG_DIRS_RESPONSE,
    _without(),
)

# Fields of an old version that kio's oldest class lacks and the handler reads: (api
# key, version) -> entity path -> {field name: (Kafka type, Kafka's default)}. The
# request is read into a subclass of kio's class that carries them
# (`messages.request_class_carrying`); other versions read the default.
CARRIED: dict[tuple[int, int], dict[tuple[str, ...], dict[str, tuple[str, int]]]] = {
    (LIST_OFFSETS, 0): {("topics", "partitions"): {"max_num_offsets": ("int32", 1)}},
    # v1's commit timestamp, stored as the offset's commit time when not -1 (Kafka 3.9).
    (OFFSET_COMMIT, 1): {("topics", "partitions"): {"commit_timestamp": ("int64", -1)}},
}


def is_legacy_version(api_key: int, version: int) -> bool:
    return (api_key, version) in LEGACY
