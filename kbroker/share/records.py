"""Share state as `__share_group_state` records: keys, values, and folding them back.

Each share-partition's whole state is one record keyed by (group, topic id, partition)
and each group's configs one keyed by the group; the topic is compacted, so the latest
record per key is the state and a tombstone removes it. Keys and values are compact
JSON: small (runs of offsets, not single records) and readable when debugging.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

KeyValue = tuple[bytes, bytes | None]
StateKey = tuple[str, uuid.UUID, int]


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def state_key(key: StateKey) -> bytes:
    return _dumps(["state", key[0], key[1].hex, key[2]])


def config_key(group_id: str) -> bytes:
    return _dumps(["config", group_id])


def state_value(topic: str, snapshot: dict[str, Any]) -> bytes:
    return _dumps({**snapshot, "topic": topic})


def config_value(configs: dict[str, str]) -> bytes:
    return _dumps(configs)


def fold(
    records: Iterable[KeyValue],
) -> tuple[dict[str, dict[str, str] | None], dict[StateKey, dict[str, Any] | None]]:
    """The latest group configs and share-partition snapshots (None: deleted) among
    records read oldest first; unreadable keys are skipped."""
    latest: dict[bytes, bytes | None] = {}
    for key, value in records:
        latest[key] = value
    configs: dict[str, dict[str, str] | None] = {}
    states: dict[StateKey, dict[str, Any] | None] = {}
    for key, value in latest.items():
        try:
            kind, *rest = json.loads(key)
            if kind == "config":
                (group_id,) = rest
                configs[group_id] = None if value is None else json.loads(value)
            elif kind == "state":
                group_id, topic_hex, partition = rest
                skey = (group_id, uuid.UUID(topic_hex), int(partition))
                states[skey] = None if value is None else json.loads(value)
        except (ValueError, TypeError):
            continue
    return configs, states
