"""What the classic and the consumer-protocol group coordinators share, and the
interface through which each reaches the group coordinator hosting both.

Both protocols' groups live in one id space, one set of `__consumer_offsets`
partitions, one store and one clock, all owned by `coordinator.GroupCoordinator`;
`GroupHost` is the part of it they may use, so neither calls into the other's
internals.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kbroker.coordinator.clock import Scheduler
from kbroker.coordinator.group import GroupState
from kbroker.coordinator.persistence import offset_tombstones
from kbroker.coordinator.store import GroupStore, KeyValue
from kbroker.coordinator_runtime.internal_topics import write_error

if TYPE_CHECKING:
    from kbroker.coordinator.group import ClassicGroup, OffsetAndMetadata

R = TypeVar("R")
G = TypeVar("G")
log = logging.getLogger("kbroker.coordinator")

E = ErrorCode
TopicPartition = tuple[str, int]


class GroupHost(Protocol):
    """The group coordinator as the protocol coordinators see it."""

    groups: dict[str, ClassicGroup]  # classic (and simple, offsets-only) groups by id
    store: GroupStore
    scheduler: Scheduler
    owned: set[int]  # partitions of __consumer_offsets loaded here

    def partition_for(self, group_id: str) -> int: ...

    def status(self, group_id: str | None, allow_empty: bool = False) -> ErrorCode | None:
        """None if the id is usable and this node coordinates it, else why not."""
        ...

    def is_consumer_group(self, group_id: str) -> bool:
        """Whether a consumer- or streams-protocol group holds the id."""
        ...

    def is_streams_group(self, group_id: str) -> bool: ...

    def release_consumer_group(
        self, group_id: str
    ) -> dict[TopicPartition, OffsetAndMetadata] | None:
        """An empty consumer-protocol group given up for a classic one: its offsets, or
        None while it has members."""
        ...

    def forget_classic_group(self, group: ClassicGroup) -> None:
        """Drop a classic group (its timers stopped) that a consumer group replaces."""
        ...

    def take_over_classic_group(self, group: ClassicGroup) -> None:
        """Drop a classic group with members that a consumer group replaces: its parked
        JoinGroups and SyncGroups are answered REBALANCE_IN_PROGRESS."""
        ...

    def adopt_downgraded_group(self, group: ClassicGroup, reason: str | None) -> None:
        """Serve a classic group made from a consumer group's classic members: sessions
        start, and (with a `reason`) a rebalance so that every member rejoins."""
        ...


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Kafka's broker settings for groups (group.*, offsets.*), in milliseconds."""

    num_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096
    # KIP-394: how long a member that joined without an id may wait for its join answer.
    new_member_join_timeout_ms: int = 300_000


def group_write_error(code: ErrorCode) -> ErrorCode:
    """How a failed group-metadata write is reported to members (Kafka's mapping): a
    timeout leaves the rebalance to go on."""
    return write_error(code, timed_out=E.rebalance_in_progress)


def invoke(callback: Callable[[R], None], result: R) -> None:
    """Answer a parked request; a failing callback must not break the state machine."""
    try:
        callback(result)
    except Exception:
        log.exception("group callback failed")


def log_write_failure(what: str, code: ErrorCode) -> None:
    if code != E.none:
        log.warning("writing coordinator records (%s) failed: %s", what, code.name)


class _EpochMember(Protocol):
    @property
    def member_epoch(self) -> int: ...


def check_offset_commit(
    members: Mapping[str, _EpochMember], member_id: str, member_epoch: int, transactional: bool
) -> ErrorCode | None:
    """Kafka's check of a commit against a consumer or streams group: from outside the
    group only while it is empty; from a member only at its current epoch."""
    if member_epoch < 0 and not members:
        return None
    member = members.get(member_id)
    if member is None:
        return E.unknown_member_id
    if member_epoch != member.member_epoch:
        # TxnOffsetCommit has no STALE_MEMBER_EPOCH: old clients know this one.
        return E.illegal_generation if transactional else E.stale_member_epoch
    return None


def check_offset_fetch(
    members: Mapping[str, _EpochMember], member_id: str | None, member_epoch: int
) -> ErrorCode | None:
    """Kafka's check of an offset fetch against a consumer or streams group: anyone
    without a member id, else a member at its current epoch."""
    if member_id is None and member_epoch < 0:
        return None
    member = members.get(member_id or "")
    if member is None:
        return E.unknown_member_id
    if member_epoch != member.member_epoch:
        return E.stale_member_epoch
    return None


def drop_offsets(
    group_id: str,
    offsets: MutableMapping[TopicPartition, OffsetAndMetadata],
    gone: list[TopicPartition],
) -> list[KeyValue]:
    """Remove `gone` from a group's committed offsets; their tombstones, to write."""
    for tp in gone:
        del offsets[tp]
    return offset_tombstones(group_id, gone)


class _Stated(Protocol):
    @property
    def state(self) -> enum.Enum: ...


def listed_groups(groups: Mapping[str, _Stated], states: set[str]) -> list[tuple[str, str]]:
    """(group id, state) of the groups ListGroups shows, filtered by lower-case state."""
    out = []
    for group_id, group in groups.items():
        state = group.state.value
        if states and state.lower() not in states:
            continue
        out.append((group_id, state))
    return out


def described_group(
    host: GroupHost, groups: Mapping[str, G], group_id: str, kind: str, held_elsewhere: bool
) -> tuple[ErrorCode, str | None, G | None]:
    """ConsumerGroupDescribe's and StreamsGroupDescribe's lookup: the group, or why not,
    in Kafka's words; `held_elsewhere` is whether a group of the other new protocol
    holds the id (a live classic group is checked here)."""
    status = host.status(group_id)
    if status is not None:
        return status, None, None
    group = groups.get(group_id)
    if group is not None:
        return E.none, None, group
    classic = host.groups.get(group_id)
    if (classic is not None and not classic.is_in(GroupState.DEAD)) or held_elsewhere:
        return E.group_id_not_found, f"Group {group_id} is not a {kind} group.", None
    return E.group_id_not_found, f"Group {group_id} not found.", None
