"""The fields of a Fetch request, as plain dicts for `messages.build`: outside any
fetch session (KIP-227 session 0, epoch -1), as the admin client's one-shot reads
send it, or within one (`in_session`), as a follower's replica fetcher does.

A fetcher of Fetch v15+ names itself in `replica_state` (KIP-903), older versions in
`replica_id`; only the field of the version being built is set, so `build` stays on
its fast path (no gathering of other versions' fields) for the follower's every fetch.
"""

from __future__ import annotations

import datetime
from typing import Any

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
