"""Partition reassignment (KIP-455) as the controller runs it: pure functions of a
`PartitionInfo` and the brokers' liveness, so every replica of the metadata log that
applies the same command reaches the same answer. Kafka's rules (KRaft's
ReplicationControlManager, PartitionReassignmentReplicas / PartitionReassignmentRevert):

1. A reassignment to `target` records the full replica set, the target replicas followed
   by the old replicas the target leaves out (`removing`), and the target replicas that
   are new (`adding`). The adding replicas take up the partition as followers and catch
   up from the leader like any follower; clients see the full set in Metadata.
2. Once every target replica is in the ISR (the leader's AlterPartition put the last one
   there), the removing replicas leave the replica set and the ISR in the same change. A
   leader that is being removed hands over to the first target replica in the ISR.
3. A change that removes replicas bumps the leader epoch even when the leader stays, so a
   removed replica's late fetches are fenced.

A reassignment that only reorders or shrinks an in-sync set completes at once. A new
reassignment of a partition already being reassigned replaces the old one, computed
from the current full replica set. Cancelling (a null target) drops the adding replicas
and keeps the removing ones, which is an unclean election when only adding replicas are
in the ISR, refused unless the topic allows one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kbroker.controller.errors import (
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    NO_REASSIGNMENT_IN_PROGRESS,
    ControllerError,
)
from kbroker.controller.leadership import Rules, Usable, elect
from kbroker.controller.state import PartitionInfo

Shape = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""(replicas, isr, adding, removing)."""


def reassign(
    p: PartitionInfo,
    target: Sequence[int],
    usable: Usable,
    *,
    unclean: bool | Rules = False,
    allow_replication_factor_change: bool = True,
) -> PartitionInfo:
    """Start (or replace) a reassignment of `p` to `target`, already checked to be a
    valid replica list; completes it at once when the ISR allows."""
    target = tuple(target)
    if not allow_replication_factor_change:
        current = original_replicas(p)
        if len(target) != len(current):
            raise ControllerError(
                INVALID_REPLICATION_FACTOR,
                f"The replication factor is changed from {len(current)} to {len(target)} "
                "but allowReplicationFactorChange is false",
            )
    removing = tuple(sorted(set(p.replicas) - set(target)))
    adding = tuple(sorted(set(target) - set(p.replicas)))
    shape = _completed((target + removing, p.isr, adding, removing))
    return reshape(p, shape, usable, unclean)


def cancel(p: PartitionInfo, usable: Usable, *, unclean: bool | Rules = False) -> PartitionInfo:
    """Revert an ongoing reassignment (AlterPartitionReassignments with null replicas)."""
    if not p.is_reassigning:
        raise ControllerError(
            NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
        )
    replicas = original_replicas(p)
    isr = tuple(r for r in p.isr if r not in p.adding)
    if not isr:
        if not (unclean.unclean if isinstance(unclean, Rules) else unclean):
            raise ControllerError(
                INVALID_REPLICA_ASSIGNMENT,
                f"Unable to revert partition assignment for partition {p.partition} because "
                "it would require an unclean leader election.",
            )
        isr = replicas[:1]
    return reshape(p, (replicas, isr, (), ()), usable, unclean)


def complete_if_ready(
    p: PartitionInfo, usable: Usable, rules: Rules | None = None
) -> PartitionInfo:
    """`p` with its reassignment completed if every target replica is now in the ISR."""
    if not p.is_reassigning:
        return p
    rules = (rules or Rules())._replace(unclean=False)
    return reshape(p, _completed((p.replicas, p.isr, p.adding, p.removing)), usable, rules)


def original_replicas(p: PartitionInfo) -> tuple[int, ...]:
    """The replicas before the ongoing reassignment (the full set without the adding)."""
    return tuple(r for r in p.replicas if r not in p.adding)


def _completed(shape: Shape) -> Shape:
    """Step 2 of the module doc: the shape after completion, or `shape` itself if the
    ISR does not yet hold every target replica."""
    replicas, isr, adding, removing = shape
    if not adding and not removing:
        return shape
    kept_isr = tuple(r for r in isr if r not in removing)
    kept = tuple(r for r in replicas if r not in removing)
    if not kept_isr or not kept or not set(kept) <= set(kept_isr):
        return shape
    return kept, kept_isr, (), ()


def reshape(p: PartitionInfo, shape: Shape, usable: Usable, unclean: bool | Rules) -> PartitionInfo:
    """`p` with a new replica set, reassignment state and ISR, its leader elected again
    if it left the ISR; the partition epoch rises with any change, the leader epoch with
    a new leader or a removed replica. `p` itself when nothing changes."""
    replicas, isr, adding, removing = shape
    shaped = replace(p, replicas=replicas, adding=adding, removing=removing)
    elected = elect(shaped, isr, usable, unclean)
    if elected == p:
        return p
    leader_epoch = elected.leader_epoch
    if leader_epoch == p.leader_epoch and not set(p.replicas) <= set(replicas):
        leader_epoch += 1
    return replace(elected, leader_epoch=leader_epoch, partition_epoch=p.partition_epoch + 1)
