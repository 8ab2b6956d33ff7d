"""Delegation tokens' secrets (KIP-48): the HMAC of a token and the SCRAM credential it
authenticates with.

A token's HMAC is HMAC-SHA512 of its id under ``delegation.token.secret.key``; the
metadata log never holds it, so every node derives it the same way. A client logs in
over SCRAM with ``tokenauth=true``, the token id as user name and the base64 of the HMAC
as password; each node salts that password once per token and mechanism.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from kbroker.security.scram import ScramCredential, credential_from_salted, salted_password

TOKEN_ITERATIONS = 4096  # Kafka's: each mechanism's minimum


def token_hmac(secret: str, token_id: str) -> bytes:
    return hmac.new(secret.encode(), token_id.encode(), hashlib.sha512).digest()


def token_password(mac: bytes) -> str:
    """What a client gives as the password: the HMAC in base64."""
    return base64.b64encode(mac).decode()


def new_token_id() -> str:
    """As Kafka's: a random UUID in url-safe base64, unpadded."""
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


class TokenCredentials:
    """The SCRAM credentials of tokens, salted once each (PBKDF2 is slow on purpose)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, bytes], ScramCredential] = {}

    def credential(self, token_id: str, mechanism: str, mac: bytes) -> ScramCredential:
        key = (token_id, mechanism, mac)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > 10_000:
                self._cache.clear()
            salt = secrets.token_bytes(16)
            salted = salted_password(mechanism, token_password(mac), salt, TOKEN_ITERATIONS)
            found = self._cache[key] = credential_from_salted(
                mechanism, salt, TOKEN_ITERATIONS, salted
            )
        return found
