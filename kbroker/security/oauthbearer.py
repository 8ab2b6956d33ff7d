"""SASL/OAUTHBEARER (RFC 7628, KIP-255, KIP-768): what a listener checks a client's
bearer token with, read from Kafka's settings once at start.

A listener enabling OAUTHBEARER checks tokens as Kafka's broker does with its server
callback handler (``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class``):

- unset, or Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``: unsigned tokens,
  with the ``unsecuredValidator*`` options of the listener's OAUTHBEARER JAAS line (for
  development and tests, as on Kafka);
- ``OAuthBearerValidatorCallbackHandler``: tokens signed by the identity provider,
  verified with the keys of ``sasl.oauthbearer.jwks.endpoint.url`` and checked against
  the ``sasl.oauthbearer.*`` settings.

Every ``sasl.oauthbearer.*`` name is read per mechanism of a listener first
(``listener.name.<l>.oauthbearer.<name>``), then per listener, then broker-wide, as
Kafka's ``ConfigurationUtils`` does. A JWKS behind a URL is fetched by ``JwksSource``
(kbroker.security.jwks), which the broker runs; a ``file://`` one is read here. The
client's side, how a login gets its token, is kbroker.security.oauth_login.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.security.jaas import parse_jaas
from kbroker.security.jwt import (
    BearerToken,
    Jwk,
    KeyMissing,
    SignedOptions,
    UnsecuredOptions,
    check_signed,
    check_unsecured,
    parse_jwks,
)

OAUTHBEARER = "OAUTHBEARER"
KAFKA_PACKAGE = "org.apache.kafka.common.security.oauthbearer"
UNSECURED_HANDLER = (
    f"{KAFKA_PACKAGE}.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
)
SIGNED_HANDLERS = frozenset(
    {
        f"{KAFKA_PACKAGE}.OAuthBearerValidatorCallbackHandler",
        f"{KAFKA_PACKAGE}.secured.OAuthBearerValidatorCallbackHandler",  # its pre-3.9 name
    }
)

Validate = Callable[[str], BearerToken]
"""A token's compact serialization -> the token; raises jwt.TokenRefused."""


class KeySource(Protocol):
    """The keys of a JWKS fetched from a URL (kbroker.security.jwks.JwksSource)."""

    @property
    def keys(self) -> tuple[Jwk, ...]: ...

    def missed(self, kid: str | None) -> None: ...


# -- the client's message (RFC 7628 section 3.1, as Kafka's OAuthBearerClientInitialResponse)

_SEPARATOR = "\x01"
EXTENSION_KEY = re.compile(r"[A-Za-z]+")
EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
_NAME = re.compile(r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+")


@dataclass(frozen=True)
class InitialResponse:
    """``n,[a=<authzid>],^Aauth=Bearer <token>^A[key=value^A]*^A``."""

    token: str
    authorization_id: str = ""
    extensions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: bytes) -> InitialResponse:
        """Raises ValueError with Kafka's reason (never quoting the token)."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("Invalid OAUTHBEARER client first message") from None
        head, sep, rest = text.partition(_SEPARATOR)
        if not sep or not head.startswith("n,") or not head.endswith(","):
            raise ValueError("Invalid OAUTHBEARER client first message")
        authzid = head[2:-1]
        if authzid:
            if not authzid.startswith("a=") or not _NAME.fullmatch(authzid[2:]):
                raise ValueError("Invalid OAUTHBEARER client first message")
            authzid = authzid[2:].replace("=2C", ",").replace("=3D", "=")
        if not rest.endswith(_SEPARATOR + _SEPARATOR) and rest != _SEPARATOR:
            raise ValueError("Invalid OAUTHBEARER client first message")
        pairs: dict[str, str] = {}
        for item in rest[:-2].split(_SEPARATOR) if rest != _SEPARATOR else []:
            key, eq, value = item.partition("=")
            if not eq or not EXTENSION_KEY.fullmatch(key) or not EXTENSION_VALUE.fullmatch(value):
                raise ValueError("Invalid OAUTHBEARER client first message")
            pairs[key] = value
        auth = pairs.pop("auth", None)
        if auth is None:
            raise ValueError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        match = _AUTH.fullmatch(auth)
        if match is None:
            raise ValueError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if match["scheme"].lower() != "bearer":
            raise ValueError("Invalid scheme in OAUTHBEARER client first message")
        return cls(match["token"], authzid, pairs)


def error_challenge(status: str, scope: str | None) -> bytes:
    """The server's answer to a refused token (RFC 7628 section 3.2.2), as Kafka's."""
    body: dict[str, str] = {"status": status}
    if scope is not None:
        body["scope"] = scope
    return json.dumps(body, separators=(",", ":")).encode()


# -- what a listener checks tokens with ------------------------------------------------------


@dataclass(frozen=True)
class BearerSettings:
    """One listener's OAUTHBEARER check, from its settings (no I/O but a file JWKS)."""

    unsecured: UnsecuredOptions | None = None
    signed: SignedOptions | None = None
    jwks_url: str | None = None  # fetched by a JwksSource (http/https)
    file_keys: tuple[Jwk, ...] = ()
    refresh_ms: int = 3_600_000
    backoff_ms: int = 100
    backoff_max_ms: int = 10_000

    def validator(self, source: KeySource | None) -> Validate:
        """The check a connection runs; ``source`` holds the fetched keys of
        ``jwks_url``."""
        unsecured, signed = self.unsecured, self.signed
        if signed is None:
            assert unsecured is not None

            def check_unsigned(token: str) -> BearerToken:
                return check_unsecured(token, unsecured, int(time.time() * 1000))

            return check_unsigned
        file_keys = self.file_keys

        def check(token: str) -> BearerToken:
            keys = source.keys if source is not None else file_keys
            try:
                return check_signed(token, signed, keys, time.time())
            except KeyMissing as exc:
                if source is not None:
                    source.missed(exc.kid)
                raise

        return check


