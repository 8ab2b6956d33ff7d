"""The states of a client connection as Kafka's SaslServerAuthenticator and KIP-368 have
them, and what moves a connection from one to the next.

A connection's state decides which requests it serves (`ACCEPTS`) and so which function
reads its frames (`DISPATCH`, the name of a KafkaConnection method): the connection keeps
that function in its instance dict, so serving a request costs one attribute lookup
whatever the state, and a connection on a listener without SASL, or authenticated for
good, pays nothing for the gate. Throttling (KIP-219) is not a state here: a muted
connection holds the frames it reads and goes on in its state when the mute ends.
"""

from __future__ import annotations

import enum

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


class State(enum.Enum):
    SERVING = "serving"  # no SASL on the listener, or authenticated with no session lifetime
    AUTHENTICATING = "authenticating"  # a SASL listener, before the login has finished
    RAW_TOKENS = "raw tokens"  # after a v0 SaslHandshake: frames are bare SASL tokens
    IN_SESSION = "in session"  # authenticated for connections.max.reauth.ms
    FAILED = "failed"  # a login failed: its answer is out, the close follows


class Event(enum.Enum):
    RAW_HANDSHAKE = "SaslHandshake v0 accepted"
    AUTHENTICATED = "authenticated, no session lifetime"
    AUTHENTICATED_FOR_A_SESSION = "authenticated for connections.max.reauth.ms"
    AUTHENTICATION_FAILED = "authentication failed"


ALL_APIS = None
"""In `ACCEPTS`: every API the broker serves."""

ACCEPTS: dict[State, frozenset[int] | None] = {
    State.SERVING: ALL_APIS,
    State.AUTHENTICATING: BEFORE_AUTHENTICATION,  # anything else fails the login and closes
    State.RAW_TOKENS: frozenset(),  # no request: each frame is the next token
    State.IN_SESSION: ALL_APIS,  # until the session's deadline, then SESSION_EXPIRED_ACCEPTS
    State.FAILED: frozenset(),  # frames are dropped unread
}
SESSION_EXPIRED_ACCEPTS = BEFORE_AUTHENTICATION
"""What an IN_SESSION connection serves once its session lifetime has passed (KIP-368):
re-authentication only; anything else closes it."""

DISPATCH: dict[State, str | None] = {
    State.SERVING: None,  # the class's dispatch, with no gate
    State.AUTHENTICATING: "_dispatch_unauthenticated",
    State.RAW_TOKENS: "_raw_token_frame",
    State.IN_SESSION: "_dispatch_in_session",
    State.FAILED: "_drop_frames",
}

TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.AUTHENTICATING, Event.RAW_HANDSHAKE): State.RAW_TOKENS,
    (State.AUTHENTICATING, Event.AUTHENTICATED): State.SERVING,
    (State.AUTHENTICATING, Event.AUTHENTICATED_FOR_A_SESSION): State.IN_SESSION,
    (State.AUTHENTICATING, Event.AUTHENTICATION_FAILED): State.FAILED,
    (State.RAW_TOKENS, Event.AUTHENTICATED): State.SERVING,
    (State.RAW_TOKENS, Event.AUTHENTICATED_FOR_A_SESSION): State.IN_SESSION,
    (State.RAW_TOKENS, Event.AUTHENTICATION_FAILED): State.FAILED,
    # Re-authentication (SaslHandshake v1+ and SaslAuthenticate on a live connection): a
    # new session deadline, or the close when the new login fails or changes principal.
    (State.IN_SESSION, Event.AUTHENTICATED_FOR_A_SESSION): State.IN_SESSION,
    (State.IN_SESSION, Event.AUTHENTICATED): State.SERVING,
    (State.IN_SESSION, Event.AUTHENTICATION_FAILED): State.FAILED,
    (State.SERVING, Event.AUTHENTICATED): State.SERVING,
    (State.SERVING, Event.AUTHENTICATED_FOR_A_SESSION): State.IN_SESSION,
    (State.SERVING, Event.AUTHENTICATION_FAILED): State.FAILED,
}
"""Every move a connection can make; any other (state, event) is a broken connection,
closed with a log line."""


def initial_state(uses_sasl: bool) -> State:
    """Where a connection starts once TLS (if any) is up."""
    return State.AUTHENTICATING if uses_sasl else State.SERVING


def accepts(state: State, api_key: int) -> bool:
    allowed = ACCEPTS[state]
    return allowed is None or api_key in allowed
