"""Shared driver for the group tests: a GroupCoordinator on a manual clock and an
in-memory store (holds no tests itself)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    JoinRequest,
    JoinResult,
    SyncRequest,
    SyncResult,
)
from kbroker.coordinator.clock import ManualScheduler
from kbroker.coordinator.store import KeyValue, WriteDone

NUM_PARTITIONS = 4


class MemoryStore:
    """Keeps every written batch; answers at once, with `fail_with`, or when released."""

    def __init__(self) -> None:
        self.batches: dict[int, list[list[KeyValue]]] = {}
        self.fail_with: ErrorCode | None = None
        self.hold = False
        self.held: list[tuple[int, list[KeyValue], WriteDone]] = []

    def write(self, partition: int, records: list[KeyValue], done: WriteDone) -> None:
        if self.hold:
            self.held.append((partition, records, done))
            return
        self._finish(partition, records, done)

    def _finish(self, partition: int, records: list[KeyValue], done: WriteDone) -> None:
        if self.fail_with is not None:
            done(self.fail_with)
            return
        if records:
            self.batches.setdefault(partition, []).append(list(records))
        done(ErrorCode.none)

    def release(self) -> None:
        held, self.held = self.held, []
        for partition, records, done in held:
            self._finish(partition, records, done)

    def records(self, partition: int) -> list[KeyValue]:
        return [r for batch in self.batches.get(partition, []) for r in batch]


@dataclass
class Box:
    """Catches a callback's result."""

    values: list[Any] = field(default_factory=list)

    def __call__(self, value: Any) -> None:
        self.values.append(value)

    @property
    def done(self) -> bool:
        return bool(self.values)

    @property
    def value(self) -> Any:
        assert len(self.values) == 1, f"expected one answer, got {self.values}"
        return self.values[0]


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


class Harness:
    def __init__(self, **config: Any) -> None:
        settings = {
            "num_partitions": NUM_PARTITIONS,
            "initial_rebalance_delay_ms": 0,
            "min_session_timeout_ms": 10,
        }
        settings.update(config)
        self.config = CoordinatorConfig(**settings)
        self.clock = ManualScheduler()
        self.store = MemoryStore()
        self._ids = iter(range(1, 1_000_000))
        self.coordinator = GroupCoordinator(
            self.config, self.clock, self.store, new_id=lambda: str(next(self._ids))
        )
        for p in range(NUM_PARTITIONS):
            self.coordinator.load_partition(p, [])

    @property
    def c(self) -> GroupCoordinator:
        return self.coordinator

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        protocols: list[tuple[str, bytes]] | None = None,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        instance_id: str | None = None,
        protocol_type: str = "consumer",
        client_id: str = "client",
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = True,
    ) -> Box:
        box = Box()
        self.coordinator.join_group(
            JoinRequest(
                group_id=group,
                member_id=member_id,
                protocol_type=protocol_type,
                protocols=protocols if protocols is not None else [("range", subscription("t"))],
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host="/127.0.0.1",
                require_known_member_id=require_known_member_id,
                supports_skip_assignment=supports_skip_assignment,
            ),
            box,
        )
        return box

    def join_new(self, group: str = "g", **kwargs: Any) -> Box:
        """Join without an id, answer MEMBER_ID_REQUIRED, and join again with the id."""
        first = self.join(group, **kwargs)
        assert first.value.error == ErrorCode.member_id_required
        return self.join(group, member_id=first.value.member_id, **kwargs)

    def sync(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes] | None = None,
        instance_id: str | None = None,
        protocol_name: str | None = None,
    ) -> Box:
        box = Box()
        self.coordinator.sync_group(
            SyncRequest(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                assignments=assignments or {},
                group_instance_id=instance_id,
                protocol_name=protocol_name,
            ),
            box,
        )
        return box

    def stable_group(self, n: int, group: str = "g", **kwargs: Any) -> list[JoinResult]:
        """Bring n members into a Stable group; returns their join results."""
        boxes = [self.join_new(group, **kwargs) for _ in range(n)]
        self.clock.advance(0)
        results = [b.value for b in boxes]
        assert all(r.error == ErrorCode.none for r in results), results
        leader = next(r for r in results if r.member_id == r.leader_id)
        generation = leader.generation_id
        syncs = [
            self.sync(
                group,
                generation,
                r.member_id,
                {m.member_id: m.member_id.encode() for m in results} if r is leader else None,
            )
            for r in results
        ]
        for box in syncs:
            result: SyncResult = box.value
            assert result.error == ErrorCode.none, result
        return results
