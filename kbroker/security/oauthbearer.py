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
(kbroker.security.jwks), which the broker runs; a ``file://`` one is read here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
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
    unsigned_token,
)

OAUTHBEARER = "OAUTHBEARER"
_PACKAGE = "org.apache.kafka.common.security.oauthbearer"
UNSECURED_HANDLER = f"{_PACKAGE}.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
SIGNED_HANDLERS = frozenset(
    {
        f"{_PACKAGE}.OAuthBearerValidatorCallbackHandler",
        f"{_PACKAGE}.secured.OAuthBearerValidatorCallbackHandler",  # its pre-3.9 name
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
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
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
            if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
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
        jaas = f"{_PACKAGE}.OAuthBearerLoginModule required;"
    if not jaas:
        raise ConfigError(
            f"listener {listener}: OAUTHBEARER needs {scoped} (or sasl.jaas.config), e.g. "
            f"{_PACKAGE}.OAuthBearerLoginModule required;",
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


# -- this broker's own login (inter-broker listener), with Kafka's unsecured login module


@dataclass(frozen=True)
class UnsecuredLogin:
    """The ``unsecuredLogin*`` options of an OAUTHBEARER JAAS line: the claims of the
    unsigned token a broker logs in to another with (Kafka's
    ``OAuthBearerUnsecuredLoginCallbackHandler``), minted afresh for every login."""

    principal: str
    claims: dict[str, Any]
    extensions: dict[str, str]
    lifetime_s: int = 3600

    @classmethod
    def from_jaas(cls, options: dict[str, str]) -> UnsecuredLogin:
        """Raises ValueError naming the option that is wrong."""
        claims: dict[str, Any] = {}
        extensions: dict[str, str] = {}
        for key, value in options.items():
            kind, _, name = key.partition("_")
            if kind in (
                "unsecuredLoginStringClaim",
                "unsecuredLoginNumberClaim",
                "unsecuredLoginListClaim",
            ) and name in ("iat", "exp"):
                raise ValueError(f"{key}: the {name} claim is set by the login itself")
            if kind == "unsecuredLoginStringClaim" and name:
                claims[name] = value
            elif kind == "unsecuredLoginNumberClaim" and name:
                try:
                    claims[name] = float(value) if "." in value else int(value)
                except ValueError:
                    raise ValueError(f"{key} is not a number") from None
            elif kind == "unsecuredLoginListClaim" and name:
                separator, items = value[:1], value[1:]
                claims[name] = [item for item in items.split(separator) if item] if items else []
            elif kind == "unsecuredLoginExtension" and name:
                if not _KEY.fullmatch(name) or name == "auth" or not _VALUE.fullmatch(value):
                    raise ValueError(f"{key} is not a valid SASL extension")
                extensions[name] = value
        principal_claim = options.get("unsecuredLoginPrincipalClaimName", "").strip() or "sub"
        principal = claims.get(principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise ValueError(
                f"the broker's own login needs unsecuredLoginStringClaim_{principal_claim}"
            )
        lifetime = options.get("unsecuredLoginLifetimeSeconds", "").strip() or "3600"
        try:
            lifetime_s = int(lifetime)
        except ValueError:
            raise ValueError("unsecuredLoginLifetimeSeconds is not an integer") from None
        if lifetime_s <= 0:
            raise ValueError("unsecuredLoginLifetimeSeconds must be above 0")
        return cls(principal.strip(), claims, extensions, lifetime_s)

    def token(self, now_s: float) -> str:
        """Issued now, to the millisecond as Kafka's clock reads (never a fraction of a
        millisecond ahead of the receiving check's clock)."""
        issued = math.floor(now_s * 1000) / 1000
        return unsigned_token({**self.claims, "iat": issued, "exp": issued + self.lifetime_s})


# -- a token from the identity provider's endpoint (client credentials, RFC 6749 4.4) ------


class TokenEndpointError(Exception):
    """No token from the endpoint; the message names it and never the secret."""


def fetch_client_credentials_token(
    url: str, client_id: str, client_secret: str, scope: str = "", timeout_s: float = 10.0
) -> tuple[str, float | None]:
    """POST the client credentials as Kafka's HttpAccessTokenRetriever does (the id and
    secret URL-encoded in a Basic header); the token and its ``expires_in`` seconds, if
    given. Blocking: run it in a thread from the event loop. A ``file://`` URL names a
    file holding the token (Kafka's FileTokenRetriever)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = urllib.parse.unquote(parsed.path)
        try:
            return Path(path).read_text().strip(), None
        except OSError as exc:
            raise TokenEndpointError(f"cannot read the token file {path}: {exc.strerror}") from None
    pair = f"{urllib.parse.quote(client_id)}:{urllib.parse.quote(client_secret)}"
    form = {"grant_type": "client_credentials"}
    if scope:
        form["scope"] = scope
    request = urllib.request.Request(
        url,
        data=urllib.parse.urlencode(form).encode(),
        headers={
            "Authorization": "Basic " + base64.b64encode(pair.encode()).decode(),
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        },
    )
    where = f"the token endpoint {url}"
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            body = json.loads(answer.read(1 << 20))
    except urllib.error.HTTPError as exc:
        raise TokenEndpointError(
            f"{where} refused the client credentials: HTTP {exc.code}"
        ) from None
    except (OSError, ValueError) as exc:
        raise TokenEndpointError(f"{where} did not answer with a token: {exc}") from None
    token = body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise TokenEndpointError(f"{where} answered without an access_token")
    expires_in = body.get("expires_in")
    return token, float(expires_in) if isinstance(expires_in, int | float) else None


LOGIN_HANDLERS = frozenset(
    {
        f"{_PACKAGE}.OAuthBearerLoginCallbackHandler",
        f"{_PACKAGE}.secured.OAuthBearerLoginCallbackHandler",  # its pre-3.9 name
    }
)
REFRESH_AT = 0.8  # of a token's life: a login after that fetches a new token


@dataclass
class ClientCredentialsLogin:
    """A broker's own OAUTHBEARER login with a token from the identity provider's
    endpoint (Kafka's OAuthBearerLoginCallbackHandler): fetched before the first login
    and again for a login once the token has lived 80% of its life; a failed fetch is
    retried after ``sasl.login.retry.backoff.ms``, doubling up to ``...backoff.max.ms``."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str = ""
    timeout_s: float = 10.0
    backoff_s: float = 0.1
    backoff_max_s: float = 10.0
    _token: str | None = field(default=None, repr=False)
    _refresh_after: float = 0.0

    @property
    def principal(self) -> str:
        return self.client_id

    @property
    def token(self) -> str:
        assert self._token is not None, "refresh() first"
        return self._token

    async def refresh(self, attempts: int = 3) -> None:
        """A token fit for a login now; raises TokenEndpointError after ``attempts``."""
        if self._token is not None and time.time() < self._refresh_after:
            return
        backoff = self.backoff_s
        for attempt in range(attempts):
            try:
                token, expires_in = await asyncio.to_thread(
                    fetch_client_credentials_token,
                    self.token_url,
                    self.client_id,
                    self.client_secret,
                    self.scope,
                    self.timeout_s,
                )
                break
            except TokenEndpointError:
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, self.backoff_max_s)
        now = time.time()
        expires = _expiry(token) or (now + expires_in if expires_in else now + 3600)
        self._token, self._refresh_after = token, now + REFRESH_AT * max(0.0, expires - now)


def _expiry(token: str) -> float | None:
    """The ``exp`` of a JWT's claims, unverified (the broker receiving it verifies)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = claims.get("exp")
        return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
    except (IndexError, ValueError, AttributeError, UnicodeDecodeError):
        return None
