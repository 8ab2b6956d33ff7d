"""A SASL client's side of PLAIN, SCRAM (RFC 5802/7677) and OAUTHBEARER (RFC 7628), as
plain functions of the server's answers (no I/O): each exchange yields the client's
messages and is sent the server's; the connection carries them in SaslAuthenticate
requests. The admin client and a broker logging in to another broker (inter-broker
listener) both use them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Generator

Exchange = Generator[bytes, bytes, None]
"""Yields each client message; is sent the server's answer to it."""


class SaslFailure(Exception):
    """The server's answer does not prove it knows the password, or is malformed."""


def plain(username: str, password: str) -> Exchange:
    yield b"\0" + username.encode() + b"\0" + password.encode()


def oauthbearer(token: str, extensions: dict[str, str] | None = None) -> Exchange:
    """The token in the client's first message; a refusal (the server's JSON status) is
    acknowledged with 0x01, after which the server fails the exchange."""
    pairs = "".join(f"{key}={value}\x01" for key, value in (extensions or {}).items())
    answer = yield f"n,,\x01auth=Bearer {token}\x01{pairs}\x01".encode()
    if answer:
        yield b"\x01"


def scram(
    mechanism: str,
    username: str,
    password: str,
    nonce: str | None = None,
    extensions: str = "",
) -> Exchange:
    """`extensions`: RFC 5802 extensions after the nonce (``tokenauth=true`` for a
    delegation token: its id as user name, its HMAC in base64 as password)."""
    digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
    name = username.replace("=", "=3D").replace(",", "=2C")
    client_nonce = nonce or secrets.token_urlsafe(24)
    first_bare = f"n={name},r={client_nonce}" + (f",{extensions}" if extensions else "")
    server_first = (yield f"n,,{first_bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
    if "e" in fields:
        raise SaslFailure(fields["e"])
    try:
        server_nonce, salt, iterations = (
            fields["r"],
            base64.b64decode(fields["s"]),
            int(fields["i"]),
        )
    except (KeyError, ValueError) as exc:
        raise SaslFailure(f"malformed server-first message: {exc}") from None
    if not server_nonce.startswith(client_nonce):
        raise SaslFailure("the server's nonce does not extend the client's")
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    without_proof = f"c=biws,r={server_nonce}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_final = (yield f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    final = dict(part.split("=", 1) for part in server_final.split(",") if "=" in part)
    if "e" in final:
        raise SaslFailure(final["e"])
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = hmac.new(server_key, auth_message, digest).digest()
    if not hmac.compare_digest(base64.b64decode(final.get("v", "")), expected):
        raise SaslFailure("the server's signature does not match: it does not know the password")
