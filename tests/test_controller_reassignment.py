"""AlterPartitionReassignments as a metadata command (KIP-455, as KRaft runs it): the full
replica set while the move is in flight, completion when the ISR holds every target
replica, the leader handed over when it is removed, cancellation, and Kafka's errors."""

import pytest

from kbroker.controller import commands as cmd
from kbroker.controller.commands import apply_command
from kbroker.controller.errors import (
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    NO_REASSIGNMENT_IN_PROGRESS,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from kbroker.controller.events import PartitionChanged
from kbroker.controller.state import state_from_plain, state_to_plain
from tests import metadata_commands
from tests.metadata_commands import ok, part


def cluster(*assignment, brokers=(1, 2, 3, 4), configs=None):
    """Brokers 1-4 registered, one topic "t" with the given replica lists."""
    return metadata_commands.cluster(*assignment, brokers=brokers, configs=configs)


def reassign(state, *triples, **extra):
    applied = apply_command(
        state,
        cmd.ALTER_PARTITION_REASSIGNMENTS,
        {"partitions": [list(t) for t in triples], **extra},
    )
    assert isinstance(applied.outcome, list), applied.outcome
    return applied


def codes(applied):
    return [code for _, _, code, _ in applied.outcome]


def alter_isr(state, isr, index=0):
    p = part(state, index)
    return ok(
        state,
        cmd.ALTER_PARTITION,
        {
            "topic_id": state.topics["t"].topic_id.bytes,
            "partition": index,
            "leader": p.leader,
            "leader_epoch": p.leader_epoch,
            "partition_epoch": p.partition_epoch,
            "isr": list(isr),
        },
    )


def test_a_reassignment_records_the_full_replica_set_and_what_is_added_and_removed():
    state, _ = cluster([1, 2, 3])
    applied = reassign(state, ("t", 0, [1, 2, 4]))
    p = part(applied.state)
    assert codes(applied) == [0]
    assert (p.replicas, p.adding, p.removing) == ((1, 2, 4, 3), (4,), (3,))
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 2, 3), 0, 1)
    assert PartitionChanged("t", state.topics["t"].topic_id, p) in applied.events


def test_the_reassignment_completes_when_the_isr_holds_every_target_replica():
    state, _ = cluster([1, 2, 3])
    state = reassign(state, ("t", 0, [1, 2, 4])).state
    p = part(alter_isr(state, [1, 2, 3, 4]).state)
    assert (p.replicas, p.isr, p.adding, p.removing) == ((1, 2, 4), (1, 2, 4), (), ())
    # A removed replica is fenced by a new leader epoch even though the leader stays.
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 1, 2)


def test_an_isr_change_that_leaves_a_target_replica_out_does_not_complete_it():
    state, _ = cluster([1, 2, 3])
    state = reassign(state, ("t", 0, [1, 2, 4])).state
    p = part(alter_isr(state, [1, 2]).state)
    assert (p.replicas, p.isr, p.adding, p.removing) == ((1, 2, 4, 3), (1, 2), (4,), (3,))


def test_a_leader_being_removed_hands_over_to_the_first_target_replica_in_sync():
    state, _ = cluster([1, 2, 3])
    state = reassign(state, ("t", 0, [4, 2, 3])).state
    assert part(state).leader == 1  # it leads until the new replica has caught up
    p = part(alter_isr(state, [1, 2, 3, 4]).state)
    assert (p.replicas, p.isr, p.leader) == ((4, 2, 3), (2, 3, 4), 4)
    assert p.leader_epoch == 1


def test_reordering_or_shrinking_an_in_sync_set_completes_at_once():
    state, _ = cluster([1, 2, 3])
    p = part(reassign(state, ("t", 0, [3, 2])).state)
    assert (p.replicas, p.isr, p.adding, p.removing, p.leader) == ((3, 2), (2, 3), (), (), 3)
    assert p.leader_epoch == 1


def test_the_same_replicas_again_change_nothing():
    state, _ = cluster([1, 2, 3])
    applied = reassign(state, ("t", 0, [1, 2, 3]))
    assert codes(applied) == [0]
    assert applied.events == ()
    assert part(applied.state) == part(state)


def test_a_new_target_replaces_the_reassignment_in_flight():
    state, _ = cluster([1, 2, 3])
    state = reassign(state, ("t", 0, [1, 2, 4])).state
    p = part(reassign(state, ("t", 0, [1, 3, 4])).state)
    assert (p.replicas, p.adding, p.removing) == ((1, 3, 4, 2), (), (2,))


