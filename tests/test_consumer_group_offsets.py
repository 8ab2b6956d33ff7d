"""Consumer-protocol groups in the APIs both group kinds answer: offsets, ListGroups,
DeleteGroups, expiry, and the shared id namespace with classic groups."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode as E
from test_consumer_group_harness import ConsumerHarness, settle
from test_group_harness import Box

from kbroker.coordinator import CoordinatorConfig, GroupCoordinator, OffsetAndMetadata
from kbroker.coordinator.consumer_records import is_consumer_record


@pytest.fixture
def h() -> ConsumerHarness:
    harness = ConsumerHarness()
    harness.create_topic("t", 2)
    return harness


def commit(h: ConsumerHarness, member_id: str, epoch: int, offset: int = 5, group: str = "g"):
    box = Box()
    h.c.commit_offsets(group, member_id, epoch, {("t", 0): OffsetAndMetadata(offset)}, box)
    return box.value[("t", 0)]


def test_member_commits_at_its_current_epoch(h):
    a = h.member()
    settle([a], rounds=2)
    assert commit(h, a.member_id, a.epoch) == E.none
    assert h.group().offsets[("t", 0)].offset == 5


def test_commit_at_an_old_epoch_is_stale_for_a_partition_got_since(h):
    a = h.member()
    settle([a], rounds=2)
    assert commit(h, a.member_id, a.epoch - 1) == E.stale_member_epoch
    assert commit(h, a.member_id, a.epoch + 1) == E.stale_member_epoch


def test_commit_at_an_old_epoch_stands_for_a_partition_held_since_then(h):
    """KIP-1251: a heartbeat moved the member's epoch while its commit, made at the
    epoch before, was on its way: the commit stands for the partitions it held then."""
    a = h.member()
    settle([a], rounds=2)
    first = a.epoch
    h.grow_topic("t", 4)  # new partitions: a new epoch, t-2 and t-3 assigned at it
    settle([a], rounds=2)
    assert a.epoch > first
    assert commit(h, a.member_id, first) == E.none  # t-0, held since the first epoch
    # t-3 came at the new epoch: as on Kafka 4.3, it fails the whole request.
    box = Box()
    both = {("t", 0): OffsetAndMetadata(7), ("t", 3): OffsetAndMetadata(1)}
    h.c.commit_offsets("g", a.member_id, first, both, box)
    assert box.value == {("t", 0): E.stale_member_epoch, ("t", 3): E.stale_member_epoch}
    assert h.group().offsets[("t", 0)].offset == 5 and ("t", 3) not in h.group().offsets


def test_assignment_epochs_survive_a_reload(h):
    a = h.member()
    settle([a], rounds=2)
    h.grow_topic("t", 4)
    settle([a], rounds=2)
    before = h.group().members[a.member_id]
    partition = h.c.partition_for("g")
    fresh = GroupCoordinator(h.config, h.clock, h.store)
    fresh.consumer.metadata = lambda: h.state
    fresh.load_partition(partition, h.store.records(partition))
    after = fresh.consumer.groups["g"].members[a.member_id]
    assert after.assignment_epochs == before.assignment_epochs != {}


def test_commit_from_an_unknown_member_is_refused(h):
    settle([h.member()], rounds=2)
    assert commit(h, "ghost", 1) == E.unknown_member_id


def test_commit_from_outside_the_group_only_while_it_is_empty(h):
    a = h.member()
    settle([a], rounds=2)
    assert commit(h, "", -1) == E.unknown_member_id
    a.leave()
    assert commit(h, "", -1) == E.none


def test_offset_fetch_checks_a_named_member_and_its_epoch(h):
    a = h.member()
    settle([a], rounds=2)
    commit(h, a.member_id, a.epoch)
    error, offsets = h.c.fetch_offsets("g", [("t", 0)], a.member_id, a.epoch)
    assert error == E.none
    assert offsets[("t", 0)].offset == 5
    assert h.c.fetch_offsets("g", None, a.member_id, a.epoch + 1)[0] == E.stale_member_epoch
    assert h.c.fetch_offsets("g", None, "ghost", 1)[0] == E.unknown_member_id
    assert h.c.fetch_offsets("g", None)[0] == E.none  # admin tools name no member


def test_transactional_commit_at_a_stale_epoch_is_illegal_generation(h):
    a = h.member()
    settle([a], rounds=2)
    assert h.c.validate_txn_offset_commit("g", a.member_id, a.epoch, None) == E.none
    assert h.c.validate_txn_offset_commit("g", a.member_id, 99, None) == E.illegal_generation


def test_offsets_of_subscribed_topics_cannot_be_deleted(h):
    a = h.member()
    settle([a], rounds=2)
    commit(h, a.member_id, a.epoch)
    box = Box()
    h.c.delete_offsets("g", [("t", 0), ("other", 0)], box)
    error, results = box.value
    assert error == E.none
    assert results[("t", 0)] == E.group_subscribed_to_topic
    assert results[("other", 0)] == E.none


def test_list_groups_shows_consumer_groups_by_type_and_state(h):
    settle([h.member()], rounds=2)
    h.stable_group(1, group="classic-g")
    _, listed = h.c.list_groups()
    by_id = {g.group_id: g for g in listed}
    assert by_id["g"].group_type == "consumer"
    assert by_id["g"].protocol_type == "consumer"
    assert by_id["g"].state == "Stable"
    assert by_id["classic-g"].group_type == "classic"
    assert [g.group_id for g in h.c.list_groups(types=["classic"])[1]] == ["classic-g"]
    assert [g.group_id for g in h.c.list_groups(types=["consumer"])[1]] == ["g"]
    assert [g.group_id for g in h.c.list_groups(states=["empty"])[1]] == []


def test_delete_groups_refuses_a_live_group_and_deletes_an_empty_one(h):
    a = h.member()
    settle([a], rounds=2)
    commit(h, a.member_id, a.epoch)
    box = Box()
    h.c.delete_groups(["g"], box)
    assert box.value == {"g": E.non_empty_group}
    a.leave()
    box = Box()
    h.c.delete_groups(["g"], box)
    assert box.value == {"g": E.none}
    assert "g" not in h.cc.groups
    last = h.store.batches[h.c.partition_for("g")][-1]
    assert all(value is None for _, value in last)
    assert any(not is_consumer_record(key) for key, _ in last)  # the offsets went too


def test_consumer_heartbeat_adopts_an_offsets_only_group_and_its_offsets(h):
    assert commit(h, "", -1, offset=9, group="simple") == E.none
    assert h.heartbeat(group_id="simple", member_id="m").error == E.none
    assert "simple" not in h.c.groups
    assert h.cc.groups["simple"].offsets[("t", 0)].offset == 9


def test_classic_join_to_an_empty_consumer_group_takes_it_over(h):
    a = h.member()
    settle([a], rounds=2)
    commit(h, a.member_id, a.epoch, offset=3)
    a.leave()
    assert h.join("g").value.error == E.member_id_required
    assert "g" not in h.cc.groups
    assert h.c.groups["g"].offsets[("t", 0)].offset == 3


def test_expiry_spares_subscribed_topics_and_deletes_empty_groups(h):
    a = h.member()
    settle([a], rounds=2)
    commit(h, a.member_id, a.epoch)
    h.c.config = replace(h.c.config, offsets_retention_ms=3_000)
    settle([a], rounds=5)  # past retention, the member heartbeating all along
    assert h.c.expire_offsets() == 0
    a.leave()
    assert h.c.expire_offsets() == 1
    assert "g" not in h.cc.groups


def test_reloaded_consumer_group_keeps_its_offsets(h):
    a = h.member()
    settle([a], rounds=2)
    commit(h, a.member_id, a.epoch, offset=11)
    partition = h.c.partition_for("g")
    fresh = GroupCoordinator(CoordinatorConfig(num_partitions=4), h.clock, h.store)
    fresh.consumer.metadata = lambda: h.state
    fresh.load_partition(partition, h.store.records(partition))
    assert "g" not in fresh.groups
    assert fresh.consumer.groups["g"].offsets[("t", 0)].offset == 11
