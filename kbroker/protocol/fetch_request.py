"""The fields of a Fetch request, as plain dicts for `messages.build`: outside any
fetch session (KIP-227 session 0, epoch -1), as the admin client's one-shot reads
send it, or within one (`in_session`), as a follower's replica fetcher does.

A fetcher of Fetch v15+ names itself in `replica_state` (KIP-903), older versions in
`replica_id`; only the field of the version being built is set, so `build` stays on
its fast path (no gathering of other versions' fields).

A follower sends one Fetch after another all day: `encode_replica_fetch` writes its
body (v15) straight to bytes instead, with no entity built and no generic writer run.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kbroker.protocol.varint import uvarint

CONSUMER = -1  # replica_id of a consumer's (or an operator's) fetch


def fetch_partition(
    partition: int,
    fetch_offset: int,
    partition_max_bytes: int,
    *,
    current_leader_epoch: int = -1,
    last_fetched_epoch: int = -1,
    log_start_offset: int = -1,
) -> dict[str, int]:
    """One partition's entry: read from `fetch_offset` up to `partition_max_bytes`."""
    return {
        "partition": partition,
        "current_leader_epoch": current_leader_epoch,
        "fetch_offset": fetch_offset,
        "last_fetched_epoch": last_fetched_epoch,
        "log_start_offset": log_start_offset,
        "partition_max_bytes": partition_max_bytes,
    }


def sessionless_fetch(
    topics: list[dict[str, Any]],
    *,
    max_wait: datetime.timedelta | int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int = 0,
    replica_id: int = CONSUMER,
    replica_state: bool = False,
) -> dict[str, Any]:
    """A whole Fetch's fields; `topics` are {topic and/or topic_id, partitions}. With
    `replica_state` the fetcher's id goes in Fetch v15's replica_state (epoch unknown,
    -1) instead of replica_id."""
    fields: dict[str, Any] = {
        "max_wait": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": topics,
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    if replica_state:
        fields["replica_state"] = {"replica_id": replica_id, "replica_epoch": -1}
    else:
        fields["replica_id"] = replica_id
    return fields


def in_session(
    fields: dict[str, Any],
    session_id: int,
    session_epoch: int,
    forgotten: list[dict[str, Any]],
) -> dict[str, Any]:
    """`fields` (from `sessionless_fetch`) as a Fetch of session `session_id` at
    `session_epoch`, forgetting `forgotten` ({topic or topic_id, partitions})."""
    fields["session_id"] = session_id
    fields["session_epoch"] = session_epoch
    fields["forgotten_topics_data"] = forgotten
    return fields


REPLICA_FETCH_VERSION = 15
"""The version `encode_replica_fetch` writes: topic ids (v13), replica_state (v15)."""

ReplicaFetchPartition = tuple[int, int, int, int, int, int]
"""(partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
partition_max_bytes): one partition's entry, in the order it goes on the wire."""

_HEAD = struct.Struct(">iiibii")
_PARTITION = struct.Struct(">iiqiqib")  # the last byte: no tagged fields
# The body's tagged fields when replica_state is set: one field, tag 1, 13 bytes long:
# replica_id, replica_epoch (unknown: -1) and its own empty tagged fields.
_REPLICA_STATE = struct.Struct(">bbbiqb")


def encode_replica_fetch(
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    session_id: int,
    session_epoch: int,
    topics: Mapping[uuid.UUID, Sequence[ReplicaFetchPartition]],
    forgotten: Mapping[uuid.UUID, Sequence[int]],
) -> bytes:
    """A follower's Fetch v15 body (read uncommitted, no rack): what
    `messages.encode` makes of the same request built from `sessionless_fetch` with
    `replica_state`, `in_session`, and these topics and forgotten partitions."""
    parts = [
        _HEAD.pack(max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch),
        uvarint(len(topics) + 1),
    ]
    append = parts.append
    pack = _PARTITION.pack
    for topic_id, partitions in topics.items():
        append(topic_id.bytes)
        append(uvarint(len(partitions) + 1))
        for entry in partitions:
            append(pack(*entry, 0))
        append(b"\x00")
    append(uvarint(len(forgotten) + 1))
    for topic_id, indexes in forgotten.items():
        append(topic_id.bytes)
        append(uvarint(len(indexes) + 1))
        append(struct.pack(f">{len(indexes)}i", *indexes))
        append(b"\x00")
    append(b"\x01")  # rack_id: the empty compact string
    if replica_id == CONSUMER:
        append(b"\x00")  # replica_state at its default is not written
    else:
        append(_REPLICA_STATE.pack(1, 1, 13, replica_id, -1, 0))
    return b"".join(parts)
