"""A small OAuth identity provider for the OAUTHBEARER tests: RSA signing keys published
as a JWKS (``/jwks``) and a client-credentials token endpoint (``/token``), on
127.0.0.1 in a thread. Keys can be rotated, and every JWKS fetch is counted.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ISSUER = "https://idp.kbroker.test"
AUDIENCE = "kafka"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64_int(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@dataclass
class SigningKey:
    kid: str
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    def jwk(self) -> dict[str, str]:
        numbers = self.key.public_key().public_numbers()
        return {
            "kty": "RSA",
            "kid": self.kid,
            "use": "sig",
            "alg": "RS256",
            "n": _b64_int(numbers.n),
            "e": _b64_int(numbers.e),
        }


@dataclass
class IdentityProvider:
    port: int = 0
    keys: list[SigningKey] = field(default_factory=lambda: [SigningKey("key-1")])
    clients: dict[str, str] = field(default_factory=lambda: {"svc-alice": "alice-client-secret"})
    jwks_fetches: int = 0
    tokens_issued: int = 0
    token_lifetime_s: float = 3600  # of the tokens the endpoint issues

    @property
    def jwks_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks"

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def mint(
        self,
        sub: str = "alice",
        lifetime_s: float = 3600,
        key: SigningKey | None = None,
        **claims: Any,
    ) -> str:
        """A token signed with ``key`` (the newest key by default)."""
        signer = key or self.keys[-1]
        now = time.time()
        body: dict[str, Any] = {
            "sub": sub,
            "iss": ISSUER,
            "aud": AUDIENCE,
            "iat": int(now),
            "exp": int(now + lifetime_s),
            "scope": "kafka",
        }
        body.update(claims)
        header = {"alg": "RS256", "typ": "JWT", "kid": signer.kid}
        head = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}"
        signature = signer.key.sign(head.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{head}.{_b64(signature)}"

    def rotate(self, kid: str) -> SigningKey:
        """A new key replaces every old one in the JWKS."""
        key = SigningKey(kid)
        self.keys = [key]
        return key

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path != "/jwks":
                    self._answer(404, {"error": "not found"})
                    return
                provider.jwks_fetches += 1
                self._answer(200, {"keys": [k.jwk() for k in provider.keys]})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                client, secret = form.get("client_id", [""])[0], form.get("client_secret", [""])[0]
                auth = self.headers.get("Authorization", "")
                if auth.startswith("Basic "):
                    client, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
                client, secret = urllib.parse.unquote(client), urllib.parse.unquote(secret)
                if self.path != "/token" or provider.clients.get(client) != secret:
                    self._answer(401, {"error": "invalid_client"})
                    return
                provider.tokens_issued += 1
                lifetime = provider.token_lifetime_s
                token = provider.mint(sub=client, lifetime_s=lifetime)
                self._answer(
                    200,
                    {"access_token": token, "token_type": "Bearer", "expires_in": int(lifetime)},
                )

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        return Handler

    @contextmanager
    def serving(self) -> Iterator[IdentityProvider]:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
