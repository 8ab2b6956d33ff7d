"""The connection's state table (kbroker.server.connection_states): what each state serves,
which function reads its frames, and every move between them."""

from __future__ import annotations

import pytest

from kbroker.server.connection import KafkaConnection
from kbroker.server.connection_states import (
    ACCEPTS,
    BEFORE_AUTHENTICATION,
    DISPATCH,
    SESSION_EXPIRED_ACCEPTS,
    TRANSITIONS,
    Event,
    State,
    accepts,
    initial_state,
)

PRODUCE, FETCH, METADATA, API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 1, 3, 18, 17, 36


def test_every_state_says_what_it_serves_and_who_reads_its_frames() -> None:
    assert set(ACCEPTS) == set(State) == set(DISPATCH)
    for state, name in DISPATCH.items():
        if name is not None:
            assert callable(getattr(KafkaConnection, name)), (state, name)


def test_before_authentication_only_version_and_sasl_requests_are_served() -> None:
    assert {API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE} == BEFORE_AUTHENTICATION
    assert SESSION_EXPIRED_ACCEPTS == BEFORE_AUTHENTICATION
    for api in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
        assert accepts(State.AUTHENTICATING, api)
    for api in (PRODUCE, FETCH, METADATA):
        assert not accepts(State.AUTHENTICATING, api)
        assert accepts(State.SERVING, api)
        assert accepts(State.IN_SESSION, api)
    for api in (PRODUCE, API_VERSIONS, SASL_AUTHENTICATE):
        assert not accepts(State.RAW_TOKENS, api)
        assert not accepts(State.FAILED, api)


def test_only_a_sasl_listener_starts_unauthenticated() -> None:
    assert initial_state(uses_sasl=True) is State.AUTHENTICATING
    assert initial_state(uses_sasl=False) is State.SERVING


@pytest.mark.parametrize(
    ("events", "end"),
    [
        ([Event.AUTHENTICATED], State.SERVING),
        ([Event.AUTHENTICATED_FOR_A_SESSION], State.IN_SESSION),
        ([Event.RAW_HANDSHAKE, Event.AUTHENTICATED], State.SERVING),
        ([Event.RAW_HANDSHAKE, Event.AUTHENTICATION_FAILED], State.FAILED),
        (
            [Event.AUTHENTICATED_FOR_A_SESSION, Event.AUTHENTICATED_FOR_A_SESSION],
            State.IN_SESSION,
        ),  # re-authenticated: a new deadline
        ([Event.AUTHENTICATED_FOR_A_SESSION, Event.AUTHENTICATION_FAILED], State.FAILED),
        ([Event.AUTHENTICATION_FAILED], State.FAILED),
    ],
)
def test_a_sasl_connection_moves_as_the_table_says(events: list[Event], end: State) -> None:
    state = initial_state(uses_sasl=True)
    for event in events:
        state = TRANSITIONS[(state, event)]
    assert state is end


def test_no_move_leaves_a_failed_login_or_returns_to_before_authentication() -> None:
    assert not [key for key in TRANSITIONS if key[0] is State.FAILED]
    assert State.AUTHENTICATING not in TRANSITIONS.values()
    # A v0 handshake's raw tokens come only before the first login (re-authentication
    # needs SaslAuthenticate, KIP-368).
    raw = [key for key, to in TRANSITIONS.items() if to is State.RAW_TOKENS]
    assert raw == [(State.AUTHENTICATING, Event.RAW_HANDSHAKE)]


def test_every_state_is_reachable_and_every_live_one_can_fail() -> None:
    reached = {initial_state(True), initial_state(False)}
    while True:
        more = {to for (state, _), to in TRANSITIONS.items() if state in reached} - reached
        if not more:
            break
        reached |= more
    assert reached == set(State)
    for state in set(State) - {State.FAILED}:
        assert TRANSITIONS[(state, Event.AUTHENTICATION_FAILED)] is State.FAILED
