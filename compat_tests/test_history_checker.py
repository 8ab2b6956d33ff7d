"""The history checker counts lost, duplicated and reordered records separately."""

from compat_tests.history import check


def test_a_faithful_history_is_clean() -> None:
    verdict = check([0, 1, 2, 3], [0, 1, 2, 3, 4])  # 4 was stored but never acknowledged
    assert verdict.clean


def test_an_acknowledged_record_missing_is_lost() -> None:
    assert check([0, 1, 2], [0, 2]).lost == [1]


def test_a_record_stored_twice_is_duplicated_even_unacknowledged() -> None:
    verdict = check([0, 1], [0, 1, 2, 2])
    assert (verdict.duplicated, verdict.lost, verdict.reordered) == ([2], [], [])


def test_an_acknowledged_record_before_an_earlier_one_is_reordered() -> None:
    verdict = check([0, 1, 2, 3], [0, 2, 1, 3])
    assert (verdict.reordered, verdict.lost, verdict.duplicated) == ([2], [], [])
