"""The metadata quorum as its leader sees it: what DescribeQuorum answers (KIP-595, KIP-836).

Only the Raft leader knows how far every replica has got. pysyncobj's leader keeps a
match index per follower and hears back from each one after every AppendEntries (at
least once a heartbeat), as a KRaft leader hears every replica's Fetch. `ReplicaTracker`
keeps per replica what Kafka's LeaderState keeps per fetching replica: its log end
offset (the match index), when it last answered (lastFetchTimestamp), and the last time
it was known to hold everything the leader held (lastCaughtUpTimestamp). Kafka's rule
for the latter: caught up with the leader's end at this response dates it now; caught
up with the leader's end at the previous response dates it to that response.

A new leadership starts from nothing, as Kafka's LeaderState does: a replica not yet
heard from in this term shows -1 for its offset and both times. Replicas that are not
voters (broker-only nodes, pysyncobj's read-only nodes) are observers, listed while
they answered within Kafka's observer session timeout. Offsets are Raft log indexes;
times are wall-clock milliseconds. No I/O here: the Raft thread feeds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Kafka's LeaderState.OBSERVER_SESSION_TIMEOUT_MS: an observer silent this long is dropped.
OBSERVER_SESSION_TIMEOUT_MS = 300_000


@dataclass(frozen=True)
class ReplicaState:
    """One replica of the metadata log in DescribeQuorum; -1 where it is not known."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int
    # The replica's metadata directory id (KIP-853); "" where it has none (a static quorum).
    directory_id: str = ""


@dataclass(frozen=True)
class VoterEndpoint:
    """Where a voter's Raft server listens (DescribeQuorum v2's `nodes`)."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class QuorumDescription:
    """The leader's view of the quorum at one moment: Kafka's DescribeQuorum partition."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]
    endpoints: tuple[VoterEndpoint, ...]

    def to_wire(self) -> dict[str, Any]:
        """Plain values only, for the Raft message that carries it to a follower."""
        return {
            "leader_id": self.leader_id,
            "leader_epoch": self.leader_epoch,
            "high_watermark": self.high_watermark,
            "voters": [_replica_tuple(r) for r in self.voters],
            "observers": [_replica_tuple(r) for r in self.observers],
            "endpoints": [(e.node_id, e.host, e.port) for e in self.endpoints],
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> QuorumDescription:
        return cls(
            leader_id=int(data["leader_id"]),
            leader_epoch=int(data["leader_epoch"]),
            high_watermark=int(data["high_watermark"]),
            voters=tuple(_replica_state(r) for r in data["voters"]),
            observers=tuple(_replica_state(r) for r in data["observers"]),
            endpoints=tuple(VoterEndpoint(int(i), str(h), int(p)) for i, h, p in data["endpoints"]),
        )


def _replica_tuple(r: ReplicaState) -> tuple[int, int, int, int, str]:
    return (
        r.replica_id,
        r.log_end_offset,
        r.last_fetch_timestamp,
        r.last_caught_up_timestamp,
        r.directory_id,
    )


def _replica_state(r: Any) -> ReplicaState:
    replica_id, end, fetched, caught_up = (int(v) for v in r[:4])
    return ReplicaState(replica_id, end, fetched, caught_up, str(r[4]) if len(r) > 4 else "")


def voter_endpoint(node_id: int, address: str) -> VoterEndpoint | None:
    """A voter's "host:port" (IPv6 hosts in brackets) as an endpoint; None if unparsable."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return VoterEndpoint(node_id, host.strip("[]"), int(port))


@dataclass
class _Progress:
    """What the leader knows of one replica in the current term."""

    log_end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    # The leader's log end when this replica last answered; None before its first answer.
    leader_end_at_last_fetch: int | None = None


class ReplicaTracker:
    """Per-replica progress kept by the leader; reset whenever a new term starts."""

    def __init__(self, node_id: int, voters: Mapping[int, str]) -> None:
        self.node_id = node_id
        # A lone voter configured without addresses still counts itself.
        self.voters = dict(voters) or {node_id: ""}
        # A dynamic quorum's voters' directory ids (node id -> id).
        self.voter_directories: dict[int, str] = {}
        self._epoch = -1
        # (node id, directory id) -> progress: a replica whose directory was replaced is
        # another replica than the voter of that id.
        self._replicas: dict[tuple[int, str], _Progress] = {}

    def set_voters(self, voters: Mapping[int, tuple[str, str]]) -> None:
        """A dynamic quorum's voters changed: node id -> (directory id, address)."""
        self.voters = {i: a for i, (_, a) in voters.items()} or {self.node_id: ""}
        self.voter_directories = {i: d for i, (d, _) in voters.items()}

    def _for_epoch(self, epoch: int) -> None:
        if epoch != self._epoch:
            self._epoch = epoch
            self._replicas = {}

    def on_response(
        self,
        epoch: int,
        replica_id: int,
        match_index: int | None,
        leader_end: int,
        now_ms: int,
        directory_id: str = "",
    ) -> None:
        """A replica answered an AppendEntries of this leader. `match_index` is what it is
        known to hold (None until it has acknowledged an append in this term)."""
        self._for_epoch(epoch)
        if replica_id == self.node_id:
            return
        p = self._replicas.setdefault((replica_id, directory_id), _Progress())
        if match_index is not None:
            if match_index >= leader_end:
                p.last_caught_up_ms = max(p.last_caught_up_ms, now_ms)
            elif (
                p.leader_end_at_last_fetch is not None and match_index >= p.leader_end_at_last_fetch
            ):
                p.last_caught_up_ms = max(p.last_caught_up_ms, p.last_fetch_ms)
            p.log_end_offset = match_index
        p.leader_end_at_last_fetch = leader_end
        p.last_fetch_ms = max(p.last_fetch_ms, now_ms)

    def describe(
        self, epoch: int, high_watermark: int, leader_end: int, now_ms: int
    ) -> QuorumDescription:
        """The quorum as this leader sees it now; the leader itself is caught up now."""
        self._for_epoch(epoch)

        def state(key: tuple[int, str]) -> ReplicaState:
            replica_id, directory = key
            if replica_id == self.node_id:
                directory = self.voter_directories.get(replica_id, "")
                return ReplicaState(replica_id, leader_end, now_ms, now_ms, directory)
            p = self._replicas.get(key, _Progress())
            return ReplicaState(
                replica_id, p.log_end_offset, p.last_fetch_ms, p.last_caught_up_ms, directory
            )

        voter_keys = {(v, self.voter_directories.get(v, "")) for v in self.voters}
        observers = sorted(
            key
            for key, p in self._replicas.items()
            if key not in voter_keys and now_ms - p.last_fetch_ms < OBSERVER_SESSION_TIMEOUT_MS
        )
        endpoints = (voter_endpoint(v, a) for v, a in sorted(self.voters.items()))
        return QuorumDescription(
            leader_id=self.node_id,
            leader_epoch=epoch,
            high_watermark=high_watermark,
            voters=tuple(
                state((v, self.voter_directories.get(v, ""))) for v in sorted(self.voters)
            ),
            observers=tuple(state(o) for o in observers),
            endpoints=tuple(e for e in endpoints if e is not None),
        )
