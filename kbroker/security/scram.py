"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's broker runs it.

The broker keeps, per user and mechanism, only the salt, the iteration count and the
two keys derived from the salted password (StoredKey = H(HMAC(salted, "Client Key")),
ServerKey = HMAC(salted, "Server Key")): enough to check a client's proof and prove
itself back, never enough to log in as the user. Clients send the salted password in
AlterUserScramCredentials, so even that request never carries the password itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# AlterUserScramCredentials' mechanism numbers (Kafka's ScramMechanism.type()).
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
TYPE_OF = {name: number for number, name in MECHANISM_TYPES.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramError(Exception):
    """The exchange failed; the message is safe to log and to send to the client."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def credential_from_salted(
    mechanism: str, salt: bytes, iterations: int, salted_password: bytes
) -> ScramCredential:
    hash_name = MECHANISMS[mechanism]
    client_key = _hmac(hash_name, salted_password, b"Client Key")
    return ScramCredential(
        mechanism,
        salt,
        iterations,
        hashlib.new(hash_name, client_key).digest(),
        _hmac(hash_name, salted_password, b"Server Key"),
    )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


def _decode_saslname(name: str) -> str:
    if re.search(r"=(?!2C|3D)", name):
        raise ScramError("Invalid user name: '=' must be escaped as =2C or =3D")
    return name.replace("=2C", ",").replace("=3D", "=")


_CLIENT_FIRST = re.compile(
    r"(?P<gs2>[ny]|p=[^,]*),(?:a=(?P<authzid>[^,]*))?,"
    r"(?P<bare>n=(?P<name>[^,]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?:,(?P<ext>.*))?)",
    re.S,
)
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<binding>[A-Za-z0-9+/=]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[a-z]=[^,]*)*),p=(?P<proof>[A-Za-z0-9+/=]+)"
)


class ScramServer:
    """One server-side exchange: client-first -> server-first, client-final -> server-final.

    ``lookup(user)`` gives the user's credential for this mechanism or None. Every
    failure raises ScramError; an unknown user and a wrong password fail alike.
    """

    def __init__(self, mechanism: str, lookup: object) -> None:
        self.mechanism = mechanism
        self._hash = MECHANISMS[mechanism]
        self._lookup = lookup
        self._state = "first"
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        # The client-first message's extensions; tokenauth=true: the user name is a
        # delegation token's id and the password its HMAC (KIP-48).
        self.extensions: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._state == "done"

    @property
    def token_auth(self) -> bool:
        return self.extensions.get("tokenauth", "").lower() == "true"

    def evaluate(self, token: bytes) -> bytes:
        if self._state == "first":
            return self._first(token)
        if self._state == "final":
            return self._final(token)
        raise ScramError("Unexpected SCRAM message after the exchange ended")

    def _first(self, token: bytes) -> bytes:
        self._state = "failed"
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("Invalid SCRAM client first message: not UTF-8") from None
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise ScramError("Invalid SCRAM client first message")
        if match["gs2"].startswith("p="):
            raise ScramError("SCRAM channel binding is not supported")
        user = _decode_saslname(match["name"])
        authzid = match["authzid"]
        if authzid and _decode_saslname(authzid) != user:
            raise ScramError(
                "Authentication failed: Client requested an authorization id "
                "that is different from username"
            )
        for part in (match["ext"] or "").split(","):
            key, sep, value = part.partition("=")
            if sep:
                self.extensions[key] = value
        lookup = self._lookup
        credential = lookup(user) if callable(lookup) else None
        if credential is None:
            raise ScramError(
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            )
        self.user, self._credential = user, credential
        self._gs2 = text[: match.start("bare")]
        self._client_first_bare = match["bare"]
        self._nonce = match["nonce"] + secrets.token_urlsafe(24).replace("-", "").replace("_", "")
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        self._state = "failed"
        credential = self._credential
        assert credential is not None
        match = _CLIENT_FINAL.fullmatch(token.decode("utf-8", "replace"))
        if match is None:
            raise ScramError("Invalid SCRAM client final message")
        if match["nonce"] != self._nonce:
            raise ScramError("Invalid SCRAM client final message: nonce does not match")
        try:
            binding = base64.b64decode(match["binding"], validate=True)
            proof = base64.b64decode(match["proof"], validate=True)
        except ValueError:
            raise ScramError("Invalid SCRAM client final message: bad base64") from None
        if binding != self._gs2.encode():
            raise ScramError("Invalid SCRAM client final message: channel binding mismatch")
        auth_message = (
            f"{self._client_first_bare},{self._server_first},{match['without_proof']}"
        ).encode()
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError(self._invalid())
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        ):
            raise ScramError(self._invalid())
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        self._state = "done"
        return b"v=" + base64.b64encode(server_signature)

    def _invalid(self) -> str:
        return (
            "Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {self.mechanism}"
        )
