"""The follower's side of a fetch session (Kafka's FetchSessionHandler): what each Fetch
names, and how answers and failures move the session on or start it over."""

from __future__ import annotations

import uuid

from kbroker.replica.fetch_session_handler import (
    FetchSessionHandler,
    SessionKey,
    SessionPartition,
)
from kbroker.replica.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    next_epoch,
)

A, B = uuid.UUID(int=1), uuid.UUID(int=2)
NOT_LEADER_OR_FOLLOWER = 6


def at(offset: int, *, start: int = 0, epoch: int = 3, last: int = 3) -> SessionPartition:
    return SessionPartition(offset, start, epoch, last, 1 << 20)


def wanted(**offsets: int) -> dict[SessionKey, SessionPartition]:
    """a0=5, b1=7 -> {(A, 0): at(5), (B, 1): at(7)}"""
    topics = {"a": A, "b": B}
    return {(topics[name[0]], int(name[1:])): at(offset) for name, offset in offsets.items()}


def in_session(handler: FetchSessionHandler, session_id: int = 42) -> FetchSessionHandler:
    """The handler after a full Fetch of a0, a1, b0 answered with `session_id`."""
    first = handler.build(wanted(a0=5, a1=9, b0=0))
    assert handler.handle_response(0, session_id, first.send)
    return handler


def test_the_first_fetch_names_every_partition_and_asks_for_a_session() -> None:
    handler = FetchSessionHandler()
    request = handler.build(wanted(a0=5, a1=9, b0=0))
    assert (request.session_id, request.epoch, request.full) == (0, 0, True)
    assert list(request.send) == [(A, 0), (A, 1), (B, 0)]
    assert request.forget == []
    assert handler.handle_response(0, 42, request.send)
    assert (handler.session_id, handler.next_epoch) == (42, 1)


def test_an_unchanged_round_sends_nothing_at_the_next_epoch() -> None:
    handler = in_session(FetchSessionHandler())
    for epoch in (1, 2, 3):
        request = handler.build(wanted(a0=5, a1=9, b0=0))
        assert (request.session_id, request.epoch, request.full) == (42, epoch, False)
        assert request.send == {} and request.forget == []
        assert handler.handle_response(0, 42, [])  # nothing new anywhere: an empty answer


def test_only_changed_partitions_are_sent_and_removed_ones_are_forgotten() -> None:
    handler = in_session(FetchSessionHandler())
    now = wanted(a0=6, a1=9, b1=0)  # a0 moved, b0 dropped, b1 added
    now[(A, 1)] = at(9, start=4)  # the log start moved
    request = handler.build(now)
    assert request.send == {(A, 0): at(6), (A, 1): at(9, start=4), (B, 1): at(0)}
    assert request.forget == [(B, 0)]
    assert handler.handle_response(0, 42, [(A, 0)])
    # The next round compares with what the last one sent.
    again = handler.build(now)
    assert again.send == {} and again.forget == [] and again.epoch == 2


def test_a_new_leader_epoch_or_last_fetched_epoch_sends_the_partition() -> None:
    handler = in_session(FetchSessionHandler())
    now = wanted(a0=5, a1=9, b0=0)
    now[(A, 0)] = at(5, epoch=4)
    now[(B, 0)] = at(0, last=4)
    assert list(handler.build(now).send) == [(A, 0), (B, 0)]


def test_the_epoch_wraps_to_one_never_zero() -> None:
    assert next_epoch(2**31 - 1) == 1
    handler = in_session(FetchSessionHandler())
    handler.next_epoch = 2**31 - 1
    request = handler.build(wanted(a0=5, a1=9, b0=0))
    assert request.epoch == 2**31 - 1
    assert handler.handle_response(0, 42, [])
    assert handler.next_epoch == 1


def test_session_not_found_starts_over_without_a_session() -> None:
    handler = in_session(FetchSessionHandler())
    handler.build(wanted(a0=5, a1=9, b0=0))
    assert not handler.handle_response(FETCH_SESSION_ID_NOT_FOUND, 0, [])
    request = handler.build(wanted(a0=5, a1=9, b0=0))
    assert (request.session_id, request.epoch) == (0, 0)
    assert list(request.send) == [(A, 0), (A, 1), (B, 0)]


def test_an_invalid_epoch_or_other_error_closes_the_session_with_a_full_fetch() -> None:
    for error in (INVALID_FETCH_SESSION_EPOCH, NOT_LEADER_OR_FOLLOWER):
        handler = in_session(FetchSessionHandler())
        handler.build(wanted(a0=5, a1=9, b0=0))
        assert not handler.handle_response(error, 0, [])
        request = handler.build(wanted(a0=5, a1=9, b0=0))
        # The old id at epoch 0: the leader drops that session and opens a new one.
        assert (request.session_id, request.epoch, request.full) == (42, 0, True)
        assert list(request.send) == [(A, 0), (A, 1), (B, 0)]
        assert handler.handle_response(0, 77, request.send)
        assert (handler.session_id, handler.next_epoch) == (77, 1)


def test_a_failed_request_sends_everything_again() -> None:
    handler = in_session(FetchSessionHandler())
    handler.build(wanted(a0=6, a1=9, b0=0))  # a0 sent, and the answer never came
    handler.handle_error()
    request = handler.build(wanted(a0=6, a1=9, b0=0))
    assert request.full and list(request.send) == [(A, 0), (A, 1), (B, 0)]


def test_the_leader_keeping_no_session_means_full_fetches() -> None:
    handler = FetchSessionHandler()
    first = handler.build(wanted(a0=5))
    assert handler.handle_response(0, 0, first.send)  # no slot for a session there
    second = handler.build(wanted(a0=5))
    assert (second.session_id, second.epoch, list(second.send)) == (0, 0, [(A, 0)])


def test_the_leader_closing_the_session_means_a_full_fetch_next() -> None:
    handler = in_session(FetchSessionHandler())
    handler.build(wanted(a0=5, a1=9, b0=0))
    assert handler.handle_response(0, 0, [])
    assert handler.build(wanted(a0=5, a1=9, b0=0)).full


def test_an_answer_that_does_not_fit_the_request_is_not_used() -> None:
    handler = FetchSessionHandler()
    first = handler.build(wanted(a0=5, a1=9))
    assert not handler.handle_response(0, 42, [(A, 0)])  # a full answer missing a1
    assert handler.build(wanted(a0=5, a1=9)).session_id == 0
    handler = in_session(FetchSessionHandler())
    handler.build(wanted(a0=5, a1=9, b0=0))
    assert not handler.handle_response(0, 42, [(B, 7)])  # not in the session
    request = handler.build(wanted(a0=5, a1=9, b0=0))
    assert (request.session_id, request.full) == (42, True)
    assert first.full
