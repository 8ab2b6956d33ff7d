"""Partition leadership as the controller decides it: elections, ISR changes, epochs.

Pure functions of a `PartitionInfo` and the brokers' liveness, so every replica of the
metadata log that applies the same command reaches the same answer. Kafka's rules
(KRaft's ReplicationControlManager / PartitionChangeBuilder):

- the leader is the first replica, in assignment order, that is in the ISR and usable
  (registered, not fenced, not shutting down, and its replica of the partition not on a
  failed log directory: Kafka's LeaderAcceptor asks that the broker be active and the
  replica's directory online, KIP-858);
- with no such replica the partition is offline (leader -1) unless unclean election is
  enabled, which takes the first usable replica and makes it the whole ISR;
- a broker that goes away leaves the ISR, except the last member, which stays so the
  partition can come back when it does (the "last known ISR");
- the leader epoch rises with every leader change; the partition epoch with every change.

With Eligible Leader Replicas (KIP-966, `Rules.elr`) a broker that goes away leaves the
ISR even as its last member; while the ISR is below min.insync.replicas the replicas
that leave it join the ELR (the high watermark does not move then, so they hold every
record below it), and with no usable ISR member the first usable ELR member leads, as
the whole ISR. An ISR back at min.insync.replicas, or an unclean election, empties the
ELR. The last known ELR holds the leader a partition had when its ISR emptied, as
Kafka's controller keeps it (PartitionChangeBuilder with
useLastKnownLeaderInBalancedRecovery, which it always runs with), until the partition
has a leader again: when the ISR and the ELR are both empty and that broker is usable,
it is elected, uncleanly, as the whole ISR (Kafka's "balanced" recovery), so a topic of
one replica comes back with its broker. A broker that restarted after an unclean
shutdown (its log may have lost acknowledged records) leaves every ELR it was in; a
replica that leaves the replica set (a reassignment) leaves both.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple

from kbroker.controller.errors import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    FENCED_LEADER_EPOCH,
    INELIGIBLE_REPLICA,
    INVALID_REQUEST,
    INVALID_UPDATE_VERSION,
    NOT_CONTROLLER,
    PREFERRED_LEADER_NOT_AVAILABLE,
    ControllerError,
)
from kbroker.controller.state import NO_LEADER, MetadataState, PartitionInfo

Usable = Callable[[int], bool]


class Rules(NamedTuple):
    """What an election of one partition may do: unclean.leader.election.enable and
    min.insync.replicas of its topic, and whether ELRs are kept (the feature's level)."""

    unclean: bool = False
    min_isr: int = 1
    elr: bool = False


def _unique(replicas: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(replicas))


def with_elr(
    before: PartitionInfo,
    after: PartitionInfo,
    rules: Rules,
    unclean: bool,
    unclean_shutdown: Collection[int] = (),
) -> PartitionInfo:
    """`after` with its ELR and last known ELR as KIP-966 keeps them (Kafka's
    PartitionChangeBuilder): the ELR cleared by an ISR at min.insync.replicas or an
    unclean election, else gaining the members that left the ISR, less the replicas of
    brokers that shut down uncleanly (`unclean_shutdown`); the last known ELR as
    `_last_known_leader` says. Neither names a replica no longer assigned."""
    if not rules.elr:
        return after
    if unclean or len(after.isr) >= rules.min_isr:
        elr: tuple[int, ...] = ()
    else:
        isr = set(after.isr)
        assigned = set(after.replicas)
        candidates = [r for r in (*before.elr, *before.isr) if r not in isr and r in assigned]
        elr = _unique(r for r in candidates if r not in unclean_shutdown)
    last_known = _last_known_leader(before, after)
    if (elr, last_known) == (after.elr, after.last_known_elr):
        return after
    epoch = after.partition_epoch if after is not before else before.partition_epoch + 1
    return replace(after, elr=elr, last_known_elr=last_known, partition_epoch=epoch)


def _last_known_leader(before: PartitionInfo, after: PartitionInfo) -> tuple[int, ...]:
    """Kafka's maybeUpdateLastKnownLeader: the leader is remembered the first time the
    ISR empties, kept while the partition has no leader, and forgotten once it has one."""
    if not after.isr and before.isr and before.leader >= 0:
        return (before.leader,)
    if after.leader >= 0:
        return ()
    return tuple(r for r in before.last_known_elr if r in after.replicas)


def _last_known_leader_back(p: PartitionInfo, isr: Sequence[int], usable: Usable) -> int | None:
    """The last known leader, when it may be elected: the ISR and the ELR are empty, it is
    the one member remembered, still a replica, and usable (Kafka's
    canElectLastKnownLeader)."""
    if isr or p.isr or p.elr or len(p.last_known_elr) != 1:
        return None
    leader = p.last_known_elr[0]
    return leader if leader in p.replicas and usable(leader) else None


def usable_in(state: MetadataState, topic_id: uuid.UUID, partition: int) -> Usable:
    """Whether a broker may lead or join the ISR of one partition: registered, not
    fenced, and its replica of the partition not on a log directory that failed. Every
    election and ISR check goes through this, so a replica recorded offline is never
    elected while its broker's incarnation lasts (Kafka: the broker must be active and
    the replica's directory online)."""

    def usable(node: int) -> bool:
        broker = state.brokers.get(node)
        return broker is not None and not broker.replica_offline(topic_id, partition)

    return usable


def change(
    p: PartitionInfo, leader: int, isr: Sequence[int], bump_leader: bool | None = None
) -> PartitionInfo:
    """`p` with a new leader and ISR, its epochs bumped as Kafka bumps them; `p` itself
    when nothing changes."""
    isr = tuple(isr)
    if leader == p.leader and isr == p.isr:
        return p
    leader_changed = leader != p.leader if bump_leader is None else bump_leader
    return replace(
        p,
        leader=leader,
        isr=isr,
        leader_epoch=p.leader_epoch + 1 if leader_changed else p.leader_epoch,
        partition_epoch=p.partition_epoch + 1,
    )


def elect(
    p: PartitionInfo, isr: Sequence[int], usable: Usable, unclean: bool | Rules
) -> PartitionInfo:
    """Keep a usable leader that is in `isr`; otherwise elect one (see module doc)."""
    rules = unclean if isinstance(unclean, Rules) else Rules(unclean=unclean)
    isr = tuple(isr)
    if p.leader in isr and usable(p.leader):
        return with_elr(p, change(p, p.leader, isr), rules, False)
    for replica in p.replicas:
        if replica in isr and usable(replica):
            return with_elr(p, change(p, replica, isr), rules, False)
    if rules.elr:
        for replica in p.replicas:
            if replica in p.elr and usable(replica):
                return with_elr(p, change(p, replica, (replica,)), rules, False)
        last = _last_known_leader_back(p, isr, usable)
        if last is not None:  # an unclean election of the last leader
            return with_elr(p, change(p, last, (last,)), rules, True)
    if rules.unclean:
        for replica in p.replicas:
            if usable(replica):
                return with_elr(p, change(p, replica, (replica,)), rules, True)
    return with_elr(p, change(p, NO_LEADER, isr), rules, False)


def without_broker(
    p: PartitionInfo, node: int, usable: Usable, unclean: bool | Rules
) -> PartitionInfo:
    """`node` was fenced, is shutting down, or its replica's log directory failed: it
    leaves the ISR (unless it is the last member and ELRs are not kept) and gives up
    leadership."""
    if node not in p.replicas:
        return p
    keeps_elr = isinstance(unclean, Rules) and unclean.elr
    isr = tuple(r for r in p.isr if r != node)
    if not keeps_elr:
        isr = isr or p.isr
    return elect(p, isr, lambda r: r != node and usable(r), unclean)


def with_broker_back(
    p: PartitionInfo, node: int, usable: Usable, unclean: bool | Rules
) -> PartitionInfo:
    """`node` is usable again: an offline partition it may lead gets it as leader."""
    if node not in p.replicas or p.has_leader:
        return p
    return elect(p, p.isr, usable, unclean)


def alter_isr(
    p: PartitionInfo,
    *,
    leader: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: Sequence[int],
    usable: Usable,
    rules: Rules | None = None,
) -> PartitionInfo:
    """A leader's AlterPartition, checked as Kafka checks it; the ISR change bumps the
    partition epoch only."""
    if leader_epoch > p.leader_epoch:
        raise ControllerError(
            NOT_CONTROLLER, "the request's leader epoch is newer than the controller's"
        )
    if leader_epoch < p.leader_epoch or leader != p.leader:
        raise ControllerError(
            FENCED_LEADER_EPOCH,
            f"leader {leader} epoch {leader_epoch} is not the current leader "
            f"{p.leader} epoch {p.leader_epoch}",
        )
    if partition_epoch != p.partition_epoch:
        raise ControllerError(
            INVALID_UPDATE_VERSION,
            f"partition epoch {partition_epoch} is not the current {p.partition_epoch}",
        )
    isr = tuple(new_isr)
    if len(set(isr)) != len(isr) or leader not in isr:
        raise ControllerError(INVALID_REQUEST, f"invalid ISR {list(isr)} for leader {leader}")
    strangers = [r for r in isr if r not in p.replicas]
    if strangers:
        raise ControllerError(INVALID_REQUEST, f"ISR names non-replicas {strangers}")
    ineligible = [r for r in isr if r not in p.isr and not usable(r)]
    if ineligible:
        raise ControllerError(
            INELIGIBLE_REPLICA,
            f"replicas {ineligible} are fenced, shutting down or on a failed log directory",
        )
    return with_elr(p, change(p, leader, isr, bump_leader=False), rules or Rules(), False)


PREFERRED = 0
UNCLEAN = 1


def elect_preferred(p: PartitionInfo, usable: Usable) -> PartitionInfo:
    """ElectLeaders(PREFERRED) and the automatic rebalance: the first assigned replica
    takes over when it is in the ISR and usable."""
    preferred = p.replicas[0]
    if p.leader == preferred:
        raise ControllerError(
            ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
        )
    if preferred not in p.isr or not usable(preferred):
        raise ControllerError(
            PREFERRED_LEADER_NOT_AVAILABLE,
            f"Failed to elect leader for partition: preferred replica {preferred} is not "
            "in the ISR or not live",
        )
    return change(p, preferred, p.isr)


def elect_unclean(p: PartitionInfo, usable: Usable, rules: Rules | None = None) -> PartitionInfo:
    """ElectLeaders(UNCLEAN): a partition without a leader takes one from the ISR, else
    (with ELRs kept) from the ELR, a clean election that keeps the rest of the ELR, else
    from any live replica (which then is the whole ISR, and the ELR and last known ELR
    empty), as Kafka's PartitionChangeBuilder elects for Election.UNCLEAN."""
    if p.has_leader:
        raise ControllerError(
            ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
        )
    rules = (rules or Rules())._replace(unclean=True)
    elected = elect(p, p.isr, usable, rules)
    if not elected.has_leader:
        raise ControllerError(
            ELIGIBLE_LEADERS_NOT_AVAILABLE,
            "Failed to elect leader for partition: no live replica",
        )
    clean = elected.leader in p.isr or (rules.elr and elected.leader in p.elr)
    if not clean and (elected.elr or elected.last_known_elr):
        elected = replace(elected, elr=(), last_known_elr=())  # an unclean election empties them
    return elected


def is_imbalanced(p: PartitionInfo, usable: Usable) -> bool:
    """The preferred replica could lead but does not (auto.leader.rebalance.enable)."""
    preferred = p.replicas[0]
    return p.leader != preferred and preferred in p.isr and usable(preferred)
