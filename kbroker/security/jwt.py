"""JSON Web Tokens as a Kafka broker checks OAUTHBEARER access tokens (no I/O).

Two checks, as Kafka's two server callback handlers:

- ``check_unsecured``: the default handler (``OAuthBearerUnsecuredValidatorCallbackHandler``),
  for development: an unsigned token (``alg`` ``none``, empty signature) whose principal
  claim, ``exp`` and optional ``iat`` and scope are checked against the JAAS line's
  ``unsecuredValidator*`` options.
- ``check_signed``: ``OAuthBearerValidatorCallbackHandler`` (KIP-768), for production: a
  token signed by the identity provider, verified with a key of its JWKS (RS, PS, ES,
  EdDSA or HS algorithms), then ``exp`` and ``iat`` required, ``nbf``, audience and
  issuer checked as jose4j's consumer does with the ``sasl.oauthbearer.*`` settings.

Both raise ``TokenRefused`` with a reason that is safe to log: it names claims and
times, never the token.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


class TokenRefused(Exception):
    """The token does not authenticate. ``scope`` is set when only the scope fell short
    (the client is told ``insufficient_scope``, else ``invalid_token``)."""

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


@dataclass(frozen=True)
class BearerToken:
    """An accepted token: who it names, what it allows, until when (ms since the epoch)."""

    principal: str
    scope: frozenset[str]
    expires_ms: int
    issued_ms: int | None


def _b64url(part: str) -> bytes:
    """Base64url without padding (RFC 7515); the standard alphabet is taken too."""
    try:
        return base64.urlsafe_b64decode(
            part.replace("+", "-").replace("/", "_") + "=" * (-len(part) % 4)
        )
    except (binascii.Error, ValueError):
        raise TokenRefused("malformed Base64 URL encoded value") from None


def _json_object(part: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64url(part))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise TokenRefused("malformed JSON") from None
    if not isinstance(value, dict):
        raise TokenRefused("malformed JSON: not an object")
    return value


@dataclass(frozen=True)
class CompactJws:
    """``header.payload.signature``, decoded but not trusted."""

    header: dict[str, Any]
    claims: dict[str, Any]
    signing_input: bytes
    signature: bytes

    @classmethod
    def parse(cls, token: str) -> CompactJws:
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenRefused(
                "JWS compact serializations must have 3 dot-separated Base64URL-encoded values"
            )
        header, payload, signature = parts
        if not header or not payload:
            raise TokenRefused("Malformed compact serialization contains '..'")
        return cls(
            header=_json_object(header),
            claims=_json_object(payload),
            signing_input=f"{header}.{payload}".encode("ascii", "replace"),
            signature=_b64url(signature),
        )


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TokenRefused(f"The '{name}' claim was not a number")
    return float(value)


def _ms(seconds: float) -> int:
    """A claim's seconds in milliseconds, as Java's Math.round does, even for a time so
    far off that its milliseconds overflow a float."""
    millis = seconds * 1000
    return round(millis) if math.isfinite(millis) else int(seconds) * 1000


def _scope(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    """A space-delimited string counts as one scope (as Kafka reads it), a list as many."""
    value = claims.get(name)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset({value.strip()}) if value.strip() else frozenset()
    if isinstance(value, list):
        return frozenset(str(item).strip() for item in value if str(item).strip())
    raise TokenRefused(f"The '{name}' claim was not a string or a list")


def _principal(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if value is None:
        raise TokenRefused(f"Required claim missing: {name}")
    if not isinstance(value, str):
        raise TokenRefused(f"The {name} claim had the incorrect type: {type(value).__name__}")
    if not value.strip():
        raise TokenRefused(f"No principal name in JWT claim: {name}")
    return value.strip()


@dataclass(frozen=True)
class UnsecuredOptions:
    """The ``unsecuredValidator*`` options of the listener's OAUTHBEARER JAAS line."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_jaas(cls, options: Mapping[str, str]) -> UnsecuredOptions:
        """Raises ValueError naming the option that is wrong."""
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip() or "0"
        try:
            clock_skew_ms = int(skew)
        except ValueError:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs is not an integer") from None
        if clock_skew_ms < 0:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs must not be negative")
        return cls(
            principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "").strip()
            or "sub",
            scope_claim=options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
            required_scope=tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
            clock_skew_ms=clock_skew_ms,
        )


