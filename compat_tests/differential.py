"""Kafka as the oracle: one raw request sent to a Kafka node and to a kbroker node, the two
answers compared field by field.

Requests are kio entities built from one version-independent description (``build``
drops the fields a version lacks), sent on a fresh connection each (a request may change
or close its connection), at the lowest and highest version both brokers serve. Answers
become plain trees (``plain``); ``differences`` lists the paths where they disagree,
leaving out the paths an allow-list names (``ALLOWED``, each entry with its reason).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import fnmatch
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema

from kbroker.admin.client import BrokerConnection, ClientError, parse_address
from kbroker.protocol.messages import build, known_versions

# Paths (fnmatch patterns over "field.field[].field") that legitimately differ, and why.
ALLOWED: dict[str, str] = {
    "throttle_time": "each broker throttles by its own quota state",
    "*.throttle_time": "each broker throttles by its own quota state",
    "cluster_id": "each cluster is formatted with its own random id",
    "*topic_id": "topic ids are random per cluster",
    "topics[].topic_id": "topic ids are random per cluster",
    "brokers[].port": "each broker listens on its own free port",
    "brokers[].host": "host names are the listener's, not the API's",
    "host": "the coordinator's listener address",
    "port": "the coordinator's listener port",
    "coordinators[].host": "the coordinator's listener address",
    "coordinators[].port": "the coordinator's listener port",
    "error_message": "free text; the error code is what clients act on",
    "*.error_message": "free text; the error code is what clients act on",
    "producer_id": "producer ids are allocated per cluster",
    "*.producer_id": "producer ids are allocated per cluster",
    "member_id": "member ids are random",
    "*.member_id": "member ids are random",
    "api_keys": "the API ranges are compared by the coverage test, not here",
    "supported_features": "feature ranges: docs/kafka-differences.md",
    "finalized_features": "feature levels: docs/kafka-differences.md",
    "finalized_features_epoch": "the metadata offset at which features were last changed",
    "zk_migration_ready": "always false on KRaft; absent from some versions",
    "cluster_authorized_operations": "-2147483648 (not asked) on both; kept out of the diff",
    "*.timestamp": "record and log append times are the wall clock at each broker",
    "*.log_append_time_ms": "log append times are the wall clock at each broker",
    "*.log_start_offset": "compared where a scenario sets it; otherwise storage detail",
    "*.leader_epoch": "Kafka counts epochs from the topic's creation in its own way",
    "*.current_leader.leader_epoch": "as leader_epoch",
    "node_endpoints": "each broker's listener address",
    "node_endpoints[].host": "each broker's listener address",
    "node_endpoints[].port": "each broker's listener port",
    "results[].log_dir": "each broker's own log directory path",
    "results[].usable_bytes": "free space on the disk changes between the two requests",
    "results[].total_bytes": "each broker's own filesystem",
    "controller_id": "node ids agree (1) but a combined Kafka node names itself later",
}


def plain(value: Any) -> Any:
    """A kio entity (or field) as JSON-like data: dicts, lists, ints, strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return int(value.value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    return value


_IDENTITY = (
    "name",
    "topic",
    "topic_name",
    "partition_index",
    "partition",
    "node_id",
    "broker_id",
    "resource_name",
    "group_id",
    "key",
    "transactional_id",
    "api_key",
    "user",
    "id",
    "config_name",
    "index",
    "resource_type",
)


def _sort_key(item: Any) -> str:
    if isinstance(item, dict):
        ident = {k: item[k] for k in _IDENTITY if k in item}
        if ident:
            return json.dumps(ident, sort_keys=True, default=str)
    return json.dumps(item, sort_keys=True, default=str)


def _allowed(path: str, allowed: Iterable[str]) -> bool:
    bare = path.replace("[]", "")
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(bare, p) for p in allowed)


def differences(kafka: Any, kbroker: Any, allowed: Iterable[str] = (), path: str = "") -> list[str]:
    """Paths where the two plain answers differ, with both values, outside `allowed`."""
    allowed = list(allowed)
    if path and _allowed(path, allowed):
        return []
    if isinstance(kafka, dict) and isinstance(kbroker, dict):
        found: list[str] = []
        for key in sorted(set(kafka) | set(kbroker)):
            sub = f"{path}.{key}" if path else key
            found += differences(kafka.get(key), kbroker.get(key), allowed, sub)
        return found
    if isinstance(kafka, list) and isinstance(kbroker, list):
        if len(kafka) != len(kbroker):
            return [
                f"{path}: {len(kafka)} elements from Kafka, {len(kbroker)} from kbroker "
                f"(Kafka {_short(kafka)}, kbroker {_short(kbroker)})"
            ]
        found = []
        for a, b in zip(sorted(kafka, key=_sort_key), sorted(kbroker, key=_sort_key), strict=True):
            found += differences(a, b, allowed, f"{path}[]")
        return found
    if kafka != kbroker:
        return [f"{path}: Kafka {_short(kafka)}, kbroker {_short(kbroker)}"]
    return []


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 300 else text[:300] + "..."


@dataclass
class Side:
    """One broker as the harness sees it: where it listens and what it serves."""

    name: str
    bootstrap: str
    versions: dict[int, tuple[int, int]]
    context: dict[str, Any]

    @classmethod
    def of(cls, name: str, bootstrap: str) -> Side:
        with connect(bootstrap) as conn:
            conn.negotiate()
            return cls(name, bootstrap, dict(conn.versions), {})


def connect(bootstrap: str, timeout: float = 15.0) -> BrokerConnection:
    host, port = parse_address(bootstrap.split(",")[0])
    return BrokerConnection(host, port, timeout, "kbroker-differential")


CLOSED = {"connection": "closed by the broker"}


def ask(side: Side, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """The plain answer, or CLOSED where the broker closed the connection instead."""
    entity = build(load_request_schema(api_key, version), body)
    try:
        with connect(side.bootstrap) as conn:
            return plain(conn.ask(entity))
    except ClientError:
        return CLOSED


def shared_versions(api_key: int, kafka: Side, kbroker: Side) -> list[int]:
    """The lowest and highest version both brokers and kio speak (one if they coincide)."""
    known = known_versions(api_key)
    low = max(kafka.versions[api_key][0], kbroker.versions[api_key][0], known.start)
    high = min(kafka.versions[api_key][1], kbroker.versions[api_key][1], known.stop - 1)
    if low > high:
        return []
    return sorted({low, high})


Body = dict[str, Any] | Callable[[Side], dict[str, Any]]


@dataclass
class Scenario:
    name: str
    api_key: int
    body: Body
    allowed: tuple[str, ...] = ()

    def body_for(self, side: Side) -> dict[str, Any]:
        return self.body(side) if callable(self.body) else self.body
