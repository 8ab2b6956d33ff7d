"""Topic name, partition count and replica assignment rules, with Kafka's error codes."""

from collections import Counter

import pytest

from kbroker.controller.errors import (
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_TOPIC_EXCEPTION,
    ControllerError,
)
from kbroker.controller.validation import (
    check_manual_assignment,
    check_partition_count,
    check_replication_factor,
    place_replicas,
    round_robin_assignment,
    validate_topic_name,
)


def code_of(fn, *args, **kwargs):
    with pytest.raises(ControllerError) as e:
        fn(*args, **kwargs)
    return e.value.error_code


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 249, "__consumer_offsets", "..."])
def test_legal_topic_names_pass(name):
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "ä", "a:b"])
def test_illegal_topic_names_are_invalid_topic(name):
    assert code_of(validate_topic_name, name) == INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("count", [0, -1, -5])
def test_non_positive_partition_count_is_invalid_partitions(count):
    assert code_of(check_partition_count, count, 100) == INVALID_PARTITIONS


def test_partition_count_above_the_limit_is_invalid_partitions():
    assert code_of(check_partition_count, 101, 100) == INVALID_PARTITIONS


@pytest.mark.parametrize("rf", [0, -2])
def test_non_positive_replication_factor_is_invalid(rf):
    assert code_of(check_replication_factor, rf, 3) == INVALID_REPLICATION_FACTOR


def test_replication_factor_above_live_brokers_is_invalid():
    assert code_of(check_replication_factor, 4, 3) == INVALID_REPLICATION_FACTOR


BROKERS = {1: None, 2: None, 3: None}


def test_manual_assignment_is_returned_in_partition_order():
    result = check_manual_assignment({1: [2, 3], 0: [1, 2]}, 0, BROKERS)
    assert result == [(1, 2), (2, 3)]


@pytest.mark.parametrize(
    "assignment",
    [
        {0: [1], 2: [2]},  # gap
        {1: [1]},  # does not start at first partition
        {0: []},  # empty replica list
        {0: [1, 1]},  # duplicate broker
        {0: [9]},  # unknown broker
        {0: [1, 2], 1: [3]},  # inconsistent replication factor
    ],
)
def test_bad_manual_assignment_is_invalid_replica_assignment(assignment):
    assert code_of(check_manual_assignment, assignment, 0, BROKERS) == INVALID_REPLICA_ASSIGNMENT


def test_added_partitions_must_match_the_topic_replication_factor():
    code = code_of(check_manual_assignment, {3: [1]}, 3, BROKERS, replication_factor=2)
    assert code == INVALID_REPLICA_ASSIGNMENT


def test_round_robin_spreads_leaders_and_replicas():
    result = round_robin_assignment([1, 2, 3], 0, 4, 2, start=0)
    assert result == [(1, 2), (2, 3), (3, 1), (1, 2)]


def test_round_robin_continues_numbering_for_added_partitions():
    assert round_robin_assignment([1, 2, 3], 2, 1, 1, start=0) == [(3,)]


def test_rack_aware_placement_puts_each_partitions_replicas_on_different_racks():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    placed = place_replicas([1, 2, 3, 4, 5, 6], racks, 0, 6, 3, start=0)
    for replicas in placed:
        assert len({racks[r] for r in replicas}) == 3
    assert sorted(r[0] for r in placed) == [1, 2, 3, 4, 5, 6]  # one leader each


def test_rack_aware_placement_doubles_up_a_rack_only_when_racks_run_out():
    racks = {1: "a", 2: "a", 3: "b"}
    for replicas in place_replicas([1, 2, 3], racks, 0, 3, 3, start=0):
        assert sorted(replicas) == [1, 2, 3]
    for replicas in place_replicas([1, 2, 3], racks, 0, 3, 2, start=0):
        assert {racks[r] for r in replicas} == {"a", "b"}


def test_without_racks_placement_is_round_robin():
    assert place_replicas([1, 2, 3], {}, 0, 2, 2, start=0) == round_robin_assignment(
        [1, 2, 3], 0, 2, 2, start=0
    )


@pytest.mark.parametrize(
    "racks",
    [
        {1: "a", 2: "a", 3: "b"},
        {1: "a", 2: "b", 3: "a"},
        {1: "a", 2: "a", 3: "b", 4: "b"},
        {1: "a", 2: "b", 3: "a", 4: "b"},
        {1: "a", 2: "a", 3: "a", 4: "b"},
        {1: "h1", 2: "h1", 3: "h1", 4: "h2", 5: "h2", 6: "h2"},
    ],
)
@pytest.mark.parametrize("replication_factor", [1, 2, 3])
def test_preferred_leaders_of_each_topic_spread_within_one_per_node(
    racks: dict[int, str], replication_factor: int
) -> None:
    brokers = sorted(racks)
    rack_count = len(set(racks.values()))
    for topic_index, partitions in enumerate(range(6, 13)):
        placed = place_replicas(brokers, racks, 0, partitions, replication_factor, topic_index)
        leaders = Counter(r[0] for r in placed)
        assert max(leaders[b] for b in brokers) - min(leaders[b] for b in brokers) <= 1
        for replicas in placed:
            assert len(set(replicas)) == replication_factor
            assert len({racks[r] for r in replicas}) == min(replication_factor, rack_count)


def test_brokers_without_a_rack_count_as_one_rack_of_their_own() -> None:
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: None, 4: None}
    for replicas in place_replicas([1, 2, 3, 4], racks, 0, 8, 2, start=0):
        assert {racks[r] for r in replicas} == {"a", None}


def test_followers_spread_over_the_brokers_of_a_rack_that_holds_more_of_them() -> None:
    racks = {1: "h1", 2: "h1", 3: "h1", 4: "h2"}  # a 3-core host and a 1-core host
    hosted: Counter[int] = Counter()
    for topic_index, partitions in enumerate(range(6, 13)):
        for replicas in place_replicas([1, 2, 3, 4], racks, 0, partitions, 2, topic_index):
            assert {racks[r] for r in replicas} == {"h1", "h2"}
            hosted.update(replicas)
    assert hosted[4] == sum(range(6, 13))  # the lone h2 broker holds every partition
    spread = [hosted[b] for b in (1, 2, 3)]
    assert max(spread) - min(spread) <= 3, spread