def check_unsecured(token: str, options: UnsecuredOptions, now_ms: int) -> BearerToken:
    """Kafka's unsecured JWS rules: ``alg`` none and no signature, a principal, ``exp``
    (and ``iat`` when present) within the allowed clock skew, the required scope."""
    jws = CompactJws.parse(token)
    if jws.header.get("alg") != "none":
        raise TokenRefused("Unsecured JWS must have 'none' for an algorithm")
    if jws.signature:
        raise TokenRefused("Unsecured JWS must not contain a digital signature")
    claims, skew = jws.claims, options.clock_skew_ms
    scope = _scope(claims, options.scope_claim)
    expires = _number(claims, "exp")
    if expires is None:
        raise TokenRefused("No expiration time in JWT")
    principal = _principal(claims, options.principal_claim)
    issued = _number(claims, "iat")
    if issued is not None and 1000 * issued > now_ms + skew:
        raise TokenRefused(f"The Issued At value ({issued:f} seconds) is in the future")
    if now_ms - skew >= 1000 * expires:
        raise TokenRefused(f"The token expired at {expires:f} seconds (clock skew {skew} ms)")
    if issued is not None and expires <= issued:
        raise TokenRefused("The Expiration Time was not after the Issued At time")
    for wanted in options.required_scope:
        if wanted not in scope:
            raise TokenRefused(
                f"The provided scope was missing a required scope ({wanted})",
                scope="[" + ", ".join(options.required_scope) + "]",
            )
    return BearerToken(
        principal=principal,
        scope=scope,
        expires_ms=_ms(expires),
        issued_ms=_ms(issued) if issued is not None else None,
    )


# -- signed tokens --------------------------------------------------------------------------

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}
_CURVES: dict[str, tuple[type[ec.EllipticCurve], int]] = {
    "P-256": (ec.SECP256R1, 32),
    "P-384": (ec.SECP384R1, 48),
    "P-521": (ec.SECP521R1, 66),
}
_ES_CURVE = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
_KEY_TYPE = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP", "HS": "oct"}
ALGORITHMS = frozenset(
    [f"{family}{bits}" for family in ("RS", "PS", "ES", "HS") for bits in _HASHES] + ["EdDSA"]
)


def _int(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError("a key parameter is not a string")
    return int.from_bytes(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)), "big")


@dataclass(frozen=True)
class Jwk:
    """One verification key of a JWKS (RFC 7517)."""

    kty: str
    kid: str | None
    alg: str | None
    use: str | None
    crv: str | None
    key: Any  # a cryptography public key, or the HMAC secret's bytes for "oct"

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Jwk:
        """Raises ValueError (or KeyError) for a key that cannot be used."""
        kty = raw["kty"]
        key: Any
        if raw.get("x5c") and kty in ("RSA", "EC"):
            der = base64.b64decode(raw["x5c"][0])
            key = x509.load_der_x509_certificate(der).public_key()
        elif kty == "RSA":
            key = rsa.RSAPublicNumbers(_int(raw["e"]), _int(raw["n"])).public_key()
        elif kty == "EC":
            curve, _size = _CURVES[raw["crv"]]
            key = ec.EllipticCurvePublicNumbers(
                _int(raw["x"]), _int(raw["y"]), curve()
            ).public_key()
        elif kty == "OKP":
            x = base64.urlsafe_b64decode(raw["x"] + "=" * (-len(raw["x"]) % 4))
            if raw["crv"] == "Ed25519":
                key = ed25519.Ed25519PublicKey.from_public_bytes(x)
            elif raw["crv"] == "Ed448":
                key = ed448.Ed448PublicKey.from_public_bytes(x)
            else:
                raise ValueError(f"curve {raw['crv']!r} is not an EdDSA curve")
        elif kty == "oct":
            key = base64.urlsafe_b64decode(raw["k"] + "=" * (-len(raw["k"]) % 4))
        else:
            raise ValueError(f"key type {kty!r} is not used for signatures")
        return cls(kty, raw.get("kid"), raw.get("alg"), raw.get("use"), raw.get("crv"), key)

    def fits(self, alg: str, kid: str | None) -> bool:
        """jose4j's selection: same ``kid`` when the token names one, a key type of the
        algorithm's family, ``use`` sig or unset, ``alg`` equal when the key names one."""
        if kid is not None and self.kid != kid:
            return False
        if self.use not in (None, "sig") or self.alg not in (None, alg):
            return False
        if _KEY_TYPE.get(alg[:2]) != self.kty:
            return False
        return alg not in _ES_CURVE or _ES_CURVE[alg] == self.crv

    def verifies(self, alg: str, data: bytes, signature: bytes) -> bool:
        try:
            if alg == "EdDSA":
                self.key.verify(signature, data)
                return True
            digest = _HASHES[alg[2:]]()
            if alg.startswith("HS"):
                expected = hmac.new(self.key, data, digest.name).digest()
                return hmac.compare_digest(expected, signature)
            if alg.startswith("RS"):
                self.key.verify(signature, data, padding.PKCS1v15(), digest)
            elif alg.startswith("PS"):
                pss = padding.PSS(padding.MGF1(digest), digest.digest_size)
                self.key.verify(signature, data, pss, digest)
            else:
                size = _CURVES[self.crv or ""][1]
                if len(signature) != 2 * size:
                    return False
                r = int.from_bytes(signature[:size], "big")
                s = int.from_bytes(signature[size:], "big")
                self.key.verify(encode_dss_signature(r, s), data, ec.ECDSA(digest))
            return True
        except (InvalidSignature, ValueError, TypeError, KeyError):
            return False


