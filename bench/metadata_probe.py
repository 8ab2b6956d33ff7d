"""A minimal Kafka Metadata probe over a raw socket, for timing broker start-up.

A stock client's reconnect back-off would blur the moment a restarted broker becomes
usable, so the probe asks the two requests it needs itself, with the project's small
client (kbroker.admin.client): ApiVersions v0 (which every broker answers) to pick a
Metadata version, then Metadata to see which topics and partition leaders the broker
serves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kbroker.admin.client import BrokerConnection, ClientError

API_METADATA = 3
API_VERSIONS = 18
CLIENT_ID = "kbroker-bench"


@dataclass
class ClusterView:
    """What one Metadata response said: partition -> leader id, per topic."""

    version: int
    brokers: int
    leaders: dict[str, dict[int, int]] = field(default_factory=dict)

    def ready_partitions(self, topic: str) -> int:
        return sum(1 for leader in self.leaders.get(topic, {}).values() if leader >= 0)


def fetch_metadata(
    host: str, port: int, topics: list[str] | None = None, timeout: float = 5.0
) -> ClusterView:
    """One connection, ApiVersions then Metadata; raises OSError if the broker is not up."""
    with BrokerConnection(host, port, timeout, CLIENT_ID) as conn:
        conn.negotiate()
        version = conn.version_for(API_METADATA, (1, 12))
        answer = conn.call(
            API_METADATA,
            {
                "topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False,
            },
            versions=(version, version),
        )
    view = ClusterView(version=version, brokers=len(answer.brokers))
    for t in answer.topics:
        view.leaders[t.name or ""] = {
            int(p.partition_index): int(p.leader_id) if int(p.error_code) == 0 else -1
            for p in t.partitions
        }
    return view


def wait_for_metadata(
    host: str,
    port: int,
    deadline: float,
    topic: str | None = None,
    partitions: int = 0,
    alive=lambda: True,
    since: float | None = None,
) -> tuple[float | None, float | None]:
    """Poll every 10 ms until Metadata succeeds, then until `topic` has `partitions` leaders.

    Returns (seconds to the first successful Metadata, seconds until the topic is fully
    led), counted from `since` (a time.perf_counter() value, default now), each None if
    not reached before `deadline` or while `alive()` stays true.
    """
    start = time.perf_counter() if since is None else since
    first: float | None = None
    while time.perf_counter() < deadline and alive():
        try:
            view = fetch_metadata(host, port, [topic] if topic else None, timeout=2.0)
        except (OSError, ClientError):
            time.sleep(0.01)
            continue
        now = time.perf_counter() - start
        if first is None:
            first = now
        if topic is None or view.ready_partitions(topic) >= partitions:
            return first, now
        time.sleep(0.01)
    return first, None