def bearer_settings(
    config: BrokerConfig, listener: str, require_jaas: bool = True
) -> BearerSettings:
    """The listener's OAUTHBEARER check; ConfigError for what Kafka would refuse at start
    or kbroker cannot do. The schema registry's check (``require_jaas`` False) needs no
    JAAS line: without one, unsigned tokens are checked with the default options."""

    def setting(name: str) -> Any:
        return config.for_mechanism(listener, OAUTHBEARER, name)

    scoped = f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config"
    jaas = config.jaas_config(listener, OAUTHBEARER)
    if not jaas and not require_jaas:
        jaas = f"{KAFKA_PACKAGE}.OAuthBearerLoginModule required;"
    if not jaas:
        raise ConfigError(
            f"listener {listener}: OAUTHBEARER needs {scoped} (or sasl.jaas.config), e.g. "
            f"{KAFKA_PACKAGE}.OAuthBearerLoginModule required;",
            setting="sasl.jaas.config",
        )
    try:
        options = parse_jaas(jaas).options
    except ValueError as exc:
        raise ConfigError(f"{scoped}: {exc}", setting="sasl.jaas.config") from None
    handler = setting("sasl.server.callback.handler.class")
    if handler in (None, "", UNSECURED_HANDLER):
        try:
            return BearerSettings(unsecured=UnsecuredOptions.from_jaas(options))
        except ValueError as exc:
            raise ConfigError(f"{scoped}: {exc}", setting="sasl.jaas.config") from None
    url = setting("sasl.oauthbearer.jwks.endpoint.url")
    if not url:
        raise ConfigError(
            f"listener {listener}: {handler} needs sasl.oauthbearer.jwks.endpoint.url",
            setting="sasl.oauthbearer.jwks.endpoint.url",
        )
    signed = SignedOptions(
        clock_skew_s=setting("sasl.oauthbearer.clock.skew.seconds"),
        audiences=frozenset(a for a in setting("sasl.oauthbearer.expected.audience") if a),
        issuer=setting("sasl.oauthbearer.expected.issuer") or None,
        scope_claim=setting("sasl.oauthbearer.scope.claim.name") or "scope",
        sub_claim=setting("sasl.oauthbearer.sub.claim.name") or "sub",
    )
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = Path(urllib.parse.unquote(parsed.path))
        try:
            keys = parse_jwks(path.read_bytes())
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise ConfigError(
                f"listener {listener}: sasl.oauthbearer.jwks.endpoint.url {url}: {reason}",
                setting="sasl.oauthbearer.jwks.endpoint.url",
            ) from None
        if not keys:
            raise ConfigError(
                f"listener {listener}: the JWKS at {url} holds no key kbroker can verify with",
                setting="sasl.oauthbearer.jwks.endpoint.url",
            )
        return BearerSettings(signed=signed, file_keys=keys)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(
            f"listener {listener}: sasl.oauthbearer.jwks.endpoint.url must be an https://, "
            f"http:// or file:// URL, not {url!r}",
            setting="sasl.oauthbearer.jwks.endpoint.url",
        )
    return BearerSettings(
        signed=signed,
        jwks_url=url,
        refresh_ms=setting("sasl.oauthbearer.jwks.endpoint.refresh.ms"),
        backoff_ms=setting("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"),
        backoff_max_ms=setting("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"),
    )
