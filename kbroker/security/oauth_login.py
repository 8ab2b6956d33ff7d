"""An OAUTHBEARER client's token, as Kafka's login modules get one: a broker logging in
to another (kbroker.security.inter_broker) and the admin CLI (kbroker.admin.security).

- ``UnsecuredLogin``: an unsigned token of the ``unsecuredLogin*`` options of the JAAS
  line (Kafka's unsecured login module), minted for each login;
- ``ClientCredentialsLogin``: a token from the identity provider's endpoint for a client
  id and secret (Kafka's OAuthBearerLoginCallbackHandler, RFC 6749 section 4.4), fetched
  in a worker thread and fetched again once it has lived 80% of its life.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbroker.security.jwt import unsigned_token
from kbroker.security.oauthbearer import EXTENSION_KEY, EXTENSION_VALUE, KAFKA_PACKAGE


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
                if (
                    not EXTENSION_KEY.fullmatch(name)
                    or name == "auth"
                    or not EXTENSION_VALUE.fullmatch(value)
                ):
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
        f"{KAFKA_PACKAGE}.OAuthBearerLoginCallbackHandler",
        f"{KAFKA_PACKAGE}.secured.OAuthBearerLoginCallbackHandler",  # its pre-3.9 name
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
