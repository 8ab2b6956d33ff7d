"""The SASL mechanisms a listener serves and one connection's authentication state.

Kafka's ``SaslServerAuthenticator`` in sans-IO form: the connection hands it each
SaslHandshake and SaslAuthenticate (or, after a v0 handshake, each raw token frame) and
writes back what it returns. It decides nothing about sockets; a failure is a
``SaslFailure`` whose message is safe to send and to log (it never holds a secret).
"""

from __future__ import annotations

import datetime
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kbroker.security.jwt import BearerToken, TokenRefused
from kbroker.security.oauthbearer import OAUTHBEARER, InitialResponse, Validate, error_challenge
from kbroker.security.principal import KafkaPrincipal, user
from kbroker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from kbroker.security.scram import ScramCredential, ScramError, ScramServer

PLAIN = "PLAIN"
# The longest session lifetime an answer carries (a duration field is a timedelta): some
# 2.7 million years, past any token's expiry that matters.
LONGEST_MS = (datetime.timedelta.max.days - 1) * 86_400_000
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)

ScramLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism)
# (token id, mechanism) -> the token's credential (its HMAC as password) and its owner
TokenLookup = Callable[[str, str], tuple[ScramCredential, str] | None]


class SaslFailure(Exception):
    """Authentication failed; the message goes to the client, and to the log unless a
    ``reason`` says more (both are free of secrets)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class SaslServer(Protocol):
    mechanism: str

    @property
    def complete(self) -> bool: ...

    def evaluate(self, token: bytes) -> bytes: ...

    @property
    def authorized_id(self) -> str: ...

    @property
    def token_authenticated(self) -> bool:
        """Logged in with a delegation token (KIP-48)."""

    @property
    def expires_ms(self) -> int | None:
        """When the credential expires (ms since the epoch), if it does."""

    @property
    def refusal(self) -> str | None:
        """Why the last credential was refused while the client has yet to hear it."""


class PlainServer:
    """RFC 4616: one message ``authzid NUL authcid NUL passwd``, checked against the
    listener's JAAS users in constant time."""

    mechanism = PLAIN
    token_authenticated = False
    expires_ms = None
    refusal = None

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self._done = False
        self._user = ""

    @property
    def complete(self) -> bool:
        return self._done

    @property
    def authorized_id(self) -> str:
        return self._user

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise SaslFailure("Unexpected PLAIN message after authentication")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, authcid, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not authcid:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        expected = self._users.get(authcid)
        # Compare against something even for an unknown user: no timing oracle.
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
        if expected is None or not ok:
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != authcid:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self._user, self._done = authcid, True
        return b""


class ScramSaslServer:
    expires_ms = None
    refusal = None

    def __init__(
        self, mechanism: str, lookup: ScramLookup, token_lookup: TokenLookup | None = None
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._owner: str | None = None
        self._scram = ScramServer(mechanism, self._find)

    def _find(self, name: str) -> ScramCredential | None:
        if not self._scram.token_auth:
            return self._lookup(name, self.mechanism)
        found = self._token_lookup(name, self.mechanism) if self._token_lookup else None
        if found is None:
            return None
        credential, self._owner = found
        return credential

    @property
    def token_authenticated(self) -> bool:
        return self._owner is not None

    @property
    def complete(self) -> bool:
        return self._scram.complete

    @property
    def authorized_id(self) -> str:
        """The user: a token's owner when authenticated with a delegation token."""
        if self._owner is not None:
            return self._owner.partition(":")[2]
        return self._scram.user or ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            return self._scram.evaluate(token)
        except ScramError as exc:
            raise SaslFailure(str(exc)) from None


class OAuthBearerServer:
    """RFC 7628 as Kafka's ``OAuthBearerSaslServer``: the client's first message carries
    the token; a token the validator refuses is answered with the JSON error status, the
    client acknowledges with a lone 0x01, and the exchange then fails with that status
    as the message."""

    mechanism = OAUTHBEARER
    token_authenticated = False

    def __init__(self, validate: Validate) -> None:
        self._validate = validate
        self._token: BearerToken | None = None
        self._error: str | None = None
        self._reason = ""

    @property
    def complete(self) -> bool:
        return self._token is not None

    @property
    def authorized_id(self) -> str:
        return self._token.principal if self._token is not None else ""

    @property
    def refusal(self) -> str | None:
        """Why the token answered with an error status was refused, until the client
        acknowledges (or sends something else, as some clients do)."""
        return self._reason if self._error is not None else None

    @property
    def expires_ms(self) -> int | None:
        """When the token expires (ms since the epoch): the session ends then (KIP-368)."""
        return self._token.expires_ms if self._token is not None else None

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise SaslFailure(self._error, f"token refused: {self._reason}")
        self._error = None
        if self._token is not None:
            raise SaslFailure("Unexpected OAUTHBEARER message after authentication")
        try:
            response = InitialResponse.parse(token)
        except ValueError as exc:
            raise SaslFailure(str(exc)) from None
        try:
            accepted = self._validate(response.token)
        except TokenRefused as exc:
            status = "insufficient_scope" if exc.scope is not None else "invalid_token"
            challenge = error_challenge(status, exc.scope)
            self._error, self._reason = challenge.decode(), str(exc)
            return challenge
        if response.authorization_id and response.authorization_id != accepted.principal:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is "
                "different from the token's principal name"
            )
        self._token = accepted
        return b""