def parse_jwks(text: str | bytes) -> tuple[Jwk, ...]:
    """A JWKS document's usable keys; keys of other types or with bad parameters are
    skipped (as jose4j skips them). ValueError when it is not a JWKS at all."""
    try:
        document = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError('not a JWKS: no "keys" list')
    keys = []
    for raw in document["keys"]:
        try:
            keys.append(Jwk.parse(raw))
        except (ValueError, KeyError, TypeError, IndexError, binascii.Error):
            continue
    return tuple(keys)


@dataclass(frozen=True)
class SignedOptions:
    """The ``sasl.oauthbearer.*`` settings a broker checks signed tokens with."""

    clock_skew_s: int = 30
    audiences: frozenset[str] = frozenset()
    issuer: str | None = None
    scope_claim: str = "scope"
    sub_claim: str = "sub"


def _audiences(claims: Mapping[str, Any]) -> list[str] | None:
    value = claims.get("aud")
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise TokenRefused("The 'aud' claim was not a string or a list of strings")


def check_signed(
    token: str, options: SignedOptions, keys: Sequence[Jwk], now_s: float
) -> BearerToken:
    """A signed token: a key of ``keys`` verifies it, then its claims hold. Raises
    ``KeyMissing`` when no key fits its ``alg`` and ``kid`` (the caller may refresh)."""
    jws = CompactJws.parse(token)
    alg = jws.header.get("alg")
    if not isinstance(alg, str) or alg not in ALGORITHMS:
        raise TokenRefused(f"the JWS algorithm {str(alg)[:16]!r} is not accepted")
    if "crit" in jws.header:
        raise TokenRefused("the JWS header names critical extensions")
    kid = jws.header.get("kid")
    kid = kid if isinstance(kid, str) else None
    candidates = [key for key in keys if key.fits(alg, kid)]
    if not candidates:
        raise KeyMissing(kid)
    if not any(key.verifies(alg, jws.signing_input, jws.signature) for key in candidates):
        raise TokenRefused("the JWS signature does not verify")
    claims, skew = jws.claims, options.clock_skew_s
    expires, issued = _number(claims, "exp"), _number(claims, "iat")
    if expires is None:
        raise TokenRefused("No Expiration Time (exp) claim present")
    if issued is None:
        raise TokenRefused("No Issued At (iat) claim present")
    if now_s - skew >= expires:
        raise TokenRefused(f"The JWT is no longer valid: it expired at {expires:.0f}")
    not_before = _number(claims, "nbf")
    if not_before is not None and now_s + skew < not_before:
        raise TokenRefused(f"The JWT is not yet valid: not before {not_before:.0f}")
    audiences = _audiences(claims)
    if options.audiences:
        if audiences is None:
            raise TokenRefused("No Audience (aud) claim present")
        if not options.audiences.intersection(audiences):
            raise TokenRefused("The Audience (aud) claim holds none of the expected audiences")
    elif audiences is not None:
        raise TokenRefused(
            "The Audience (aud) claim is present but sasl.oauthbearer.expected.audience is not set"
        )
    if options.issuer is not None and claims.get("iss") != options.issuer:
        raise TokenRefused("The Issuer (iss) claim is not the expected issuer")
    scope = _scope(claims, options.scope_claim)
    principal = _principal(claims, options.sub_claim)
    if expires < 0 or issued < 0:
        raise TokenRefused("the exp and iat claims must not be negative")
    return BearerToken(principal, scope, _ms(expires), _ms(issued))


class KeyMissing(TokenRefused):
    """No key of the JWKS fits the token: perhaps the provider rotated its keys."""

    def __init__(self, kid: str | None) -> None:
        super().__init__(
            f"no key of the JWKS matches the token's algorithm and key id {kid!r}"[:200]
        )
        self.kid = kid


def unsigned_token(claims: Mapping[str, Any]) -> str:
    """An unsecured JWS of ``claims`` (what Kafka's unsecured login module sends)."""

    def encode(value: Mapping[str, Any]) -> str:
        raw = json.dumps(value, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return f"{encode({'alg': 'none'})}.{encode(claims)}."
