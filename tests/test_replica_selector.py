"""KIP-392's replica selection: which replica a leader sends a consumer in a rack to."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.protocol.batch import encode_batch
from kbroker.replica.delayed import DataWaiters
from kbroker.replica.partition import Partition
from kbroker.replica.selector import (
    LEADER_SELECTOR,
    RACK_AWARE_SELECTOR,
    ReplicaView,
    preferred_read_replica,
    rack_aware_choice,
)
from kbroker.storage import LogConfig, PartitionLog

NOW = 1_700_000_000_000
RACKS = {1: "east", 2: "west", 3: "north"}


def view(broker_id: int, rack: str, end: int = 10, since: int = 0) -> ReplicaView:
    return ReplicaView(broker_id, rack, end, since)


def test_the_leader_in_the_clients_rack_is_kept():
    leader = view(1, "east")
    assert rack_aware_choice("east", leader, [view(2, "east")]) is leader


def test_a_follower_in_the_clients_rack_is_chosen_over_a_leader_elsewhere():
    assert rack_aware_choice("west", view(1, "east"), [view(2, "west"), view(3, "north")]) == view(
        2, "west"
    )


def test_the_most_caught_up_follower_of_the_rack_wins():
    followers = [view(2, "west", end=8), view(3, "west", end=10, since=50), view(4, "west", 10, 5)]
    assert rack_aware_choice("west", view(1, "east"), followers).broker_id == 4


def test_no_replica_in_the_clients_rack_keeps_the_leader():
    leader = view(1, "east")
    assert rack_aware_choice("south", leader, [view(2, "west")]) is leader


@pytest.fixture
def leader(tmp_path: Path) -> Partition:
    """Broker 1 (rack east) leads with followers 2 (west) and 3 (north) in its ISR, both
    having fetched up to offset 5."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), NOW)
    partition = Partition("t", 0, plog, 1, DataWaiters())
    partition.become_leader(1, 0, (1, 2, 3), (1, 2, 3), NOW)
    partition.append_as_leader(encode_batch([b"x"] * 5, NOW), NOW, required_acks=1)
    for follower in (2, 3):
        partition.record_follower_fetch(follower, 5, NOW)
    return partition


def choose(partition: Partition, rack: str, offset: int = 5, selector=RACK_AWARE_SELECTOR, **racks):
    known = {**RACKS, **{int(k[1:]): v for k, v in racks.items()}}
    return preferred_read_replica(selector, partition, rack, offset, lambda b: known.get(b), NOW)


def test_a_leader_sends_a_consumer_to_the_in_sync_follower_of_its_rack(leader):
    assert choose(leader, "west") == 2
    assert choose(leader, "north") == 3
    assert choose(leader, "east") is None  # the leader's own rack: read here


def test_the_leader_selector_and_a_rackless_client_stay_on_the_leader(leader):
    assert choose(leader, "west", selector=LEADER_SELECTOR) is None
    assert choose(leader, "west", selector=None) is None
    assert choose(leader, "") is None


def test_a_follower_out_of_the_isr_or_short_of_the_fetch_offset_is_not_chosen(leader):
    assert choose(leader, "west", offset=6) is None  # follower 2 holds offsets below 5 only
    leader.update_isr((1, 3), 1)
    assert choose(leader, "west") is None


def test_a_fenced_follower_is_not_chosen(leader):
    assert choose(leader, "west", b2=None) is None