@dataclass
class SaslSession:
    """What one connection has proved so far, and with which mechanism."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]
    scram_lookup: ScramLookup
    server: SaslServer | None = None
    raw_tokens: bool = False  # a v0 handshake: tokens follow as bare size-prefixed frames
    principal: KafkaPrincipal | None = None
    authenticated_mechanism: str | None = None
    failures: list[str] = field(default_factory=list)
    token_lookup: TokenLookup | None = None
    bearer: Validate | None = None  # the listener's OAUTHBEARER token check
    credential_expires_ms: int | None = None  # an OAUTHBEARER token's exp: the session's end

    def handshake(self, mechanism: str, version: int) -> bool:
        """Start an exchange; False when the mechanism is not enabled (Kafka answers
        UNSUPPORTED_SASL_MECHANISM, then closes the connection)."""
        if mechanism not in self.mechanisms:
            return False
        if self.authenticated_mechanism not in (None, mechanism):
            return False  # KIP-368: re-authentication keeps the mechanism
        if mechanism == PLAIN:
            self.server = PlainServer(self.plain_users)
        elif mechanism == OAUTHBEARER:
            if self.bearer is None:
                return False
            self.server = OAuthBearerServer(self.bearer)
        else:
            self.server = ScramSaslServer(mechanism, self.scram_lookup, self.token_lookup)
        self.raw_tokens = version == 0
        return True

    @property
    def in_exchange(self) -> bool:
        return self.server is not None

    @property
    def refusal(self) -> str | None:
        """Why the exchange's last credential was refused while the client has yet to
        hear it fail (OAUTHBEARER's error status), for the log."""
        return self.server.refusal if self.server is not None else None

    def authenticate(self, token: bytes) -> tuple[bytes, bool]:
        """Feed one client token; returns (answer, finished). Raises SaslFailure."""
        server = self.server
        if server is None:
            raise SaslFailure("SaslAuthenticate received before SaslHandshake")
        try:
            answer = server.evaluate(token)
        except SaslFailure:
            self.server = None
            raise
        if not server.complete:
            return answer, False
        principal = user(server.authorized_id)
        if server.token_authenticated:
            principal = KafkaPrincipal("User", principal.name, token_authenticated=True)
        if self.principal is not None and principal != self.principal:
            self.server = None
            raise SaslFailure(
                "Cannot change principals during re-authentication from "
                f"{self.principal} to {principal}"
            )
        self.principal, self.authenticated_mechanism = principal, server.mechanism
        self.credential_expires_ms = server.expires_ms
        self.server, self.raw_tokens = None, False
        return answer, True


def session_lifetime_ms(
    max_reauth_ms: int, credential_expires_ms: int | None, now_ms: int
) -> int | None:
    """A session's lifetime (KIP-368) as Kafka's SaslServerAuthenticator sets it: the
    shorter of ``connections.max.reauth.ms`` (when above 0) and what is left of the
    credential (an OAUTHBEARER token's ``exp``); None when neither bounds it."""
    if credential_expires_ms is None:
        return max_reauth_ms if max_reauth_ms > 0 else None
    # A token may name any expiry; the answer's duration field holds up to LONGEST_MS.
    left = min(max(0, credential_expires_ms - now_ms), LONGEST_MS)
    return min(left, max_reauth_ms) if max_reauth_ms > 0 else left