def test_cancelling_drops_the_adding_replicas_and_keeps_the_removing_ones():
    state, _ = cluster([1, 2, 3])
    state = reassign(state, ("t", 0, [1, 2, 4])).state
    applied = reassign(state, ("t", 0, None))
    p = part(applied.state)
    assert codes(applied) == [0]
    assert (p.replicas, p.isr, p.adding, p.removing, p.leader) == ((1, 2, 3), (1, 2, 3), (), (), 1)


def test_cancelling_where_nothing_is_in_flight_is_no_reassignment_in_progress():
    state, _ = cluster([1, 2, 3])
    applied = reassign(state, ("t", 0, None))
    assert codes(applied) == [NO_REASSIGNMENT_IN_PROGRESS]
    assert applied.state is state


def only_adding_replicas_in_sync(configs=None):
    """[1, 2] moving to [3, 4]; 3 caught up, then 1 and 2 fenced: the ISR is (3,)."""
    state, epochs = cluster([1, 2], configs=configs)
    state = reassign(state, ("t", 0, [3, 4])).state
    state = alter_isr(state, [1, 2, 3]).state
    for node in (1, 2):
        state = ok(state, cmd.FENCE_BROKER, {"node_id": node, "epoch": epochs[node]}).state
    assert (part(state).isr, part(state).leader) == ((3,), 3)
    return state


def test_a_cancellation_needing_an_unclean_election_is_invalid_replica_assignment():
    state = only_adding_replicas_in_sync()
    applied = reassign(state, ("t", 0, None))
    assert codes(applied) == [INVALID_REPLICA_ASSIGNMENT]
    assert applied.state is state


def test_a_cancellation_needing_an_unclean_election_goes_ahead_where_the_topic_allows_it():
    state = only_adding_replicas_in_sync({"unclean.leader.election.enable": "true"})
    p = part(reassign(state, ("t", 0, None)).state)
    assert (p.replicas, p.isr, p.adding, p.removing) == ((1, 2), (1,), (), ())


@pytest.mark.parametrize(
    ("target", "code"),
    [
        ([], INVALID_REPLICA_ASSIGNMENT),
        ([1, 1, 2], INVALID_REPLICA_ASSIGNMENT),
        ([1, 2, 9], INVALID_REPLICA_ASSIGNMENT),
    ],
    ids=["empty", "duplicate", "unregistered"],
)
def test_an_invalid_target_is_invalid_replica_assignment(target, code):
    state, _ = cluster([1, 2, 3])
    applied = reassign(state, ("t", 0, target))
    assert codes(applied) == [code]
    assert applied.state is state


def test_a_fenced_but_registered_broker_may_be_a_target_as_in_kafka():
    state, epochs = cluster([1, 2, 3])
    state = ok(state, cmd.FENCE_BROKER, {"node_id": 4, "epoch": epochs[4]}).state
    p = part(reassign(state, ("t", 0, [1, 2, 4])).state)
    assert p.adding == (4,)


def test_unknown_topics_and_partitions_are_unknown_topic_or_partition():
    state, _ = cluster([1, 2, 3])
    applied = reassign(state, ("nope", 0, [1]), ("t", 5, [1]), ("t", 0, [1, 2, 4]))
    assert codes(applied) == [UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION, 0]


def test_a_replication_factor_change_is_refused_when_the_request_forbids_it():
    state, _ = cluster([1, 2, 3])
    applied = reassign(state, ("t", 0, [1, 2]), allow_replication_factor_change=False)
    assert codes(applied) == [INVALID_REPLICATION_FACTOR]
    applied = reassign(state, ("t", 0, [1, 2, 4]), allow_replication_factor_change=False)
    assert codes(applied) == [0]


def test_a_reassignment_in_flight_survives_a_snapshot():
    state, _ = cluster([1, 2, 3])
    state = reassign(state, ("t", 0, [1, 2, 4])).state
    assert state_from_plain(state_to_plain(state)) == state


def test_a_snapshot_from_before_reassignments_loads():
    state, _ = cluster([1, 2, 3])
    plain = state_to_plain(state)
    for topic in plain["topics"]:
        topic["partitions"] = [p[:6] for p in topic["partitions"]]
    assert state_from_plain(plain) == state
