"""Committed offsets: OffsetCommit/Fetch/Delete rules, DeleteGroups, expiry."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E
from test_group_harness import Box, Harness, subscription

from kbroker.coordinator import GroupState, LeavingMember, OffsetAndMetadata

TP = ("t", 0)
DAY_MS = 24 * 3600 * 1000


def commit(
    h: Harness,
    group: str = "g",
    member_id: str = "",
    generation: int = -1,
    offsets: dict | None = None,
    instance_id: str | None = None,
    unknown_group_error: E = E.illegal_generation,
) -> dict:
    box = Box()
    h.c.commit_offsets(
        group,
        member_id,
        generation,
        offsets if offsets is not None else {TP: OffsetAndMetadata(42, 3, "meta", 0)},
        box,
        instance_id=instance_id,
        unknown_group_error=unknown_group_error,
    )
    return box.value


def fetch(h: Harness, group: str = "g", partitions: list | None = None):
    return h.c.fetch_offsets(group, partitions if partitions is not None else [TP])


def test_member_commit_is_fetched_back_with_epoch_and_metadata():
    h = Harness()
    (r,) = h.stable_group(1)
    assert commit(h, member_id=r.member_id, generation=r.generation_id) == {TP: E.none}
    error, offsets = fetch(h)
    assert error == E.none
    assert (offsets[TP].offset, offsets[TP].leader_epoch, offsets[TP].metadata) == (42, 3, "meta")


def test_fetch_of_uncommitted_partition_gives_none():
    h = Harness()
    assert fetch(h, "nobody") == (E.none, {TP: None})


def test_fetch_all_returns_every_committed_partition():
    h = Harness()
    commit(h, offsets={("a", 0): OffsetAndMetadata(1), ("b", 2): OffsetAndMetadata(5)})
    _, offsets = h.c.fetch_offsets("g", None)
    assert {tp: v.offset for tp, v in offsets.items()} == {("a", 0): 1, ("b", 2): 5}


def test_commit_with_old_generation_is_illegal():
    h = Harness()
    (r,) = h.stable_group(1)
    result = commit(h, member_id=r.member_id, generation=r.generation_id - 1)
    assert result == {TP: E.illegal_generation}
    assert fetch(h)[1][TP] is None


def test_commit_from_unknown_member_is_refused():
    h = Harness()
    (r,) = h.stable_group(1)
    assert commit(h, member_id="ghost", generation=r.generation_id) == {TP: E.unknown_member_id}


def test_simple_commit_creates_an_empty_group():
    h = Harness()
    assert commit(h) == {TP: E.none}
    group = h.c.groups["g"]
    assert group.state == GroupState.EMPTY
    assert group.protocol_type is None


def test_simple_commit_into_a_live_group_is_refused():
    h = Harness()
    h.stable_group(1)
    assert commit(h) == {TP: E.unknown_member_id}


def test_simple_commit_into_an_emptied_consumer_group_is_accepted():
    h = Harness()
    (r,) = h.stable_group(1)
    h.c.classic.leave_group("g", [LeavingMember(r.member_id)])
    assert commit(h) == {TP: E.none}


def test_member_commit_to_missing_group_gets_the_versions_error():
    h = Harness()
    assert commit(h, member_id="m", generation=3) == {TP: E.illegal_generation}
    result = commit(h, member_id="m", generation=3, unknown_group_error=E.group_id_not_found)
    assert result == {TP: E.group_id_not_found}


def test_commit_between_join_and_sync_is_rebalance_in_progress():
    h = Harness()
    box = h.join_new()
    h.clock.advance(0)
    r = box.value
    assert commit(h, member_id=r.member_id, generation=r.generation_id) == {
        TP: E.rebalance_in_progress
    }


def test_commit_while_preparing_rebalance_is_accepted():
    h = Harness()
    a, b = h.stable_group(2)
    h.join(member_id=a.member_id)
    assert h.c.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert commit(h, member_id=b.member_id, generation=b.generation_id) == {TP: E.none}


def test_commit_with_oversized_metadata_is_refused_per_partition():
    h = Harness(offset_metadata_max_bytes=10)
    result = commit(
        h,
        offsets={("t", 0): OffsetAndMetadata(1, metadata="x" * 11), ("t", 1): OffsetAndMetadata(2)},
    )
    assert result == {("t", 0): E.offset_metadata_too_large, ("t", 1): E.none}


def test_commit_is_answered_after_the_write_and_only_then_visible():
    h = Harness()
    h.store.hold = True
    box = Box()
    h.c.commit_offsets("g", "", -1, {TP: OffsetAndMetadata(7)}, box)
    assert not box.done
    assert fetch(h)[1][TP] is None
    h.store.release()
    assert box.value == {TP: E.none}
    assert fetch(h)[1][TP].offset == 7


def test_failed_offset_write_maps_to_kafkas_commit_errors():
    h = Harness()
    h.store.fail_with = E.message_too_large
    assert commit(h) == {TP: E.invalid_commit_offset_size}
    h.store.fail_with = E.not_leader_or_follower
    assert commit(h) == {TP: E.not_coordinator}


def test_commit_to_a_group_not_led_here_is_not_coordinator():
    h = Harness()
    h.c.unload_partition(h.c.partition_for("g"))
    assert commit(h) == {TP: E.not_coordinator}
    assert fetch(h)[0] == E.not_coordinator


# -- DeleteGroups / OffsetDelete -------------------------------------------------------------


def test_delete_of_an_empty_group_writes_tombstones_and_forgets_it():
    h = Harness()
    commit(h)
    box = Box()
    h.c.delete_groups(["g"], box)
    assert box.value == {"g": E.none}
    assert "g" not in h.c.groups
    written = h.store.records(h.c.partition_for("g"))
    assert [v for _, v in written[-2:]] == [None, None]
    assert fetch(h)[1][TP] is None


def test_delete_of_a_live_group_is_refused():
    h = Harness()
    h.stable_group(1)
    box = Box()
    h.c.delete_groups(["g", "missing"], box)
    assert box.value == {"g": E.non_empty_group, "missing": E.group_id_not_found}


def test_offset_delete_refuses_topics_the_group_consumes():
    h = Harness()
    (r,) = h.stable_group(1, protocols=[("range", subscription("t"))])
    commit(
        h,
        member_id=r.member_id,
        generation=r.generation_id,
        offsets={("t", 0): OffsetAndMetadata(1), ("old", 0): OffsetAndMetadata(2)},
    )
    box = Box()
    h.c.delete_offsets("g", [("t", 0), ("old", 0)], box)
    error, results = box.value
    assert error == E.none
    assert results == {("t", 0): E.group_subscribed_to_topic, ("old", 0): E.none}
    _, offsets = h.c.fetch_offsets("g", None)
    assert set(offsets) == {("t", 0)}


def test_offset_delete_of_missing_group_is_group_id_not_found():
    h = Harness()
    box = Box()
    h.c.delete_offsets("nope", [TP], box)
    assert box.value == (E.group_id_not_found, {})


def test_offset_delete_on_a_live_non_consumer_group_is_non_empty_group():
    h = Harness()
    h.stable_group(1, protocol_type="connect")
    box = Box()
    h.c.delete_offsets("g", [TP], box)
    assert box.value[0] == E.non_empty_group


# -- listing and describing ------------------------------------------------------------------


def test_list_groups_filters_by_state_case_insensitively():
    h = Harness()
    h.stable_group(1, group="live")
    commit(h, group="idle")
    error, groups = h.c.list_groups(states=["stable"])
    assert error == E.none
    assert [(g.group_id, g.state, g.protocol_type) for g in groups] == [
        ("live", "Stable", "consumer")
    ]
    _, everything = h.c.list_groups()
    assert {g.group_id for g in everything} == {"live", "idle"}
    assert h.c.list_groups(types=["consumer"])[1] == []
    assert len(h.c.list_groups(types=["Classic"])[1]) == 2


def test_describe_missing_group_is_group_id_not_found():
    h = Harness()
    assert h.c.describe_group("nope") == (E.group_id_not_found, None)


# -- expiry ----------------------------------------------------------------------------------


def test_offsets_of_an_empty_consumer_group_expire_from_when_it_emptied():
    h = Harness(offsets_retention_ms=DAY_MS, max_session_timeout_ms=10 * DAY_MS)
    (r,) = h.stable_group(1, session_ms=2 * DAY_MS)
    commit(h, member_id=r.member_id, generation=r.generation_id)
    h.clock.advance(DAY_MS)  # the commit is old, but the group is still live
    h.c.classic.heartbeat("g", r.member_id, r.generation_id)
    assert h.c.expire_offsets() == 0
    h.c.classic.leave_group("g", [LeavingMember(r.member_id)])
    h.clock.advance(DAY_MS - 1)
    assert h.c.expire_offsets() == 0
    h.clock.advance(1)
    assert h.c.expire_offsets() == 1
    assert "g" not in h.c.groups


def test_simple_group_offsets_expire_by_commit_time():
    h = Harness(offsets_retention_ms=DAY_MS)
    commit(h, offsets={("t", 0): OffsetAndMetadata(1)})
    h.clock.advance(DAY_MS // 2)
    commit(h, offsets={("t", 1): OffsetAndMetadata(1)})
    h.clock.advance(DAY_MS // 2)
    assert h.c.expire_offsets() == 1
    assert set(h.c.groups["g"].offsets) == {("t", 1)}


def test_stable_group_keeps_offsets_of_subscribed_topics_only():
    h = Harness(offsets_retention_ms=DAY_MS, max_session_timeout_ms=10 * DAY_MS)
    (r,) = h.stable_group(1, session_ms=10 * DAY_MS, protocols=[("range", subscription("t"))])
    commit(
        h,
        member_id=r.member_id,
        generation=r.generation_id,
        offsets={("t", 0): OffsetAndMetadata(1), ("gone", 0): OffsetAndMetadata(1)},
    )
    h.clock.advance(DAY_MS)
    assert h.c.expire_offsets() == 1
    assert set(h.c.groups["g"].offsets) == {("t", 0)}


def test_empty_group_without_offsets_is_removed_by_expiry():
    h = Harness()
    (r,) = h.stable_group(1)
    h.c.classic.leave_group("g", [LeavingMember(r.member_id)])
    h.c.expire_offsets()
    assert "g" not in h.c.groups


def test_commit_with_retention_time_expires_at_that_time():
    h = Harness(offsets_retention_ms=DAY_MS)
    box = Box()
    h.c.commit_offsets("g", "", -1, {TP: OffsetAndMetadata(1)}, box, retention_ms=1000)
    h.clock.advance(999)
    assert h.c.expire_offsets() == 0
    h.clock.advance(1)
    assert h.c.expire_offsets() == 1


def test_an_offset_expires_at_its_explicit_expiry_else_retention_after_its_base():
    aged = OffsetAndMetadata(1, commit_timestamp_ms=1000)
    assert not aged.expired(1999, retention_ms=1000)
    assert aged.expired(2000, retention_ms=1000)
    # An Empty classic group ages its offsets from when it emptied, not from the commit.
    assert not aged.expired(2000, retention_ms=1000, since_ms=1500)
    assert aged.expired(2500, retention_ms=1000, since_ms=1500)
    # OffsetCommit v2-v4's retention time: that expiry, whatever the retention setting.
    explicit = OffsetAndMetadata(1, commit_timestamp_ms=1000, expire_timestamp_ms=1200)
    assert explicit.expired(1200, retention_ms=10**9)
    assert not explicit.expired(1199, retention_ms=0)


# -- hooks for the transaction coordinator ---------------------------------------------------


def test_txn_commit_validation_allows_a_rebalancing_member():
    h = Harness()
    box = h.join_new()
    h.clock.advance(0)
    r = box.value  # CompletingRebalance: a plain commit would be refused
    assert h.c.validate_txn_offset_commit("g", r.member_id, r.generation_id, None) == E.none
    assert (
        h.c.validate_txn_offset_commit("g", r.member_id, r.generation_id + 1, None)
        == E.illegal_generation
    )


def test_txn_commit_validation_creates_a_simple_group_for_no_member():
    h = Harness()
    assert h.c.validate_txn_offset_commit("new", "", -1, None) == E.none
    assert h.c.groups["new"].state == GroupState.EMPTY
    assert h.c.validate_txn_offset_commit("other", "m", 2, None) == E.illegal_generation


def test_applied_offsets_become_visible():
    h = Harness()
    h.c.apply_committed_offsets("g", {TP: OffsetAndMetadata(11)})
    assert fetch(h)[1][TP].offset == 11


def test_load_listeners_hear_of_each_loaded_partition():
    h = Harness()
    heard: list[int] = []
    h.c.load_listeners.append(heard.append)
    h.c.unload_partition(2)
    h.c.begin_loading(2)
    h.c.load_partition(2, [])
    assert heard == [2]


def test_pending_offset_check_is_consulted():
    h = Harness()
    assert not h.c.has_pending_offset("g", TP)
    h.c.pending_offset_check = lambda group, tp: (group, tp) == ("g", TP)
    assert h.c.has_pending_offset("g", TP)
    assert not h.c.has_pending_offset("g", ("t", 1))


def test_commit_time_given_by_offset_commit_v1_is_stored_and_expires_the_offset():
    # Kafka 3.9 stores OffsetCommit v1's commit timestamp; without an explicit expiry
    # the offset expires offsets.retention.minutes after it.
    h = Harness(offsets_retention_ms=DAY_MS)
    box = Box()
    given = h.clock.now_ms() - DAY_MS + 1000
    offsets = {TP: OffsetAndMetadata(1), ("t", 1): OffsetAndMetadata(2)}
    h.c.commit_offsets("g", "", -1, offsets, box, commit_timestamps={TP: given})
    stored = h.c.groups["g"].offsets
    assert (stored[TP].commit_timestamp_ms, stored[("t", 1)].commit_timestamp_ms) == (
        given,
        h.clock.now_ms(),
    )
    assert stored[TP].expire_timestamp_ms is None
    h.clock.advance(999)
    assert h.c.expire_offsets() == 0
    h.clock.advance(1)
    assert h.c.expire_offsets() == 1
    assert set(stored) == {("t", 1)}
