"""Checks on topic names, partition counts and replica assignments, with Kafka's error codes.

These run twice for a state-dependent rule: once on the caller's snapshot, to answer
quickly, and again inside the applied command, where two racing requests are ordered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from kbroker.controller.errors import (
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_ALREADY_EXISTS,
    ControllerError,
)
from kbroker.controller.state import BrokerInfo, MetadataState, collision_key

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """INVALID_TOPIC_EXCEPTION with the message Kafka's controller gives (Topic.validate)."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = (
            f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
        )
    elif not _LEGAL_NAME.fullmatch(name):
        reason = (
            f"'{name}' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    if reason is not None:
        raise ControllerError(INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")


def check_topic_absent(state: MetadataState, name: str) -> None:
    """TOPIC_ALREADY_EXISTS for the same name; INVALID_TOPIC_EXCEPTION for a name that
    differs from an existing one only by '.' versus '_' (they would share metric names)."""
    if name in state.topics:
        raise ControllerError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    holder = state.topic_collisions.get(collision_key(name))
    if holder is not None:
        raise ControllerError(
            INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topic: {holder}",
        )


def check_partition_count(count: int, limit: int) -> None:
    if count <= 0:
        raise ControllerError(
            INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
        )
    if count > limit:
        raise ControllerError(
            INVALID_PARTITIONS, f"Number of partitions {count} exceeds the limit of {limit}."
        )


def check_replication_factor(replication_factor: int, live_brokers: int) -> None:
    if replication_factor <= 0:
        raise ControllerError(
            INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if replication_factor > live_brokers:
        raise ControllerError(
            INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): the target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{live_brokers} broker(s) are registered.",
        )


def check_replica_list(
    replicas: Sequence[int], known_brokers: Mapping[int, object], partition: int
) -> tuple[int, ...]:
    """One partition's replicas given by hand (CreateTopics, CreatePartitions,
    AlterPartitionReassignments): not empty, no broker twice, every broker registered
    (a fenced one counts, as in Kafka: the replica catches up once it is back)."""
    replicas = tuple(replicas)
    if not replicas:
        raise ControllerError(
            INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment for partition {partition} is an empty replica list.",
        )
    if len(set(replicas)) != len(replicas):
        raise ControllerError(
            INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment for partition {partition} names a broker "
            f"more than once: {list(replicas)}.",
        )
    for broker in replicas:
        if broker not in known_brokers:
            raise ControllerError(
                INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered.",
            )
    return replicas


def check_manual_assignment(
    assignments: Mapping[int, Sequence[int]],
    first_partition: int,
    known_brokers: Mapping[int, object],
    replication_factor: int | None = None,
) -> list[tuple[int, ...]]:
    """Validate replicas given by hand for partitions first_partition.. and return them in
    partition order. All partitions must have the same number of replicas (or exactly
    `replication_factor` when adding to a topic whose factor is known)."""
    ids = sorted(assignments)
    expected = list(range(first_partition, first_partition + len(ids)))
    if ids != expected:
        raise ControllerError(
            INVALID_REPLICA_ASSIGNMENT,
            f"Partitions in the manual assignment must be consecutive from {first_partition}; "
            f"got {ids}.",
        )
    result: list[tuple[int, ...]] = []
    for partition in ids:
        replicas = check_replica_list(assignments[partition], known_brokers, partition)
        if replication_factor is None:
            replication_factor = len(replicas)
        elif len(replicas) != replication_factor:
            raise ControllerError(
                INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment for partition {partition} has "
                f"{len(replicas)} replica(s), but other partitions have {replication_factor}.",
            )
        result.append(replicas)
    return result


def initial_isr(
    replicas: Sequence[int], brokers: Mapping[int, BrokerInfo], partition: int
) -> tuple[int, ...]:
    """A new partition's ISR: its replicas on active brokers, in the listed order, the
    first of which leads (Kafka's createTopic and createPartitions). A replica on a fenced
    broker, or one in controlled shutdown, joins once it has caught up, through the
    leader's AlterPartition; a partition none of whose brokers is active is refused."""
    isr = tuple(r for r in replicas if r in brokers and not brokers[r].fenced)
    if not isr:
        raise ControllerError(
            INVALID_REPLICA_ASSIGNMENT,
            f"All brokers specified in the manual partition assignment for partition "
            f"{partition} are fenced or in controlled shutdown.",
        )
    return isr


def round_robin_assignment(
    brokers: Sequence[int], first_partition: int, count: int, replication_factor: int, start: int
) -> list[tuple[int, ...]]:
    """Replicas for `count` new partitions: partition p's leader is the broker after the
    previous partition's leader, its followers the next brokers in id order."""
    n = len(brokers)
    result = []
    for p in range(first_partition, first_partition + count):
        first = (start + p) % n
        result.append(tuple(brokers[(first + j) % n] for j in range(replication_factor)))
    return result


def rack_alternated(brokers: Sequence[int], racks: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered so consecutive ones sit on different racks where possible
    (Kafka's getRackAlternatedBrokerList): rack by rack, the i-th broker of each."""
    by_rack: dict[str | None, list[int]] = {}
    for broker in sorted(brokers):
        by_rack.setdefault(racks.get(broker), []).append(broker)
    ordered_racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    result: list[int] = []
    for i in range(max(len(v) for v in by_rack.values())):
        result.extend(by_rack[r][i] for r in ordered_racks if i < len(by_rack[r]))
    return result


def place_replicas(
    brokers: Sequence[int],
    racks: Mapping[int, str | None],
    first_partition: int,
    count: int,
    replication_factor: int,
    start: int,
) -> list[tuple[int, ...]]:
    """Replicas for new partitions, leaders spread over the brokers in turn. With
    `broker.rack` set on the brokers, each partition's replicas go to as many different
    racks as there are (Kafka's rack-aware assignment): the leader walks a
    rack-alternated broker list, and each follower is the next broker, from a shift
    that grows by one every time the leaders have gone round the list (so followers
    vary when racks hold unequal numbers of brokers), on a rack that holds no replica
    of the partition yet, or once every rack has one, the next broker holding none."""
    if not any(racks.get(b) for b in brokers):
        return round_robin_assignment(brokers, first_partition, count, replication_factor, start)
    ordered = rack_alternated(brokers, racks)
    n = len(ordered)
    rack_count = len({racks.get(b) for b in ordered})
    result = []
    shift = start + first_partition // n
    for p in range(first_partition, first_partition + count):
        if p > first_partition and p % n == 0:
            shift += 1
        first = (start + p) % n
        chosen = [ordered[first]]
        used_racks = {racks.get(ordered[first])}
        k = 0
        while len(chosen) < replication_factor:
            candidate = ordered[(first + 1 + (shift * rack_count + k) % (n - 1)) % n]
            k += 1
            if candidate in chosen:
                continue
            if racks.get(candidate) in used_racks and len(used_racks) < rack_count:
                continue
            chosen.append(candidate)
            used_racks.add(racks.get(candidate))
        result.append(tuple(chosen))
    return result
