"""`kbroker consume --group G`: consume as a member of a consumer group, committing.

The member joins with the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat):
the coordinator assigns it partitions of the topic, and it heartbeats at the interval
the coordinator asks. Each assigned partition starts at the group's committed offset,
or where `--from` says (end by default, Kafka's auto.offset.reset=latest) when the
group has none. After each batch printed the offsets after the last record printed are
committed with the member's id and epoch, and once more before it leaves the group
(a heartbeat with epoch -1), so a record printed is never read again by the group and
none is skipped. When the assignment changes the member commits, then reads its new
partitions.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.admin.client import ClientError, Cluster
from kbroker.admin.consumer import Fetcher, Start, start_positions
from kbroker.admin.groups import fetch_committed, find_coordinator
from kbroker.admin.topics import check, error_of, metadata

OFFSET_COMMIT = 8
CONSUMER_GROUP_HEARTBEAT = 68
REBALANCE_TIMEOUT_MS = 30_000
JOIN_TIMEOUT_S = 30.0


class GroupMember:
    """One member of `group` subscribed to `topic`: its assignment and its commits."""

    def __init__(self, cluster: Cluster, group: str, topic: str) -> None:
        self.cluster, self.group, self.topic = cluster, group, topic
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.interval_s = 5.0
        self.next_heartbeat = 0.0
        md = metadata(cluster, [topic])
        self.topic_id = uuid.UUID(md.topics[0].topic_id) if md.topics[0].topic_id else None
        _, host, port = find_coordinator(cluster, group)
        self.coordinator = cluster.connection(host, port, purpose="group")
        self.assignment: list[int] = []

    def heartbeat(self, leaving: bool = False) -> bool:
        """One heartbeat; True when the assignment changed."""
        first = self.epoch == 0
        body: dict[str, Any] = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": -1 if leaving else self.epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": REBALANCE_TIMEOUT_MS if first else -1,
            "subscribed_topic_names": [self.topic] if first else None,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [] if first else None,
        }
        response = self.coordinator.call(CONSUMER_GROUP_HEARTBEAT, body, versions=(1, 1))
        error = error_of(response.error_code)
        if leaving:
            return False
        if error == ErrorCode.unsupported_version:
            raise ClientError(f"the coordinator of group {self.group} does not serve KIP-848")
        check(response.error_code, f"heartbeat of group {self.group}", response.error_message)
        self.epoch = int(response.member_epoch)
        interval = response.heartbeat_interval
        seconds = (
            interval.total_seconds() if hasattr(interval, "total_seconds") else interval / 1000
        )
        self.interval_s = max(0.1, seconds)
        self.next_heartbeat = time.monotonic() + self.interval_s
        if response.assignment is None:
            return False
        mine = sorted(
            int(p)
            for tp in response.assignment.topic_partitions
            if self.topic_id is None or tp.topic_id == self.topic_id
            for p in tp.partitions
        )
        changed = mine != self.assignment
        self.assignment = mine
        return changed

    def join(self) -> None:
        """Heartbeat until the coordinator assigns partitions (or a timeout passes)."""
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        self.heartbeat()
        while not self.assignment:
            if time.monotonic() > deadline:
                raise ClientError(f"group {self.group} assigned no partition of {self.topic}")
            time.sleep(min(self.interval_s, 0.2))
            self.heartbeat()

    def due(self) -> bool:
        return time.monotonic() >= self.next_heartbeat

    def positions(self, start: Start) -> dict[int, int]:
        committed = fetch_committed(self.coordinator, self.group)
        found = {
            p: committed[(self.topic, p)] for p in self.assignment if (self.topic, p) in committed
        }
        missing = [p for p in self.assignment if p not in found]
        if missing:
            found.update(start_positions(self.cluster, self.topic, missing, start))
        return found

    def commit(self, offsets: dict[int, int]) -> None:
        if not offsets:
            return
        response = self.coordinator.call(
            OFFSET_COMMIT,
            {
                "group_id": self.group,
                "generation_id_or_member_epoch": self.epoch,
                "member_id": self.member_id,
                "group_instance_id": None,
                "topics": [
                    {
                        "name": self.topic,
                        "partitions": [
                            {"partition_index": p, "committed_offset": o,
                             "committed_leader_epoch": -1, "committed_metadata": ""}
                            for p, o in sorted(offsets.items())
                        ],
                    }
                ],
            },
            versions=(9, 9),
        )  # fmt: skip
        for t in response.topics:
            for p in t.partitions:
                check(p.error_code, f"committing {t.name}-{p.partition_index} for {self.group}")

    def leave(self) -> None:
        with contextlib.suppress(ClientError):  # its session ends there anyway
            self.heartbeat(leaving=True)


def consume_in_group(
    cluster: Cluster,
    group: str,
    topic: str,
    start: Start,
    make_fetcher: Callable[[dict[int, int]], Fetcher],
    print_section: Callable[[int, Any, int], tuple[int, int | None]],
    full: Callable[[], bool],
) -> None:
    """Read the member's partitions, printing each batch and committing after it."""
    member = GroupMember(cluster, group, topic)
    member.join()
    done: dict[int, int] = {}
    try:
        while True:
            fetcher = make_fetcher(member.positions(start))
            changed = False

            def tick() -> bool:
                nonlocal changed
                if member.due():
                    changed = member.heartbeat() or changed
                return changed

            fetcher.on_round = tick
            for p, section, skip in fetcher.batches():
                _, after = print_section(p, section, skip)
                if after is not None:
                    done[p] = after
                    member.commit({p: after})
                if full() or tick():
                    break
            fetcher.close()
            if not changed or full():
                return
            done.clear()
    finally:
        if done:
            member.commit(done)
        member.leave()
