"""The leader's per-replica progress behind DescribeQuorum (kbroker.controller.quorum)."""

from kbroker.controller.quorum import (
    OBSERVER_SESSION_TIMEOUT_MS,
    QuorumDescription,
    ReplicaState,
    ReplicaTracker,
)

VOTERS = {1: "127.0.0.1:9101", 2: "127.0.0.1:9102", 3: "[::1]:9103"}


def voter(description: QuorumDescription, replica_id: int) -> ReplicaState:
    return next(v for v in description.voters if v.replica_id == replica_id)


def test_a_voter_not_heard_from_in_this_term_is_unknown_and_the_leader_is_current():
    tracker = ReplicaTracker(1, VOTERS)
    described = tracker.describe(epoch=4, high_watermark=10, leader_end=12, now_ms=5000)
    assert (described.leader_id, described.leader_epoch, described.high_watermark) == (1, 4, 10)
    assert voter(described, 1) == ReplicaState(1, 12, 5000, 5000)
    assert voter(described, 2) == ReplicaState(2, -1, -1, -1)
    assert [(e.node_id, e.host, e.port) for e in described.endpoints] == [
        (1, "127.0.0.1", 9101),
        (2, "127.0.0.1", 9102),
        (3, "::1", 9103),
    ]


def test_a_replica_is_caught_up_when_it_holds_the_leaders_end_at_its_answer():
    tracker = ReplicaTracker(1, VOTERS)
    tracker.on_response(4, 2, match_index=12, leader_end=12, now_ms=1000)
    tracker.on_response(4, 2, match_index=13, leader_end=15, now_ms=2000)
    state = voter(tracker.describe(4, 13, 15, 2500), 2)
    # At 2000 it lagged the leader's 15 but held the 12 the leader had at 1000.
    assert state == ReplicaState(2, 13, 2000, 1000)


def test_a_replica_that_never_reaches_the_leaders_earlier_end_keeps_its_old_catch_up_time():
    tracker = ReplicaTracker(1, VOTERS)
    tracker.on_response(4, 2, match_index=20, leader_end=20, now_ms=1000)
    tracker.on_response(4, 2, match_index=21, leader_end=30, now_ms=2000)
    tracker.on_response(4, 2, match_index=25, leader_end=40, now_ms=3000)
    assert voter(tracker.describe(4, 25, 40, 3000), 2) == ReplicaState(2, 25, 3000, 1000)


def test_an_answer_that_acknowledges_nothing_counts_as_contact_only():
    tracker = ReplicaTracker(1, VOTERS)
    tracker.on_response(4, 3, match_index=None, leader_end=9, now_ms=700)
    assert voter(tracker.describe(4, 9, 9, 800), 3) == ReplicaState(3, -1, 700, -1)


def test_a_new_term_forgets_what_the_previous_leadership_knew():
    tracker = ReplicaTracker(1, VOTERS)
    tracker.on_response(4, 2, match_index=12, leader_end=12, now_ms=1000)
    tracker.on_response(5, 3, match_index=14, leader_end=14, now_ms=2000)
    described = tracker.describe(5, 14, 14, 2100)
    assert voter(described, 2) == ReplicaState(2, -1, -1, -1)
    assert voter(described, 3) == ReplicaState(3, 14, 2000, 2000)


def test_observers_are_the_non_voters_heard_from_within_the_session_timeout():
    tracker = ReplicaTracker(1, VOTERS)
    tracker.on_response(4, 7, match_index=5, leader_end=5, now_ms=1000)
    tracker.on_response(4, 5, match_index=5, leader_end=5, now_ms=2000)
    now = 1000 + OBSERVER_SESSION_TIMEOUT_MS
    assert [o.replica_id for o in tracker.describe(4, 5, 5, now).observers] == [5]


def test_a_description_survives_the_raft_message_that_carries_it():
    tracker = ReplicaTracker(1, VOTERS)
    tracker.on_response(4, 2, match_index=12, leader_end=12, now_ms=1000)
    tracker.on_response(4, 9, match_index=11, leader_end=12, now_ms=1100)
    described = tracker.describe(4, 12, 12, 1200)
    assert QuorumDescription.from_wire(described.to_wire()) == described
