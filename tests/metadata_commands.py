"""Metadata commands applied without Raft, for tests of the controller's rules: a command
that must succeed, and a cluster of registered brokers holding one topic "t"."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from kbroker.controller import commands as cmd
from kbroker.controller.commands import Applied, apply_command
from kbroker.controller.errors import ControllerError
from kbroker.controller.state import MetadataState, PartitionInfo


def ok(state: MetadataState, kind: str, payload: dict[str, Any]) -> Applied:
    """Apply a command that must succeed."""
    applied = apply_command(state, kind, payload)
    assert not isinstance(applied.outcome, ControllerError), applied.outcome
    return applied


def cluster(
    *assignment: Sequence[int],
    brokers: Iterable[int] = (1, 2, 3),
    configs: dict[str, str] | None = None,
) -> tuple[MetadataState, dict[int, int]]:
    """`brokers` registered (with their broker epochs), one topic "t" with the given
    replica lists."""
    state = MetadataState()
    epochs = {}
    for node in brokers:
        applied = ok(
            state,
            cmd.REGISTER_BROKER,
            {"node_id": node, "host": "h", "port": 9000 + node, "timestamp_ms": 0},
        )
        state, epochs[node] = applied.state, applied.outcome.epoch
    state = ok(
        state,
        cmd.CREATE_TOPIC,
        {
            "name": "t",
            "topic_id": uuid.uuid4().bytes,
            "assignment": [list(r) for r in assignment],
            "configs": configs or {},
        },
    ).state
    return state, epochs


def part(state: MetadataState, index: int = 0) -> PartitionInfo:
    """Partition `index` of topic "t"."""
    return state.topics["t"].partitions[index]
